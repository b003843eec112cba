#include "ops/attention.h"

#include <cmath>
#include <vector>

#include "ops/activations.h"

namespace deltabit::cpu {

void attention(const float* q, const float* k, const float* v, const float* gate, const AttentionDims& dims,
               float* out) {
    const int64_t d = dims.head_dim;
    const int64_t group = dims.n_head / dims.n_kv_head;
    const double scale = 1.0 / std::sqrt(double(d));
    std::vector<double> score(size_t(dims.n_past + dims.n_tokens));
    std::vector<double> acc(static_cast<size_t>(d));
    for (int64_t t = 0; t < dims.n_tokens; ++t) {
        const int64_t n_visible = dims.n_past + t + 1;  // keys 0 .. n_past + t
        for (int64_t h = 0; h < dims.n_head; ++h) {
            const int64_t kv_head = h / group;
            const float* qh = q + (t * dims.n_head + h) * d;
            double max_score = -INFINITY;
            for (int64_t p = 0; p < n_visible; ++p) {
                const float* kp = k + (p * dims.n_kv_head + kv_head) * d;
                double dot = 0.0;
                for (int64_t i = 0; i < d; ++i) dot += double(qh[i]) * double(kp[i]);
                score[p] = dot * scale;
                max_score = std::max(max_score, score[p]);
            }
            double denom = 0.0;
            for (int64_t p = 0; p < n_visible; ++p) {
                score[p] = std::exp(score[p] - max_score);
                denom += score[p];
            }
            std::fill(acc.begin(), acc.end(), 0.0);
            for (int64_t p = 0; p < n_visible; ++p) {
                const float* vp = v + (p * dims.n_kv_head + kv_head) * d;
                for (int64_t i = 0; i < d; ++i) acc[i] += score[p] / denom * double(vp[i]);
            }
            float* oh = out + (t * dims.n_head + h) * d;
            const float* gh = gate ? gate + (t * dims.n_head + h) * d : nullptr;
            for (int64_t i = 0; i < d; ++i) oh[i] = float(gh ? acc[i] * sigmoid(double(gh[i])) : acc[i]);
        }
    }
}

}  // namespace deltabit::cpu
