// The CUDA backend: device 0, one stream that every op and copy is queued on. Exists only in CUDA
// builds (DELTABIT_HAVE_CUDA); construct it through make_backend.
#pragma once

#include <cuda_runtime.h>

#include "backend/backend.h"

namespace deltabit {

class CudaBackend final : public Backend {
public:
    CudaBackend();  // throws deltabit::Error when no device is usable
    ~CudaBackend() override;
    CudaBackend(const CudaBackend&) = delete;
    CudaBackend& operator=(const CudaBackend&) = delete;

    std::string_view name() const override { return "cuda"; }
    std::string description() const override;
    bool host_accessible() const override { return false; }
    void* allocate(size_t bytes) override;
    void free(void* ptr) override;
    void copy_to_device(void* dst, const void* host, size_t bytes) override;
    void copy_to_host(void* host, const void* src, size_t bytes) override;
    void copy_on_device(void* dst, const void* src, size_t bytes) override;
    void synchronize() override;
    bool supports(Op op, DType type) const override { return cuda::supports(op, type); }

    // The stream to pass to the ops of ops/<family>/*_cuda.h.
    cudaStream_t stream() const { return stream_; }

private:
    cudaStream_t stream_ = nullptr;
};

}  // namespace deltabit
