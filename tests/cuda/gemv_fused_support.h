// Helpers of the fused-GEMV tests (test_gemv_fused_cuda.cpp, test_gemv_add_norm_cuda.cpp): random weights
// straight in the GEMV layout, device-quantised activations, bitwise comparison and the plain GEMV that
// the fused kernels are held to. CUDA builds only (include it inside `#ifdef DELTABIT_HAVE_CUDA`).
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "core/dtype.h"
#include "core/half.h"
#include "cuda/gemv_test_data.h"
#include "cuda/op_parity_cuda.h"
#include "ops/matmul/matmul_cuda.h"
#include "ops/matmul/weight_repack.h"

namespace deltabit::test {

// A random matrix straight in the GEMV layout. These tests compare GPU kernels with each other, so the
// weights need no GGUF original (the repack is proven in test_gemv_repack.cpp); filling the two planes
// directly, four code bytes per draw, keeps the 17408 × 5120 FFN shapes cheap on the host. Every code
// pattern is a valid weight, so random bytes exercise every level.
inline cuda::GemvWeights random_gemv_weights(DType t, int64_t rows, int64_t cols, std::mt19937& rng) {
    GemvRepacked packed;
    packed.dtype = t;
    packed.rows = rows;
    packed.cols = cols;
    packed.codes.resize(size_t(rows) * gemv_code_row_bytes(t, cols));
    for (size_t i = 0; i < packed.codes.size(); i += 4) {
        const uint32_t word = rng();
        std::memcpy(&packed.codes[i], &word, std::min<size_t>(4, packed.codes.size() - i));
    }
    std::uniform_real_distribution<float> scale(-0.05f, 0.05f);
    packed.scales.resize(size_t(rows) * size_t(cols / dtype_info(t).block_elems));
    for (uint16_t& d : packed.scales) d = float_to_half(scale(rng));
    return cuda::upload_gemv_weights(packed);
}

// Hidden-state-like x[cols], quantised on the device by cuda::quantize_activations (itself checked
// against its CPU twin in test_gemv_cuda.cpp). Both sides of every GEMV comparison read this one copy.
inline cuda::ActivationScratch random_quantized_activations(int64_t cols, std::mt19937& rng) {
    cuda::ActivationScratch scratch(cols);
    const std::vector<float> x = random_activations(cols, rng);
    cuda::DeviceBuffer dx(x.size() * sizeof(float));
    dx.upload(x.data(), dx.bytes());
    cuda::quantize_activations(dx.get<float>(), scratch.view(cols), nullptr);
    cuda::cuda_check(cudaDeviceSynchronize(), "quantize_activations");
    return scratch;
}

// got == want bit for bit. The reference must be all finite: otherwise an unwritten (NaN-poisoned)
// output could match an unwritten reference.
inline ::testing::AssertionResult bitwise_equal(const std::vector<float>& got, const std::vector<float>& want) {
    if (got.size() != want.size()) {
        return ::testing::AssertionFailure() << got.size() << " outputs, want " << want.size();
    }
    for (size_t i = 0; i < want.size(); ++i) {
        if (!std::isfinite(want[i])) return ::testing::AssertionFailure() << "reference row " << i << " is " << want[i];
        if (std::bit_cast<uint32_t>(got[i]) != std::bit_cast<uint32_t>(want[i])) {
            return ::testing::AssertionFailure() << "row " << i << " is " << got[i] << " (bits 0x" << std::hex
                                                 << std::bit_cast<uint32_t>(got[i]) << "), want " << want[i]
                                                 << " (bits 0x" << std::bit_cast<uint32_t>(want[i]) << std::dec << ")";
        }
    }
    return ::testing::AssertionSuccess();
}

inline std::vector<float> gemv_alone(const cuda::QuantizedActivationsView& x, const cuda::GemvWeightView& w,
                              const cuda::GemvLaunchConfig& config, const std::string& what) {
    GuardedDeviceArray<float> y(size_t(w.rows));
    cuda::gemv_quantized(x, w, y.get(), nullptr, config);
    return y.download(what + " (gemv_quantized alone)");
}


inline std::string config_text(const cuda::GemvLaunchConfig& c) {
    std::string s = "lanes " + std::to_string(c.lanes_per_row) + " rows/thread " + std::to_string(c.rows_per_thread) +
                    " warps " + std::to_string(c.warps_per_block);
    if (c.max_blocks > 0) s += " max_blocks " + std::to_string(c.max_blocks);
    if (c.max_grid > 0) s += " max_grid " + std::to_string(c.max_grid);
    return s;
}

// The first `groups` arrival counters of a view are all zero (a kernel that counts arrivals leaves them so,
// and a refused call must not have launched).
inline ::testing::AssertionResult arrivals_zero(const cuda::QuantizedActivationsView& v, int64_t groups) {
    cuda::cuda_check(cudaDeviceSynchronize(), "arrival counters");
    std::vector<int32_t> arrivals(static_cast<size_t>(groups));
    cuda::cuda_check(cudaMemcpy(arrivals.data(), v.arrivals, arrivals.size() * sizeof(int32_t), cudaMemcpyDeviceToHost),
                     "download arrivals");
    for (size_t g = 0; g < arrivals.size(); ++g) {
        if (arrivals[g] != 0) return ::testing::AssertionFailure() << "arrival counter " << g << " is " << arrivals[g];
    }
    return ::testing::AssertionSuccess();
}

}  // namespace deltabit::test
