// Matrix product with a stored weight: y = x · Wᵀ, i.e. y[t][n] = Σ_k x[t][k] · W[n][k]. A GEMV
// (decode) is n_tokens = 1. W is read in place in its own dtype (core/quant.h's dot_row), as every
// backend must.
//
//   x  [T][K]     row-major, K = w.cols
//   w  W[N][K]    WeightView, N = w.rows (one row per output)
//   y  [T][N]     row-major; must not overlap x
//
// Reference numerics: each y[t][n] is one dot_row — products and sum in double, in k order.
#pragma once

#include <cstdint>

#include "core/tensor.h"

namespace deltabit::cpu {

void matmul(const float* x, const WeightView& w, int64_t n_tokens, float* y);

}  // namespace deltabit::cpu
