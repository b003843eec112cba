// What the split-K attention kernels of the decode step share (ops/attention/attention_cuda.h, attention_cached):
// how a kv head's keys are cut into splits, the arguments of a split launch, and the entry points of the
// register and staged kernels. Internal to src/ops (attention_decode_cuda.cu, attention_split_register.cuh
// and its instantiations attention_split_{f32,f16,kivi4}_cuda.cu, attention_split_staged_cuda.cu).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "ops/attention/kv_cuda.h"

namespace deltabit::cuda {

// A split never takes fewer keys than this (below it the partial write and the combine cost more than
// the keys), nor are there more splits than kMaxSplits per (token, kv head): 128 splits × 4 kv heads =
// 512 blocks, enough to fill an H200 (132 SMs) at any depth.
inline constexpr int64_t kMinKeysPerSplit = 64;
inline constexpr int64_t kMaxSplits = 128;

// Keys per split for `total` keys over `splits` splits. Host and device use the same formula: the graph
// plans the grid on the host (for the capacity), the device picks the slices from the real length.
__host__ __device__ inline int64_t keys_per_split(int64_t total, int64_t splits) {
    const int64_t even = (total + splits - 1) / splits;
    return even > kMinKeysPerSplit ? even : kMinKeysPerSplit;
}

// s + q[0..8) · k[0..8) as eight fmaf in dim order (q 16-byte aligned in shared memory): the score
// chains of the CUDA-core split kernels.
__device__ __forceinline__ float fma8(const float* q, const float (&k)[8], float s) {
    const float4 qa = reinterpret_cast<const float4*>(q)[0], qb = reinterpret_cast<const float4*>(q)[1];
    s = fmaf(qa.x, k[0], s);
    s = fmaf(qa.y, k[1], s);
    s = fmaf(qa.z, k[2], s);
    s = fmaf(qa.w, k[3], s);
    s = fmaf(qb.x, k[4], s);
    s = fmaf(qb.y, k[5], s);
    s = fmaf(qb.z, k[6], s);
    return fmaf(qb.w, k[7], s);
}

// Grid (split, kv head, token): block (s, h, t) writes one partial (m, l, acc[d]) per query head of kv
// head h for token t over split s's keys; the combine kernel merges the splits.
//
// The rows form (attention_cached_rows): one launch for one token of each of several sequences. Grid
// (split, row · n_kv_head + kv head, 1): block (s, r·H_kv + h) reads row r's caches, position and split count
// from rows[r] and works exactly as block (s, h) of a launch over that row alone, on row r's q (q + r·H·d)
// and its own region of the scratch (part_acc + r·row_scratch, laid out as a single call's with the row's
// split count). The grid is planned for the largest row; a block past its row's splits exits at once.
struct SplitArgs {
    const float* q;
    KvCacheView k;  // the rows form: the launch's element only (rows of other formats are left alone)
    KvCacheView v;
    const int32_t* n_past;
    float* part_acc;  // [T][H][S][d]
    float* part_ml;   // [T][H][S][2]: running max (base 2) and denominator
    int64_t n_tokens, n_head, n_kv_head, head_dim, splits;
    float score_scale;  // log2(e) / sqrt(d)
    const AttentionRow* rows = nullptr;  // the rows form's table, else nullptr
    int64_t row_scratch = 0;             // the rows form: floats of scratch per row
};

// The arguments block (·, blockIdx.y, ·) of a rows launch works with: those of its row, as a single call over
// that row has them; a row of another format than the launch's gets splits = 0 (its blocks exit). A single
// call's kernel hands the body its own arguments in place, not a copy, so its code is what it was before the
// rows form. Reads the table, which no kernel writes (AttentionRow), so a rows kernel calls it before its wait
// for the kernel before (ops/cuda/programmatic_launch.cuh).
__device__ __forceinline__ SplitArgs split_row_args(const SplitArgs& a) {
    const int64_t r = int64_t(blockIdx.y) / a.n_kv_head;
    const AttentionRow& row = a.rows[r];
    SplitArgs out = a;
    out.q = a.q + r * a.n_head * a.head_dim;
    out.k = row.k;
    out.v = row.v;
    out.n_past = &row.position;
    out.splits = row.k.element == a.k.element ? row.splits : 0;
    out.part_acc = a.part_acc + r * a.row_scratch;
    out.part_ml = out.part_acc + out.splits * a.n_head * a.head_dim;
    return out;
}
// The kv head of block (·, blockIdx.y, ·) (the rows form: within its row).
template <bool kRows>
__device__ __forceinline__ int64_t split_kv_head(const SplitArgs& a) {
    if constexpr (kRows) return int64_t(blockIdx.y) % a.n_kv_head;
    else return blockIdx.y;
}

// The keys split `split` covers, [begin, begin + per_split), before each token's causal limit; n_past is
// read on the device (a graph replays the launch at every position).
struct SplitSpan {
    int64_t n_past, per_split, begin;
    __device__ bool empty(int64_t n_tokens) const { return begin >= n_past + n_tokens; }
};
__device__ __forceinline__ SplitSpan split_span(const SplitArgs& a, int64_t split) {
    const int64_t n_past = *a.n_past;
    const int64_t per_split = keys_per_split(n_past + a.n_tokens, a.splits);
    return {n_past, per_split, split * per_split};
}

// Launches the register split kernels (ops/attention/attention_split_register.cuh) over a cache of f32, f16 or kivi4
// rows: keys_across_lanes when `keys`, else dims_across_lanes; `group` query heads per kv head. Each is
// defined in its own translation unit (attention_split_{f32,f16,kivi4}_cuda.cu), so they compile in parallel.
void launch_register_split_f32(dim3 grid, const SplitArgs& args, int64_t group, bool keys, cudaStream_t stream);
void launch_register_split_f16(dim3 grid, const SplitArgs& args, int64_t group, bool keys, cudaStream_t stream);
void launch_register_split_kivi4(dim3 grid, const SplitArgs& args, int64_t group, bool keys, cudaStream_t stream);

// Launches the staged kernel (attention_split_staged_cuda.cu) for a plain f16 or f32 cache whose
// head_dim it supports (staged_attention_supports); returns false, launching nothing, otherwise.
bool staged_attention_supports(KvElement element, int64_t head_dim, int64_t group);
bool launch_attention_split_staged(dim3 grid, const SplitArgs& args, KvElement element, cudaStream_t stream);

}  // namespace deltabit::cuda
