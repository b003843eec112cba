#include "ops/rope_proportional.h"

#include <cmath>

namespace deltabit::cpu {

void rope_proportional(float* x, const int32_t* positions, int64_t n_tokens, int64_t n_head, int64_t head_dim,
                       int64_t n_pairs, float theta) {
    const int64_t half = head_dim / 2;
    for (int64_t t = 0; t < n_tokens; ++t) {
        for (int64_t j = 0; j < n_pairs; ++j) {
            const float exponent = float(2 * j) / float(head_dim);
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

}  // namespace deltabit::cpu
