// Test data shared by the CUDA GEMV tests (test_gemv_cuda.cpp, test_gemv_fused_cuda.cpp): hidden-state-like
// activations and a CPU twin of the activation quantiser defined in ops/matmul_cuda.h. CUDA builds only
// (include it inside `#ifdef DELTABIT_HAVE_CUDA`).
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <random>
#include <vector>

#include "ops/matmul/matmul_cuda.h"

namespace deltabit::test {

// Activations with a per-group magnitude that varies over three decades, as hidden states do.
inline std::vector<float> random_activations(int64_t cols, std::mt19937& rng) {
    std::uniform_real_distribution<float> value(-1.0f, 1.0f);
    std::uniform_real_distribution<float> log_magnitude(-2.0f, 1.0f);
    std::vector<float> x(static_cast<size_t>(cols));
    float magnitude = 1.0f;
    for (int64_t k = 0; k < cols; ++k) {
        if (k % 128 == 0) magnitude = std::pow(10.0f, log_magnitude(rng));
        x[size_t(k)] = value(rng) * magnitude;
    }
    return x;
}

// CPU twin of the quantiser's definition in matmul_cuda.h: q has whole groups (zero beyond cols).
struct HostQuantized {
    std::vector<int8_t> q;
    std::vector<float> scale;
    std::vector<int32_t> sum;
};
inline HostQuantized quantize_on_host(const std::vector<float>& x) {
    const int64_t cols = int64_t(x.size());
    const int64_t groups = cuda::activation_groups(cols);
    HostQuantized out{std::vector<int8_t>(size_t(groups * 128), 0), std::vector<float>(size_t(groups)),
                      std::vector<int32_t>(size_t(groups))};
    for (int64_t g = 0; g < groups; ++g) {
        float amax = 0.0f;
        for (int64_t k = g * 128; k < std::min(cols, (g + 1) * 128); ++k) amax = std::max(amax, std::fabs(x[size_t(k)]));
        const float inv = amax > 0.0f ? 127.0f / amax : 0.0f;
        int32_t sum = 0;
        for (int64_t k = g * 128; k < std::min(cols, (g + 1) * 128); ++k) {
            const long q = std::clamp(std::lrint(x[size_t(k)] * inv), -127L, 127L);  // round half to even
            out.q[size_t(k)] = int8_t(q);
            sum += int32_t(q);
        }
        out.scale[size_t(g)] = amax / 127.0f;
        out.sum[size_t(g)] = sum;
    }
    return out;
}

}  // namespace deltabit::test
