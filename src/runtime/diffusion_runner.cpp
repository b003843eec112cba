#include "runtime/diffusion_runner.h"

#include "backend/backend.h"
#include "core/file_io.h"
#include "models/config_summary.h"
#include "models/model_fingerprint.h"
#include "runtime/diffusion_generation_config.h"
#include "runtime/diffusion_record.h"

#if DELTABIT_HAVE_CUDA
#include "backend/cuda_buffer.h"
#include "backend/cuda_probe.h"
#include "models/diffusion_gemma_cuda.h"
#include "runtime/diffusion_gemma_denoiser_cuda.h"
#include "runtime/diffusion_generate_cuda.h"
#endif

#include <algorithm>
#include <chrono>
#include <filesystem>

namespace deltabit {

namespace {

// A CUDA load handles every weight byte twice, bound on the host and then uploaded: by bytes, half each.
constexpr double kHostShareOfCudaLoad = 0.5;

}  // namespace

#if DELTABIT_HAVE_CUDA
struct DiffusionRunner::Cuda {
    DiffusionGemmaCuda model;
    DiffusionGemmaDenoiserCuda denoiser;  // one sequence's cache, reset at each generate

    Cuda(const Model& host, const DiffusionGemmaCuda::UploadProgress& progress)
        : model(host, progress), denoiser(model, host.config().canvas_length) {}

    DiffusionGeneration generate(std::span<const int32_t> prompt, const DiffusionGenerationConfig& settings, uint64_t seed,
                                 const DiffusionBlockCallback& on_block, const DiffusionStepCallback& on_step,
                                 const std::function<bool()>& stop) {
        // The loop checks the settings and the prompt, but sizing the cache comes first.
        validate_diffusion_generation(settings, model.config().canvas_length, prompt, {});
        denoiser.reset(diffusion_encoded_tokens(int64_t(prompt.size()), settings.max_new_tokens, model.config().canvas_length));
        cuda::DiffusionCudaRunOptions options;
        options.on_block = on_block;
        options.on_step = on_step;
        options.stop = stop;
        options.stream = model.stream();
        return cuda::generate_diffusion_cuda(denoiser, prompt, settings, seed, options);
    }
};
#else
struct DiffusionRunner::Cuda {};  // never made: resolve_backend refuses cuda in this build
#endif

DiffusionRunner::DiffusionRunner(const std::string& model, std::string_view backend, std::optional<int64_t> max_tokens,
                                 const Progress& progress)
    : path_(model), backend_(resolve_backend(backend)) {
    const bool cuda = backend_ == "cuda";
    const double host_share = cuda ? kHostShareOfCudaLoad : 1.0;
    model_ = std::make_unique<const Model>(Model::load(model, [&](uint64_t done, uint64_t total) {
        if (progress) progress(total == 0 ? host_share : host_share * double(done) / double(total));
    }));
    settings_ = load_diffusion_generation_config(model, model_->config());
    if (max_tokens) settings_.max_new_tokens = *max_tokens;
#if DELTABIT_HAVE_CUDA
    if (cuda) {
        cuda_ = std::make_unique<Cuda>(*model_, [&](double done) {
            if (progress) progress(host_share + (1.0 - host_share) * done);
        });
        return;
    }
#endif
    diffusion_ = std::make_unique<const DiffusionGemma>(*model_);
}

DiffusionRunner::~DiffusionRunner() = default;

std::string DiffusionRunner::backend_description() const {
#if DELTABIT_HAVE_CUDA
    if (cuda_) return "cuda: " + cuda::device_summary() + "; block-diffusion device loop";
#endif
    return "cpu: block-diffusion reference";
}

DiffusionGeneration DiffusionRunner::generate_cpu(std::span<const int32_t> prompt, const DiffusionGenerationConfig& settings,
                                                  uint64_t seed, const DiffusionBlockCallback& on_block,
                                                  const DiffusionStepCallback& on_step) const {
    SeededDiffusionRandomness random(seed);
    return generate_diffusion(*diffusion_, prompt, settings, random, {}, on_block, on_step);
}

DiffusionRun DiffusionRunner::generate(std::span<const int32_t> prompt, uint64_t seed, const DiffusionBlockCallback& on_block,
                                       const std::string& record, const std::function<bool()>& stop,
                                       std::optional<int64_t> max_new_tokens) {
    DiffusionGenerationConfig settings = settings_;
    if (max_new_tokens) settings.max_new_tokens = *max_new_tokens;
    DiffusionRecord recorded;
    if (!record.empty()) {
        check_replaceable(record, "run: --record");  // before the run, so a bad path costs nothing
        diffusion_logits_hash({});                   // a build without xxhash says so now, not after the run
    }
    // Only a recording needs every step: on CUDA a step callback makes the loop wait after each step, so
    // `stop` goes to the device loop's own hook there, and joins the step callback on the CPU.
    const bool cpu_polls_stop = !cuda_ && stop;
    DiffusionStepCallback on_step;
    if (!record.empty() || cpu_polls_stop)
        on_step = [&](const DiffusionStep& step) {
            if (!record.empty()) recorded.steps.push_back(record_step(step));
            return !(cpu_polls_stop && stop());
        };
    const auto start = std::chrono::steady_clock::now();
    DiffusionRun run;
#if DELTABIT_HAVE_CUDA
    if (cuda_) run.generation = cuda_->generate(prompt, settings, seed, on_block, on_step, stop);
    else
#endif
        run.generation = generate_cpu(prompt, settings, seed, on_block, on_step);
    run.generate_ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
    if (!record.empty()) {
        recorded.fingerprint = model_fingerprint(model_->weights());
        recorded.model_path = std::filesystem::absolute(path_).lexically_normal().string();
        recorded.backend = backend_;
        recorded.canvas_length = config().canvas_length;
        recorded.n_vocab = config().n_vocab;
        recorded.seed = seed;
        recorded.prompt.assign(prompt.begin(), prompt.end());
        recorded.settings = settings;
        recorded.tokens = run.generation.tokens;
        recorded.steps_per_block = run.generation.steps_per_block;
        recorded.finished = run.generation.finished;
        write_diffusion_record(record, recorded, model_config_summary(config()));
    }
    return run;
}

std::span<const int32_t> diffusion_visible_tokens(std::span<const int32_t> tokens, const DiffusionGenerationConfig& g) {
    const auto eos = std::find_if(tokens.begin(), tokens.end(), [&](int32_t t) {
        return std::find(g.eos_ids.begin(), g.eos_ids.end(), int64_t(t)) != g.eos_ids.end();
    });
    return tokens.first(size_t(eos - tokens.begin()));
}

}  // namespace deltabit
