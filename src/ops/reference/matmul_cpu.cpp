#include "ops/matmul.h"

#include "core/half.h"
#include "core/quant.h"
#include "ops/matmul/f16_activations.h"

#include <algorithm>
#include <bit>
#include <cmath>
#include <vector>

namespace deltabit::cpu {

void matmul(const float* x, const WeightView& w, int64_t n_tokens, float* y) {
    for (int64_t t = 0; t < n_tokens; ++t) {
        for (int64_t n = 0; n < w.rows; ++n) {
            y[t * w.rows + n] = dot_row(w.dtype, w.row(n), x + t * w.cols, w.cols);
        }
    }
}

void matmul_int8_activations(const float* x, const WeightView& w, int64_t n_tokens, float* y) {
    matmul_int8_activations(x, w, n_tokens, y, kInt8ActivationGroup);
}

void matmul_int8_activations(const float* x, const WeightView& w, int64_t n_tokens, float* y, int64_t group) {
    if (!is_quantized(w.dtype)) {
        matmul(x, w, n_tokens, y);
        return;
    }
    std::vector<float> rounded(size_t(w.cols));
    for (int64_t t = 0; t < n_tokens; ++t) {
        const float* xt = x + t * w.cols;
        for (int64_t begin = 0; begin < w.cols; begin += group) {
            const int64_t end = std::min(w.cols, begin + group);
            float amax = 0.0f;
            for (int64_t i = begin; i < end; ++i) amax = std::max(amax, std::fabs(xt[i]));
            const float inv = amax > 0.0f ? 127.0f / amax : 0.0f;
            const float scale = amax / 127.0f;
            for (int64_t i = begin; i < end; ++i) {
                const float q = std::clamp(std::nearbyint(xt[i] * inv), -127.0f, 127.0f);  // ties to even
                rounded[size_t(i)] = q * scale;
            }
        }
        matmul(rounded.data(), w, 1, y + t * w.rows);
    }
}

void round_activations_f16(const float* x, int64_t cols, float* out) {
    float amax = 0.0f;
    for (int64_t i = 0; i < cols; ++i) amax = std::max(amax, std::fabs(x[i]));
    const int e = f16_activation_exponent(std::bit_cast<uint32_t>(amax));
    const float scale = std::bit_cast<float>(power_of_two_bits(e)), inv = std::bit_cast<float>(power_of_two_bits(-e));
    for (int64_t i = 0; i < cols; ++i) out[i] = half_to_float(float_to_half(x[i] * scale)) * inv;
}

void matmul_f16_activations(const float* x, const WeightView& w, int64_t n_tokens, float* y) {
    std::vector<float> rounded(size_t(w.cols));
    for (int64_t t = 0; t < n_tokens; ++t) {
        round_activations_f16(x + t * w.cols, w.cols, rounded.data());
        matmul(rounded.data(), w, 1, y + t * w.rows);
    }
}

}  // namespace deltabit::cpu
