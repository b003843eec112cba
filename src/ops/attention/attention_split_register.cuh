// The register split-K kernels of the decode attention (ops/attention/attention_cuda.h, AttentionDecodeVariant):
// dims_across_lanes and keys_across_lanes, and the row accessors they read a cache through, as templates.
// Internal to src/ops. Each cache element's instantiations are compiled in their own translation unit
// (attention_split_{f32,f16,kivi4}_cuda.cu, behind the launch_register_split_* entry points of
// ops/attention/attention_split.cuh): all 120 kernels in one unit took 252 s to compile on two cores, six times the
// next file and the pace of a whole build; split by element they take 16 s (f32), 18 s (f16) and 47 s
// (kivi4), in parallel.
//
// dims_across_lanes: 4 warps take interleaved pairs of keys; lane i holds dims [i·P, i·P + P) of q, k, v
// and the accumulators (16- or 32-byte vector loads when head_dim = 32·P); per key one partial dot per
// query head and a butterfly per head. keys_across_lanes: 4 warps take interleaved tiles of 32 keys, lane
// j scoring key j (see attention_split_keys_kernel). Both keep an online softmax in base 2 (q is
// prescaled by log2(e)/sqrt(d), so exp2f replaces expf), prefetch the rows they will read next into L2,
// merge the warps through shared memory and write one partial (m, l, acc[d]) per query head; the combine
// kernel (attention_decode_cuda.cu) merges the splits in a fixed order (deterministic). Both read rows
// through an accessor, the kernels' Rows parameter: PlainRows for an f32 or f16 cache, KiviRows for kivi4
// (ops/attention/kv_cuda.h: sinks and window rows exact, the middle dequantised as it is read).
// keys_across_lanes also has the rows form (attention_split.cuh, SplitArgs): one launch over a table of
// rows, each block running the same body on its row's arguments; dims_across_lanes has none (a measurement
// variant, attention_cached_rows refuses it).
#pragma once

#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "ops/attention/attention_split.cuh"
#include "ops/cuda/cuda_math.cuh"
#include "ops/attention/attention_cuda.h"
#include "ops/attention/kv_cuda.h"
#include "ops/cuda/programmatic_launch.cuh"

