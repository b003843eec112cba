// Gates of the gated DeltaNet, per token and value head:
//   beta[t][h] = sigmoid(b[t][h])
//   g[t][h]    = ssm_a[h] · softplus(a[t][h] + dt_bias[h])          (a log-decay, <= 0)
// ssm_a is GGUF's stored −exp(A_log), so g equals transformers' −exp(A_log) · softplus(a + dt_bias).
// softplus is torch's (x itself when x > 20).
//
//   b, a          [T][n_value_heads]   projections of the normed hidden state (in_proj_b, in_proj_a)
//   ssm_a, dt_bias [n_value_heads]
//   beta, g       [T][n_value_heads]
#pragma once

#include <cstdint>

namespace deltabit::cpu {

void gdn_gates(const float* b, const float* a, const float* ssm_a, const float* dt_bias, int64_t n_tokens,
               int64_t n_value_heads, float* beta, float* g);

}  // namespace deltabit::cpu
