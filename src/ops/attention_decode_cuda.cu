// Split-K attention over a KV cache, its combine, and the decode step's attention prologue
// (ops/decode_cuda.h).
//
// Why split-K with all query heads per block: at batch 1 the attention of one layer is a stream over
// the K and V rows, ~2·n·H_kv·d elements, with almost no arithmetic. The one-block-per-(query, head)
// kernel (attention_cuda.cu) runs only n_head blocks and reads every kv row group = n_head/n_kv_head
// times; here block (token, kv head, split) reads a slice of rows once and serves the group's query
// heads from registers, and there are enough splits to fill the card at any depth.
//
// Inside a block, three variants (ops/decode_cuda.h, AttentionDecodeVariant); staged_tiles, the default
// for plain f16/f32 caches, lives in attention_split_staged_cuda.cu. Here: dims_across_lanes: 4 warps
// take interleaved pairs of keys; lane i holds dims [i·P, i·P + P) of q, k, v and the accumulators (16-
// or 32-byte vector loads when head_dim = 32·P); per key one partial dot per query head and a butterfly
// per head. keys_across_lanes: 4 warps take interleaved tiles of 32 keys, lane j scoring key j (see
// attention_split_keys_kernel). Both keep an online softmax in base 2 (q is prescaled by log2(e)/sqrt(d),
// so exp2f replaces expf), prefetch the rows they will read next into L2, merge the warps through
// shared memory and write one partial (m, l, acc[d]) per query head; the combine kernel merges the
// splits in a fixed order (deterministic). Both read rows through an accessor, the kernels' Rows
// parameter: PlainRows for an f32 or f16 cache, KiviRows for kivi4 (ops/kv_cuda.h: sinks and window
// rows exact, the middle dequantised as it is read).
#include <cuda_fp16.h>

#include <algorithm>
#include <cmath>
#include <string>

#include "backend/cuda_buffer.h"
#include "ops/activation_quant.cuh"
#include "ops/attention_split.cuh"
#include "ops/cuda_math.cuh"
#include "ops/decode_cuda.h"
#include "ops/kv_cuda.h"
#include "ops/programmatic_launch.cuh"

