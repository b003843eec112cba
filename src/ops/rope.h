// Rotary position embedding, NeoX (split-half) pairing, optionally partial — in place.
//
//   x          [T][n_head][head_dim]   rotated in place
//   positions  [T]                     absolute position of each token
//   rope_dim   the first rope_dim dims of every head are rotated (even, <= head_dim); the rest pass
//              through (Qwen3.5: 64 of 256; Qwen3: all)
//
// For j < rope_dim/2, dims (j, j + rope_dim/2) rotate by angle_j = pos · theta^(−2j / rope_dim):
//   x'_j            = x_j · cos − x_{j+rope_dim/2} · sin
//   x'_{j+rope_dim/2} = x_{j+rope_dim/2} · cos + x_j · sin
//
// The angle is formed in fp32 the way transformers does (inv_freq = 1 / theta^(2j/rope_dim) in fp32,
// times the fp32 position, rounded to fp32): at positions ~10^4 the fp32 roundings of inv_freq and of
// the product move the angle by up to ~10^-3 rad, far more than any other difference, so matching them
// matters for logit parity.
// cos/sin of that angle and the rotation itself are evaluated in double.
#pragma once

#include <cstdint>

namespace deltabit::cpu {

void rope_neox(float* x, const int32_t* positions, int64_t n_tokens, int64_t n_head, int64_t head_dim,
               int64_t rope_dim, float theta);

// The rotation both rope_neox and rope_proportional (rope_proportional.h) apply, with the numerics above:
// for j < n_pairs, dims (j, j + half) rotate by angle_j = pos · theta^(−2j / exponent_dim).
// rope_neox: half = n_pairs = rope_dim / 2, exponent_dim = rope_dim; proportional: half = head_dim / 2,
// exponent_dim = head_dim.
void rope_rotate_pairs(float* x, const int32_t* positions, int64_t n_tokens, int64_t n_head, int64_t head_dim,
                       int64_t half, int64_t n_pairs, int64_t exponent_dim, float theta);

}  // namespace deltabit::cpu
