// The CUDA helpers every piece of device code needs: `cuda_check`, which turns a failed runtime call
// into a deltabit::Error naming what was being done, `device_attribute`, and `DeviceBuffer`, a move-only
// owner of one cudaMalloc allocation. Header-only on purpose: ops/ (which backend/ depends on) uses it too, and
// plain C++ translation units (tests, benchmarks) include it without nvcc.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <string>
#include <utility>

#include "core/error.h"

namespace deltabit::cuda {

inline void cuda_check(cudaError_t status, const char* what) {
    if (status != cudaSuccess) fail_message(std::string("cuda: ") + what + ": " + cudaGetErrorString(status));
}

// After a kernel launch: launch-configuration errors surface here, not at the <<<>>> line.
inline void cuda_check_launch(const char* kernel) { cuda_check(cudaGetLastError(), kernel); }

// An attribute of the current device (SM count, compute capability, shared-memory limit, ...).
inline int device_attribute(cudaDeviceAttr attribute, const char* what) {
    int device = 0;
    cuda_check(cudaGetDevice(&device), "cudaGetDevice");
    int value = 0;
    cuda_check(cudaDeviceGetAttribute(&value, attribute, device), what);
    return value;
}

class DeviceBuffer {
public:
    DeviceBuffer() = default;
    explicit DeviceBuffer(size_t bytes) : bytes_(bytes) {
        if (bytes_ != 0) cuda_check(cudaMalloc(&ptr_, bytes_), "cudaMalloc");
    }
    ~DeviceBuffer() {
        if (ptr_ != nullptr) cudaFree(ptr_);  // no throw from a destructor; a failed free is not actionable
    }
    DeviceBuffer(DeviceBuffer&& other) noexcept
        : ptr_(std::exchange(other.ptr_, nullptr)), bytes_(std::exchange(other.bytes_, 0)) {}
    DeviceBuffer& operator=(DeviceBuffer&& other) noexcept {
        if (this != &other) {
            if (ptr_ != nullptr) cudaFree(ptr_);
            ptr_ = std::exchange(other.ptr_, nullptr);
            bytes_ = std::exchange(other.bytes_, 0);
        }
        return *this;
    }
    DeviceBuffer(const DeviceBuffer&) = delete;
    DeviceBuffer& operator=(const DeviceBuffer&) = delete;

    template <typename T = void>
    T* get() const { return static_cast<T*>(ptr_); }
    size_t bytes() const { return bytes_; }

    void upload(const void* host, size_t bytes, size_t offset = 0) {
        check_range(offset, bytes, "upload");
        cuda_check(cudaMemcpy(static_cast<char*>(ptr_) + offset, host, bytes, cudaMemcpyHostToDevice), "upload");
    }
    void download(void* host, size_t bytes, size_t offset = 0) const {
        check_range(offset, bytes, "download");
        cuda_check(cudaMemcpy(host, static_cast<const char*>(ptr_) + offset, bytes, cudaMemcpyDeviceToHost),
                   "download");
    }

private:
    void check_range(size_t offset, size_t bytes, const char* what) const {
        if (offset > bytes_ || bytes > bytes_ - offset) {
            fail_message(std::string("cuda: DeviceBuffer ") + what + " of " + std::to_string(bytes) +
                         " bytes at offset " + std::to_string(offset) + " runs past the " +
                         std::to_string(bytes_) + "-byte buffer");
        }
    }

    void* ptr_ = nullptr;
    size_t bytes_ = 0;
};

}  // namespace deltabit::cuda
