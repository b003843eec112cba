// Gated RMS norm on the DeltaNet output, per value head:
//   y[r][i] = w[i] · x[r][i] / sqrt(mean_i(x[r][i]²) + eps) · silu(z[r][i])
// Plain w (not 1 + w), shared by all heads; norm first, then the gate.
//
//   x, z, y  [rows][dim]   rows = T · n_value_heads, dim = value_dim (y may equal x)
//   w        [dim]
// Reference numerics: mean of squares in double.
#pragma once

#include <cstdint>

namespace deltabit::cpu {

void gated_rms_norm(const float* x, const float* z, const float* w, int64_t rows, int64_t dim, float eps,
                    float* y);

}  // namespace deltabit::cpu
