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
    wait_for_predecessor();  // ops/programmatic_launch.cuh: nothing of the step is read before this
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
    wait_for_predecessor();  // ops/programmatic_launch.cuh: nothing of the step is read before this
    allow_dependents();
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
    int64_t n_tokens, n_head, head_dim, splits, gate_head_stride;
};

// Block (query head, 32 dims, token): lane = dim, warp w sums splits w, w + 8, ... (loads of several
// splits in flight per thread), then warp 0 adds the 8 warp sums in order — deterministic. One thread
// per dim walking all splits was latency-bound: 128 dependent-looking L2 round trips per thread.
constexpr int kCombineWarps = 8;
constexpr int kCombineThreads = 32 * kCombineWarps;

__global__ void __launch_bounds__(kCombineThreads) attention_combine_kernel(CombineArgs a) {
    wait_for_predecessor();  // ops/programmatic_launch.cuh: nothing of the step is read before this
    allow_dependents();
    __shared__ float s_weight[kMaxSplits];
    __shared__ float s_part[kCombineWarps][32];
    __shared__ float s_inv_l;
    const int64_t chunks = (a.head_dim + 31) / 32;
    const int64_t h = blockIdx.x / chunks, d = a.head_dim;
    const int lane = int(threadIdx.x) & 31, warp = int(threadIdx.x) >> 5;
    const int64_t i = (blockIdx.x % chunks) * 32 + lane;
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
        float o = 0.0f;
        if (i < d) {
#pragma unroll 4
            for (int64_t s = warp; s < active; s += kCombineWarps) o = fmaf(acc[s * d + i], s_weight[s], o);
        }
        s_part[warp][lane] = o;
        __syncthreads();
        if (warp == 0 && i < d) {
            o = 0.0f;
#pragma unroll
            for (int w = 0; w < kCombineWarps; ++w) o += s_part[w][lane];
            o *= s_inv_l;
            if (a.gate != nullptr) o *= sigmoid_f(a.gate[(t * a.n_head + h) * a.gate_head_stride + i]);
            a.out[(t * a.n_head + h) * d + i] = o;
        }
        __syncthreads();
    }
}

template <typename Rows, int P, int G>
void launch_split(dim3 grid, const SplitArgs& args, bool keys_across_lanes, cudaStream_t stream) {
    if (keys_across_lanes)
        launch_programmatic(attention_split_keys_kernel<Rows, P, G>, grid, dim3(kThreads), 0, stream, "attention_split", args);
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

// ---- prologue and cache stores ----

constexpr int kPrologueThreads = 256;  // >= kAttentionDecodeMaxHeadDim: one thread per dim

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
    int64_t n_head, n_kv_head, head_dim, q_head_stride, rope_dim;
    float rope_theta, rms_eps;
};

// Element `index` of position p's row (kivi4: its exact row; quantisation comes later, kivi_compress).
__device__ __forceinline__ void store_kv(const KvCacheView& cache, int64_t p, int64_t row_elems, int64_t index,
                                         float value) {
    const int64_t at = kv_data_row(cache, p) * row_elems + index;
    if (cache.element == KvElement::f16) static_cast<__half*>(cache.data)[at] = __float2half_rn(value);
    else static_cast<float*>(cache.data)[at] = value;
}

