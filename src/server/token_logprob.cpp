#include "server/token_logprob.h"

#include <algorithm>
#include <cmath>
#include <vector>

namespace deltabit::server {

TokenLogprob logprob_of(std::span<const float> logits, int32_t token, int top) {
    float max = -INFINITY;
    for (float x : logits) max = std::max(max, x);
    double sum = 0.0;
    for (float x : logits) sum += std::exp(double(x) - max);
    const float log_z = float(std::log(sum)) + max;
    TokenLogprob out;
    out.token = token;
    out.logprob = logits[size_t(token)] - log_z;
    if (top > 0) {
        std::vector<int32_t> ids(logits.size());
        for (size_t i = 0; i < ids.size(); ++i) ids[i] = int32_t(i);
        const size_t k = std::min(ids.size(), size_t(top));
        std::partial_sort(ids.begin(), ids.begin() + ptrdiff_t(k), ids.end(), [&](int32_t a, int32_t b) {
            return logits[size_t(a)] != logits[size_t(b)] ? logits[size_t(a)] > logits[size_t(b)] : a < b;
        });
        for (size_t i = 0; i < k; ++i) out.top.emplace_back(ids[i], logits[size_t(ids[i])] - log_z);
    }
    return out;
}

}  // namespace deltabit::server
