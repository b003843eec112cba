// The CUDA attention family, against the CPU references ops/attention.h and ops/attention_spans.h: the
// one-op twin (attention_cuda.cu), attention over a KV cache for decode and continued prompts
// (attention_decode_cuda.cu with the split kernels attention_split_*), the flash-style prompt kernel
// (attention_prefill_cuda.cu) and its generalisation to explicit key spans (attention_spans_cuda.cu). The KV cache
// layouts these read are ops/attention/kv_cuda.h's.
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

#include "backend/cuda_buffer.h"
#include "ops/attention.h"
#include "ops/attention_spans.h"
#include "ops/attention/kv_cuda.h"

namespace deltabit::cuda {

using cpu::AttentionDims;
using cpu::AttentionSpanDims;

// ---- attention.h ----
// One block per (query, head) (grid-stride), its warps splitting the visible keys and keeping an
// online softmax each, merged at the end. head_dim <= kAttentionMaxHeadDim. Scores, softmax and the
// weighted sum in fp32. The model runs the flash prompt kernel and split-K decode (both below).
inline constexpr int64_t kAttentionMaxHeadDim = 256;
inline constexpr int kAttentionWarps = 8;
void attention(const float* q, const float* k, const float* v, const float* gate, const AttentionDims& dims,
               float* out, cudaStream_t stream);

// ---- attention over a KV cache (attention_decode_cuda.cu; the register split kernels in
//      attention_split_register.cuh, the staged ones in attention_split_staged_cuda.cu) ----
//
//   q      [T][n_head][head_dim]        normed and roped
//   k, v   the caches (ops/attention/kv_cuda.h: f32, f16 or kivi4), positions 0 .. n_past+T−1 filled (kivi4: settled
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

// ---- the rows forms: one decode token of each of several sequences (CudaModel::forward_batch) ----
//
// Row r of a launch over n_rows rows is one sequence at its own position, capacity and cache: its caches,
// position and split count come from rows[r], a device table of AttentionRow (ops/attention/kv_cuda.h)
// written by a copy from the host before the step, and its q, gate and output are row r of [n_rows][…]
// arrays. Each kernel is the single call's kernel body instantiated for a table (the block's row taken from
// a grid dimension the single call leaves at 1), so row r's outputs, cache rows and partials are exactly
// those of the single call over that row with the same split count — bit for bit (tests/cuda/
// test_attention_rows_cuda.cpp). The kernels may read the table before their wait for the kernel before
// (ops/cuda/programmatic_launch.cuh): no kernel writes it.
//
// A row as a single call plans it: dims.max_keys the row's capacity, the splits attention_decode_splits_run's.
AttentionRow attention_row(const KvCacheView& k_cache, const KvCacheView& v_cache, int64_t position,
                           const CachedAttentionDims& dims);
// What a rows launch needs to know of its rows on the host: how many, the most splits any row takes (the
// split grid's x, and the scratch region of every row), and the cache formats among them (one split launch
// each; the prologue and the combine take every row at once).
struct AttentionRowsPlan {
    int64_t n_rows = 0;
    int64_t max_splits = 0;
    bool formats[3] = {};  // by KvElement
    void add(const AttentionRow& row);
};
// Scratch (floats) of attention_cached_rows: a region per row of a single call's layout for max_splits.
size_t attention_decode_rows_scratch_floats(const CachedAttentionDims& dims, const AttentionRowsPlan& plan);
// attention_cached for one token of each of plan.n_rows rows: q, gate and out as a T = plan.n_rows call lays
// them out, dims.n_tokens = 1 (a row's token), dims.max_keys unused (each row's splits are in the table).
// staged_tiles (falling back to keys_across_lanes as attention_cached does) or keys_across_lanes;
// dims_across_lanes is refused. Launches: one split launch per format in plan.formats, one combine.
// attention_decode_prologue_rows (after attention_decode_prologue below) is the prologue's rows form.
void attention_cached_rows(const float* q, const AttentionRow* rows, const AttentionRowsPlan& plan, const float* gate,
                           const CachedAttentionDims& dims, float* scratch, float* out, cudaStream_t stream);

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
// *position — the same bits, read before the wait for the kernel before (ops/cuda/programmatic_launch.cuh), so the
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

// The rows form (above) of attention_decode_prologue, one launch for n_rows rows: q_full, k_raw, v_raw and
// q_out as a call over row r has them, at row r of [n_rows][…]; no rope table (the rows' positions differ).
void attention_decode_prologue_rows(const float* q_full, const float* k_raw, const float* v_raw, const float* q_norm,
                                    const float* k_norm, const AttentionRow* rows, int64_t n_rows,
                                    const AttentionPrologueDims& dims, float* q_out, cudaStream_t stream);

// The decode step's rotation, once for all its attention layers: for each dim pair j < rope_dim / 2,
// table[2j] = cos and table[2j + 1] = sin of the angle attention_decode_prologue forms for *position (its fp32
// angle, its double sincos), so a prologue reading the table gives the bits it would compute. `table` holds
// rope_decode_table_doubles(rope_dim) doubles; rope_dim even, at most kAttentionDecodeMaxHeadDim.
// CudaModel's decode step launches it first (DELTABIT_ROPE_TABLE=0 leaves it out, docs/bench.md).
inline int64_t rope_decode_table_doubles(int64_t rope_dim) { return rope_dim; }
void rope_decode_table(const int32_t* position, int64_t rope_dim, float rope_theta, double* table, cudaStream_t stream);

// kv_store (ops/attention/kv_cuda.h) for a plain cache by pointer.
void kv_store(const float* rows, int64_t n_tokens, int64_t row_elems, const int32_t* n_past, KvElement kv,
              void* cache, cudaStream_t stream);

// ---- flash-style attention prefill (attention_prefill_cuda.cu) ----
//
// Same contract as cpu::attention. One block per (kv head, tile of kAttentionQueryTile query
// positions) serves all n_head / n_kv_head query heads of that kv head, so each key and value tile is
// read once for the whole group; online softmax (running max and denominator) over key tiles, fp32.
// head_dim ≤ kAttentionPrefillMaxHeadDim.
inline constexpr int64_t kAttentionQueryTile = 16;
inline constexpr int64_t kAttentionPrefillMaxHeadDim = 256;
// `max_blocks` (0 = the grid cap) lets tests force blocks to walk several items.
void attention_prefill(const float* q, const float* k, const float* v, const float* gate, const AttentionDims& dims,
                       float* out, cudaStream_t stream, int64_t max_blocks = 0);
// The same over a half (f16) KV cache, [position][n_kv_head][head_dim] binary16, the chunk's own keys and
// values already stored in it: each element widened exactly to f32 as it is read, so y is attention_prefill's
// on the widened cache bit for bit.
void attention_prefill_half_cache(const float* q, const uint16_t* k, const uint16_t* v, const float* gate,
                                  const AttentionDims& dims, float* out, cudaStream_t stream, int64_t max_blocks = 0);

// ---- attention prefill on tensor cores (attention_prefill_mma_cuda.cu) ----
//
// The same contract over a half (f16) KV cache, for head_dim 64, 128 or 256: both products on tensor cores
// (mma.sync f16 · f16 → f32), q and the softmax weights each entering as two f16 terms (hi + lo), so the
// result is of f32-class precision (the bound: tests/cuda/test_prefill_attention.cpp) but not attention_prefill's
// bit for bit. Blocks of 128 query rows (position × head); `max_blocks` as attention_prefill's.
bool attention_prefill_mma_supported(const AttentionDims& dims);
void attention_prefill_mma(const float* q, const uint16_t* k, const uint16_t* v, const float* gate,
                           const AttentionDims& dims, float* out, cudaStream_t stream, int64_t max_blocks = 0);

// ---- attention over explicit key spans (attention_spans_cuda.cu) ----
//
// Same contract as cpu::attention_spans (ops/attention_spans.h): query t attends keys key_begin[t] ..
// key_end[t] − 1 (both int64 arrays of n_queries on the device), scores scale · q·k — DiffusionGemma's
// encoder (causal with a sliding window) and decoder (cache ++ canvas, no mask). The prompt kernel's
// flash walk (one block per kv head and tile of query positions, all its query heads together, online
// softmax in fp32), from the smallest begin to the largest end of the tile's rows. q·scale is rounded to
// fp32 once (exact for the model's scale 1). head_dim ≤ kAttentionSpansMaxHeadDim; a block holds
// attention_spans_rows_per_block(head_dim) query rows (64, or 32 above head_dim 256), and the query
// heads of one kv head must fit in it. A row whose span is empty (the contract forbids it) comes out NaN.
inline constexpr int64_t kAttentionSpansMaxHeadDim = 512;
int64_t attention_spans_rows_per_block(int64_t head_dim);
// `max_blocks` (0 = the grid cap) lets tests force blocks to walk several items.
void attention_spans(const float* q, const float* k, const float* v, const AttentionSpanDims& dims, double scale,
                     const int64_t* key_begin, const int64_t* key_end, float* out, cudaStream_t stream,
                     int64_t max_blocks = 0);

// cpu::diffusion_key_spans (ops/attention_spans.h) written on the device (diffusion_key_spans_cuda.cu): a
// DiffusionGemma call knows its key counts on the host, and this gives attention_spans its spans with no
// copy from the host, so a denoising step can be enqueued without waiting for anything. Integers: equal to
// the reference's exactly. key_begin, key_end [n_queries] on the device.
void diffusion_key_spans(int64_t n_queries, int64_t n_cached, bool causal, int64_t window, int64_t* key_begin,
                         int64_t* key_end, cudaStream_t stream);

}  // namespace deltabit::cuda
