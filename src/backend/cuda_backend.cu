#include "backend/cuda_backend.h"

#include <string>

#include "backend/cuda_buffer.h"
#include "backend/cuda_probe.h"

namespace deltabit {

using cuda::cuda_check;

CudaBackend::CudaBackend() {
    if (cuda::device_count() == 0) fail_message("backend cuda: no CUDA device on this machine");
    cuda_check(cudaSetDevice(0), "backend cuda: cudaSetDevice(0)");
    cuda_check(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking), "backend cuda: cudaStreamCreate");
}

CudaBackend::~CudaBackend() {
    if (stream_ != nullptr) {
        cudaStreamSynchronize(stream_);  // no throw from a destructor; queued work must not outlive the stream
        cudaStreamDestroy(stream_);
    }
}

std::string CudaBackend::description() const { return "cuda: " + cuda::device_summary(); }

void* CudaBackend::allocate(size_t bytes) {
    if (bytes == 0) return nullptr;
    void* ptr = nullptr;
    cuda_check(cudaMalloc(&ptr, bytes), ("backend cuda: cudaMalloc of " + std::to_string(bytes) + " bytes").c_str());
    return ptr;
}

// cudaFree synchronises the device, so queued work that still reads the buffer finishes first.
void CudaBackend::free(void* ptr) {
    if (ptr != nullptr) cuda_check(cudaFree(ptr), "backend cuda: cudaFree");
}

// Waits for the copy: from pinned host memory cudaMemcpyAsync returns before reading the source, and
// the contract lets the caller reuse `host` at once. Uploads are load-time or a few bytes per token.
void CudaBackend::copy_to_device(void* dst, const void* host, size_t bytes) {
    if (bytes == 0) return;
    cuda_check(cudaMemcpyAsync(dst, host, bytes, cudaMemcpyHostToDevice, stream_), "backend cuda: copy to device");
    synchronize();
}

void CudaBackend::copy_to_host(void* host, const void* src, size_t bytes) {
    if (bytes == 0) return;
    cuda_check(cudaMemcpyAsync(host, src, bytes, cudaMemcpyDeviceToHost, stream_), "backend cuda: copy to host");
    synchronize();
}

void CudaBackend::copy_on_device(void* dst, const void* src, size_t bytes) {
    if (bytes == 0) return;
    cuda_check(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, stream_), "backend cuda: device copy");
}

void CudaBackend::synchronize() { cuda_check(cudaStreamSynchronize(stream_), "backend cuda: synchronize"); }

}  // namespace deltabit