namespace deltabit::cuda::attention_split_detail {

constexpr int kWarps = 4;
constexpr int kThreads = 32 * kWarps;
constexpr int kKeysPerStep = 2;  // loads of two keys in flight per warp before the first use

// Dims [lane·P, lane·P + P) of a row; vector loads when the row is exactly 32·P wide (then aligned).
template <int P>
__device__ __forceinline__ void load_row(const float* row, int lane, int64_t d, bool full, float (&out)[P]) {
    const int64_t base = int64_t(lane) * P;
    if (full) {
        if constexpr (P >= 4) {
#pragma unroll
            for (int c = 0; c < P / 4; ++c) {
                const float4 f = reinterpret_cast<const float4*>(row + base)[c];
                out[4 * c] = f.x;
                out[4 * c + 1] = f.y;
                out[4 * c + 2] = f.z;
                out[4 * c + 3] = f.w;
            }
        } else if constexpr (P == 2) {
            const float2 f = *reinterpret_cast<const float2*>(row + base);
            out[0] = f.x;
            out[1] = f.y;
        } else {
            out[0] = row[base];
        }
        return;
    }
#pragma unroll
    for (int r = 0; r < P; ++r) out[r] = base + r < d ? row[base + r] : 0.0f;
}

template <int P>
__device__ __forceinline__ void load_row(const __half* row, int lane, int64_t d, bool full, float (&out)[P]) {
    const int64_t base = int64_t(lane) * P;
    if (full && P >= 2) {
        if constexpr (P == 8) {
            const uint4 u = *reinterpret_cast<const uint4*>(row + base);
            const uint32_t w[4] = {u.x, u.y, u.z, u.w};
#pragma unroll
            for (int c = 0; c < 4; ++c) {
                const float2 f = __half22float2(*reinterpret_cast<const __half2*>(&w[c]));
                out[2 * c] = f.x;
                out[2 * c + 1] = f.y;
            }
        } else if constexpr (P == 4) {
            const uint2 u = *reinterpret_cast<const uint2*>(row + base);
            const uint32_t w[2] = {u.x, u.y};
#pragma unroll
            for (int c = 0; c < 2; ++c) {
                const float2 f = __half22float2(*reinterpret_cast<const __half2*>(&w[c]));
                out[2 * c] = f.x;
                out[2 * c + 1] = f.y;
            }
        } else if constexpr (P == 2) {
            const float2 f = __half22float2(*reinterpret_cast<const __half2*>(row + base));
            out[0] = f.x;
            out[1] = f.y;
        }
        return;
    }
#pragma unroll
    for (int r = 0; r < P; ++r) out[r] = base + r < d ? __half2float(row[base + r]) : 0.0f;
}

// Asks L2 for a row ahead of its use (no register, no wait): a warp's demand loads of one tile are too
// few to cover DRAM latency, so each tile prefetches the V rows it will read after scoring and the K rows
// of the warp's next tile.
template <typename KvT>
__device__ __forceinline__ void prefetch_row_l2(const KvT* row, int64_t d) {
    const char* bytes = reinterpret_cast<const char*>(row);
    for (int64_t b = 0; b < d * int64_t(sizeof(KvT)); b += 128) asm volatile("prefetch.global.L2 [%0];" ::"l"(bytes + b));
}

// The split's partial (m, l, acc) of each query head from its kWarps warps' partials in shared memory, after
// a barrier: M = max m_w, acc = Σ 2^(m_w − M)·acc_w, l likewise, warps in order. A warp (or the whole split,
// for an early token of a prompt chunk) that saw no key has m = −inf and weighs 0. Both register kernels.
template <int P, int G>
__device__ __forceinline__ void merge_warp_partials(const SplitArgs& a, const float (&s_m)[kWarps][G],
                                                    const float (&s_l)[kWarps][G],
                                                    const float (&s_acc)[kWarps][G][32 * P], int64_t t, int64_t kh,
                                                    int64_t group, int64_t split, int64_t d) {
    for (int64_t idx = threadIdx.x; idx < int64_t(G) * 32 * P; idx += kThreads) {
        const int g = int(idx / (32 * P));
        const int64_t i = idx % (32 * P);
        if (g >= group || i >= d) continue;
        float m_all = -INFINITY;
#pragma unroll
        for (int w = 0; w < kWarps; ++w) m_all = fmaxf(m_all, s_m[w][g]);
        float o = 0.0f, l_all = 0.0f;
#pragma unroll
        for (int w = 0; w < kWarps; ++w) {
            const float weight = m_all == -INFINITY ? 0.0f : exp2f(s_m[w][g] - m_all);
            o = fmaf(s_acc[w][g][i], weight, o);
            l_all = fmaf(s_l[w][g], weight, l_all);
        }
        const int64_t part = (t * a.n_head + kh * group + g) * a.splits + split;
        a.part_acc[part * d + i] = o;
        if (i == 0) {
            a.part_ml[2 * part] = m_all;
            a.part_ml[2 * part + 1] = l_all;
        }
    }
}

// P = dims per lane (head_dim <= 32·P), G >= query heads per kv head.
template <typename Rows, int P, int G>
__global__ void __launch_bounds__(kThreads) attention_split_kernel(SplitArgs a) {
    wait_for_predecessor();  // ops/cuda/programmatic_launch.cuh: nothing of the step is read before this
    allow_dependents();
    __shared__ float s_m[kWarps][G], s_l[kWarps][G];
    __shared__ float s_acc[kWarps][G][32 * P];
    const int lane = int(threadIdx.x) & 31, warp = int(threadIdx.x) >> 5;
    const int64_t split = blockIdx.x, kh = blockIdx.y;
    const int64_t d = a.head_dim, group = a.n_head / a.n_kv_head, row_stride = a.n_kv_head * d;
    const bool full = d == 32 * P;
    const int64_t n_past = *a.n_past;
    const int64_t per_split = keys_per_split(n_past + a.n_tokens, a.splits);
    const int64_t p_begin = split * per_split;
    if (p_begin >= n_past + a.n_tokens) return;  // past the end of the cache: this split has no keys
    const Rows keys(a.k, kh, d, row_stride, n_past), values(a.v, kh, d, row_stride, n_past);

    for (int64_t t = blockIdx.z; t < a.n_tokens; t += gridDim.z) {
        const int64_t visible = n_past + t + 1;
        const int64_t p_end = p_begin + per_split < visible ? p_begin + per_split : visible;
        float q[G][P], acc[G][P], m[G], l[G];
#pragma unroll
        for (int g = 0; g < G; ++g) {
            if (g < group) load_row<P>(a.q + (t * a.n_head + kh * group + g) * d, lane, d, full, q[g]);
#pragma unroll
            for (int r = 0; r < P; ++r) {
                q[g][r] = g < group ? q[g][r] * a.score_scale : 0.0f;
                acc[g][r] = 0.0f;
            }
            m[g] = -INFINITY;
            l[g] = 0.0f;
        }

        for (int64_t p = p_begin + int64_t(warp) * kKeysPerStep; p < p_end; p += int64_t(kWarps) * kKeysPerStep) {
            // The rows this warp reads 8 steps from now (lanes 0-3 of a row share a 128-byte line).
            constexpr int64_t kAhead = 8 * kWarps * kKeysPerStep;
            const int64_t lane_dim = int64_t(lane) * P < d ? int64_t(lane) * P : 0;  // stay inside the row
#pragma unroll
            for (int u = 0; u < kKeysPerStep; ++u) {
                if (p + kAhead + u < p_end) {
                    keys.prefetch_at(p + kAhead + u, lane_dim);
                    values.prefetch_at(p + kAhead + u, lane_dim);
                }
            }
            float kr[kKeysPerStep][P], vr[kKeysPerStep][P];
#pragma unroll
            for (int u = 0; u < kKeysPerStep; ++u) {
                const int64_t pu = p + u < p_end ? p + u : p;  // a repeat of key p is loaded, then ignored
                keys.template load_lane<P>(pu, lane, d, full, kr[u]);
                values.template load_lane<P>(pu, lane, d, full, vr[u]);
            }
            const bool second = p + 1 < p_end;
#pragma unroll
            for (int g = 0; g < G; ++g) {
                if (g >= group) continue;
                float dot0 = 0.0f, dot1 = 0.0f;
#pragma unroll
                for (int r = 0; r < P; ++r) {
                    dot0 = fmaf(q[g][r], kr[0][r], dot0);
                    dot1 = fmaf(q[g][r], kr[1][r], dot1);
                }
                const float s0 = warp_sum(dot0);
                const float s1 = second ? warp_sum(dot1) : -INFINITY;
                const float m_new = fmaxf(m[g], fmaxf(s0, s1));
                const float correction = exp2f(m[g] - m_new);  // 0 on the first key (m = −inf)
                const float w0 = exp2f(s0 - m_new), w1 = exp2f(s1 - m_new);  // w1 = 0 without a second key
                l[g] = fmaf(l[g], correction, w0 + w1);
#pragma unroll
                for (int r = 0; r < P; ++r) acc[g][r] = fmaf(acc[g][r], correction, fmaf(w0, vr[0][r], w1 * vr[1][r]));
                m[g] = m_new;
            }
        }

#pragma unroll
        for (int g = 0; g < G; ++g) {
            if (lane == 0) {
                s_m[warp][g] = m[g];
                s_l[warp][g] = l[g];
            }
#pragma unroll
            for (int r = 0; r < P; ++r) s_acc[warp][g][lane * P + r] = acc[g][r];
        }
        __syncthreads();
        merge_warp_partials<P, G>(a, s_m, s_l, s_acc, t, kh, group, split, d);
        __syncthreads();  // the shared partials are rewritten for the next token
    }
}

// Eight consecutive elements of a row, as floats (16- or 32-byte loads: the caller guarantees alignment).
__device__ __forceinline__ void load8(const float* p, float (&out)[8]) {
    const float4 a = reinterpret_cast<const float4*>(p)[0], b = reinterpret_cast<const float4*>(p)[1];
    out[0] = a.x, out[1] = a.y, out[2] = a.z, out[3] = a.w, out[4] = b.x, out[5] = b.y, out[6] = b.z, out[7] = b.w;
}
__device__ __forceinline__ void load8(const __half* p, float (&out)[8]) {
    const uint4 u = *reinterpret_cast<const uint4*>(p);
    const uint32_t w[4] = {u.x, u.y, u.z, u.w};
#pragma unroll
    for (int c = 0; c < 4; ++c) {
        const float2 f = __half22float2(*reinterpret_cast<const __half2*>(&w[c]));
        out[2 * c] = f.x;
        out[2 * c + 1] = f.y;
    }
}
__device__ __forceinline__ float load1(const float* p) { return *p; }
__device__ __forceinline__ float load1(const __half* p) { return __half2float(*p); }

// ---- how a kernel reads one kv head's rows (the Rows parameter of the split kernels) ----
// Positions are absolute; dims are within the head. Both accessors give the values attention sees:
// stored f32 or f16 values, or kivi4's sinks and residual exact and its middle as m + s·code.

template <typename KvT>
struct PlainRows {
    const KvT* head;  // the head's dims of position 0
    int64_t stride;   // elements between positions

