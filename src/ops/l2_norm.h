// L2 norm over the last dimension, as Qwen3.5's gated DeltaNet normalises q and k:
//   y[r][i] = x[r][i] / sqrt(Σ_i x[r][i]² + eps)        (eps inside the root, transformers' l2norm;
//                                                         the model passes 1e-6)
//   x, y  [rows][dim]   (y may equal x)
// Reference numerics: sum of squares in double.
#pragma once

#include <cstdint>

namespace deltabit::cpu {

void l2_norm(const float* x, int64_t rows, int64_t dim, float eps, float* y);

}  // namespace deltabit::cpu
