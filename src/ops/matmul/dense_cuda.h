// Two small CUDA ops the GPU model forward needs beside the op twins of ops/<family>/*_cuda.h: a matrix
// product for weights stored as plain floats (F32, F16, BF16 — the float fixtures and any unquantised
// tensor; the decode GEMV of ops/matmul/matmul_cuda.h covers only the quantised formats), and y += a·x for the
// residual stream and the MoE mixture. Same conventions as those: device pointers, queued on
// `stream`, empty shapes launch nothing, a launch error throws naming the kernel.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "core/tensor.h"

namespace deltabit::cuda {

// The twin of cpu::matmul (ops/matmul.h) for w.dtype F32, F16 or BF16, any n_tokens:
//   x [T][K], W[N][K] (w.data on the device, GGUF row layout), y [T][N]; y must not overlap x.
// Deliberately naive — one warp per (token, output), fp32 products summed per lane in k order then
// by a butterfly — so it differs from the reference's double dot only by fp32 rounding. Throws for
// another dtype.
void matmul_plain(const float* x, const WeightView& w, int64_t n_tokens, float* y, cudaStream_t stream);

// y[i] += a · x[i] for i < n; x and y must not overlap.
void axpy(float a, const float* x, float* y, int64_t n, cudaStream_t stream);

}  // namespace deltabit::cuda
