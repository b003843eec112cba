// Device code of the decode GEMV kernels (ops/matmul/matmul_cuda.cu; ops/matmul/gemv_b1_cuda.cu reads its launch arguments
// and activation copy): the per-dtype unit dots, the launch arguments, the activation copy into shared memory
// and the quantised-output epilogue.
#pragma once

#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>
#include <span>

#include "ops/cuda/activation_quant.cuh"
#include "ops/cuda/cuda_math.cuh"
#include "ops/matmul/matmul_cuda.h"

namespace deltabit::cuda::gemv_detail {

constexpr unsigned kFullMask = 0xffffffffu;

// Weight codes are read exactly once: keep them out of L1 so the activations stay there.
__device__ __forceinline__ uint4 load_streaming(const uint4* p) {
    uint4 v;
    asm("ld.global.nc.L1::no_allocate.v4.u32 {%0, %1, %2, %3}, [%4];"
        : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
        : "l"(p));
    return v;
}

// Weights per 16-byte unit of codes and weights per fp16 scale, per dtype.
template <DType T>
struct Layout;
template <>
struct Layout<DType::Q1_0> {
    static constexpr int unit = 128, group = 128;
};
template <>
struct Layout<DType::Q2_0> {
    static constexpr int unit = 64, group = 128;
};
template <>
struct Layout<DType::Q2_0_G64> {
    static constexpr int unit = 64, group = 64;
};
template <>
struct Layout<DType::Q4_0> {
    static constexpr int unit = 32, group = 32;
};
template <>
struct Layout<DType::Q8_0> {
    static constexpr int unit = 16, group = 32;
};

// Integer dot of one unit of codes with its activation words x (4 int8 each, natural order).
// `group_sum` is Σq over the unit's 128-input activation group (only Q1_0 needs it).
template <DType T>
__device__ __forceinline__ int unit_dot(const uint4& codes, const int* x, int group_sum);

template <>
__device__ __forceinline__ int unit_dot<DType::Q1_0>(const uint4& codes, const int* x, int group_sum) {
    const unsigned words[4] = {codes.x, codes.y, codes.z, codes.w};
    int a0 = 0, a1 = 0, a2 = 0, a3 = 0;  // a_s = Σ 2^s·bit·x over the bit planes s and s + 4
#pragma unroll
    for (int i = 0; i < 4; ++i) {
        const int lo = int(words[i]);
        const int hi = int(words[i] >> 4);
        const int* xi = x + 8 * i;  // word i covers weights 32·i .. 32·i+31; bit plane j ↔ x word j
        a0 = __dp4a(lo & 0x01010101, xi[0], a0);
        a1 = __dp4a(lo & 0x02020202, xi[1], a1);
        a2 = __dp4a(lo & 0x04040404, xi[2], a2);
        a3 = __dp4a(lo & 0x08080808, xi[3], a3);
        a0 = __dp4a(hi & 0x01010101, xi[4], a0);
        a1 = __dp4a(hi & 0x02020202, xi[5], a1);
        a2 = __dp4a(hi & 0x04040404, xi[6], a2);
        a3 = __dp4a(hi & 0x08080808, xi[7], a3);
    }
    const int positive_sum = a0 + (a1 >> 1) + (a2 >> 2) + (a3 >> 3);
    return 2 * positive_sum - group_sum;  // Σ sign·x = Σ_{bit=1} x − Σ_{bit=0} x
}

template <DType T>
__device__ __forceinline__ int unit_dot_q2(const uint4& codes, const int* x) {
    const unsigned words[4] = {codes.x, codes.y, codes.z, codes.w};
    int acc = 0, x_sum = 0;
#pragma unroll
    for (int i = 0; i < 4; ++i) {
#pragma unroll
        for (int p = 0; p < 4; ++p) acc = __dp4a(int((words[i] >> (2 * p)) & 0x03030303u), x[4 * i + p], acc);
    }
#pragma unroll
    for (int i = 0; i < 16; ++i) x_sum = __dp4a(x[i], 0x01010101, x_sum);
    return acc - x_sum;  // level = code − 1
}
template <>
__device__ __forceinline__ int unit_dot<DType::Q2_0>(const uint4& codes, const int* x, int) {
    return unit_dot_q2<DType::Q2_0>(codes, x);
}
template <>
__device__ __forceinline__ int unit_dot<DType::Q2_0_G64>(const uint4& codes, const int* x, int) {
    return unit_dot_q2<DType::Q2_0_G64>(codes, x);
}

template <>
__device__ __forceinline__ int unit_dot<DType::Q4_0>(const uint4& codes, const int* x, int) {
    const unsigned words[4] = {codes.x, codes.y, codes.z, codes.w};
    int acc = 0, x_sum = 0;
#pragma unroll
    for (int i = 0; i < 4; ++i) {
        acc = __dp4a(int(words[i] & 0x0f0f0f0fu), x[i], acc);             // weights 4i .. 4i+3
        acc = __dp4a(int((words[i] >> 4) & 0x0f0f0f0fu), x[4 + i], acc);  // weights 16+4i ..
    }
#pragma unroll
    for (int i = 0; i < 8; ++i) x_sum = __dp4a(x[i], 0x01010101, x_sum);
    return acc - 8 * x_sum;  // level = code − 8
}

template <>
__device__ __forceinline__ int unit_dot<DType::Q8_0>(const uint4& codes, const int* x, int) {
    int acc = __dp4a(int(codes.x), x[0], 0);
    acc = __dp4a(int(codes.y), x[1], acc);
    acc = __dp4a(int(codes.z), x[2], acc);
    return __dp4a(int(codes.w), x[3], acc);
}

// One matrix of a launch: its rows are the tiles [first_tile, first_tile + ceil(rows / rows per tile)).
struct Segment {
    const uint4* codes;
    const uint16_t* scales;
    float* y;
    int64_t rows;
    int64_t first_tile;
};

struct KernelArgs {
    Segment seg[kMaxGemvGroup];  // in tile order; a launch of one matrix uses seg[0]
    int n_segments;
    // SwiGLU pairs: seg[0] is the gate, these the up matrix's planes (same shape); y = silu(gate) · up.
    const uint4* up_codes;
    const uint16_t* up_scales;
    const int8_t* xq;
    const ActivationGroupMeta* x_meta;
    // SwiGLU with a quantised output, or gemv_quantized_add_norm: y's int8 groups, and their arrival
    // counters (zero between launches).
    int8_t* yq;
    ActivationGroupMeta* yq_meta;
    int32_t* arrivals;
    // gemv_quantized_add_norm: y is the residual stream (y[n] += W·x); a completed group's codes are of
    // y ⊙ norm_w and its Σy² goes to yq_sum_sq (a deferred-norm view, ops/matmul/matmul_cuda.h).
    bool add_to_y;
    const float* norm_w;
    float* yq_sum_sq;
    // A deferred-norm input (QuantizedActivationsView::norm_sum_sq): its group sums, row length and eps.
    const float* x_sum_sq;
    int x_cols;
    float x_norm_eps;
    int units_per_row;
    int scales_per_row;
    int x_groups;
};

// Activations live in shared memory, one 128-byte group every kSmemGroupStride bytes: the 16 bytes of
// padding put the 16-byte reads of neighbouring lanes (units 128, 64, 32 or 16 bytes apart) in
// different bank quads, so a warp's 128-bit loads do not conflict. Measured first with the
// activations read through L1 instead: the weight stream evicted them and every unit re-read its
// activations from L2 (Q1_0 LM head: 100 µs with 4 rows per thread, 170 µs with 2).
constexpr int kSmemGroupStride = kActivationGroup + 16;
__host__ __device__ inline size_t activation_smem_bytes(int x_groups) {
    return size_t(x_groups) * (kSmemGroupStride + sizeof(ActivationGroupMeta));
}


// One unit of codes for each of a thread's R rows against the unit's activations in shared memory (x one group
// per kSmemGroupStride bytes, meta with the group scale and Σq), added into acc: code_of(r) and scale_of(r)
// give row r's 16 bytes of codes and its fp16 scale of this unit. The arithmetic of both GEMV kernels, in
// this one place: a row's terms in the same order is what makes their y equal bit for bit.
template <DType T, int R, typename CodeOf, typename ScaleOf>
__device__ __forceinline__ void accumulate_unit(const uint8_t* x_smem, const int2* meta_smem, int u, const CodeOf& code_of,
                                                const ScaleOf& scale_of, float (&acc)[R]) {
    using L = Layout<T>;
    constexpr int kXWords = L::unit / 4;
    const int group = u * L::unit / kActivationGroup;
    const int4* xs = reinterpret_cast<const int4*>(x_smem + group * kSmemGroupStride + (u * L::unit) % kActivationGroup);
    int x[kXWords];
#pragma unroll
    for (int v = 0; v < kXWords / 4; ++v) {
        const int4 t = xs[v];
        x[4 * v + 0] = t.x;
        x[4 * v + 1] = t.y;
        x[4 * v + 2] = t.z;
        x[4 * v + 3] = t.w;
    }
    const int2 meta = meta_smem[group];
    const float x_scale = __int_as_float(meta.x);
#pragma unroll
    for (int r = 0; r < R; ++r) {
        const int dot = unit_dot<T>(code_of(r), x, meta.y);
        acc[r] = fmaf(float(dot), __half2float(__ushort_as_half(scale_of(r))) * x_scale, acc[r]);
    }
}

// The KT lanes of a row group sum their partial dots (a butterfly), and the outputs are stored: the group's
// first output is y[row0], the matrix has `rows` (rows past the end were computed, clamped, and are not
// stored). SwiGLU: one output, silu(gate) · up; otherwise R rows, lane r storing row row0 + r (added to y for
// gemv_quantized_add_norm).
template <int KT, int R, bool kSwiglu>
__device__ __forceinline__ void reduce_and_store(const KernelArgs& a, float (&acc)[R], int k_lane, float* y, int64_t row0,
                                                 int64_t rows) {
#pragma unroll
    for (int r = 0; r < R; ++r) {
#pragma unroll
        for (int offset = KT / 2; offset > 0; offset /= 2) acc[r] += __shfl_xor_sync(kFullMask, acc[r], offset);
    }
    if constexpr (kSwiglu) {
        if (k_lane == 0 && row0 < rows) y[row0] = silu_f(acc[0]) * acc[1];
    } else {
#pragma unroll
        for (int r = 0; r < R; ++r) {
            if (k_lane == r && row0 + r < rows) {
                float* out = y + row0 + r;
                *out = a.add_to_y ? *out + acc[r] : acc[r];
            }
        }
    }
}

// Each of the `found` groups in `complete` quantised by one warp of the `threads` taking part (warps taking them
// in turn): y read past L1 (other blocks wrote it), times norm_w where set, into yq and its meta; the group's
// sum of squares where the view keeps them; its arrival counter zeroed for the next launch.
__device__ inline void quantize_groups_by_warps(const KernelArgs& a, const int64_t* complete, int found, int64_t rows,
                                                int tid, int threads) {
    const int lane = tid & 31;
    for (int c = tid / 32; c < found; c += threads / 32) {
        const int64_t g = complete[c];
        float y[4], v[4];
#pragma unroll
        for (int i = 0; i < 4; ++i) {
            const int64_t k = g * kActivationGroup + lane * 4 + i;
            y[i] = k < rows ? __ldcg(a.seg[0].y + k) : 0.0f;
            v[i] = a.norm_w != nullptr && k < rows ? y[i] * __ldg(a.norm_w + k) : y[i];
        }
        const ActivationGroupMeta meta = quantize_group_by_warp(v, lane, a.yq + g * kActivationGroup);
        float sum_sq = 0.0f;  // the order ops/matmul/matmul_cuda.h promises: in-lane fmaf, then the butterfly
        if (a.yq_sum_sq != nullptr) {
#pragma unroll
            for (int i = 0; i < 4; ++i) sum_sq = fmaf(y[i], y[i], sum_sq);
#pragma unroll
            for (int offset = 16; offset > 0; offset /= 2) sum_sq += __shfl_xor_sync(kFullMask, sum_sq, offset);
        }
        if (lane == 0) {
            a.yq_meta[g] = meta;
            if (a.yq_sum_sq != nullptr) a.yq_sum_sq[g] = sum_sq;
            a.arrivals[g] = 0;
        }
    }
}

// Adds v to an arrival counter at GPU scope, returning the count before: a release of everything the calling
// thread has observed (the block's stores, ordered before it by a barrier: PTX releases are cumulative) and an
// acquire of what the other arrivals released, in one operation. It replaces a fence.sc (__threadfence) before
// the add and another after it.
__device__ __forceinline__ int arrive_acq_rel(int* counter, int v) {
    int before;
    asm volatile("atom.acq_rel.gpu.global.add.s32 %0, [%1], %2;" : "=r"(before) : "l"(counter), "r"(v) : "memory");
    return before;
}

// The kernel's epilogue for a block's last n_tiles tiles at once: the last holds the outputs
// [last_row0, + tile_rows) of a matrix of `rows`, each before it those `stride` rows earlier (a block's tiles lie
// gridDim.x tiles apart), each spanning at most two groups of 128. One lane of warp 0 a (tile, group) pair
// counts the tile's outputs into the group (arrive_acq_rel), so the counts of all the tiles fly together (one
// round trip, where one thread counting them in turn took one each); a lane whose count completes its group
// hands it to quantize_groups_by_warps. Called by every thread of the block. 32-bit row
// numbers (a quantised output has at most an activation vector's inputs): the kernel's registers are tight.
constexpr int kMaxDeferredTiles = 8;  // two groups a tile: 16 of warp 0's lanes
__device__ inline void quantize_completed_tiles(const KernelArgs& a, int last_row0, int stride, int n_tiles,
                                                int tile_rows, int rows) {
    __shared__ int64_t s_complete[2 * kMaxDeferredTiles];
    __shared__ int s_found;
    __syncthreads();  // every output of the tiles stored (the releases below are cumulative over it)
    const int tid = int(threadIdx.x);
    if (tid < 32) {
        const int tile = tid / 2;  // 0 = the oldest
        const int begin = last_row0 - (n_tiles - 1 - tile) * stride;
        const int end = min(begin + tile_rows, rows);
        const int g = begin / kActivationGroup + (tid & 1);
        const int g_begin = g * kActivationGroup;
        const int g_end = min(g_begin + kActivationGroup, rows);
        bool completes = false;
        if (tile < n_tiles && g_begin < end) {
            const int mine = min(end, g_end) - max(begin, g_begin);
            completes = arrive_acq_rel(a.arrivals + g, mine) + mine == g_end - g_begin;
        }
        const unsigned completing = __ballot_sync(kFullMask, completes);
        if (completes) s_complete[__popc(completing & ((1u << tid) - 1u))] = g;
        if (tid == 0) s_found = __popc(completing);
    }
    __syncthreads();
    quantize_groups_by_warps(a, s_complete, s_found, rows, tid, int(blockDim.x));
    __syncthreads();  // s_complete is rewritten by the next call
}

// The activations the kernel before wrote, into shared memory: x one group per kSmemGroupStride bytes, the
// group meta with a deferred-norm input's r = 1/sqrt(Σ/cols + eps) (ops/matmul/matmul_cuda.h) multiplied into the
// scales. It runs after wait_for_predecessor with nothing left to overlap it, so it is latency: every load of
// a batch is issued before the first store, and the first batches of x, meta and the group sums together:
// with Q1_0's batches and 128 threads, one L2 round trip for K ≤ 8192 (K = 17408: 3 instead of 9 + 1 + 2). r
// is the same float in every warp of every block: lane l adds the group sums l, l + 32, ... in order, then a
// butterfly — the order of the loop this replaced, so the values are bit for bit those of before.
// kCopyBatch, kMetaBatch, kSumBatch: the x vectors, meta entries and group sums a thread loads at once (the
// kernel's weight registers are live meanwhile: wide batches only where they cost no spills, see gemv_kernel).
// The copying threads are `tid` of `threads`.
template <int kCopyBatch, int kMetaBatch, int kSumBatch>
__device__ __forceinline__ void copy_activations_by(const KernelArgs& a, uint8_t* x_smem, int2* meta_smem, int tid,
                                                    int threads) {
    const int lane = tid & 31;
    const int4* x_src = reinterpret_cast<const int4*>(a.xq);
    const int2* meta_src = reinterpret_cast<const int2*>(a.x_meta);
    const int x_vectors = a.x_groups * 8;
    const bool deferred = a.x_sum_sq != nullptr;

    float sums[kSumBatch];
    if (deferred) {
#pragma unroll
        for (int j = 0; j < kSumBatch; ++j) {
            const int g = lane + 32 * j;
            sums[j] = g < a.x_groups ? __ldg(a.x_sum_sq + g) : 0.0f;
        }
    }
    int2 meta[kMetaBatch];
#pragma unroll
    for (int j = 0; j < kMetaBatch; ++j) {
        const int g = tid + j * threads;
        if (g < a.x_groups) meta[j] = __ldg(meta_src + g);
    }
    for (int base = tid; base < x_vectors; base += kCopyBatch * threads) {
        int4 v[kCopyBatch];
#pragma unroll
        for (int j = 0; j < kCopyBatch; ++j)
            if (base + j * threads < x_vectors) v[j] = __ldg(x_src + base + j * threads);
#pragma unroll
        for (int j = 0; j < kCopyBatch; ++j) {
            const int i = base + j * threads;
            if (i < x_vectors) *reinterpret_cast<int4*>(x_smem + (i / 8) * kSmemGroupStride + (i % 8) * 16) = v[j];
        }
    }

    float norm_scale = 1.0f;
    if (deferred) {
        float sum = 0.0f;
#pragma unroll
        for (int j = 0; j < kSumBatch; ++j)
            if (lane + 32 * j < a.x_groups) sum += sums[j];
        for (int g = lane + 32 * kSumBatch; g < a.x_groups; g += 32) sum += __ldg(a.x_sum_sq + g);
#pragma unroll
        for (int offset = 16; offset > 0; offset /= 2) sum += __shfl_xor_sync(kFullMask, sum, offset);
        norm_scale = 1.0f / sqrtf(sum / float(a.x_cols) + a.x_norm_eps);
    }
    auto store_meta = [&](int g, int2 m) {
        if (deferred) m.x = __float_as_int(__int_as_float(m.x) * norm_scale);
        meta_smem[g] = m;
    };
#pragma unroll
    for (int j = 0; j < kMetaBatch; ++j)
        if (tid + j * threads < a.x_groups) store_meta(tid + j * threads, meta[j]);
    for (int g = tid + kMetaBatch * threads; g < a.x_groups; g += threads) store_meta(g, __ldg(meta_src + g));
}
template <int kCopyBatch, int kMetaBatch, int kSumBatch>
__device__ __forceinline__ void copy_activations(const KernelArgs& a, uint8_t* x_smem, int2* meta_smem) {
    copy_activations_by<kCopyBatch, kMetaBatch, kSumBatch>(a, x_smem, meta_smem, int(threadIdx.x), int(blockDim.x));
}


// What a launch does with its outputs besides storing them: quantise them for the next matmul (SwiGLU's
// y_quantized; gemv_quantized_add_norm's out, with norm_w and the residual add).
struct OutputEpilogue {
    const QuantizedActivationsView* y_quantized = nullptr;
    const float* norm_w = nullptr;  // set: y += W·x and the codes are of y ⊙ norm_w (gemv_quantized_add_norm)
};

// The kernel arguments of matrices sharing x (a SwiGLU pair: outputs[0] the gate, `up` its partner), every
// shape and view checked (deltabit::Error naming `what` otherwise); segments of no rows are left out, and
// each segment's first_tile is 0 for the launcher to set in its own tiles.
KernelArgs make_gemv_args(const QuantizedActivationsView& x, std::span<const GemvOutput> outputs,
                          const GemvWeightView* up, const OutputEpilogue& epilogue, const char* what);

}  // namespace deltabit::cuda::gemv_detail