// Block b: query head b (b < H), key head b − H, or value head b − H − H_kv.
__global__ void __launch_bounds__(kPrologueThreads) attention_prologue_kernel(PrologueArgs a) {
    const int64_t b = blockIdx.x, d = a.head_dim, i = threadIdx.x;
    const bool is_q = b < a.n_head, is_k = !is_q && b < a.n_head + a.n_kv_head;
    // The norm weight is the model's, written by no kernel of the step: requested before the wait, so the
    // norm does not wait for it after the block sum.
    const float norm_w = (is_q || is_k) && i < d ? (is_q ? a.q_norm : a.k_norm)[i] : 0.0f;
    wait_for_predecessor();  // ops/programmatic_launch.cuh: nothing of the step is read before this
    allow_dependents();
    __shared__ float row[kAttentionDecodeMaxHeadDim];
    __shared__ float scratch[32];
    const int64_t position = *a.position;
    const float* src = is_q ? a.q_full + b * a.q_head_stride
                            : is_k ? a.k_raw + (b - a.n_head) * d : a.v_raw + (b - a.n_head - a.n_kv_head) * d;
    const float x = i < d ? src[i] : 0.0f;
    if (!is_q && !is_k) {
        if (i < d) store_kv(a.v_cache, position, a.n_kv_head * d, (b - a.n_head - a.n_kv_head) * d + i, x);
        return;
    }
    // rms_norm (as cuda::rms_norm: fp32 sum of squares, 1/sqrt(mean + eps), x·scale·w).
    const float scale = 1.0f / sqrtf(block_sum(x * x, scratch) / float(d) + a.rms_eps);
    const float y = i < d ? x * scale * norm_w : 0.0f;
    if (i < d) row[i] = y;
    __syncthreads();
    // rope_neox (as cuda::rope_neox: fp32 angle, cos/sin and the rotation in double, no contraction).
    float out = y;
    const int64_t half = a.rope_dim / 2;
    if (i < a.rope_dim) {
        const int64_t j = i < half ? i : i - half;
        const float exponent = float(2 * j) / float(a.rope_dim);
        const float inv_freq = 1.0f / float(pow(double(a.rope_theta), double(exponent)));
        const float angle = float(int32_t(position)) * inv_freq;
        double s, c;
        sincos(double(angle), &s, &c);
        const double x0 = row[j], x1 = row[j + half];
        out = i < half ? float(__dsub_rn(__dmul_rn(x0, c), __dmul_rn(x1, s)))
                       : float(__dadd_rn(__dmul_rn(x1, c), __dmul_rn(x0, s)));
    }
    if (i >= d) return;
    if (is_q) a.q_out[b * d + i] = out;
    else store_kv(a.k_cache, position, a.n_kv_head * d, (b - a.n_head) * d + i, out);
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
    check_dims(dims);
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

    const CombineArgs combine{args.part_acc, args.part_ml, gate,           n_past, out, dims.n_tokens,
                              dims.n_head,   dims.head_dim, splits, dims.gate_head_stride};
    const dim3 combine_grid(unsigned(dims.n_head * ((dims.head_dim + 31) / 32)),
                            unsigned(std::min(dims.n_tokens, kMaxGridZ)));
    launch_programmatic(attention_combine_kernel, combine_grid, dim3(kCombineThreads), 0, stream, "attention_combine",
                        combine);
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
                               cudaStream_t stream) {
    if (dims.head_dim <= 0 || dims.head_dim > kAttentionDecodeMaxHeadDim || dims.rope_dim % 2 != 0 ||
        dims.rope_dim > dims.head_dim || dims.rope_dim < 0) {
        fail_message("attention_decode_prologue (cuda): head_dim " + std::to_string(dims.head_dim) + ", rope_dim " +
                     std::to_string(dims.rope_dim) + " is not a supported shape");
    }
    const PrologueArgs args{q_full,       k_raw,          v_raw,          q_norm,         k_norm,
                            position,     k_cache,        v_cache,        q_out,          dims.n_head,
                            dims.n_kv_head, dims.head_dim, dims.q_head_stride, dims.rope_dim, dims.rope_theta,
                            dims.rms_eps};
    const int64_t blocks = dims.n_head + 2 * dims.n_kv_head;
    if (blocks <= 0) return;
    launch_programmatic(attention_prologue_kernel, dim3(unsigned(blocks)), dim3(kPrologueThreads), 0, stream,
                        "attention_prologue", args);
    cuda_check_launch("attention_decode_prologue");
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
