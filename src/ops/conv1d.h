// Depthwise causal 1-D convolution followed by SiLU, with a rolling state (the gated DeltaNet input
// conv over the [q | k | v] channels).
//
//   x      [T][C]          the T new inputs
//   w      [C][K]          per-channel taps; w[c][K−1] multiplies the newest input (GGUF ssm_conv1d
//                          {K, C}, HF conv1d.weight [C, 1, K] squeezed)
//   state  [K−1][C]        the K−1 inputs before x, oldest first (zeros at sequence start); on return
//                          it holds the last K−1 inputs of concat(state, x)
//   out    [T][C]          out[t][c] = silu(Σ_{j<K} w[c][j] · window[t + j][c]),
//                          window = concat(state, x) along time ([K−1+T][C])
//
// Running [x1; x2] in one call equals running x1 then x2 with the state carried over.
// Reference numerics: each sum in double.
#pragma once

#include <cstdint>

namespace deltabit::cpu {

void conv1d_causal_silu(const float* x, const float* w, float* state, int64_t n_tokens, int64_t channels,
                        int64_t kernel, float* out);

}  // namespace deltabit::cpu
