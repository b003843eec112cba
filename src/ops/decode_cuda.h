// CUDA kernels of the batch-1 decode step (models/model_cuda.h captures the whole step as one CUDA
// graph): fewer, fatter launches than the one-op-per-kernel twins in ops/ops_cuda.h, and every length
// that changes from token to token (the position, the number of keys) read from device memory, so one
// captured graph serves every position. Same conventions as ops/ops_cuda.h: device pointers, work
// enqueued on `stream`, launch errors throw deltabit::Error naming the kernel.
//
// The CPU references are the ordinary ops (ops/attention.h, conv1d.h, l2_norm.h, gdn_gates.h,
// delta_rule.h, gated_rms_norm.h, rms_norm.h, rope.h); each kernel below says which chain it fuses.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

#include "ops/delta_rule.h"
#include "ops/kv_cuda.h"
#include "ops/matmul_cuda.h"
#include "ops/rms_norm.h"

namespace deltabit::cuda {


// ---- attention over a KV cache (attention_decode_cuda.cu; the register split kernels in
//      attention_split_register.cuh, the staged ones in attention_split_staged_cuda.cu) ----
//
//   q      [T][n_head][head_dim]        normed and roped
//   k, v   the caches (ops/kv_cuda.h: f32, f16 or kivi4), positions 0 .. n_past+T−1 filled (kivi4: settled
//          at n_past, the call's T rows appended exact)
//   gate   token t, head h, dim i at gate[t·n_head·gate_head_stride + h·gate_head_stride + i], or nullptr
//   out    [T][n_head][head_dim]
//   n_past one int32 on the device: token t attends keys 0 .. n_past + t (ops/attention.h's rule)
//
// Split-K: block (token, kv head, split) walks one contiguous slice of the keys for ALL the query heads
// of its kv head (GQA: each key and value row is read once per token, not once per query head), keeping
// an online softmax per query head in base 2; a combine kernel merges the splits (max-rescaled sums, in
// a fixed order, so results are deterministic). The grid is planned for `max_keys` keys (the KV capacity
// under a CUDA graph); the slice length is computed on the device from the real length, so every split
// has work at any depth and blocks past the end exit at once.
// head_dim <= 256; n_head a multiple of n_kv_head with at most 8 query heads per kv head.
inline constexpr int64_t kAttentionDecodeMaxHeadDim = 256;
inline constexpr int64_t kAttentionDecodeMaxGroup = 8;

// How a split's block works through its keys (all write the same partials; tests check each):
//   staged_tiles       (the default) 256 threads stream the split's K and V rows through shared memory in
//                      tiles of 32 keys (f16) or 16 (f32), the next tile in flight (cp.async) while this
//                      one is scored, softmaxed and summed from shared memory — over f16 rows on tensor
//                      cores (attention_split_staged_cuda.cu). Plain f16 caches with head_dim 64, 128
//                      or 256, f32 with 128 or 256; other shapes and kivi4 run keys_across_lanes.
//   dims_across_lanes  each warp takes two keys at a time, lane i holding dims [i·P, i·P + P) of q, k, v;
//                      a score needs a 5-step butterfly per query head per key.
//   keys_across_lanes  each warp takes 32 keys at a time, lane j computing key j's scores for every
//                      query head from q in shared memory (no butterflies), then the weighted sum of V
//                      with lanes over dims again (one shuffle per key and head to broadcast p).
// The register kernels are latency-bound per warp (a load, its wait, its use). Measured on an H200,
// Bonsai-27B geometry, split + combine (tests/cuda/test_decode_perf.cpp, 2026-11-29; % of the copy
// roofline on the K and V bytes):
//   depth 32K  f16: staged 59.5 µs (53%), keys 98, dims 218;  f32: staged 85 µs (74%), keys 139, dims 181
//   depth 4K   f16: staged 15.3 µs, keys 37, dims 38;         f32: staged 19.5 µs, keys 45, dims 31
// and since the one-wave cap on the staged kernel's decode splits (attention_decode_splits_run, 2026-12-02):
//   depth 32K  f16: staged 55.3 µs (57%); f32: staged 81.6 µs (77%); Bonsai-4B heads f16 67.7 (47%), f32 76.0 (83%)
// (staged over f16 rows with fp32 CUDA-core arithmetic, before the tensor cores: 70 µs and 17 µs.)
enum class AttentionDecodeVariant : uint8_t { dims_across_lanes, keys_across_lanes, staged_tiles };

struct CachedAttentionDims {
    int64_t n_tokens = 1;
    int64_t n_head = 0;
    int64_t n_kv_head = 0;
    int64_t head_dim = 0;
    int64_t max_keys = 0;          // n_past + n_tokens never exceeds this (the grid is planned for it)
    int64_t gate_head_stride = 0;  // distance between heads in `gate` (head_dim, or 2·head_dim inside q_proj)
    AttentionDecodeVariant variant = AttentionDecodeVariant::staged_tiles;
};

// The variant attention_cached runs for these dims over a cache of `element`s (staged_tiles falls back to
// keys_across_lanes where it does not apply).
AttentionDecodeVariant attention_decode_variant_run(const CachedAttentionDims& dims, KvElement element);

// Splits per (token, kv head) a launch may use (at most kMaxSplits, a split at least 64 keys of max_keys),
// and the scratch (floats) the partial results need for that many.
int64_t attention_decode_splits(const CachedAttentionDims& dims);
size_t attention_decode_scratch_floats(const CachedAttentionDims& dims);
// The splits attention_cached launches over a cache of `element`s: attention_decode_splits, except that a
// decode launch (one token) of the staged kernel takes no more than fill one wave of its resident blocks —
// each block then streams its keys as one pipeline instead of a second wave starting cold (Bonsai-27B:
// 128 splits × 4 kv heads were 512 blocks for 264 slots).
int64_t attention_decode_splits_run(const CachedAttentionDims& dims, KvElement element);
// Blocks of the staged_tiles kernel over `element` rows resident at once on the current device (0 where
// that kernel does not apply to the shape): a launch of no more blocks runs in one wave.
int64_t staged_attention_resident_blocks(KvElement element, int64_t head_dim, int64_t group);

void attention_cached(const float* q, const KvCacheView& k_cache, const KvCacheView& v_cache, const float* gate,
                      const int32_t* n_past, const CachedAttentionDims& dims, float* scratch, float* out,
                      cudaStream_t stream);
// A plain cache (f32 or f16) by pointer.
void attention_cached(const float* q, const void* k_cache, const void* v_cache, KvElement kv, const float* gate,
                      const int32_t* n_past, const CachedAttentionDims& dims, float* scratch, float* out,
                      cudaStream_t stream);

// The decode step's attention prologue, one launch for what the prompt path does with a split, two
// rms_norms, two ropes and the cache stores: for the one new token at position *position,
//   q_out[h]            = rope(rms_norm(q_full[h·q_head_stride ..][0 .. head_dim), q_norm))
//   k_cache[position]   = rope(rms_norm(k_raw, k_norm))   converted to `kv`
//   v_cache[position]   = v_raw                           converted to `kv`
// Norms as cuda::rms_norm (plain weight), rope as cuda::rope_neox (fp32 angle, double rotation).
struct AttentionPrologueDims {
    int64_t n_head = 0, n_kv_head = 0, head_dim = 0;
    int64_t q_head_stride = 0;  // head_dim, or 2·head_dim when q_proj interleaves the output gate
    int64_t rope_dim = 0;
    float rope_theta = 0.0f;
    float rms_eps = 0.0f;
};
// rope_table: nullptr (each thread forms its dim's angle, a double pow and sincos), or rope_decode_table's for
// *position — the same bits, read before the wait for the kernel before (ops/programmatic_launch.cuh), so the
// table must have been written two or more launches earlier on the stream, or before a synchronisation.
void attention_decode_prologue(const float* q_full, const float* k_raw, const float* v_raw, const float* q_norm,
                               const float* k_norm, const int32_t* position, const AttentionPrologueDims& dims,
                               const KvCacheView& k_cache, const KvCacheView& v_cache, float* q_out,
                               cudaStream_t stream, const double* rope_table = nullptr);
// A plain cache (f32 or f16) by pointer.
void attention_decode_prologue(const float* q_full, const float* k_raw, const float* v_raw, const float* q_norm,
                               const float* k_norm, const int32_t* position, const AttentionPrologueDims& dims,
                               KvElement kv, void* k_cache, void* v_cache, float* q_out, cudaStream_t stream,
                               const double* rope_table = nullptr);

// The decode step's rotation, once for all its attention layers: for each dim pair j < rope_dim / 2,
// table[2j] = cos and table[2j + 1] = sin of the angle attention_decode_prologue forms for *position (its fp32
// angle, its double sincos), so a prologue reading the table gives the bits it would compute. `table` holds
// rope_decode_table_doubles(rope_dim) doubles; rope_dim even, at most kAttentionDecodeMaxHeadDim.
// CudaModel's decode step launches it first (DELTABIT_ROPE_TABLE=0 leaves it out, docs/bench.md).
inline int64_t rope_decode_table_doubles(int64_t rope_dim) { return rope_dim; }
void rope_decode_table(const int32_t* position, int64_t rope_dim, float rope_theta, double* table, cudaStream_t stream);

// kv_store (ops/kv_cuda.h) for a plain cache by pointer.
void kv_store(const float* rows, int64_t n_tokens, int64_t row_elems, const int32_t* n_past, KvElement kv,
              void* cache, cudaStream_t stream);

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

// ---- the seam between blocks: residual add + RMS norm + activation quantisation (residual_norm_cuda.cu) ----
// One launch for what the decode step did with cuda::axpy, cuda::rms_norm and cuda::quantize_activations:
//   x  += residual                 (skipped when residual is nullptr; x updated in place)
//   h   = rms_norm(x, w, eps)      (cuda::rms_norm's formula: x · (1 / sqrt(Σx²/dim + eps)) · w)
//   hq  = quantize_activations(h)  (matmul_cuda.h's int8 groups of 128, bit for bit that kernel's on this h)
// One row of dim <= kResidualNormMaxDim (one block holds it in registers); hq.cols must be dim; x and
// residual are read as float4 (16-byte aligned, as device allocations are); h must not overlap x or
// residual. Σx² is summed in another order than cuda::rms_norm's, so h may differ from it by rounding.
// Where every matrix is quantised, the decode step runs only its first seam with this kernel and folds
// the others into the GEMVs beside them (ops/matmul_cuda.h gemv_quantized_add_norm).
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
