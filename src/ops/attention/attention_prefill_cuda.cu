// Flash-style causal GQA attention for prefill (contract: ops/attention/attention_cuda.h and ops/attention.h).
//
// A block owns one kv head and kAttentionQueryTile·G query rows at most kRows = 64 (G = n_head /
// n_kv_head query heads per kv head; the tile shrinks to 64 / G positions so that all G heads of a
// position share the block): row r is position t0 + r / G, head kv·G + r % G. It walks the visible
// keys in tiles of kKeys, each K and V tile read once for all its rows:
//   scores   S = (q · scale) Kᵀ, 4 rows × 2 keys per thread from shared memory (16-byte loads, rows
//            padded to ≡ 4 words mod 32 so that 8 lanes' loads fall in distinct banks);
//   softmax  4 lanes per row: tile max, m_new = max(m, tile max), p = e^{s − m_new}, l ← l·e^{m − m_new} + Σp;
//   P V      8 rows × 4·kChunks dims per thread, acc ← acc·e^{m − m_new} + Σ_j p_j v_j.
// out = acc / l (· sigmoid(gate)). All fp32, as the decode kernel (ops/attention/attention_cuda.cu). Keys and values
// are read as f32 or, from a half cache (attention_prefill_half_cache), as f16 widened exactly to f32 on
// their way into shared memory: the rest of the kernel is the same.
//
// Grid: (kv head, query tile) items, longest rows first (a tile late in the prompt sees the most keys),
// grid-stride, so any T and n_past run; nothing in a launch grows with the context but the loop.
#include <algorithm>
#include <cmath>
#include <string>

#include <cuda_fp16.h>

#include "ops/cuda/cuda_launch.h"
#include "ops/cuda/cuda_math.cuh"
#include "ops/attention/attention_cuda.h"

