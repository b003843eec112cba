// The CUDA Gated DeltaNet family, against the CPU references ops/conv1d.h, ops/delta_rule.h, gdn_gates.h,
// l2_norm.h and gated_rms_norm.h: the causal conv (conv1d_cuda.cu), the recurrent delta rule
// (delta_rule_cuda.cu), the fused decode step of a whole DeltaNet core (gdn_decode_cuda.cu) and the
// chunked delta rule of prompts (delta_rule_chunked_cuda.cu, chunks of 64 in the WY form).
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

#include "ops/delta_rule.h"
#include "ops/rms_norm.h"
#include "ops/matmul/matmul_cuda.h"

namespace deltabit::cuda {

using cpu::DeltaRuleDims;
using cpu::KeyHeadMap;
using cpu::NormWeight;

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

// ---- delta_rule.h ----
// Recurrent form (prompts take the chunked kernel below). Each block owns one value
// head's group of state columns in registers (the columns of S evolve independently), reads that
// state once per call and walks the tokens in order. key_dim <= kDeltaRuleMaxKeyDim. fp32 state and
// arithmetic (the reference computes each token in double and rounds the state to fp32).
inline constexpr int64_t kDeltaRuleMaxKeyDim = 256;
void gated_delta_rule_recurrent(const float* q, const float* k, const float* v, const float* g, const float* beta,
                                const DeltaRuleDims& dims, float* state, float* out, cudaStream_t stream);

// ---- gated DeltaNet decode step (gdn_decode_cuda.cu) ----
// Two launches instead of ten. They cannot be one: the conv window of a key head's q/k channels is
// shared by the several value heads that read that key head, and rolling it in place races with the
// blocks still reading the old window unless every reader has finished — the launch boundary is that
// barrier.
struct GdnDecodeDims {
    int64_t n_key_heads = 0, n_value_heads = 0, key_dim = 0, value_dim = 0, conv_kernel = 0;
    cpu::KeyHeadMap key_head_map = cpu::KeyHeadMap::tiled;
};
inline constexpr int64_t kGdnDecodeMaxKeyDim = 256;
inline constexpr int64_t kGdnDecodeMaxValueDim = 1024;
inline constexpr int64_t kGdnDecodeMaxConvKernel = 8;

// conv1d_causal_silu (T = 1) → l2_norm of every q and k head (eps l2_eps) → gdn_gates. The conv window
// is read from conv_in and the rolled window written to conv_out — the same buffer (in place) or another
// (the model's ping-pong, which lets a step be undone by going back to the old buffer).
//   mixed [C] = [q (H_k·d_k) | k (H_k·d_k) | v (H_v·d_v)], conv_w [C][K], conv_in/out [K−1][C]
//   q, k [H_k][d_k] normed; v [H_v][d_v]; beta, g [H_v]
void gdn_decode_prepare(const float* mixed, const float* b, const float* a, const float* conv_w, const float* conv_in,
                        float* conv_out, const float* ssm_a, const float* dt_bias, const GdnDecodeDims& dims,
                        float l2_eps, float* q, float* k, float* v, float* beta, float* g, cudaStream_t stream);

// gated_delta_rule_recurrent (T = 1) → gated_rms_norm(o, z, norm_w, eps): one thread-block cluster per
// value head (up to 8 blocks, each a share of the head's value columns; sm_90) reads the head's state
// once from state_in and writes it once to state_out (the same buffer or another, as conv_in/conv_out),
// and norms the head's output across the cluster's shared memory, in a fixed order. With out_quantized
// (value_dim a multiple of 128, a view of H_v·d_v inputs) it also writes out's int8 activations for the
// output matmul, bit for bit quantize_activations(out) — one launch fewer per layer.
//   z, out [H_v][d_v]; state_in/out [H_v][d_k][d_v]
void gdn_decode_recurrent(const float* q, const float* k, const float* v, const float* beta, const float* g,
                          const float* z, const float* norm_w, float norm_eps, const GdnDecodeDims& dims,
                          const float* state_in, float* state_out, float* out, cudaStream_t stream,
                          const QuantizedActivationsView* out_quantized = nullptr);

// The decode step of B rows (sequences), each with its own conv window and state, in one launch of each
// kernel: the same kernels as the calls above, the row the grid's y index, so row i is bit for bit the
// single call on row i's slices and buffers. The activations are the single call's arrays stacked by row
// ([B][...] of the shapes above: mixed [B][C], b, a, beta, g [B][H_v], q, k [B][H_k·d_k], v, z, out
// [B][H_v·d_v]); row i's window and state are read and written where rows[i] says, a table of B entries
// on the device (a captured graph reads what is there when it runs). The kernels read the table before
// they wait for the kernel launched just before them (ops/cuda/programmatic_launch.cuh), so that kernel
// must not write it: a copy before the step does. Each row may read and write one buffer (in place) or
// two; no two rows may write the same buffer, nor one row read what another writes. No quantised output.
// More rows than a grid's y dimension holds take several launches.
struct GdnDecodeRow {
    const float* conv_in;  // [K−1][C]
    float* conv_out;
    const float* state_in;  // [H_v][d_k][d_v]
    float* state_out;
};
void gdn_decode_prepare_rows(const float* mixed, const float* b, const float* a, const float* conv_w,
                             const GdnDecodeRow* rows, int64_t n_rows, const float* ssm_a, const float* dt_bias,
                             const GdnDecodeDims& dims, float l2_eps, float* q, float* k, float* v, float* beta,
                             float* g, cudaStream_t stream);
void gdn_decode_recurrent_rows(const float* q, const float* k, const float* v, const float* beta, const float* g,
                               const float* z, const float* norm_w, float norm_eps, const GdnDecodeDims& dims,
                               const GdnDecodeRow* rows, int64_t n_rows, float* out, cudaStream_t stream);

// ---- chunked gated delta rule (delta_rule_chunked_cuda.cu) ----
//
// Same contract as cpu::gated_delta_rule_chunked with chunk 64 (layouts in ops/delta_rule.h).
// key_dim ≤ kChunkedDeltaRuleMaxKeyDim. Two kernels: per (value head, chunk), all chunks at once, the
// state-free parts (the WY system's lower-triangular A and the causal q·k decay matrix); then per
// (value head, tile of value columns) a walk over the chunks carrying the state tile in shared
// memory. fp32 throughout (the reference works in double and keeps the state in fp32 between chunks).
// `workspace` holds delta_rule_chunked_workspace_bytes(dims) bytes of device memory.
inline constexpr int64_t kDeltaRuleChunk = 64;
inline constexpr int64_t kChunkedDeltaRuleMaxKeyDim = 256;
size_t delta_rule_chunked_workspace_bytes(const DeltaRuleDims& dims);
// `max_blocks` (0 = the grid cap) lets tests force blocks to walk several items.
void gated_delta_rule_chunked(const float* q, const float* k, const float* v, const float* g, const float* beta,
                              const DeltaRuleDims& dims, float* state, float* out, void* workspace,
                              cudaStream_t stream, int64_t max_blocks = 0);

}  // namespace deltabit::cuda
