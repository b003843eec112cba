// RMS norm over the last dimension of x[rows][dim]:
//   y[r][i] = x[r][i] / sqrt(mean_i(x[r][i]²) + eps) · w'[i],   w' = w (plain), 1 + w (one_plus) or 1 (none).
//
// The engine keeps GGUF's convention, where Qwen3.5's zero-centred "1 + w" weights are stored with
// the 1 already added, so models only need `plain`; `one_plus` serves Hugging Face weights as read.
// Per-head norms (Qwen q_norm / k_norm over head_dim) are this op with rows = T · n_head and
// dim = head_dim on a contiguous [T][n_head][head_dim] buffer.
//
//   x  [rows][dim]   y [rows][dim] (y may equal x: each row is read fully before it is written)
//   w  [dim]         (ignored, and may be null, for `none`: the scale-free norms of DiffusionGemma's
//                     value path, router and inputs)
// Reference numerics: mean of squares in double, eps added inside the square root.
#pragma once

#include <cstdint>

namespace deltabit::cpu {

enum class NormWeight : uint8_t { plain, one_plus, none };

void rms_norm(const float* x, const float* w, int64_t rows, int64_t dim, float eps, NormWeight weight, float* y);

}  // namespace deltabit::cpu