namespace deltabit::cuda {

namespace {

constexpr int kThreads = 256;
constexpr int kRows = 64;  // query rows (position × head) per block
constexpr int kKeys = 32;  // keys per tile
constexpr int kScoreRow = kKeys + 1;

struct PrefillArgs {
    const float* q;
    const void* k;  // float, or __half with kHalfKv
    const void* v;
    const float* gate;
    float* out;
    int64_t n_tokens, n_past, n_head, n_kv_head, head_dim;
    int group;      // query heads per kv head
    int positions;  // query positions per block = kRows / group
    int dim4;       // head_dim rounded up to 4
    int row;        // padded row of q and k tiles in floats (≡ 4 mod 32)
    float scale;
};

__host__ __device__ inline int padded_row(int64_t head_dim) { return int((head_dim + 31) / 32 * 32 + 4); }

size_t smem_bytes(int64_t head_dim) {
    const int row = padded_row(head_dim), dim4 = int((head_dim + 3) / 4 * 4);
    return size_t(kRows * row + kKeys * row + kKeys * dim4 + kRows * kScoreRow + 3 * kRows) * sizeof(float);
}

// Element i of a key or value array as f32; four of them from i (16-byte / 8-byte aligned) at once.
template <bool kHalfKv>
__device__ __forceinline__ float kv_at(const void* p, int64_t i) {
    if constexpr (kHalfKv) return __half2float(static_cast<const __half*>(p)[i]);
    else return static_cast<const float*>(p)[i];
}
template <bool kHalfKv>
__device__ __forceinline__ float4 kv_at4(const void* p, int64_t i) {
    if constexpr (kHalfKv) {
        const uint2 raw = *reinterpret_cast<const uint2*>(static_cast<const __half*>(p) + i);
        const float2 lo = __half22float2(*reinterpret_cast<const __half2*>(&raw.x));
        const float2 hi = __half22float2(*reinterpret_cast<const __half2*>(&raw.y));
        return make_float4(lo.x, lo.y, hi.x, hi.y);
    } else {
        return *reinterpret_cast<const float4*>(static_cast<const float*>(p) + i);
    }
}

// kChunks: float4 chunks of dims per lane in P V (dims 4·lane + 128·u), head_dim ≤ 128·kChunks.
template <int kChunks, bool kHalfKv>
__global__ void __launch_bounds__(kThreads) attention_prefill_kernel(PrefillArgs a) {
    extern __shared__ __align__(16) float smem[];
    float* q_s = smem;                       // [64][row]  q · scale, zero past head_dim and for idle rows
    float* k_s = q_s + kRows * a.row;        // [32][row]
    float* v_s = k_s + kKeys * a.row;        // [32][dim4]
    float* p_s = v_s + kKeys * a.dim4;       // [64][33]   scores, then probabilities
    float* m_s = p_s + kRows * kScoreRow;    // [64] running max
    float* l_s = m_s + kRows;                // [64] running denominator
    float* corr_s = l_s + kRows;             // [64] this tile's rescale e^{m_old − m_new}

    const int tid = int(threadIdx.x), lane = tid & 31, warp = tid >> 5;
    const int64_t d = a.head_dim;
    const int64_t q_tiles = (a.n_tokens + a.positions - 1) / a.positions;
    const int64_t n_keys_all = a.n_past + a.n_tokens;
    const bool vec_rows = (d & 3) == 0;  // rows of k, v 16-byte (half: 8-byte) aligned: 4-element loads

    for (int64_t item = blockIdx.x; item < a.n_kv_head * q_tiles; item += gridDim.x) {
        const int64_t kvh = item % a.n_kv_head;
        const int64_t t0 = (q_tiles - 1 - item / a.n_kv_head) * a.positions;
        const int64_t t_end = min(a.n_tokens, t0 + a.positions);
        const int64_t n_keys = a.n_past + t_end;  // keys any row of the block may see

        for (int e = tid; e < kRows * a.row; e += kThreads) {
            const int r = e / a.row, x = e % a.row;
            const int64_t t = t0 + r / a.group;
            const bool live = r < a.positions * a.group && t < t_end && x < d;
            const int64_t h = kvh * a.group + r % a.group;
            q_s[e] = live ? a.q[(t * a.n_head + h) * d + x] * a.scale : 0.0f;
        }
        if (tid < kRows) {
            m_s[tid] = -INFINITY;
            l_s[tid] = 0.0f;
        }
        // P V ownership: rows 8·warp .. +7, dims 4·lane + 128·u.
        float acc[8][kChunks][4];
#pragma unroll
        for (int r = 0; r < 8; ++r)
#pragma unroll
            for (int u = 0; u < kChunks; ++u)
#pragma unroll
                for (int e = 0; e < 4; ++e) acc[r][u][e] = 0.0f;

        for (int64_t key0 = 0; key0 < n_keys; key0 += kKeys) {
            __syncthreads();  // the previous tile's K, V and P are consumed
            for (int e = tid; e < kKeys * (a.dim4 / 4); e += kThreads) {
                const int j = e / (a.dim4 / 4), x = 4 * (e % (a.dim4 / 4));
                const int64_t p = key0 + j;
                float4 kv = make_float4(0, 0, 0, 0), vv = make_float4(0, 0, 0, 0);
                if (p < n_keys_all) {
                    const int64_t base = (p * a.n_kv_head + kvh) * d;
                    if (vec_rows) {
                        kv = kv_at4<kHalfKv>(a.k, base + x);
                        vv = kv_at4<kHalfKv>(a.v, base + x);
                    } else {
                        float kf[4], vf[4];
#pragma unroll
                        for (int c = 0; c < 4; ++c) {
                            kf[c] = x + c < d ? kv_at<kHalfKv>(a.k, base + x + c) : 0.0f;
                            vf[c] = x + c < d ? kv_at<kHalfKv>(a.v, base + x + c) : 0.0f;
                        }
                        kv = make_float4(kf[0], kf[1], kf[2], kf[3]);
                        vv = make_float4(vf[0], vf[1], vf[2], vf[3]);
                    }
                }
                *reinterpret_cast<float4*>(k_s + j * a.row + x) = kv;
                *reinterpret_cast<float4*>(v_s + j * a.dim4 + x) = vv;
            }
            __syncthreads();

            {  // scores: rows 4·(tid / 16) .. +3, keys tid % 16 and that + 16 (8 lanes' rows: distinct banks)
                const int r0 = 4 * (tid >> 4), j0 = tid & 15;
                float s[4][2] = {};
                for (int x = 0; x < a.dim4; x += 4) {
                    const float4 k0 = *reinterpret_cast<const float4*>(k_s + j0 * a.row + x);
                    const float4 k1 = *reinterpret_cast<const float4*>(k_s + (j0 + 16) * a.row + x);
#pragma unroll
                    for (int r = 0; r < 4; ++r) {
                        const float4 qv = *reinterpret_cast<const float4*>(q_s + (r0 + r) * a.row + x);
                        s[r][0] = fmaf(qv.x, k0.x, fmaf(qv.y, k0.y, fmaf(qv.z, k0.z, fmaf(qv.w, k0.w, s[r][0]))));
                        s[r][1] = fmaf(qv.x, k1.x, fmaf(qv.y, k1.y, fmaf(qv.z, k1.z, fmaf(qv.w, k1.w, s[r][1]))));
                    }
                }
#pragma unroll
                for (int r = 0; r < 4; ++r) {
                    // Causal mask: key p is visible to position n_past + t iff p ≤ n_past + t. Idle rows
                    // see every key (their scores are 0), so no row is ever wholly masked.
                    const int row = r0 + r;
                    const int64_t t = t0 + row / a.group;
                    const bool live = row < a.positions * a.group && t < t_end;
                    const int64_t last_visible = live ? a.n_past + t : n_keys - 1;
#pragma unroll
                    for (int c = 0; c < 2; ++c)
                        p_s[row * kScoreRow + j0 + 16 * c] = key0 + j0 + 16 * c <= last_visible ? s[r][c] : -INFINITY;
                }
            }
            __syncthreads();

            {  // online softmax: row tid / 4, keys 8·(tid % 4) .. +7
                const int row = tid >> 2, part = tid & 3;
                float* pr = p_s + row * kScoreRow + 8 * part;
                float tile_max = -INFINITY;
#pragma unroll
                for (int j = 0; j < 8; ++j) tile_max = fmaxf(tile_max, pr[j]);
                tile_max = fmaxf(tile_max, __shfl_xor_sync(kFullWarpMask, tile_max, 1));
                tile_max = fmaxf(tile_max, __shfl_xor_sync(kFullWarpMask, tile_max, 2));
                const float m_old = m_s[row];
                const float m_new = fmaxf(m_old, tile_max);  // finite: key 0 is visible to every row
                float sum = 0.0f;
#pragma unroll
                for (int j = 0; j < 8; ++j) {
                    const float p = expf(pr[j] - m_new);  // masked: e^{−inf} = 0
                    pr[j] = p;
                    sum += p;
                }
                sum += __shfl_xor_sync(kFullWarpMask, sum, 1);
                sum += __shfl_xor_sync(kFullWarpMask, sum, 2);
                __syncwarp();  // all four lanes have read m_old before lane 0 moves it
                if (part == 0) {
                    const float corr = expf(m_old - m_new);  // 0 on the first tile (m_old = −inf)
                    corr_s[row] = corr;
                    l_s[row] = fmaf(l_s[row], corr, sum);
                    m_s[row] = m_new;
                }
            }
            __syncthreads();

            // P V: rows 8·warp .. +7.
#pragma unroll
            for (int r = 0; r < 8; ++r) {
                const float corr = corr_s[8 * warp + r];
#pragma unroll
                for (int u = 0; u < kChunks; ++u)
#pragma unroll
                    for (int e = 0; e < 4; ++e) acc[r][u][e] *= corr;
            }
            const int keys_here = int(min(int64_t(kKeys), n_keys - key0));
            for (int j = 0; j < keys_here; ++j) {
                float4 vv[kChunks];
#pragma unroll
                for (int u = 0; u < kChunks; ++u) {
                    const int x = 4 * lane + 128 * u;
                    vv[u] = x < a.dim4 ? *reinterpret_cast<const float4*>(v_s + j * a.dim4 + x) : make_float4(0, 0, 0, 0);
                }
#pragma unroll
                for (int r = 0; r < 8; ++r) {
                    const float p = p_s[(8 * warp + r) * kScoreRow + j];
#pragma unroll
                    for (int u = 0; u < kChunks; ++u) {
                        acc[r][u][0] = fmaf(p, vv[u].x, acc[r][u][0]);
                        acc[r][u][1] = fmaf(p, vv[u].y, acc[r][u][1]);
                        acc[r][u][2] = fmaf(p, vv[u].z, acc[r][u][2]);
                        acc[r][u][3] = fmaf(p, vv[u].w, acc[r][u][3]);
                    }
                }
            }
        }
        __syncthreads();  // l_s is final

#pragma unroll
        for (int r = 0; r < 8; ++r) {
            const int row = 8 * warp + r;
            const int64_t t = t0 + row / a.group;
            if (row >= a.positions * a.group || t >= t_end) continue;
            const int64_t h = kvh * a.group + row % a.group;
            const float inv_l = 1.0f / l_s[row];
            float* o = a.out + (t * a.n_head + h) * d;
            const float* gate = a.gate != nullptr ? a.gate + (t * a.n_head + h) * d : nullptr;
#pragma unroll
            for (int u = 0; u < kChunks; ++u)
#pragma unroll
                for (int e = 0; e < 4; ++e) {
                    const int64_t x = 4 * lane + 128 * u + e;
                    if (x >= d) continue;
                    float value = acc[r][u][e] * inv_l;
                    if (gate != nullptr) value *= sigmoid_f(gate[x]);
                    o[x] = value;
                }
        }
        __syncthreads();  // l_s is read above; the next item resets it
    }
}

}  // namespace

namespace {

template <bool kHalfKv>
void run_attention_prefill(const float* q, const void* k, const void* v, const float* gate, const AttentionDims& dims,
                           float* out, cudaStream_t stream, int64_t max_blocks) {
    if (dims.head_dim <= 0 || dims.head_dim > kAttentionPrefillMaxHeadDim || dims.n_kv_head <= 0 ||
        dims.n_head % dims.n_kv_head != 0 || dims.n_head / dims.n_kv_head > kRows || dims.n_past < 0) {
        fail_message("attention_prefill (cuda): head_dim " + std::to_string(dims.head_dim) + " (at most " +
                     std::to_string(kAttentionPrefillMaxHeadDim) + "), n_head " + std::to_string(dims.n_head) +
                     ", n_kv_head " + std::to_string(dims.n_kv_head) + " (at most " + std::to_string(kRows) +
                     " query heads per kv head), n_past " + std::to_string(dims.n_past) + " is not a supported shape");
    }
    if (dims.n_tokens <= 0 || dims.n_head <= 0) return;
    static const bool attributes_set = [] {
        const int most = int(smem_bytes(kAttentionPrefillMaxHeadDim));
        cuda_check(cudaFuncSetAttribute(attention_prefill_kernel<1, kHalfKv>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                        most),
                   "attention prefill shared memory");
        cuda_check(cudaFuncSetAttribute(attention_prefill_kernel<2, kHalfKv>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                        most),
                   "attention prefill shared memory");
        return true;
    }();
    (void)attributes_set;
    PrefillArgs args{};
    args.q = q;
    args.k = k;
    args.v = v;
    args.gate = gate;
    args.out = out;
    args.n_tokens = dims.n_tokens;
    args.n_past = dims.n_past;
    args.n_head = dims.n_head;
    args.n_kv_head = dims.n_kv_head;
    args.head_dim = dims.head_dim;
    args.group = int(dims.n_head / dims.n_kv_head);
    args.positions = kRows / args.group;
    args.dim4 = int((dims.head_dim + 3) / 4 * 4);
    args.row = padded_row(dims.head_dim);
    args.scale = float(1.0 / std::sqrt(double(dims.head_dim)));
    const int64_t items = dims.n_kv_head * ((dims.n_tokens + args.positions - 1) / args.positions);
    const size_t smem = smem_bytes(dims.head_dim);
    const unsigned blocks = max_blocks > 0 ? unsigned(std::min(items, max_blocks)) : grid_blocks(items);
    if (dims.head_dim <= 128)
        attention_prefill_kernel<1, kHalfKv><<<blocks, kThreads, smem, stream>>>(args);
    else
        attention_prefill_kernel<2, kHalfKv><<<blocks, kThreads, smem, stream>>>(args);
    cuda_check_launch("attention_prefill_kernel");
}

}  // namespace

void attention_prefill(const float* q, const float* k, const float* v, const float* gate, const AttentionDims& dims,
                       float* out, cudaStream_t stream, int64_t max_blocks) {
    run_attention_prefill<false>(q, k, v, gate, dims, out, stream, max_blocks);
}

void attention_prefill_half_cache(const float* q, const uint16_t* k, const uint16_t* v, const float* gate,
                                  const AttentionDims& dims, float* out, cudaStream_t stream, int64_t max_blocks) {
    run_attention_prefill<true>(q, k, v, gate, dims, out, stream, max_blocks);
}

}  // namespace deltabit::cuda