    __device__ PlainRows(const KvCacheView& view, int64_t kh, int64_t d, int64_t row_stride, int64_t)
        : head(static_cast<const KvT*>(view.data) + kh * d), stride(row_stride) {}
    __device__ const KvT* row(int64_t p) const { return head + p * stride; }
    template <int P>
    __device__ void load_lane(int64_t p, int lane, int64_t d, bool full, float (&out)[P]) const {
        load_row<P>(row(p), lane, d, full, out);
    }
    __device__ void load8(int64_t p, int64_t c, float (&out)[8]) const {
        attention_split_detail::load8(row(p) + c, out);
    }
    __device__ float load1(int64_t p, int64_t c) const { return attention_split_detail::load1(row(p) + c); }
    __device__ void prefetch_row(int64_t p, int64_t d) const { prefetch_row_l2(row(p), d); }
    __device__ void prefetch_at(int64_t p, int64_t c) const {
        asm volatile("prefetch.global.L2 [%0];" ::"l"(row(p) + c));
    }
};

// f16 bits → f32; m + s·code rounded as the CPU store computes it (no FMA contraction).
__device__ __forceinline__ float half_bits_to_float(uint16_t bits) { return __half2float(__ushort_as_half(bits)); }
__device__ __forceinline__ float kivi_level(float m, float s, uint32_t code) {
    return __fadd_rn(m, __fmul_rn(s, float(code)));
}

struct KiviRows {
    const float* exact;  // the head's dims of exact row 0
    const uint8_t* codes;
    const uint16_t* min;
    const uint16_t* scale;
    int64_t row;             // elements per position, all heads
    int64_t head_offset;     // kh · head_dim
    int64_t quantised_end;   // positions [sinks, quantised_end) are codes; the store as settled before the call
    KiviLayout layout;
    bool keys;

