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

// The reference of the CUDA quantised GEMV's numerics (ops/matmul/matmul_cuda.h): for a quantised weight
// type, each token's x is first rounded per group of kInt8ActivationGroup values to int8 — scale =
// max|x|/127, q = round-half-even(x · (127/max|x|)) clamped to ±127, all in fp32 — and the dequantised
// q · scale is dotted with the row as in matmul. Plain-float weights (F32/F16/BF16) run matmul as is,
// since the GPU computes those in fp32.
inline constexpr int64_t kInt8ActivationGroup = 128;
void matmul_int8_activations(const float* x, const WeightView& w, int64_t n_tokens, float* y);
// The same rounding per group of `group` values (K a multiple of it): with the weight's block size it is the
// reference of the CPU fast path's int8 mode (ops/cpu_fast/matmul_cpu_fast.h).
void matmul_int8_activations(const float* x, const WeightView& w, int64_t n_tokens, float* y, int64_t group);

// The reference of the CUDA Q1_0 prompt GEMM on f16 activations (ops/matmul/gemm_cuda.h gemm_q1_0_half): each
// token's row scaled by its power of two (ops/matmul/f16_activations.h), rounded to f16 (nearest even) and scaled
// back — exact in fp32 — then matmul. round_activations_f16 writes one row's rounded values to `out`.
void round_activations_f16(const float* x, int64_t cols, float* out);
void matmul_f16_activations(const float* x, const WeightView& w, int64_t n_tokens, float* y);
// Tokens from which the CUDA engine's prompt matmuls run a GEMM (ops/matmul/gemm_cuda.h kGemmMinTokens is this,
// and why 8 is there): below it, every token goes through the decode GEMV on int8 activations.
inline constexpr int64_t kPromptGemmMinTokens = 8;

}  // namespace deltabit::cpu
