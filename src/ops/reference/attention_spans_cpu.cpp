#include "ops/attention_spans.h"

#include <algorithm>
#include <cmath>
#include <vector>

namespace deltabit::cpu {

void attention_spans(const float* q, const float* k, const float* v, const AttentionSpanDims& dims, double scale,
                     const int64_t* key_begin, const int64_t* key_end, float* out) {
    const int64_t d = dims.head_dim;
    const int64_t group = dims.n_head / dims.n_kv_head;
    std::vector<double> score(size_t(dims.n_keys));
    std::vector<double> acc(static_cast<size_t>(d));
    for (int64_t t = 0; t < dims.n_queries; ++t) {
        const int64_t begin = key_begin[t], end = key_end[t];
        for (int64_t h = 0; h < dims.n_head; ++h) {
            const int64_t kv_head = h / group;
            const float* qh = q + (t * dims.n_head + h) * d;
            double max_score = -INFINITY;
            for (int64_t p = begin; p < end; ++p) {
                const float* kp = k + (p * dims.n_kv_head + kv_head) * d;
                double dot = 0.0;
                for (int64_t i = 0; i < d; ++i) dot += double(qh[i]) * double(kp[i]);
                score[size_t(p)] = dot * scale;
                max_score = std::max(max_score, score[size_t(p)]);
            }
            double denom = 0.0;
            for (int64_t p = begin; p < end; ++p) {
                score[size_t(p)] = std::exp(score[size_t(p)] - max_score);
                denom += score[size_t(p)];
            }
            std::fill(acc.begin(), acc.end(), 0.0);
            for (int64_t p = begin; p < end; ++p) {
                const float* vp = v + (p * dims.n_kv_head + kv_head) * d;
                for (int64_t i = 0; i < d; ++i) acc[size_t(i)] += score[size_t(p)] / denom * double(vp[i]);
            }
            float* oh = out + (t * dims.n_head + h) * d;
            for (int64_t i = 0; i < d; ++i) oh[i] = float(acc[size_t(i)]);
        }
    }
}

void diffusion_key_spans(int64_t n_queries, int64_t n_cached, bool causal, int64_t window, int64_t* key_begin,
                         int64_t* key_end) {
    for (int64_t t = 0; t < n_queries; ++t) {
        key_begin[t] = 0;
        key_end[t] = n_cached + n_queries;
        if (causal) {
            key_end[t] = n_cached + t + 1;                                               // itself and everything before it...
            if (window > 0) key_begin[t] = std::max<int64_t>(0, key_end[t] - window);  // ...within W
        }
    }
}

}  // namespace deltabit::cpu
