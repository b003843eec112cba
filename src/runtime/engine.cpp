#include "runtime/engine.h"

#include "backend/backend.h"
#include "core/error.h"
#include "models/model.h"

namespace deltabit {

std::unique_ptr<Engine> open_engine(const std::filesystem::path& path, std::string_view backend) {
    if (backend != "cpu" && backend != "cuda" && backend != "auto")
        fail("unknown backend '{}': choose {}", backend, kBackendChoices);
    const bool cuda = backend == "cuda" || (backend == "auto" && cuda_backend_available());
    if (backend == "cuda") make_backend("cuda");  // the reason CUDA is unavailable, before a long load
    auto model = std::make_shared<const Model>(Model::load(path));
    return cuda ? make_cuda_engine(std::move(model)) : make_cpu_engine(std::move(model));
}

}  // namespace deltabit
