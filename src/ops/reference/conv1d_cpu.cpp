#include "ops/conv1d.h"

#include <vector>

#include "ops/activations.h"

namespace deltabit::cpu {

void conv1d_causal_silu(const float* x, const float* w, float* state, int64_t n_tokens, int64_t channels,
                        int64_t kernel, float* out) {
    // window = concat(state, x) along time: [K−1+T][C], built explicitly so the loop reads like the formula.
    const int64_t history = kernel - 1;
    std::vector<float> window(size_t((history + n_tokens) * channels));
    std::copy(state, state + history * channels, window.begin());
    std::copy(x, x + n_tokens * channels, window.begin() + history * channels);

    for (int64_t t = 0; t < n_tokens; ++t) {
        for (int64_t c = 0; c < channels; ++c) {
            double sum = 0.0;
            for (int64_t j = 0; j < kernel; ++j) sum += double(w[c * kernel + j]) * double(window[(t + j) * channels + c]);
            out[t * channels + c] = float(silu(sum));
        }
    }
    // The new state is the last K−1 rows of the window.
    std::copy(window.end() - history * channels, window.end(), state);
}

}  // namespace deltabit::cpu
