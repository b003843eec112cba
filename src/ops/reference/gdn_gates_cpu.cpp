#include "ops/gdn_gates.h"

#include "ops/activations.h"

namespace deltabit::cpu {

void gdn_gates(const float* b, const float* a, const float* ssm_a, const float* dt_bias, int64_t n_tokens,
               int64_t n_value_heads, float* beta, float* g) {
    for (int64_t t = 0; t < n_tokens; ++t) {
        for (int64_t h = 0; h < n_value_heads; ++h) {
            const int64_t i = t * n_value_heads + h;
            beta[i] = float(sigmoid(double(b[i])));
            // transformers adds in fp32 before softplus; keep that rounding.
            const float pre = a[i] + dt_bias[h];
            g[i] = float(double(ssm_a[h]) * softplus(double(pre)));
        }
    }
}

}  // namespace deltabit::cpu
