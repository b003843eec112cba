// The parts of the fused decode attention (attention_decode_fused, ops/decode_cuda.h) that the staged split
// kernels (attention_split_staged_cuda.cu) call around their split when they run fused: the prologue of a
// block, and the combine and quantisation in the last block of a kv head to finish.
//
// Why one launch: at a shallow depth the decode step's attention is four dependent kernels for almost no data
// (prologue, split, combine, quantise: ~11 µs a Bonsai-4B layer, 29% of its step, on the H200), and what each
// costs is its place on the chain (wait, read what the kernel before wrote, write), not its work. Fused, the
// split blocks request their keys before the wait (everything before the new position was written steps ago),
// form q themselves, and the last block merges the splits in the order of the combine kernel; a cache whose
// keys all fit one split needs no merge at all.
//
// Measured (H200, 2026-12-03, docs/bench.md "The decode attention as one launch"): NOT faster — Bonsai-4B tg128
// 794 vs 798 tok/s at depth 0, 540 vs 696 at 4K; Bonsai-27B 285 vs 292. Inside the kernel every dependent
// memory round trip (the position, q's row, the partials' fence and counter, the merge's loads) costs ~0.8–1.6
// µs, as much as a kernel boundary, and the blocks start only once the GEMV before has left their SM (its
// registers fill it). So CudaModel runs it only when asked (DELTABIT_ATTENTION_FUSED=1).
//
// Bit for bit the separate launches: a prologue row is one warp doing what the prologue kernel's 256 threads
// do (its block sum is eight butterflies of 32 dims then one over the eight sums, replayed here lane for
// lane), the new key and value enter the block's tile as the cache holds them, and the combine sums each
// output in the combine kernel's order. tests/cuda/test_decode_kernels.cpp compares every byte.
#pragma once

#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "ops/activation_quant.cuh"
#include "ops/attention_split.cuh"
#include "ops/cuda_math.cuh"
#include "ops/decode_cuda.h"

