// Products with plain-float weights on the tensor cores (cuBLAS), for many tokens at once: the prompt and
// canvas twin of matmul_plain (ops/matmul/dense_cuda.h), which takes one warp an output — tens of milliseconds
// for DiffusionGemma's 256-token canvas through its 262,144-row LM head, where a GEMM takes well under one.
//
//   matmul_plain_gemm           y[T][N] = x[T][K] · W[N][K]ᵀ   (cpu::matmul: the matrix's rows are outputs)
//   matmul_plain_gemm_by_rows   y[T][K] = x[T][N] · W[N][K]    (the rows of W weighted by x: the soft embedding's
//                                                               probabilities times the embedding table)
//
// Numerics: matmul_plain's contract, y differs from the exact dot only by fp32-class rounding, whatever the
// weights' type.
//   F32 weights: one fp32 GEMM (CUBLAS_COMPUTE_32F_PEDANTIC: no TF32, even under NVIDIA_TF32_OVERRIDE=1).
//   BF16 weights: the activations are split in three bf16 parts, hi = bf16(x), mid = bf16(x − hi),
//     lo = bf16(x − hi − mid) (each difference is exact in fp32), so x = hi + mid + lo + r with |r| ≤ 2⁻²⁴·|x|
//     (round to nearest keeps 8 significant bits: each remainder is at most 2⁻⁸ of the one before); y = W·hi +
//     W·mid + W·lo, three bf16 GEMMs accumulating in fp32 (a product of two bf16 values is exact in fp32). So
//     |y − Σ w·x| ≤ 2⁻²⁴·Σ|w·x| plus the fp32 accumulation's error, matmul_plain's fp32 class, at three times
//     one bf16 GEMM's cost. (Two parts leave 2⁻¹⁶ of Σ|w·x|, 256 times fp32's unit: over DiffusionGemma's
//     ~60 products in sequence that alone took its logits past the 1e-4 parity bound.)
//   F16 weights are not taken (plain_gemm_applies is false): an f16 split overflows past ±65,504, which
//     residual streams can reach; they stay on matmul_plain.
// The sums' order is cuBLAS's and may change with the shape or the library version; tests bound, never pin,
// the bits.
//
// cuBLAS: one handle per host thread (a handle is not shared between threads), bound to `stream` at each call
// with a 32 MiB workspace of that stream's set right after (cublasSetStream resets it), so a call can be
// captured in a CUDA graph and two streams never share a workspace. Queued on `stream`; nothing waits. Empty shapes launch nothing. A cuBLAS error throws
// deltabit::Error naming the call and the shape.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

#include "core/tensor.h"
#include "ops/matmul/dense_cuda.h"

namespace deltabit::cuda {

// Below this many tokens the naive kernel is as fast (decode, a 2-token prompt) and matmul_plain stays.
inline constexpr int64_t kPlainGemmMinTokens = 8;

// Whether these products take weights of `dtype` at `n_tokens`: BF16 or F32, n_tokens ≥ kPlainGemmMinTokens.
bool plain_gemm_applies(DType dtype, int64_t n_tokens);

// Device scratch the products need for `n_tokens` rows of `width` activations (K for matmul_plain_gemm, N for
// _by_rows): the two bf16 parts for BF16 weights (2·T·width bytes each, each rounded up to 256), none for F32.
size_t plain_gemm_scratch_bytes(DType dtype, int64_t n_tokens, int64_t width);

// y[T][N] = x[T][K]·W[N][K]ᵀ, w.data on the device (any row slice of a matrix: rows are w.row_bytes() apart).
// y must not overlap x or the scratch (256-byte aligned). Error unless plain_gemm_applies(w.dtype, n_tokens).
void matmul_plain_gemm(const float* x, const WeightView& w, int64_t n_tokens, float* y, void* scratch,
                       cudaStream_t stream);

// y[T][K] = x[T][N]·W[N][K], as above with x of width w.rows and y of width w.cols.
void matmul_plain_gemm_by_rows(const float* x, const WeightView& w, int64_t n_tokens, float* y, void* scratch,
                               cudaStream_t stream);

// y = x·Wᵀ for plain-float weights at any T: the tensor-core GEMM where plain_gemm_applies, else matmul_plain
// (dense_cuda.h). `scratch(bytes)` returns device scratch of that many bytes, 256-byte aligned (a model's
// arena), asked for only when the GEMM needs it.
template <class Scratch>
void matmul_plain_any(const float* x, const WeightView& w, int64_t n_tokens, float* y, Scratch&& scratch,
                      cudaStream_t stream) {
    if (!plain_gemm_applies(w.dtype, n_tokens)) return matmul_plain(x, w, n_tokens, y, stream);
    const size_t bytes = plain_gemm_scratch_bytes(w.dtype, n_tokens, w.cols);
    matmul_plain_gemm(x, w, n_tokens, y, bytes > 0 ? scratch(bytes) : nullptr, stream);
}

}  // namespace deltabit::cuda
