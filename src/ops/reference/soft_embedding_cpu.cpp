#include "ops/soft_embedding.h"

#include "ops/embedding.h"

#include <algorithm>
#include <cmath>
#include <vector>

namespace deltabit::cpu {

void soft_embedding(const float* logits, const WeightView& table, int64_t n_tokens, float* out) {
    const int64_t V = table.rows, D = table.cols;
    std::vector<float> p(static_cast<size_t>(V));
    std::vector<float> row(static_cast<size_t>(D));
    std::vector<double> acc(static_cast<size_t>(D));
    for (int64_t t = 0; t < n_tokens; ++t) {
        const float* lt = logits + t * V;
        const double max_logit = *std::max_element(lt, lt + V);
        double denom = 0.0;
        for (int64_t v = 0; v < V; ++v) denom += std::exp(double(lt[v]) - max_logit);
        for (int64_t v = 0; v < V; ++v) p[size_t(v)] = float(std::exp(double(lt[v]) - max_logit) / denom);
        std::fill(acc.begin(), acc.end(), 0.0);
        for (int32_t v = 0; v < int32_t(V); ++v) {
            if (p[size_t(v)] == 0.0f) continue;  // an underflowed probability adds exactly nothing
            embedding_lookup(table, &v, 1, row.data());
            for (int64_t i = 0; i < D; ++i) acc[size_t(i)] += double(p[size_t(v)]) * double(row[size_t(i)]);
        }
        for (int64_t i = 0; i < D; ++i) out[t * D + i] = float(acc[size_t(i)]);
    }
}

}  // namespace deltabit::cpu
