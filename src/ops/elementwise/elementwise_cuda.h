// The element-wise and row-wise CUDA ops: row norms (ops/rms_norm.h, l2_norm.h, gated_rms_norm.h),
// SwiGLU, GeGLU and the DeltaNet gates (swiglu.h, gelu_glu.h, gdn_gates.h), RoPE (rope.h,
// rope_proportional.h), the embedding lookup and the soft embedding (embedding.h, soft_embedding.h), the
// logit soft-cap, the residual add-and-scale and the per-column scale (softcap.h, add_scale.h,
// scale_columns.h),
// the MoE router (moe_router.h), the decode step's seam between blocks (residual add + RMS norm +
// activation quantisation) and the GPU argmax. Each keeps the signature of its CPU reference in ops/<op>.h
// with a trailing stream; the kernels are ops/elementwise/<op>_cuda.cu.
//
// Common to all: every array pointer is on the device and the work is enqueued on `stream` (nothing waits
// for it); a launch error throws deltabit::Error naming the kernel; empty shapes (0 rows, 0 tokens) launch
// nothing; grids follow ops/cuda/cuda_launch.h, so any length that fits in memory runs. Arithmetic is fp32
// where the references use double: the differences are summation order and rounding, bounded in
// tests/cuda/op_parity.h and stated per kernel below.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

#include "core/tensor.h"
#include "ops/matmul/matmul_cuda.h"
#include "ops/rms_norm.h"

