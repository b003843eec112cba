// Helpers for the CUDA trainer's tests: device copies of host vectors, and the comparison of a float
// result against the double reference (worst |difference| relative to the reference's largest
// magnitude, printed so that a run on the GPU records the measured error beside the bound).
#pragma once

#ifdef DELTABIT_HAVE_CUDA
#include "backend/cuda_buffer.h"
#include "backend/cuda_probe.h"
#include "train/cuda/kernel_marks.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <random>
#include <string>
#include <vector>

namespace deltabit::train::testing {

// The kernel marks (train/cuda/kernel_marks.h) of the launches made while it lives: which kernels ran.
struct MarkedKernels {
    std::vector<std::string> names;
    MarkedKernels() { cuda::g_kernel_marks = {&record, this}; }
    ~MarkedKernels() { cuda::g_kernel_marks = {}; }
    MarkedKernels(const MarkedKernels&) = delete;
    MarkedKernels& operator=(const MarkedKernels&) = delete;
    static void record(void* self, const char* kernel) { static_cast<MarkedKernels*>(self)->names.emplace_back(kernel); }
    bool ran(const std::string& kernel) const { return std::find(names.begin(), names.end(), kernel) != names.end(); }
};

// A device array of floats made from host doubles (or zeros), read back as doubles.
struct DeviceArray {
    deltabit::cuda::DeviceBuffer buffer;
    size_t n = 0;

    explicit DeviceArray(const std::vector<double>& values) : buffer(std::max<size_t>(values.size(), 1) * 4), n(values.size()) {
        std::vector<float> f(values.begin(), values.end());
        if (n) buffer.upload(f.data(), n * 4);
    }
    static DeviceArray zeros(size_t n) { return DeviceArray(std::vector<double>(n, 0.0)); }
    float* get() const { return buffer.get<float>(); }
    std::vector<double> read() const {
        std::vector<float> f(n);
        if (n) buffer.download(f.data(), n * 4);
        return {f.begin(), f.end()};
    }
};

struct DeviceInts {
    deltabit::cuda::DeviceBuffer buffer;
    explicit DeviceInts(const std::vector<int32_t>& values) : buffer(std::max<size_t>(values.size(), 1) * 4) {
        if (!values.empty()) buffer.upload(values.data(), values.size() * 4);
    }
    int32_t* get() const { return buffer.get<int32_t>(); }
};

inline std::vector<double> normal_values(size_t n, uint64_t seed, double scale = 1.0) {
    std::mt19937_64 rng(seed);
    std::normal_distribution<double> normal(0.0, scale);
    std::vector<double> v(n);
    for (double& x : v) x = normal(rng);
    return v;
}

// max|got − want| / max|want|; prints it under `what`.
inline double relative_error(const std::string& what, const std::vector<double>& got, const std::vector<double>& want) {
    EXPECT_EQ(got.size(), want.size()) << what;
    double worst = 0.0, scale = 0.0;
    for (size_t i = 0; i < std::min(got.size(), want.size()); ++i) {
        if (!std::isfinite(got[i])) return INFINITY;
        worst = std::max(worst, std::fabs(got[i] - want[i]));
        scale = std::max(scale, std::fabs(want[i]));
    }
    const double rel = scale > 0 ? worst / scale : worst;
    std::printf("[ cuda train ] %-40s max|Δ| %.3g of max|ref| %.3g (rel %.3g)\n", what.c_str(), worst, scale, rel);
    return rel;
}

// max over elements of |got − (base + want)| / (bound + fp32 rounding of the sum + 1e-37: weights below
// fp32's normal range may flush to zero); printed. A bf16 kernel passes at ≤ 1.
inline double worst_over_bound(const std::string& what, const std::vector<double>& got, const std::vector<double>& want,
                               const std::vector<double>& bound, double base) {
    EXPECT_EQ(got.size(), want.size()) << what;
    double worst = 0.0, largest = 0.0, ratio = 0.0;
    for (size_t i = 0; i < std::min(got.size(), want.size()); ++i) {
        const double sum = base + want[i];
        const double allowed = bound[i] + std::ldexp(std::fabs(sum) + bound[i], -24) + 1e-37;
        const double error = std::isfinite(got[i]) ? std::fabs(got[i] - sum) : INFINITY;
        worst = std::max(worst, error);
        largest = std::max(largest, std::fabs(want[i]));
        ratio = std::max(ratio, error / allowed);
    }
    std::printf("[ cuda train ] %-40s max|Δ| %.3g of max|ref| %.3g, worst |Δ| / bound %.3g\n", what.c_str(), worst,
                largest, ratio);
    return ratio;
}

#define DELTABIT_EXPECT_CLOSE(what, got, want, tolerance) \
    EXPECT_LE(::deltabit::train::testing::relative_error(what, got, want), tolerance) << (what)

inline bool have_gpu() { return deltabit::cuda::device_count() > 0; }

}  // namespace deltabit::train::testing

#define SKIP_WITHOUT_GPU()                                                            \
    do {                                                                              \
        if (!::deltabit::train::testing::have_gpu()) GTEST_SKIP() << "no CUDA device"; \
    } while (0)
#endif