    __device__ KiviRows(const KvCacheView& view, int64_t kh, int64_t d, int64_t row_stride, int64_t n_past)
        : exact(static_cast<const float*>(view.data) + kh * d), codes(view.codes), min(view.min), scale(view.scale),
          row(row_stride), head_offset(kh * d), quantised_end(view.kivi.sinks + kivi_quantised(n_past, view.kivi)),
          layout(view.kivi), keys(view.keys) {}

    __device__ bool is_exact(int64_t p) const { return p < layout.sinks || p >= quantised_end; }
    __device__ const float* exact_row(int64_t p) const {
        const int64_t r = p < layout.sinks ? p : layout.sinks + (p - layout.sinks) % layout.ring_rows;
        return exact + r * row;
    }
    // Index of the (m, s) pair of element (q, e) of the quantised middle (e = index within the row).
    __device__ int64_t param_index(int64_t q, int64_t e) const {
        return keys ? (q / layout.block) * row + e : q * (row / layout.value_group) + e / layout.value_group;
    }
    __device__ float dequantised(int64_t p, int64_t c) const {
        const int64_t q = p - layout.sinks, e = head_offset + c;
        const uint32_t byte = codes[(q * row + e) >> 1];
        const uint32_t code = ((q * row + e) & 1) != 0 ? byte >> 4 : byte & 15u;
        const int64_t i = param_index(q, e);
        return kivi_level(half_bits_to_float(min[i]), half_bits_to_float(scale[i]), code);
    }
    template <int P>
    __device__ void load_lane(int64_t p, int lane, int64_t d, bool full, float (&out)[P]) const {
        if (is_exact(p)) {
            load_row<P>(exact_row(p), lane, d, full, out);
            return;
        }
        const int64_t base = int64_t(lane) * P;
        if constexpr (P == 4 || P == 8) {
            if (full) {
                load_quantised<P>(p, base, out);
                return;
            }
        }
#pragma unroll
        for (int r = 0; r < P; ++r) out[r] = base + r < d ? dequantised(p, base + r) : 0.0f;
    }
    // N = 4 or 8 consecutive elements from dim c of a quantised position, c a multiple of N and head_dim
    // of kKiviGroup (32): the codes are one aligned u16 or u32, keys' N (m, s) pairs one aligned 8- or
    // 16-byte load each, values' N elements share one pair (their group of 32 channels).
    template <int N>
    __device__ void load_quantised(int64_t p, int64_t c, float (&out)[N]) const {
        const int64_t q = p - layout.sinks, e = head_offset + c;
        const uint8_t* at = codes + ((q * row + e) >> 1);
        const uint32_t word = N == 8 ? *reinterpret_cast<const uint32_t*>(at) : *reinterpret_cast<const uint16_t*>(at);
        const int64_t i = param_index(q, e);
        if (keys) {
            uint32_t mw[4], sw[4];
            if constexpr (N == 8) {
                const uint4 m8 = *reinterpret_cast<const uint4*>(min + i), s8 = *reinterpret_cast<const uint4*>(scale + i);
                mw[0] = m8.x, mw[1] = m8.y, mw[2] = m8.z, mw[3] = m8.w;
                sw[0] = s8.x, sw[1] = s8.y, sw[2] = s8.z, sw[3] = s8.w;
            } else {
                const uint2 m4 = *reinterpret_cast<const uint2*>(min + i), s4 = *reinterpret_cast<const uint2*>(scale + i);
                mw[0] = m4.x, mw[1] = m4.y;
                sw[0] = s4.x, sw[1] = s4.y;
            }
#pragma unroll
            for (int j = 0; j < N; ++j) {
                const uint16_t mb = uint16_t(mw[j / 2] >> (16 * (j % 2))), sb = uint16_t(sw[j / 2] >> (16 * (j % 2)));
                out[j] = kivi_level(half_bits_to_float(mb), half_bits_to_float(sb), (word >> (4 * j)) & 15u);
            }
        } else {
            const float m = half_bits_to_float(min[i]), s = half_bits_to_float(scale[i]);
#pragma unroll
            for (int j = 0; j < N; ++j) out[j] = kivi_level(m, s, (word >> (4 * j)) & 15u);
        }
    }
    __device__ void load8(int64_t p, int64_t c, float (&out)[8]) const {
        if (is_exact(p)) attention_split_detail::load8(exact_row(p) + c, out);
        else load_quantised<8>(p, c, out);
    }
    __device__ float load1(int64_t p, int64_t c) const { return is_exact(p) ? exact_row(p)[c] : dequantised(p, c); }
    __device__ void prefetch_row(int64_t p, int64_t d) const {
        if (is_exact(p)) prefetch_row_l2(exact_row(p), d);
        else prefetch_row_l2(codes + (((p - layout.sinks) * row + head_offset) >> 1), d / 2);
    }
    __device__ void prefetch_at(int64_t p, int64_t c) const {
        const void* at = is_exact(p) ? static_cast<const void*>(exact_row(p) + c)
                                     : static_cast<const void*>(codes + (((p - layout.sinks) * row + head_offset + c) >> 1));
        asm volatile("prefetch.global.L2 [%0];" ::"l"(at));
    }
};

// keys_across_lanes (ops/attention/attention_cuda.h): per tile of 32 keys, lane j scores key j against every query
// head of the group (q from shared memory, a sequential fp32 sum over the dims), the warp updates one
// online softmax per head (a max butterfly per head per tile; the denominators stay per lane until the
// end), then lanes go back to owning dims [lane·P, lane·P + P) for the weighted sum of the tile's V rows.
// kRows: the rows form (SplitArgs; `a` is the block's row's, split_row_args).
template <typename Rows, int P, int G, bool kRows>
__device__ __forceinline__ void split_keys(const SplitArgs& a) {
    wait_for_predecessor();  // ops/cuda/programmatic_launch.cuh: nothing of the step is read before this
    allow_dependents();
    constexpr int kDims = 32 * P;
    __shared__ __align__(16) float s_q[G][kDims];
    __shared__ float s_m[kWarps][G], s_l[kWarps][G];
    __shared__ float s_acc[kWarps][G][kDims];
    const int lane = int(threadIdx.x) & 31, warp = int(threadIdx.x) >> 5;
    const int64_t split = blockIdx.x, kh = split_kv_head<kRows>(a);
    if (kRows && split >= a.splits) return;  // past its row's splits (the grid is planned for the largest row)
    const int64_t d = a.head_dim, group = a.n_head / a.n_kv_head, row_stride = a.n_kv_head * d;
    const bool full = d == 32 * P;
    const bool vector_rows = d % 8 == 0;  // every row then starts 16-byte aligned (f16) or 32-byte (f32)
    const int64_t n_past = *a.n_past;
    const int64_t per_split = keys_per_split(n_past + a.n_tokens, a.splits);
    const int64_t p_begin = split * per_split;
    if (p_begin >= n_past + a.n_tokens) return;
    const Rows keys(a.k, kh, d, row_stride, n_past), values(a.v, kh, d, row_stride, n_past);

    for (int64_t t = blockIdx.z; t < a.n_tokens; t += gridDim.z) {
        const int64_t visible = n_past + t + 1;
        const int64_t p_end = p_begin + per_split < visible ? p_begin + per_split : visible;
        for (int idx = int(threadIdx.x); idx < G * kDims; idx += kThreads) {
            const int g = idx / kDims, i = idx % kDims;
            s_q[g][i] = g < group && i < d ? a.q[(t * a.n_head + kh * group + g) * d + i] * a.score_scale : 0.0f;
        }
        __syncthreads();

        float acc[G][P], m[G], l[G];
#pragma unroll
        for (int g = 0; g < G; ++g) {
#pragma unroll
            for (int r = 0; r < P; ++r) acc[g][r] = 0.0f;
            m[g] = -INFINITY;
            l[g] = 0.0f;
        }
        if (p_begin + int64_t(warp) * 32 + lane < p_end) keys.prefetch_row(p_begin + warp * 32 + lane, d);
        for (int64_t tile = p_begin + int64_t(warp) * 32; tile < p_end; tile += int64_t(kWarps) * 32) {
            const int64_t key = tile + lane;
            const bool valid = key < p_end;
            const int64_t k_pos = valid ? key : tile;
            if (valid) values.prefetch_row(key, d);
            if (key + kWarps * 32 < p_end) keys.prefetch_row(key + kWarps * 32, d);
            float s[G];
#pragma unroll
            for (int g = 0; g < G; ++g) s[g] = 0.0f;
            if (vector_rows) {
#pragma unroll 4
                for (int64_t c = 0; c < d; c += 8) {
                    float kv[8];
                    keys.load8(k_pos, c, kv);
#pragma unroll
                    for (int g = 0; g < G; ++g) s[g] = fma8(&s_q[g][c], kv, s[g]);
                }
            } else {
                for (int64_t i = 0; i < d; ++i) {
                    const float kx = keys.load1(k_pos, i);
#pragma unroll
                    for (int g = 0; g < G; ++g) s[g] = fmaf(s_q[g][i], kx, s[g]);
                }
            }
            // Online softmax per head over the tile; lane 0's key (= tile < p_end) is valid, so the tile
            // max is finite.
            float p[G];
#pragma unroll
            for (int g = 0; g < G; ++g) {
                const float sg = valid ? s[g] : -INFINITY;
                float tile_max = sg;
#pragma unroll
                for (int offset = 16; offset > 0; offset >>= 1)
                    tile_max = fmaxf(tile_max, __shfl_xor_sync(kFullWarpMask, tile_max, offset));
                const float m_new = fmaxf(m[g], tile_max);
                const float correction = exp2f(m[g] - m_new);  // 0 on the first tile (m = −inf)
                p[g] = exp2f(sg - m_new);                       // 0 for a key past the end
                l[g] = fmaf(l[g], correction, p[g]);
#pragma unroll
                for (int r = 0; r < P; ++r) acc[g][r] *= correction;
                m[g] = m_new;
            }
            const int n_keys = p_end - tile < 32 ? int(p_end - tile) : 32;
#pragma unroll 2
            for (int j = 0; j < n_keys; ++j) {
                float vr[P];
                values.template load_lane<P>(tile + j, lane, d, full, vr);
#pragma unroll
                for (int g = 0; g < G; ++g) {
                    const float pj = __shfl_sync(kFullWarpMask, p[g], j);
#pragma unroll
                    for (int r = 0; r < P; ++r) acc[g][r] = fmaf(pj, vr[r], acc[g][r]);
                }
            }
        }

#pragma unroll
        for (int g = 0; g < G; ++g) {
            const float l_warp = warp_sum(l[g]);
            if (lane == 0) {
                s_m[warp][g] = m[g];
                s_l[warp][g] = l_warp;
            }
#pragma unroll
            for (int r = 0; r < P; ++r) s_acc[warp][g][lane * P + r] = acc[g][r];
        }
        __syncthreads();
        merge_warp_partials<P, G>(a, s_m, s_l, s_acc, t, kh, group, split, d);
        __syncthreads();  // s_q and the shared partials are rewritten for the next token
    }
}

// A single call's launch runs the body on its own arguments, as they are; the rows form's on its row's, read
// from the table before the body's wait (no kernel writes the table).
template <typename Rows, int P, int G, bool kRows>
__global__ void __launch_bounds__(kThreads) attention_split_keys_kernel(SplitArgs a) {
    if constexpr (kRows) split_keys<Rows, P, G, true>(split_row_args(a));
    else split_keys<Rows, P, G, false>(a);
}

// ---- launches: the kernel for (Rows, P = dims per lane, G = query heads per kv head, rounded up) ----

template <typename Rows, int P, int G>
void launch_split(dim3 grid, const SplitArgs& args, bool keys_across_lanes, cudaStream_t stream) {
    if (args.rows != nullptr)  // the rows form runs keys_across_lanes only (attention_cached_rows)
        launch_programmatic(attention_split_keys_kernel<Rows, P, G, true>, grid, dim3(kThreads), 0, stream,
                            "attention_split_rows", args);
    else if (keys_across_lanes)
        launch_programmatic(attention_split_keys_kernel<Rows, P, G, false>, grid, dim3(kThreads), 0, stream,
                            "attention_split", args);
    else
        launch_programmatic(attention_split_kernel<Rows, P, G>, grid, dim3(kThreads), 0, stream, "attention_split", args);
}

template <typename Rows, int P>
void launch_split(dim3 grid, const SplitArgs& args, int64_t group, bool keys, cudaStream_t stream) {
    if (group <= 1) launch_split<Rows, P, 1>(grid, args, keys, stream);
    else if (group <= 2) launch_split<Rows, P, 2>(grid, args, keys, stream);
    else if (group <= 4) launch_split<Rows, P, 4>(grid, args, keys, stream);
    else if (group <= 6) launch_split<Rows, P, 6>(grid, args, keys, stream);
    else launch_split<Rows, P, 8>(grid, args, keys, stream);
}

template <typename Rows>
void launch_split(dim3 grid, const SplitArgs& args, int64_t group, bool keys, cudaStream_t stream) {
    if (args.head_dim <= 32) launch_split<Rows, 1>(grid, args, group, keys, stream);
    else if (args.head_dim <= 64) launch_split<Rows, 2>(grid, args, group, keys, stream);
    else if (args.head_dim <= 128) launch_split<Rows, 4>(grid, args, group, keys, stream);
    else launch_split<Rows, 8>(grid, args, group, keys, stream);
}

}  // namespace deltabit::cuda::attention_split_detail