namespace deltabit::cuda {

using cpu::NormWeight;

// ---- row norms (rms_norm.h, l2_norm.h, gated_rms_norm.h) ----
// One warp per row when dim <= kWarpRowMaxDim (per-head norms: head_dim 128 or 256), else one block
// of kBlockRowThreads per row (hidden 5120). Sums of squares in fp32: each thread adds its strided
// elements in order, then a butterfly over the lanes (and the warps).
inline constexpr int64_t kWarpRowMaxDim = 1024;
inline constexpr int kBlockRowThreads = 256;
// Threads that share one row's sum, for the error bound the tests derive.
inline int norm_threads_per_row(int64_t dim) { return dim <= kWarpRowMaxDim ? 32 : kBlockRowThreads; }

void rms_norm(const float* x, const float* w, int64_t rows, int64_t dim, float eps, NormWeight weight, float* y,
              cudaStream_t stream);
void l2_norm(const float* x, int64_t rows, int64_t dim, float eps, float* y, cudaStream_t stream);
void gated_rms_norm(const float* x, const float* z, const float* w, int64_t rows, int64_t dim, float eps,
                    float* y, cudaStream_t stream);

// ---- element-wise (swiglu.h, gdn_gates.h) ----
void swiglu(const float* gate, const float* up, int64_t n, float* out, cudaStream_t stream);
void gdn_gates(const float* b, const float* a, const float* ssm_a, const float* dt_bias, int64_t n_tokens,
               int64_t n_value_heads, float* beta, float* g, cudaStream_t stream);

// ---- DiffusionGemma's element-wise ops (gelu_glu.h, softcap.h, add_scale.h, scale_columns.h) ----
// gelu_glu and softcap in double as their references, so each output is within 1 ulp of the reference's
// (the device's tanh may differ from the host's in the last double bit). add_scale and scale_columns round
// as their references do: exact.
void gelu_glu(const float* gate, const float* up, int64_t n, float* out, cudaStream_t stream);
void softcap(const float* x, int64_t n, float cap, float* y, cudaStream_t stream);
void add_scale(const float* x, const float* r, int64_t n, float s, float* y, cudaStream_t stream);
void scale_columns(const float* x, const float* w, int64_t rows, int64_t dim, double c, float* y,
                   cudaStream_t stream);

// ---- rope.h ----
// Same fp32 angle as the reference; cos, sin and the rotation in double, so results equal the
// reference's to within one rounding of the output.
void rope_neox(float* x, const int32_t* positions, int64_t n_tokens, int64_t n_head, int64_t head_dim,
               int64_t rope_dim, float theta, cudaStream_t stream);
// rope_proportional.h: the same rotation with the pairs (j, j + head_dim/2), j < n_pairs, and the exponent
// over head_dim (the one kernel serves both).
void rope_proportional(float* x, const int32_t* positions, int64_t n_tokens, int64_t n_head, int64_t head_dim,
                       int64_t n_pairs, float theta, cudaStream_t stream);

// ---- embedding.h ----
// `table.data` is on the device in the dtype's GGUF block layout (not the GEMV repack); `ids` too.
// Exact: each weight is d·level in fp32, as dequantize_row. Ids are validated where they enter (the
// request, the tokenizer); an id outside [0, rows) here cannot throw from the device, so its row is
// written as NaN (never read out of bounds) and poisons the logits visibly.
void embedding_lookup(const WeightView& table, const int32_t* ids, int64_t n_tokens, float* out,
                      cudaStream_t stream);

// ---- soft_embedding.h ----
// `table` as embedding_lookup's, `logits` [T][rows] on the device. The softmax statistics in double and p
// rounded to fp32 as the reference does; Σ_v p·table[v][i] in fp32 chains of 32 rows added into a double,
// so |out − reference| ≤ 34·u·Σ_v p|table[v][i]| + u·|out| (soft_embedding_cuda.cu derives it).
void soft_embedding(const float* logits, const WeightView& table, int64_t n_tokens, float* out,
                    cudaStream_t stream);
// The fast path for BF16 and F32 tables from kPlainGemmMinTokens tokens (ops/matmul/dense_gemm_cuda.h
// plain_gemm_applies; Error otherwise): p [T][n_vocab] written in fp32 by the same formula, then
// out = p · table on the tensor cores (matmul_plain_gemm_by_rows), so |out − reference| ≤
// (2⁻²⁴ + (1 + 2⁻⁶)·γ(n_vocab + 2) + 2u)·Σ_v p|table[v][i]| for BF16, (γ(n_vocab) + 2u)·Σ for F32 (γ(n) =
// n·u/(1 − n·u), the worst case of an fp32 sum in cuBLAS's order; 2u: p's rounding after the double sums).
// `scratch`: soft_embedding_gemm_scratch_bytes on the device, 256-byte aligned.
size_t soft_embedding_gemm_scratch_bytes(const WeightView& table, int64_t n_tokens);
void soft_embedding_gemm(const float* logits, const WeightView& table, int64_t n_tokens, float* out, void* scratch,
                         cudaStream_t stream);

// ---- moe_router.h ----
// One warp per token. The top_k are chosen by logit (softmax is monotonic, and logits are exact
// inputs), so the ids equal the reference's exactly, ties included; the weights are fp32 softmax.
void moe_router(const float* logits, int64_t n_tokens, int64_t n_expert, int64_t top_k, bool renormalize,
                int32_t* ids, float* weights, cudaStream_t stream);

// ---- the seam between blocks: residual add + RMS norm + activation quantisation (residual_norm_cuda.cu) ----
// One launch for what the decode step did with cuda::axpy, cuda::rms_norm and cuda::quantize_activations:
//   x  += residual                 (skipped when residual is nullptr; x updated in place)
//   h   = rms_norm(x, w, eps)      (cuda::rms_norm's formula: x · (1 / sqrt(Σx²/dim + eps)) · w)
//   hq  = quantize_activations(h)  (matmul_cuda.h's int8 groups of 128, bit for bit that kernel's on this h)
// One row of dim <= kResidualNormMaxDim (one block holds it in registers); hq.cols must be dim; x and
// residual are read as float4 (16-byte aligned, as device allocations are); h must not overlap x or
// residual. Σx² is summed in another order than cuda::rms_norm's, so h may differ from it by rounding.
// Where every matrix is quantised, the decode step runs only its first seam with this kernel and folds
// the others into the GEMVs beside them (ops/matmul/matmul_cuda.h gemv_quantized_add_norm).
inline constexpr int64_t kResidualNormMaxDim = 16384;
void add_rms_norm_quantize(float* x, const float* residual, const float* w, int64_t dim, float eps,
                           cpu::NormWeight weight, float* h, const QuantizedActivationsView& hq, cudaStream_t stream);

// ---- argmax (argmax_cuda.cu) ----
// The index of the largest of x[0 .. n), ties to the lowest index — sampling/sampler.h's
// argmax_lowest_id exactly when every value is finite. When any is NaN or ±inf the answer is instead
// non_finite_choice(i) for the lowest such i (core/non_finite_choice.h: a negative id), so a broken
// forward pass is reported rather than decoded; the same reduction finds it, at no extra pass.
// `scratch` holds argmax_scratch_bytes(n) bytes; the result lands in *out (device).
size_t argmax_scratch_bytes(int64_t n);
void argmax(const float* x, int64_t n, void* scratch, int32_t* out, cudaStream_t stream);

}  // namespace deltabit::cuda
