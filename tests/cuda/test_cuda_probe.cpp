// The CUDA toolchain works end to end: a kernel launches on the GPU and its result matches the CPU.
// Skips cleanly where the build has no CUDA or the machine no GPU (CI); runs on the GPU machine.
#include <gtest/gtest.h>

#include <vector>

#ifdef DELTABIT_HAVE_CUDA
#include "backend/cuda_probe.h"
#endif

TEST(CudaProbe, AxpyMatchesCpu) {
#ifndef DELTABIT_HAVE_CUDA
    GTEST_SKIP() << "built without CUDA";
#else
    if (deltabit::cuda::device_count() == 0) GTEST_SKIP() << "no CUDA device on this machine";
    // Length past one grid of 65535×256 so the grid-stride loop's second pass is exercised.
    const size_t n = 65535u * 256u + 1000u;
    std::vector<float> x(n), y(n), expected(n);
    for (size_t i = 0; i < n; ++i) {
        x[i] = float(i % 1000) * 0.5f;
        y[i] = float(i % 7) - 3.0f;
        expected[i] = 2.0f * x[i] + y[i];
    }
    deltabit::cuda::axpy(2.0f, x.data(), y.data(), n);
    for (size_t i = 0; i < n; ++i) ASSERT_EQ(y[i], expected[i]) << "at " << i;
    RecordProperty("device", deltabit::cuda::device_summary());
#endif
}
