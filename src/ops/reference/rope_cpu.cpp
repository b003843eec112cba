#include "ops/rope.h"

#include <cmath>

namespace deltabit::cpu {

void rope_rotate_pairs(float* x, const int32_t* positions, int64_t n_tokens, int64_t n_head, int64_t head_dim,
                       int64_t half, int64_t n_pairs, int64_t exponent_dim, float theta) {
    for (int64_t t = 0; t < n_tokens; ++t) {
        for (int64_t j = 0; j < n_pairs; ++j) {
            // fp32 angle, step by step as transformers forms it (see rope.h for why).
            const float exponent = float(2 * j) / float(exponent_dim);
            const float inv_freq = 1.0f / float(std::pow(double(theta), double(exponent)));
            const float angle = float(positions[t]) * inv_freq;
            const double c = std::cos(double(angle));
            const double s = std::sin(double(angle));
            for (int64_t h = 0; h < n_head; ++h) {
                float* head = x + (t * n_head + h) * head_dim;
                const double x0 = head[j];
                const double x1 = head[j + half];
                head[j] = float(x0 * c - x1 * s);
                head[j + half] = float(x1 * c + x0 * s);
            }
        }
    }
}

void rope_neox(float* x, const int32_t* positions, int64_t n_tokens, int64_t n_head, int64_t head_dim,
               int64_t rope_dim, float theta) {
    rope_rotate_pairs(x, positions, n_tokens, n_head, head_dim, rope_dim / 2, rope_dim / 2, rope_dim, theta);
}

}  // namespace deltabit::cpu
