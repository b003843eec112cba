// Expected embedding under a distribution over the vocabulary (DiffusionGemma's self-conditioning input,
// ../shared/reference/diffusion-gemma.md §2.7): p = softmax(logits[t]) over the vocabulary, then
//   out[t][i] = Σ_v p[t][v] · table[v][i].
// It is a product with the table itself (W[n_vocab][D] read along its rows), not with its transpose as
// matmul would take it.
//
//   logits  [T][n_vocab]
//   table   W[n_vocab][D]   (WeightView: rows = n_vocab, cols = D; any weight dtype)
//   out     [T][D]
// Reference numerics: softmax and the sum in double; p is rounded to fp32 first, as transformers casts
// softmax's output to the (fp32) embedding dtype before the product.
#pragma once
#include <cstdint>
#include "core/tensor.h"
namespace deltabit::cpu {
void soft_embedding(const float* logits, const WeightView& table, int64_t n_tokens, float* out);
}  // namespace deltabit::cpu
