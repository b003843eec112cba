// The CUDA twins of the CPU reference ops: for each op in ops/<op>.h, the same entry signature with
// every array pointer on the device and a trailing stream. The contracts (shapes, layouts, aliasing)
// are the ones in those headers; only the numerics differ, as stated per op below. The kernels are in
// ops/<op>_cuda.cu. The model's fast paths have their own headers: ops/{matmul,dense,prefill,decode,kv}_cuda.h.
//
// Common to all: the work is enqueued on `stream` and nothing waits for it; a launch error throws
// deltabit::Error naming the kernel; empty shapes (0 rows, 0 tokens) launch nothing. Grids follow
// ops/cuda_launch.h, so any length that fits in memory runs (no grid dimension can exceed a limit).
// Arithmetic is fp32 where the references use double: the differences are summation order and
// rounding, bounded in tests/cuda/op_parity.h.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "core/tensor.h"
#include "ops/attention.h"
#include "ops/delta_rule.h"
#include "ops/rms_norm.h"

namespace deltabit::cuda {

using cpu::AttentionDims;
using cpu::DeltaRuleDims;
using cpu::KeyHeadMap;
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

// ---- rope.h ----
// Same fp32 angle as the reference; cos, sin and the rotation in double, so results equal the
// reference's to within one rounding of the output.
void rope_neox(float* x, const int32_t* positions, int64_t n_tokens, int64_t n_head, int64_t head_dim,
               int64_t rope_dim, float theta, cudaStream_t stream);

// ---- conv1d.h ----
// Two launches: the outputs (reading the old state), then the state roll, one thread per channel.
void conv1d_causal_silu(const float* x, const float* w, float* state, int64_t n_tokens, int64_t channels,
                        int64_t kernel, float* out, cudaStream_t stream);
// The gated DeltaNet's prompt input in one pass: conv1d_causal_silu over the [q | k | v] channels
// (n_key_heads · key_dim twice, then value_dim), each part written to its own array ([T][n_key_heads · key_dim],
// [T][value_dim]) and q and k L2-normalised per head of key_dim — the bits of conv1d_causal_silu, the split
// and l2_norm(eps). Error unless conv1d_split_l2_supported (key_dim ≤ 256, kernel ≤ 4).
bool conv1d_split_l2_supported(int64_t key_dim, int64_t kernel);
void conv1d_split_l2(const float* x, const float* w, float* state, int64_t n_tokens, int64_t n_key_heads,
                     int64_t key_dim, int64_t value_dim, int64_t kernel, float eps, float* q, float* k, float* v,
                     cudaStream_t stream);

// ---- embedding.h ----
// `table.data` is on the device in the dtype's GGUF block layout (not the GEMV repack); `ids` too.
// Exact: each weight is d·level in fp32, as dequantize_row. Ids are validated where they enter (the
// request, the tokenizer); an id outside [0, rows) here cannot throw from the device, so its row is
// written as NaN (never read out of bounds) and poisons the logits visibly.
void embedding_lookup(const WeightView& table, const int32_t* ids, int64_t n_tokens, float* out,
                      cudaStream_t stream);

// ---- attention.h ----
// One block per (query, head) (grid-stride), its warps splitting the visible keys and keeping an
// online softmax each, merged at the end. head_dim <= kAttentionMaxHeadDim. Scores, softmax and the
// weighted sum in fp32. The model runs the flash prompt kernel (prefill_cuda.h) and split-K decode (decode_cuda.h).
inline constexpr int64_t kAttentionMaxHeadDim = 256;
inline constexpr int kAttentionWarps = 8;
void attention(const float* q, const float* k, const float* v, const float* gate, const AttentionDims& dims,
               float* out, cudaStream_t stream);

// ---- delta_rule.h ----
// Recurrent form (prompts take the chunked kernel of prefill_cuda.h). Each block owns one value
// head's group of state columns in registers (the columns of S evolve independently), reads that
// state once per call and walks the tokens in order. key_dim <= kDeltaRuleMaxKeyDim. fp32 state and
// arithmetic (the reference computes each token in double and rounds the state to fp32).
inline constexpr int64_t kDeltaRuleMaxKeyDim = 256;
void gated_delta_rule_recurrent(const float* q, const float* k, const float* v, const float* g, const float* beta,
                                const DeltaRuleDims& dims, float* state, float* out, cudaStream_t stream);

// ---- moe_router.h ----
// One warp per token. The top_k are chosen by logit (softmax is monotonic, and logits are exact
// inputs), so the ids equal the reference's exactly, ties included; the weights are fp32 softmax.
void moe_router(const float* logits, int64_t n_tokens, int64_t n_expert, int64_t top_k, bool renormalize,
                int32_t* ids, float* weights, cudaStream_t stream);

}  // namespace deltabit::cuda