namespace deltabit::cuda::fused_attention {


// The prologue kernel's block (ops/attention_decode_cuda.cu): 256 threads, thread i holding dim i.
constexpr int kPrologueWarps = 8;
constexpr int kDimsPerLane = kAttentionDecodeMaxHeadDim / 32;
static_assert(kDimsPerLane == kPrologueWarps, "a prologue row of 256 dims is 8 warps of the prologue kernel");

template <typename KvT>
__device__ __forceinline__ KvT to_kv(float v) {
    if constexpr (sizeof(KvT) == 2) return __float2half_rn(v);
    else return v;
}

// Row `job` of kv head kh's prologue, by one warp (lane l holds dims l, l + 32, ...): job g < group is query
// head kh·group + g, normed and roped into q_row (as the prologue kernel writes q_out); job group is the new
// key and job group + 1 the new value, stored into the caches at `position` and into new_k / new_v as the
// cache holds them. `row` is this warp's scratch of head_dim floats.
template <typename KvT>
__device__ void prologue_row(const SplitArgs& a, const FusedDecodeArgs& f, int64_t kh, int64_t group, int64_t job,
                             int64_t position, const float* norms, const double* table, float* row, float* q_row,
                             KvT* new_k, KvT* new_v) {
    const int lane = int(threadIdx.x) & 31;
    const int d = int(a.head_dim);
    const bool is_q = job < group, is_k = job == group;
    const float* src = is_q ? f.q_full + (kh * group + job) * f.q_head_stride : (is_k ? f.k_raw : f.v_raw) + kh * d;
    const int64_t cache_at = position * a.n_kv_head * d + kh * d;  // a plain cache's element of dim 0
    float x[kDimsPerLane];
#pragma unroll
    for (int k = 0; k < kDimsPerLane; ++k) x[k] = lane + 32 * k < d ? src[lane + 32 * k] : 0.0f;
    if (!is_q && !is_k) {
#pragma unroll
        for (int k = 0; k < kDimsPerLane; ++k) {
            const int i = lane + 32 * k;
            if (i >= d) break;
            const KvT v = to_kv<KvT>(x[k]);
            static_cast<KvT*>(a.v.data)[cache_at + i] = v;
            new_v[i] = v;
        }
        return;
    }
    // block_sum(x·x) over the prologue kernel's 8 warps: warp k's butterfly over dims 32k .. 32k+31, then the
    // butterfly over the 8 warp sums in lanes 0..7 (zeros beyond).
    float warp_sums = 0.0f;
#pragma unroll
    for (int k = 0; k < kDimsPerLane; ++k) {
        const float s = warp_sum(x[k] * x[k]);
        if (lane == k) warp_sums = s;
    }
    const float scale = 1.0f / sqrtf(warp_sum(warp_sums) / float(d) + f.rms_eps);
    const float* norm_w = is_q ? norms : norms + d;
    float y[kDimsPerLane];
#pragma unroll
    for (int k = 0; k < kDimsPerLane; ++k) {
        const int i = lane + 32 * k;
        y[k] = i < d ? x[k] * scale * norm_w[i] : 0.0f;
        if (i < d) row[i] = y[k];
    }
    __syncwarp();
    const int64_t half = f.rope_dim / 2;
#pragma unroll
    for (int k = 0; k < kDimsPerLane; ++k) {
        const int i = lane + 32 * k;
        if (i >= d) break;
        float out = y[k];
        if (i < f.rope_dim) {
            const int64_t j = i < half ? i : i - half;
            const double c = table[2 * j], s = table[2 * j + 1];
            const double x0 = row[j], x1 = row[j + half];
            out = i < half ? float(__dsub_rn(__dmul_rn(x0, c), __dmul_rn(x1, s)))
                           : float(__dadd_rn(__dmul_rn(x1, c), __dmul_rn(x0, s)));
        }
        if (is_q) {
            q_row[i] = out;
        } else {
            const KvT v = to_kv<KvT>(out);
            static_cast<KvT*>(a.k.data)[cache_at + i] = v;
            new_k[i] = v;
        }
    }
    __syncwarp();  // `row` is the warp's next job's
}

// Before the wait for the kernel before (ops/programmatic_launch.cuh): the norms' weights (the model's) and
// the step's rope table (written by its first launch) into shared memory — norms [2][head_dim], q's then k's,
// table [rope_dim] — so that after the wait the prologue loads only what the kernel before wrote. The
// prologue's first barrier publishes them.
__device__ __forceinline__ void stage_prologue_constants(const SplitArgs& a, const FusedDecodeArgs& f, float* norms,
                                                         double* table) {
    for (int i = int(threadIdx.x); i < int(a.head_dim); i += int(blockDim.x)) {
        norms[i] = f.q_norm[i];
        norms[a.head_dim + i] = f.k_norm[i];
    }
    for (int i = int(threadIdx.x); i < int(f.rope_dim); i += int(blockDim.x)) table[i] = f.rope_table[i];
}

// The block's prologue: warp w takes jobs w, w + 8, ... of the group's query heads and, when `owner` (its
// split holds the new position), the new key and value. Ends with the block synchronised.
template <typename KvT>
__device__ void prologue(const SplitArgs& a, const FusedDecodeArgs& f, int64_t kh, int64_t group, bool owner,
                         int64_t position, const float* norms, const double* table, float* rows, float* q_rows,
                         KvT* new_k, KvT* new_v) {
    __syncthreads();  // stage_prologue_constants' stores
    const int warp = int(threadIdx.x) >> 5, warps = int(blockDim.x) >> 5;
    const int64_t jobs = group + (owner ? 2 : 0);
    for (int64_t job = warp; job < jobs; job += warps)
        prologue_row<KvT>(a, f, kh, group, job, position, norms, table, rows + warp * a.head_dim,
                          q_rows + (job < group ? job : 0) * a.head_dim, new_k, new_v);
    __syncthreads();
}

// The splits of kv head kh that hold keys: those a block of split >= this count finds empty.
__device__ __forceinline__ int64_t active_splits(int64_t total, int64_t splits) {
    const int64_t per_split = keys_per_split(total, splits);
    return (total + per_split - 1) / per_split;
}

// Shared memory combine_and_quantize needs (it reuses the tile ring once the keys are done): the split
// weights [group][kMaxSplits], the heads' 1/l [kAttentionDecodeMaxGroup], the outputs [group][head_dim].
__host__ __device__ constexpr size_t combine_smem_bytes(int64_t group, int64_t head_dim) {
    return (size_t(group) * kMaxSplits + kAttentionDecodeMaxGroup + size_t(group) * head_dim) * sizeof(float);
}

// Kv head kh's outputs s_out [group][head_dim] (shared memory, synchronised) quantised in groups of 128 as
// quantize_activations_kernel does.
__device__ __forceinline__ void quantize_outputs(const FusedDecodeArgs& f, int64_t kh, int64_t group, int64_t d,
                                                 const float* s_out) {
    const int lane = int(threadIdx.x) & 31, warp = int(threadIdx.x) >> 5, warps = int(blockDim.x) >> 5;
    const int64_t first_group = kh * group * d / kActivationGroup, groups = group * d / kActivationGroup;
    auto* meta = static_cast<ActivationGroupMeta*>(f.out_meta);
    for (int64_t c = warp; c < groups; c += warps) {
        float v[4];
#pragma unroll
        for (int i = 0; i < 4; ++i) v[i] = s_out[c * kActivationGroup + lane * 4 + i];
        const ActivationGroupMeta m = quantize_group_by_warp(v, lane, f.out_q + (first_group + c) * kActivationGroup);
        if (lane == 0) meta[first_group + c] = m;
    }
}

// One output of a kv head whose keys all sit in one split (active_splits = 1), from the block's own partial
// (acc, and the head's 1/l): what combine_and_quantize makes of that split alone — its weight exp2f(0) is 1,
// so the eight chains sum to acc + 0 — times 1/l and the gate. Stored to out and s_out [group][head_dim].
__device__ __forceinline__ void single_split_output(const FusedDecodeArgs& f, int64_t kh, int64_t group, int64_t d,
                                                    int64_t g, int64_t i, float acc, float inv_l, float gate,
                                                    float* s_out) {
    float o = acc + 0.0f;  // fmaf(acc, 1, 0) then 0 + that: −0 becomes +0 there too
    o *= inv_l;
    if (f.gate != nullptr) o *= sigmoid_f(gate);
    f.out[(kh * group + g) * d + i] = o;
    s_out[g * d + i] = o;
}

// Called by every block of a non-empty split after its partials are stored. The last of kv head kh's
// `active` blocks to get here merges the splits as attention_combine_kernel does (m and l by lane-strided
// loops and butterflies, each output as eight strided fmaf chains summed in order, then 1/l and the gate),
// writes out and quantises the kv head's outputs in groups of 128 as quantize_activations_kernel does, and
// sets the counter back to zero; the other blocks return.
__device__ void combine_and_quantize(const SplitArgs& a, const FusedDecodeArgs& f, int64_t kh, int64_t group,
                                     int64_t active, unsigned char* smem) {
    __shared__ int s_last;
    const int tid = int(threadIdx.x), lane = tid & 31, warp = tid >> 5;
    const int64_t d = a.head_dim;
    int32_t* counter = f.arrivals + kh * group * d / kActivationGroup;
    // The barrier orders every thread's partial stores before thread 0's fence, which is cumulative over
    // them (as quantize_completed_groups_by in ops/gemv_device.cuh); the second fence orders the reads after.
    __syncthreads();
    if (tid == 0) {
        __threadfence();
        s_last = atomicAdd(counter, 1) == int(active) - 1;
        __threadfence();
    }
    __syncthreads();
    if (!s_last) return;

    // Every load of the merge is requested at once (one L2 round trip at a shallow depth): warp g's m and l of
    // head g's splits, lanes over splits, and each thread's first batch of partials, which wait in registers
    // for the weights.
    static_assert(kAttentionDecodeMaxGroup <= kPrologueWarps, "a warp per query head of the group");
    constexpr int kChains = 8;       // the combine kernel's warps: chain c sums splits c, c + 8, ...
    constexpr int kOutputs = 4;      // outputs a thread merges at once
    constexpr int kSplitsPerLane = kMaxSplits / 32;
    float* s_weight = reinterpret_cast<float*>(smem);  // [group][kMaxSplits]
    float* s_inv_l = s_weight + group * kMaxSplits;     // [kAttentionDecodeMaxGroup]
    float* s_out = s_inv_l + kAttentionDecodeMaxGroup;  // [group][d]
    const int outputs = int(group * d), threads = int(blockDim.x), dim = int(d);
    float m_s[kSplitsPerLane], l_s[kSplitsPerLane];
    if (warp < group) {
        const float* ml = a.part_ml + (kh * group + warp) * a.splits * 2;
#pragma unroll
        for (int j = 0; j < kSplitsPerLane; ++j) {
            const int64_t s = lane + 32 * j;
            m_s[j] = s < active ? __ldcg(ml + 2 * s) : -INFINITY;
            l_s[j] = s < active ? __ldcg(ml + 2 * s + 1) : 0.0f;
        }
    }
    float v[kOutputs][kChains], gate[kOutputs];
    // Partials of outputs first + tid + j·threads (j < kOutputs), splits base .. base + kChains − 1; zeros past either end.
    auto load_batch = [&](int first, int64_t base) {
#pragma unroll
        for (int j = 0; j < kOutputs; ++j) {
            const int idx = first + tid + j * threads;
            const int g = idx / dim, i = idx % dim;
            const float* acc = a.part_acc + (kh * group + g) * a.splits * d + i;
#pragma unroll
            for (int c = 0; c < kChains; ++c)
                v[j][c] = idx < outputs && base + c < active ? __ldcg(acc + (base + c) * d) : 0.0f;
            if (base == 0)
                gate[j] = f.gate != nullptr && idx < outputs ? f.gate[(kh * group + g) * f.gate_head_stride + i] : 0.0f;
        }
    };
    load_batch(0, 0);
    if (warp < group) {
        float m_all = -INFINITY;  // split 0 holds key 0: finite
#pragma unroll
        for (int j = 0; j < kSplitsPerLane; ++j)
            if (lane + 32 * j < active) m_all = fmaxf(m_all, m_s[j]);
#pragma unroll
        for (int offset = 16; offset > 0; offset >>= 1) m_all = fmaxf(m_all, __shfl_xor_sync(kFullWarpMask, m_all, offset));
        float l_part = 0.0f;
#pragma unroll
        for (int j = 0; j < kSplitsPerLane; ++j) {
            if (lane + 32 * j >= active) continue;
            const float w = exp2f(m_s[j] - m_all);
            s_weight[warp * kMaxSplits + lane + 32 * j] = w;
            l_part = fmaf(l_s[j], w, l_part);
        }
        const float l_all = warp_sum(l_part);
        if (lane == 0) s_inv_l[warp] = 1.0f / l_all;
    }
    __syncthreads();
    for (int first = 0; first < outputs; first += kOutputs * threads) {
        float chain[kOutputs][kChains] = {};
        for (int64_t base = 0; base < active; base += kChains) {
            if (first != 0 || base != 0) load_batch(first, base);
#pragma unroll
            for (int j = 0; j < kOutputs; ++j) {
                const int idx = first + tid + j * threads;
                if (idx >= outputs) continue;
                const float* w = s_weight + (idx / dim) * kMaxSplits + base;
#pragma unroll
                for (int c = 0; c < kChains; ++c)
                    if (base + c < active) chain[j][c] = fmaf(v[j][c], w[c], chain[j][c]);
            }
        }
#pragma unroll
        for (int j = 0; j < kOutputs; ++j) {
            const int idx = first + tid + j * threads;
            if (idx >= outputs) continue;
            const int g = idx / dim, i = idx % dim;
            float o = 0.0f;
#pragma unroll
            for (int c = 0; c < kChains; ++c) o += chain[j][c];
            o *= s_inv_l[g];
            const int64_t head = kh * group + g;
            if (f.gate != nullptr) o *= sigmoid_f(gate[j]);
            f.out[head * d + i] = o;
            s_out[idx] = o;
        }
    }
    __syncthreads();
    quantize_outputs(f, kh, group, d, s_out);
    if (tid == 0) *counter = 0;
}

}  // namespace deltabit::cuda::fused_attention
