#include "ops/moe_router.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <vector>

namespace deltabit::cpu {

void moe_router(const float* logits, int64_t n_tokens, int64_t n_expert, int64_t top_k, bool renormalize,
                int32_t* ids, float* weights) {
    std::vector<double> prob(static_cast<size_t>(n_expert));
    std::vector<int32_t> order(static_cast<size_t>(n_expert));
    for (int64_t t = 0; t < n_tokens; ++t) {
        const float* lt = logits + t * n_expert;
        const double max_logit = *std::max_element(lt, lt + n_expert);
        double denom = 0.0;
        for (int64_t e = 0; e < n_expert; ++e) {
            prob[e] = std::exp(double(lt[e]) - max_logit);
            denom += prob[e];
        }
        for (double& p : prob) p /= denom;

        std::iota(order.begin(), order.end(), 0);
        std::stable_sort(order.begin(), order.end(), [&](int32_t a, int32_t b) { return prob[a] > prob[b]; });
        double chosen = 0.0;
        for (int64_t i = 0; i < top_k; ++i) chosen += prob[order[i]];
        for (int64_t i = 0; i < top_k; ++i) {
            ids[t * top_k + i] = order[i];
            weights[t * top_k + i] = float(renormalize ? prob[order[i]] / chosen : prob[order[i]]);
        }
    }
}

}  // namespace deltabit::cpu
