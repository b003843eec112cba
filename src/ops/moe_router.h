// MoE routing (Qwen3-Next / Qwen3.5-MoE): softmax over the router logits, the top_k experts by
// probability, optionally renormalised so the chosen weights sum to 1.
//
//   logits   [T][n_expert]   router output (matmul with ffn_gate_inp)
//   ids      [T][top_k]      chosen experts, by decreasing probability; equal probabilities keep the
//                            lower expert index first
//   weights  [T][top_k]      their probabilities (renormalised over the chosen when `renormalize`)
// Reference numerics: softmax in double.
#pragma once

#include <cstdint>

namespace deltabit::cpu {

void moe_router(const float* logits, int64_t n_tokens, int64_t n_expert, int64_t top_k, bool renormalize,
                int32_t* ids, float* weights);

}  // namespace deltabit::cpu
