#include "backend/backend.h"

#include "backend/cpu_backend.h"
#include "core/error.h"

#ifdef DELTABIT_HAVE_CUDA
#include "backend/cuda_backend.h"
#include "backend/cuda_probe.h"
#endif

namespace deltabit {

bool cuda_backend_available() {
#ifdef DELTABIT_HAVE_CUDA
    return cuda::device_count() > 0;
#else
    return false;
#endif
}

std::string resolve_backend(std::string_view choice) {
    if (choice == "cpu") return "cpu";
    if (choice == "cuda" || choice == "auto") {
#ifdef DELTABIT_HAVE_CUDA
        if (cuda::device_count() > 0) return "cuda";
        if (choice == "cuda") fail("backend cuda: no CUDA device on this machine; use --backend cpu (or auto, which picks the GPU when there is one)");
#else
        if (choice == "cuda") fail("backend cuda: this build has no CUDA (configure with nvcc and -DDELTABIT_CUDA=ON); use --backend cpu");
#endif
        return "cpu";
    }
    fail("backend: unknown backend '{}' (choose cpu, cuda or auto)", choice);
}

std::unique_ptr<Backend> make_backend(std::string_view choice) {
#ifdef DELTABIT_HAVE_CUDA
    if (resolve_backend(choice) == "cuda") return std::make_unique<CudaBackend>();
#else
    resolve_backend(choice);  // the error for cuda or an unknown name
#endif
    return std::make_unique<CpuBackend>();
}

}  // namespace deltabit
