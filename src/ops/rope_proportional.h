// Rotary position embedding with rotate-half pairing over the whole head, where only the first
// n_pairs frequencies are non-zero ("proportional" RoPE of DiffusionGemma's full-attention layers;
// ../shared/reference/diffusion-gemma.md §2.2) — in place.
//
//   x          [T][n_head][head_dim]   rotated in place
//   positions  [T]                     absolute position of each token
//   n_pairs    pairs (j, j + head_dim/2) with j < n_pairs rotate; every other dim passes through
//
// angle_j = pos · theta^(−2j / head_dim): the exponent's denominator is the whole head_dim, not
// 2·n_pairs, which is what sets this apart from rope_neox's partial rotation (there the rotated dims are
// the first rope_dim and the exponent is over rope_dim). With n_pairs = head_dim/2 it is ordinary full
// RoPE, i.e. rope_neox with rope_dim = head_dim, value for value.
//   x'_j            = x_j · cos − x_{j+head_dim/2} · sin
//   x'_{j+head_dim/2} = x_{j+head_dim/2} · cos + x_j · sin
// Angle numerics as rope_neox (rope.h): inv_freq and the product rounded to fp32 as transformers forms
// them; cos, sin and the rotation in double.
#pragma once
#include <cstdint>
namespace deltabit::cpu {
void rope_proportional(float* x, const int32_t* positions, int64_t n_tokens, int64_t n_head, int64_t head_dim,
                       int64_t n_pairs, float theta);
}  // namespace deltabit::cpu
