#include "runtime/engine.h"

#include "backend/backend.h"
#include "core/error.h"
#include "models/model.h"
#include "runtime/engine_checks.h"

namespace deltabit {

namespace {

// A CUDA load handles every weight byte twice: bound on the host, then copied to the device. By bytes,
// each is half the work.
constexpr double kHostShareOfCudaLoad = 0.5;

// The host load's bytes as a fraction of the whole load, of which it is the first `share`.
LoadProgress host_part(const LoadFraction& progress, double share) {
    if (!progress) return {};
    return [&progress, share](uint64_t done, uint64_t total) {
        progress(total == 0 ? share : share * double(done) / double(total));
    };
}

}  // namespace

void Engine::forward_batch(std::span<EngineSequence* const> sequences, std::span<const int32_t> ids) {
    // Every row checked first: a refused row must leave every sequence unchanged, not only itself.
    check_forward_batch(config(), sequences, ids);
    for (size_t i = 0; i < sequences.size(); ++i) forward(*sequences[i], ids.subspan(i, 1));
}

std::unique_ptr<Engine> open_engine(const std::filesystem::path& path, std::string_view backend,
                                    const LoadFraction& progress) {
    if (backend != "cpu" && backend != "cuda" && backend != "auto")
        fail("unknown backend '{}': choose {}", backend, kBackendChoices);
    const bool cuda = backend == "cuda" || (backend == "auto" && cuda_backend_available());
    if (backend == "cuda") make_backend("cuda");  // the reason CUDA is unavailable, before a long load
    const double host_share = cuda ? kHostShareOfCudaLoad : 1.0;
    auto model = std::make_shared<const Model>(Model::load(path, host_part(progress, host_share)));
    if (model->config().arch == Arch::diffusion_gemma)
        fail("{}: {} is a block-diffusion model; this command drives left-to-right models only", path.string(),
             model->config().arch_name);
    if (!cuda) return make_cpu_engine(std::move(model));
    LoadFraction upload;
    if (progress)
        upload = [&progress, host_share](double done) { progress(host_share + (1.0 - host_share) * done); };
    return make_cuda_engine(std::move(model), upload);
}

}  // namespace deltabit
