// The op-parity harness's device half: buffers whose outputs start as NaN (every byte 0xFF, also −1
// for int32 outputs) and end in a guard band that must come back untouched, so an unwritten element
// and a write past the end both fail. See tests/ops/op_parity.h for the comparisons.
#pragma once

#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "ops/op_parity.h"

#ifdef DELTABIT_HAVE_CUDA
#include <cuda_runtime.h>

#include "backend/cuda_buffer.h"
#include "backend/cuda_probe.h"

namespace deltabit::test {

inline bool have_gpu() { return cuda::device_count() > 0; }

inline constexpr size_t kGuardBytes = 256;
inline constexpr uint8_t kGuardByte = 0xA5;
inline constexpr uint8_t kPoisonByte = 0xFF;  // float NaN, int32 −1

template <typename T>
class GuardedDeviceArray {
public:
    // n elements of poison, then the guard.
    explicit GuardedDeviceArray(size_t n) : n_(n), buffer_(n * sizeof(T) + kGuardBytes) {
        std::vector<uint8_t> init(buffer_.bytes(), kPoisonByte);
        std::memset(init.data() + n * sizeof(T), kGuardByte, kGuardBytes);
        buffer_.upload(init.data(), init.size());
    }
    // The host values, then the guard.
    explicit GuardedDeviceArray(const std::vector<T>& host) : GuardedDeviceArray(host.size()) {
        if (!host.empty()) buffer_.upload(host.data(), host.size() * sizeof(T));
    }

    T* get() const { return buffer_.get<T>(); }
    size_t size() const { return n_; }

    // Waits for the device, then copies the n elements back and checks the guard band.
    std::vector<T> download(const std::string& what) const {
        cuda::cuda_check(cudaDeviceSynchronize(), what.c_str());
        std::vector<T> host(n_);
        if (n_ != 0) buffer_.download(host.data(), n_ * sizeof(T));
        std::vector<uint8_t> guard(kGuardBytes);
        buffer_.download(guard.data(), kGuardBytes, n_ * sizeof(T));
        for (size_t i = 0; i < kGuardBytes; ++i) {
            EXPECT_EQ(guard[i], kGuardByte) << what << ": guard byte " << i << " past the end was overwritten";
            if (guard[i] != kGuardByte) break;
        }
        return host;
    }

private:
    size_t n_;
    cuda::DeviceBuffer buffer_;
};

}  // namespace deltabit::test

#define DELTABIT_REQUIRE_GPU() \
    if (!deltabit::test::have_gpu()) GTEST_SKIP() << "no CUDA device on this machine"
#endif  // DELTABIT_HAVE_CUDA