namespace deltabit::cuda {

namespace {

constexpr int kWarps = 4;
constexpr int kThreads = 32 * kWarps;
constexpr int kKeysPerStep = 2;  // loads of two keys in flight per warp before the first use
// With several tokens (the prompt path) the tokens themselves fill the grid.
constexpr int64_t kTargetBlocks = 512;
constexpr int64_t kMaxGridZ = 65535;
constexpr float kLog2e = 1.4426950408889634f;

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

// P = dims per lane (head_dim <= 32·P), G >= query heads per kv head.
template <typename Rows, int P, int G>
__global__ void __launch_bounds__(kThreads) attention_split_kernel(SplitArgs a) {
    const FoldedNorms norms = load_folded_norms(a);
    wait_for_predecessor();  // ops/programmatic_launch.cuh: nothing of the step is read before this
    allow_dependents();
    extern __shared__ __align__(16) float fold_rows[];  // folded_prologue_bytes, with a folded prologue
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
    const float* folded = a.prologue.q_full == nullptr
                              ? nullptr
                              : fold_prologue(a, kh, group, SplitSpan{n_past, per_split, p_begin}, norms, fold_rows);
    const Rows keys(a.k, kh, d, row_stride, n_past), values(a.v, kh, d, row_stride, n_past);

    for (int64_t t = blockIdx.z; t < a.n_tokens; t += gridDim.z) {
        const int64_t visible = n_past + t + 1;
        const int64_t p_end = p_begin + per_split < visible ? p_begin + per_split : visible;
        float q[G][P], acc[G][P], m[G], l[G];
#pragma unroll
        for (int g = 0; g < G; ++g) {
            if (g < group) load_row<P>(query_row(a, folded, t, kh, group, g), lane, d, full, q[g]);
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
        // Merge the warps: M = max m_w; acc = Σ 2^(m_w − M) acc_w; a warp (or the whole split, for an early
        // token of a prompt chunk) that saw no key has m = −inf and weighs 0.
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
    __device__ void load8(int64_t p, int64_t c, float (&out)[8]) const { ::deltabit::cuda::load8(row(p) + c, out); }
    __device__ float load1(int64_t p, int64_t c) const { return ::deltabit::cuda::load1(row(p) + c); }
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
        if (is_exact(p)) ::deltabit::cuda::load8(exact_row(p) + c, out);
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

// keys_across_lanes (ops/decode_cuda.h): per tile of 32 keys, lane j scores key j against every query
// head of the group (q from shared memory, a sequential fp32 sum over the dims), the warp updates one
// online softmax per head (a max butterfly per head per tile; the denominators stay per lane until the
// end), then lanes go back to owning dims [lane·P, lane·P + P) for the weighted sum of the tile's V rows.
template <typename Rows, int P, int G>
__global__ void __launch_bounds__(kThreads) attention_split_keys_kernel(SplitArgs a) {
    const FoldedNorms norms = load_folded_norms(a);
    wait_for_predecessor();  // ops/programmatic_launch.cuh: nothing of the step is read before this
    allow_dependents();
    extern __shared__ __align__(16) float fold_rows[];  // folded_prologue_bytes, with a folded prologue
    constexpr int kDims = 32 * P;
    __shared__ __align__(16) float s_q[G][kDims];
    __shared__ float s_m[kWarps][G], s_l[kWarps][G];
    __shared__ float s_acc[kWarps][G][kDims];
    const int lane = int(threadIdx.x) & 31, warp = int(threadIdx.x) >> 5;
    const int64_t split = blockIdx.x, kh = blockIdx.y;
    const int64_t d = a.head_dim, group = a.n_head / a.n_kv_head, row_stride = a.n_kv_head * d;
    const bool full = d == 32 * P;
    const bool vector_rows = d % 8 == 0;  // every row then starts 16-byte aligned (f16) or 32-byte (f32)
    const int64_t n_past = *a.n_past;
    const int64_t per_split = keys_per_split(n_past + a.n_tokens, a.splits);
    const int64_t p_begin = split * per_split;
    if (p_begin >= n_past + a.n_tokens) return;
    const float* folded = a.prologue.q_full == nullptr
                              ? nullptr
                              : fold_prologue(a, kh, group, SplitSpan{n_past, per_split, p_begin}, norms, fold_rows);
    const Rows keys(a.k, kh, d, row_stride, n_past), values(a.v, kh, d, row_stride, n_past);

    for (int64_t t = blockIdx.z; t < a.n_tokens; t += gridDim.z) {
        const int64_t visible = n_past + t + 1;
        const int64_t p_end = p_begin + per_split < visible ? p_begin + per_split : visible;
        for (int idx = int(threadIdx.x); idx < G * kDims; idx += kThreads) {
            const int g = idx / kDims, i = idx % kDims;
            s_q[g][i] = g < group && i < d ? query_row(a, folded, t, kh, group, g)[i] * a.score_scale : 0.0f;
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
        for (int64_t idx = threadIdx.x; idx < int64_t(G) * kDims; idx += kThreads) {
            const int g = int(idx / kDims);
            const int64_t i = idx % kDims;
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
        __syncthreads();  // s_q and the shared partials are rewritten for the next token
    }
}

struct CombineArgs {
    const float* part_acc;
    const float* part_ml;
    const float* gate;
    const int32_t* n_past;
    float* out;
    int8_t* out_q;  // with AttentionDecodeFolds::out_quantized: out's int8 codes and their group meta
    ActivationGroupMeta* out_meta;
    int64_t n_tokens, n_head, head_dim, splits, gate_head_stride;
};

// Block (query head, Chunks·32 dims, token): lane = dim within each chunk of 32, warp w sums splits w,
// w + 8, ... (loads of several splits in flight per thread), then warp 0 adds the 8 warp sums in order —
// deterministic, and each dim's arithmetic the same for any Chunks. One thread per dim walking all splits
// was latency-bound: 128 dependent-looking L2 round trips per thread. Chunks = 4 (a group of 128, inside
// one head) when the block also quantises its dims for the output matmul: quantize_group_by_warp on the
// values it stores, so the codes are quantize_activations(out)'s bit for bit.
constexpr int kCombineWarps = 8;
constexpr int kCombineThreads = 32 * kCombineWarps;
constexpr int kQuantizingChunks = int(kActivationGroup / 32);

template <int Chunks>
__global__ void __launch_bounds__(kCombineThreads) attention_combine_kernel(CombineArgs a) {
    wait_for_predecessor();  // ops/programmatic_launch.cuh: nothing of the step is read before this
    allow_dependents();
    __shared__ float s_weight[kMaxSplits];
    __shared__ float s_part[kCombineWarps][Chunks][32];
    __shared__ __align__(16) float s_out[Chunks * 32];
    __shared__ float s_inv_l;
    constexpr int64_t kSpan = 32 * Chunks;
    const int64_t per_head = (a.head_dim + kSpan - 1) / kSpan;
    const int64_t h = blockIdx.x / per_head, d = a.head_dim;
    const int lane = int(threadIdx.x) & 31, warp = int(threadIdx.x) >> 5;
    const int64_t first = (blockIdx.x % per_head) * kSpan;
    const int64_t n_past = *a.n_past;
    const int64_t total = n_past + a.n_tokens;
    const int64_t per_split = keys_per_split(total, a.splits);
    const int64_t active = (total + per_split - 1) / per_split;
    for (int64_t t = blockIdx.y; t < a.n_tokens; t += gridDim.y) {
        const float* ml = a.part_ml + (t * a.n_head + h) * a.splits * 2;
        if (warp == 0) {
            // Split 0 always holds key 0, visible to every token, so the max is finite.
            float m_all = -INFINITY;
            for (int64_t s = lane; s < active; s += 32) m_all = fmaxf(m_all, ml[2 * s]);
#pragma unroll
            for (int offset = 16; offset > 0; offset >>= 1)
                m_all = fmaxf(m_all, __shfl_xor_sync(kFullWarpMask, m_all, offset));
            float l_part = 0.0f;
            for (int64_t s = lane; s < active; s += 32) {
                const float w = exp2f(ml[2 * s] - m_all);  // 0 for a split that saw no key (m = −inf)
                s_weight[s] = w;
                l_part = fmaf(ml[2 * s + 1], w, l_part);
            }
            const float l_all = warp_sum(l_part);
            if (lane == 0) s_inv_l = 1.0f / l_all;
        }
        __syncthreads();
        const float* acc = a.part_acc + (t * a.n_head + h) * a.splits * d;
        float o[Chunks];
#pragma unroll
        for (int c = 0; c < Chunks; ++c) o[c] = 0.0f;
#pragma unroll 4
        for (int64_t s = warp; s < active; s += kCombineWarps) {
#pragma unroll
            for (int c = 0; c < Chunks; ++c) {
                const int64_t i = first + 32 * c + lane;
                if (i < d) o[c] = fmaf(acc[s * d + i], s_weight[s], o[c]);
            }
        }
#pragma unroll
        for (int c = 0; c < Chunks; ++c) s_part[warp][c][lane] = o[c];
        __syncthreads();
        if (warp == 0) {
#pragma unroll
            for (int c = 0; c < Chunks; ++c) {
                const int64_t i = first + 32 * c + lane;
                if (i >= d) continue;
                float y = 0.0f;
#pragma unroll
                for (int w = 0; w < kCombineWarps; ++w) y += s_part[w][c][lane];
                y *= s_inv_l;
                if (a.gate != nullptr) y *= sigmoid_f(a.gate[(t * a.n_head + h) * a.gate_head_stride + i]);
                a.out[(t * a.n_head + h) * d + i] = y;
                s_out[32 * c + lane] = y;
            }
            if (a.out_q != nullptr) {  // Chunks == kQuantizingChunks, one token, head_dim a multiple of 128
                __syncwarp();
                const float4 f = reinterpret_cast<const float4*>(s_out)[lane];
                const float v[4] = {f.x, f.y, f.z, f.w};
                const int64_t g = (h * d + first) / kActivationGroup;
                const ActivationGroupMeta meta = quantize_group_by_warp(v, lane, a.out_q + g * kActivationGroup);
                if (lane == 0) a.out_meta[g] = meta;
            }
        }
        __syncthreads();
    }
}

// The dynamic shared memory is the folded prologue's rows (none without one); the kernel's limit is set
// for G heads of 32·P dims whether or not this launch folds (as launch_split_kernel does for the staged
// kernels: a prompt-path launch must not lower it under a captured decode graph's).
template <typename Kernel>
void launch_register_split(Kernel kernel, dim3 grid, int64_t G, int64_t P, const SplitArgs& args, cudaStream_t stream) {
    const size_t smem =
        args.prologue.q_full == nullptr ? 0 : folded_prologue_bytes(args.n_head / args.n_kv_head, args.head_dim);
    cuda_check(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                    int(folded_prologue_bytes(G, 32 * P))),
               "attention_split shared memory");
    launch_programmatic(kernel, grid, dim3(kThreads), smem, stream, "attention_split", args);
}

template <typename Rows, int P, int G>
void launch_split(dim3 grid, const SplitArgs& args, bool keys_across_lanes, cudaStream_t stream) {
    if (keys_across_lanes) launch_register_split(attention_split_keys_kernel<Rows, P, G>, grid, G, P, args, stream);
    else launch_register_split(attention_split_kernel<Rows, P, G>, grid, G, P, args, stream);
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

// ---- prologue and cache stores ----

struct PrologueArgs {
    const float* q_full;
    const float* k_raw;
    const float* v_raw;
    const float* q_norm;
    const float* k_norm;
    const int32_t* position;
    KvCacheView k_cache;
    KvCacheView v_cache;
    float* q_out;
    int64_t n_head, n_kv_head, q_head_stride;
    PrologueShape shape;
};

// Block b of one warp: query head b (b < H), key head b − H, or value head b − H − H_kv.
__global__ void __launch_bounds__(32) attention_prologue_kernel(PrologueArgs a) {
    const int64_t b = blockIdx.x, d = a.shape.head_dim;
    const int lane = int(threadIdx.x);
    const bool is_q = b < a.n_head, is_k = !is_q && b < a.n_head + a.n_kv_head;
    // The norm weights are the model's, written by no kernel of the step: requested before the wait, so the
    // norm does not wait for them after its sum.
    const PrologueNormLanes norm_w = load_norm_lanes(is_q ? a.q_norm : is_k ? a.k_norm : nullptr, d, lane);
    wait_for_predecessor();  // ops/programmatic_launch.cuh: nothing of the step is read before this
    allow_dependents();
    __shared__ float row[kAttentionDecodeMaxHeadDim];
    const int64_t position = *a.position, row_elems = a.n_kv_head * d;
    if (!is_q && !is_k) {
        const int64_t h = b - a.n_head - a.n_kv_head;
        for (int64_t i = lane; i < d; i += 32) store_kv(a.v_cache, position, row_elems, h * d + i, a.v_raw[h * d + i]);
        return;
    }
    const float* src = is_q ? a.q_full + b * a.q_head_stride : a.k_raw + (b - a.n_head) * d;
    norm_rope_head(src, norm_w, a.shape, position, row, lane);
    for (int64_t i = lane; i < d; i += 32) {
        if (is_q) a.q_out[b * d + i] = row[i];
        else store_kv(a.k_cache, position, row_elems, (b - a.n_head) * d + i, row[i]);
    }
}

// Thread j: dim pair j's cos and sin at *position (rope_decode_table).
__global__ void rope_table_kernel(const int32_t* position, int64_t pairs, int64_t rope_dim, float rope_theta,
                                  double2* table) {
    wait_for_predecessor();  // ops/programmatic_launch.cuh: the previous step's readers are done
    allow_dependents();
    const int64_t j = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
    if (j < pairs) table[j] = rope_angle(j, rope_dim, rope_theta, *position);
}

__global__ void kv_store_kernel(const float* rows, int64_t n, int64_t row_elems, const int32_t* n_past,
                                KvCacheView cache) {
    const int64_t first = *n_past;
    for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x)
        store_kv(cache, first + i / row_elems, row_elems, i % row_elems, rows[i]);
}

void check_dims(const CachedAttentionDims& d) {
    if (d.head_dim <= 0 || d.head_dim > kAttentionDecodeMaxHeadDim || d.n_kv_head <= 0 || d.n_head <= 0 ||
        d.n_head % d.n_kv_head != 0 || d.n_head / d.n_kv_head > kAttentionDecodeMaxGroup || d.n_tokens < 0 ||
        d.max_keys < d.n_tokens) {
        fail_message("attention_cached (cuda): head_dim " + std::to_string(d.head_dim) + " (at most " +
                     std::to_string(kAttentionDecodeMaxHeadDim) + "), heads " + std::to_string(d.n_head) + "/" +
                     std::to_string(d.n_kv_head) + " (at most " + std::to_string(kAttentionDecodeMaxGroup) +
                     " per kv head), " + std::to_string(d.n_tokens) + " tokens, max_keys " +
                     std::to_string(d.max_keys) + " is not a supported shape");
    }
}

void check_prologue_dims(const AttentionPrologueDims& dims, const char* who) {
    if (dims.head_dim <= 0 || dims.head_dim > kAttentionDecodeMaxHeadDim || dims.rope_dim % 2 != 0 ||
        dims.rope_dim > dims.head_dim || dims.rope_dim < 0 || dims.q_head_stride < dims.head_dim) {
        fail_message(std::string(who) + " (cuda): head_dim " + std::to_string(dims.head_dim) + ", rope_dim " +
                     std::to_string(dims.rope_dim) + ", q head stride " + std::to_string(dims.q_head_stride) +
                     " is not a supported shape");
    }
}

PrologueShape prologue_shape(const AttentionPrologueDims& dims, const double* rope_table) {
    return {dims.head_dim, dims.rope_dim, dims.rope_theta, dims.rms_eps, rope_table};
}

// The folds' requirements (ops/decode_cuda.h, AttentionDecodeFolds), before anything is launched.
void check_folds(const float* q, const CachedAttentionDims& dims, const AttentionDecodeFolds& folds) {
    const std::string who = "attention_cached (cuda): ";
    if (folds.prologue != nullptr) {
        const AttentionPrologueDims& p = folds.prologue->dims;
        check_prologue_dims(p, "attention_cached with a folded prologue");
        if (dims.n_tokens != 1 || q != nullptr || p.n_head != dims.n_head || p.n_kv_head != dims.n_kv_head ||
            p.head_dim != dims.head_dim) {
            fail_message(who + "a folded prologue needs one token (got " + std::to_string(dims.n_tokens) +
                         "), q = nullptr (the split kernels make it) and prologue dims equal to the attention's (" +
                         std::to_string(p.n_head) + "/" + std::to_string(p.n_kv_head) + " heads of " +
                         std::to_string(p.head_dim) + " vs " + std::to_string(dims.n_head) + "/" +
                         std::to_string(dims.n_kv_head) + " of " + std::to_string(dims.head_dim) + ")");
        }
    } else if (q == nullptr) {
        fail_message(who + "q is nullptr and no prologue is folded in to make it");
    }
    if (folds.out_quantized != nullptr) {
        require_plain_view(*folds.out_quantized, "attention_cached (cuda)");
        if (dims.n_tokens != 1 || dims.head_dim % kActivationGroup != 0 ||
            folds.out_quantized->cols != dims.n_head * dims.head_dim) {
            fail_message(who + "a quantised output needs one token (got " + std::to_string(dims.n_tokens) +
                         "), head_dim a multiple of " + std::to_string(kActivationGroup) + " (got " +
                         std::to_string(dims.head_dim) + ") and a view of " +
                         std::to_string(dims.n_head * dims.head_dim) + " inputs (got " +
                         std::to_string(folds.out_quantized->cols) + ")");
        }
    }
}

}  // namespace

AttentionDecodeVariant attention_decode_variant_run(const CachedAttentionDims& dims, KvElement element) {
    if (dims.variant != AttentionDecodeVariant::staged_tiles) return dims.variant;
    const int64_t group = dims.n_kv_head > 0 ? dims.n_head / dims.n_kv_head : 0;
    return staged_attention_supports(element, dims.head_dim, group) ? AttentionDecodeVariant::staged_tiles
                                                                    : AttentionDecodeVariant::keys_across_lanes;
}

int64_t attention_decode_splits(const CachedAttentionDims& dims) {
    const int64_t by_length = (std::max<int64_t>(dims.max_keys, 1) + kMinKeysPerSplit - 1) / kMinKeysPerSplit;
    int64_t splits = std::min(kMaxSplits, by_length);
    if (dims.n_tokens > 1) {
        const int64_t per_token = dims.n_tokens * dims.n_kv_head;
        splits = std::min(splits, std::max<int64_t>(1, (kTargetBlocks + per_token - 1) / per_token));
    }
    return splits;
}

size_t attention_decode_scratch_floats(const CachedAttentionDims& dims) {
    return size_t(dims.n_tokens * dims.n_head * attention_decode_splits(dims) * (dims.head_dim + 2));
}

void attention_cached(const float* q, const KvCacheView& k_cache, const KvCacheView& v_cache, const float* gate,
                      const int32_t* n_past, const CachedAttentionDims& dims, float* scratch, float* out,
                      cudaStream_t stream) {
    attention_cached(q, k_cache, v_cache, gate, n_past, dims, scratch, out, stream, AttentionDecodeFolds{});
}

void attention_cached(const float* q, const KvCacheView& k_cache, const KvCacheView& v_cache, const float* gate,
                      const int32_t* n_past, const CachedAttentionDims& dims, float* scratch, float* out,
                      cudaStream_t stream, const AttentionDecodeFolds& folds) {
    check_dims(dims);
    check_folds(q, dims, folds);
    if (k_cache.element != v_cache.element)
        fail_message("attention_cached (cuda): keys and values are stored in different formats");
    if (k_cache.element == KvElement::kivi4 && (dims.head_dim % 8 != 0 || k_cache.kivi.ring_rows <= 0))
        fail_message("attention_cached (cuda): a kivi4 cache needs head_dim a multiple of 8 and a ring of exact rows");
    if (dims.n_tokens == 0) return;
    const int64_t splits = attention_decode_splits(dims);
    SplitArgs args{};
    args.q = q;
    args.k = k_cache;
    args.v = v_cache;
    args.n_past = n_past;
    args.part_acc = scratch;
    args.part_ml = scratch + size_t(dims.n_tokens * dims.n_head * splits * dims.head_dim);
    args.n_tokens = dims.n_tokens;
    args.n_head = dims.n_head;
    args.n_kv_head = dims.n_kv_head;
    args.head_dim = dims.head_dim;
    args.splits = splits;
    args.score_scale = float(double(kLog2e) / std::sqrt(double(dims.head_dim)));
    if (const AttentionPrologueInputs* p = folds.prologue) {
        args.prologue = FoldedPrologue{p->q_full,           p->k_raw, p->v_raw, p->q_norm, p->k_norm,
                                       p->dims.q_head_stride, prologue_shape(p->dims, p->rope_table)};
    }
    const dim3 grid(unsigned(splits), unsigned(dims.n_kv_head), unsigned(std::min(dims.n_tokens, kMaxGridZ)));
    const int64_t group = dims.n_head / dims.n_kv_head;
    // staged_tiles where it supports the format and head_dim, else keys_across_lanes (ops/decode_cuda.h).
    const bool staged = dims.variant == AttentionDecodeVariant::staged_tiles &&
                        launch_attention_split_staged(grid, args, k_cache.element, stream);
    const bool keys = dims.variant != AttentionDecodeVariant::dims_across_lanes;
    if (!staged) switch (k_cache.element) {
        case KvElement::f32: launch_split<PlainRows<float>>(grid, args, group, keys, stream); break;
        case KvElement::f16: launch_split<PlainRows<__half>>(grid, args, group, keys, stream); break;
        case KvElement::kivi4: launch_split<KiviRows>(grid, args, group, keys, stream); break;
    }
    cuda_check_launch("attention_split");

    const QuantizedActivationsView* yq = folds.out_quantized;
    const CombineArgs combine{args.part_acc,
                              args.part_ml,
                              gate,
                              n_past,
                              out,
                              yq != nullptr ? yq->q : nullptr,
                              yq != nullptr ? yq->meta : nullptr,
                              dims.n_tokens,
                              dims.n_head,
                              dims.head_dim,
                              splits,
                              dims.gate_head_stride};
    const int64_t chunks = yq != nullptr ? kQuantizingChunks : 1;
    const dim3 combine_grid(unsigned(dims.n_head * ((dims.head_dim + 32 * chunks - 1) / (32 * chunks))),
                            unsigned(std::min(dims.n_tokens, kMaxGridZ)));
    if (yq != nullptr)
        launch_programmatic(attention_combine_kernel<kQuantizingChunks>, combine_grid, dim3(kCombineThreads), 0, stream,
                            "attention_combine", combine);
    else
        launch_programmatic(attention_combine_kernel<1>, combine_grid, dim3(kCombineThreads), 0, stream,
                            "attention_combine", combine);
}

void attention_cached(const float* q, const void* k_cache, const void* v_cache, KvElement kv, const float* gate,
                      const int32_t* n_past, const CachedAttentionDims& dims, float* scratch, float* out,
                      cudaStream_t stream) {
    if (kv == KvElement::kivi4) fail_message("attention_cached (cuda): a kivi4 cache needs a KvCacheView");
    attention_cached(q, plain_kv_view(kv, const_cast<void*>(k_cache)), plain_kv_view(kv, const_cast<void*>(v_cache)),
                     gate, n_past, dims, scratch, out, stream);
}

void attention_decode_prologue(const float* q_full, const float* k_raw, const float* v_raw, const float* q_norm,
                               const float* k_norm, const int32_t* position, const AttentionPrologueDims& dims,
                               KvElement kv, void* k_cache, void* v_cache, float* q_out, cudaStream_t stream) {
    if (kv == KvElement::kivi4) fail_message("attention_decode_prologue (cuda): a kivi4 cache needs a KvCacheView");
    attention_decode_prologue(q_full, k_raw, v_raw, q_norm, k_norm, position, dims, plain_kv_view(kv, k_cache),
                              plain_kv_view(kv, v_cache), q_out, stream);
}

void attention_decode_prologue(const float* q_full, const float* k_raw, const float* v_raw, const float* q_norm,
                               const float* k_norm, const int32_t* position, const AttentionPrologueDims& dims,
                               const KvCacheView& k_cache, const KvCacheView& v_cache, float* q_out,
                               cudaStream_t stream, const double* rope_table) {
    check_prologue_dims(dims, "attention_decode_prologue");
    const PrologueArgs args{q_full,  k_raw,   v_raw, q_norm, k_norm, position, k_cache, v_cache, q_out, dims.n_head,
                            dims.n_kv_head, dims.q_head_stride, prologue_shape(dims, rope_table)};
    const int64_t blocks = dims.n_head + 2 * dims.n_kv_head;
    if (blocks <= 0) return;
    launch_programmatic(attention_prologue_kernel, dim3(unsigned(blocks)), dim3(32), 0, stream, "attention_prologue",
                        args);
    cuda_check_launch("attention_decode_prologue");
}

void rope_decode_table(const int32_t* position, int64_t rope_dim, float rope_theta, double* table, cudaStream_t stream) {
    if (rope_dim < 0 || rope_dim % 2 != 0 || rope_dim > kAttentionDecodeMaxHeadDim)
        fail_message("rope_decode_table (cuda): rope_dim " + std::to_string(rope_dim) + " is not a supported shape");
    const int64_t pairs = rope_dim / 2;
    if (pairs == 0) return;
    launch_programmatic(rope_table_kernel, dim3(1), dim3(unsigned(pairs)), 0, stream, "rope_table", position, pairs,
                        rope_dim, rope_theta, reinterpret_cast<double2*>(table));
    cuda_check_launch("rope_decode_table");
}

void kv_store(const float* rows, int64_t n_tokens, int64_t row_elems, const int32_t* n_past, KvElement kv, void* cache,
              cudaStream_t stream) {
    if (kv == KvElement::kivi4) fail_message("kv_store (cuda): a kivi4 cache needs a KvCacheView");
    kv_store(rows, n_tokens, row_elems, n_past, plain_kv_view(kv, cache), stream);
}

void kv_store(const float* rows, int64_t n_tokens, int64_t row_elems, const int32_t* n_past, const KvCacheView& cache,
              cudaStream_t stream) {
    const int64_t n = n_tokens * row_elems;
    if (n <= 0) return;
    constexpr int kThreads256 = 256;
    const int64_t blocks = std::min<int64_t>((n + kThreads256 - 1) / kThreads256, 65535);
    kv_store_kernel<<<unsigned(blocks), kThreads256, 0, stream>>>(rows, n, row_elems, n_past, cache);
    cuda_check_launch("kv_store");
}

}  // namespace deltabit::cuda
