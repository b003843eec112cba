// What the split-K attention kernels of the decode step share (ops/decode_cuda.h, attention_cached):
// how a kv head's keys are cut into splits, the arguments of a split launch, and the staged kernel's
// entry point. Internal to src/ops (attention_decode_cuda.cu, attention_split_staged_cuda.cu).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "ops/attention_prologue.cuh"
#include "ops/kv_cuda.h"

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

// The decode step's prologue folded into a split launch (AttentionDecodeFolds::prologue, one token):
// q_full == nullptr means q is ready in SplitArgs::q.
struct FoldedPrologue {
    const float* q_full = nullptr;  // [n_head][q_head_stride], the head's q first
    const float* k_raw = nullptr;   // [n_kv_head][head_dim]
    const float* v_raw = nullptr;
    const float* q_norm = nullptr;
    const float* k_norm = nullptr;
    int64_t q_head_stride = 0;
    PrologueShape shape{};
};

// Grid (split, kv head, token): block (s, h, t) writes one partial (m, l, acc[d]) per query head of kv
// head h for token t over split s's keys; the combine kernel merges the splits.
struct SplitArgs {
    const float* q;  // unused with a folded prologue
    KvCacheView k;
    KvCacheView v;
    const int32_t* n_past;
    float* part_acc;  // [T][H][S][d]
    float* part_ml;   // [T][H][S][2]: running max (base 2) and denominator
    int64_t n_tokens, n_head, n_kv_head, head_dim, splits;
    float score_scale;  // log2(e) / sqrt(d)
    FoldedPrologue prologue;
};

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

// The folded prologue's norm weights for this lane, loaded before the kernel's wait (they are weights).
struct FoldedNorms {
    PrologueNormLanes q, k;
};
__device__ __forceinline__ FoldedNorms load_folded_norms(const SplitArgs& a) {
    const int lane = int(threadIdx.x) & 31;
    if (a.prologue.q_full == nullptr) return {};
    return {load_norm_lanes(a.prologue.q_norm, a.head_dim, lane), load_norm_lanes(a.prologue.k_norm, a.head_dim, lane)};
}

// Shared memory the folded prologue needs at the end of a split kernel's: the group's q rows and the new key.
__host__ __device__ inline size_t folded_prologue_bytes(int64_t group, int64_t head_dim) {
    return size_t(group + 1) * size_t(head_dim) * sizeof(float);
}

// The folded prologue of block (split, kv head kh), every thread of it calling: the group's q heads
// normed and roped into rows[g·d ..] (warps take heads in turn), and, when the split holds position
// n_past (the new token's), that position's key (normed, roped) and value stored into the caches —
// before any thread of the block reads a key, and read by no other block (no other split's keys reach
// n_past). Returns rows, ready for every thread (the call ends with __syncthreads).
__device__ __forceinline__ const float* fold_prologue(const SplitArgs& a, int64_t kh, int64_t group, const SplitSpan& span,
                                                      const FoldedNorms& norms, float* rows) {
    const FoldedPrologue& p = a.prologue;
    const int lane = int(threadIdx.x) & 31, warp = int(threadIdx.x) >> 5, n_warps = int(blockDim.x) >> 5;
    const int64_t d = a.head_dim, row_elems = a.n_kv_head * d, position = span.n_past;
    const bool holds_new = span.begin <= position && position < span.begin + span.per_split;
    const int64_t tasks = holds_new ? group + 2 : group;  // q heads, then the new key, then the new value
    for (int64_t task = warp; task < tasks; task += n_warps) {
        if (task < group) {
            norm_rope_head(p.q_full + (kh * group + task) * p.q_head_stride, norms.q, p.shape, position, rows + task * d,
                           lane);
        } else if (task == group) {
            float* key = rows + group * d;
            norm_rope_head(p.k_raw + kh * d, norms.k, p.shape, position, key, lane);
            for (int64_t i = lane; i < d; i += 32) store_kv(a.k, position, row_elems, kh * d + i, key[i]);
        } else {
            for (int64_t i = lane; i < d; i += 32) store_kv(a.v, position, row_elems, kh * d + i, p.v_raw[kh * d + i]);
        }
    }
    __syncthreads();  // the rows, and the cache stores for this block's loads
    return rows;
}

// Row g of the group's queries for token t: the folded prologue's (folded != nullptr) or a.q's.
__device__ __forceinline__ const float* query_row(const SplitArgs& a, const float* folded, int64_t t, int64_t kh,
                                                  int64_t group, int64_t g) {
    return folded != nullptr ? folded + g * a.head_dim : a.q + (t * a.n_head + kh * group + g) * a.head_dim;
}

// Launches the staged kernel (attention_split_staged_cuda.cu) for a plain f16 or f32 cache whose
// head_dim it supports (staged_attention_supports); returns false, launching nothing, otherwise.
bool staged_attention_supports(KvElement element, int64_t head_dim, int64_t group);
bool launch_attention_split_staged(dim3 grid, const SplitArgs& args, KvElement element, cudaStream_t stream);

}  // namespace deltabit::cuda
