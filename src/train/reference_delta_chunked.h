// The gated delta rule in its chunked (WY) form, forward and backward, in double: the form the CUDA
// training kernels compute (train/cuda/delta_rule_chunked_kernels.cu), written as naive loops over the
// formulas so that the kernels have an oracle step for step. Same contract as ref::delta_rule_forward
// and ref::delta_rule_backward (reference_ops.h: layouts, grouped GQA, q already scaled, zero initial
// state), which stay the oracle of this form; docs/notes/delta-rule-chunked-backward.md derives the
// backward.
//
// Per value head and chunk of `chunk` tokens (the last one may be shorter), with the state S [dk][dv]
// entering the chunk and γ_i = Σ_{m≤i} g_m the cumulative log-decay inside the chunk (i, j index the
// chunk's tokens, ℓ its last one):
//   A_ij = β_i (k_i·k_j) e^{γ_i−γ_j}   (j < i)          T = (I + A)^{-1}   (unit lower triangular)
//   M_ij = (q_i·k_j) e^{γ_i−γ_j}       (j ≤ i)
//   R    = V − e^γ ⊙ K S                                what each token would write against S alone
//   V'   = T (β ⊙ R)                                    the δ of every token of the chunk
//   O    = e^γ ⊙ Q S + M V'
//   S   ← e^{γ_ℓ} S + Kᵀ (e^{γ_ℓ−γ} ⊙ V')
// Every exponent is ≤ 0, so nothing overflows however strong the decay.
#pragma once

#include "train/reference_ops.h"

#include <cstdint>

namespace deltabit::train::ref {

// The training kernels' chunk: 64 tokens, as transformers, fla and the engine's prefill.
inline constexpr int64_t kDeltaRuleChunk = 64;

// o [T][Hv][dv]; any chunk ≥ 1.
void delta_rule_chunked_forward(const double* q, const double* k, const double* v, const double* g,
                                const double* beta, const DeltaRuleShape& s, int64_t chunk, double* o);
// Adds into dq, dk (shared by the value heads of a key head), dv, dg, dbeta, as delta_rule_backward.
void delta_rule_chunked_backward(const double* q, const double* k, const double* v, const double* g,
                                 const double* beta, const double* dout, const DeltaRuleShape& s, int64_t chunk,
                                 double* dq, double* dk, double* dv, double* dg, double* dbeta);

}  // namespace deltabit::train::ref
