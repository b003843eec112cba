// Flash-style GQA attention where each query row sees its own contiguous span of keys (contract:
// ops/attention/attention_cuda.h attention_spans, math: ops/attention_spans.h). DiffusionGemma's two
// masks are spans: the encoder's causal sliding window and the decoder's cache ++ canvas with no mask.
//
// The prompt kernel's walk (attention_prefill_cuda.cu), with the causal rule replaced by the span rule
// and head_dim up to 512 (the model's full layers): a block owns one kv head and kRows query rows (row r
// is position t0 + r / G, head kv·G + r % G, G = n_head / n_kv_head) and walks the keys in tiles of
// kKeys from the smallest span begin of its rows to the largest span end:
//   scores   S = (q · scale) Kᵀ from shared memory, kRows/16 rows × 2 keys per thread;
//   softmax  256/kRows lanes per row: tile max, m_new = max(m, tile max), p = e^{s − m_new},
//            l ← l·e^{m − m_new} + Σp — a row whose span starts past this tile has seen nothing yet
//            (m_new = −inf), and keeps p = 0, l = 0;
//   P V      kRows/8 rows × 4·kChunks dims per thread, acc ← acc·e^{m − m_new} + Σ_j p_j v_j.
// out = acc / l. All fp32. kRows = 64 for head_dim ≤ 256, 32 for head_dim ≤ 512 (the 512-wide q, K and
// V tiles of 64 rows would not fit in shared memory).
//
// Grid: (kv head, query tile) items, grid-stride, so any length runs.
#include <algorithm>
#include <cmath>
#include <string>

#include "ops/attention/attention_cuda.h"
#include "ops/cuda/cuda_launch.h"
#include "ops/cuda/cuda_math.cuh"

namespace deltabit::cuda {

namespace {

constexpr int kThreads = 256;
constexpr int kKeys = 32;  // keys per tile
constexpr int kScoreRow = kKeys + 1;

struct SpanArgs {
    const float* q;
    const float* k;
    const float* v;
    const int64_t* key_begin;
    const int64_t* key_end;
    float* out;
    int64_t n_queries, n_keys, n_head, n_kv_head, head_dim;
    int group;      // query heads per kv head
    int positions;  // query positions per block = rows / group
    int dim4;       // head_dim rounded up to 4
    int row;        // padded row of q and k tiles in floats (≡ 4 mod 32: 8 lanes' 16-byte loads in distinct banks)
    float scale;
};

inline int padded_row(int64_t head_dim) { return int((head_dim + 31) / 32 * 32 + 4); }

size_t smem_bytes(int rows, int64_t head_dim) {
    const int row = padded_row(head_dim), dim4 = int((head_dim + 3) / 4 * 4);
    return size_t(rows * row + kKeys * row + kKeys * dim4 + rows * kScoreRow + 3 * rows + 4) * sizeof(float);
}

// kRows: query rows per block (64 or 32); kChunks: float4 chunks of dims per lane in P V (dims
// 4·lane + 128·u), head_dim ≤ 128·kChunks.
template <int kRows, int kChunks>
__global__ void __launch_bounds__(kThreads) attention_spans_kernel(SpanArgs a) {
    constexpr int kScoreRows = kRows / 16;         // rows per thread in the scores
    constexpr int kLanesPerRow = kThreads / kRows;  // lanes per row in the softmax
    constexpr int kKeysPerLane = kKeys / kLanesPerRow;
    constexpr int kRowsPerWarp = kRows / 8;         // rows per warp in P V
    extern __shared__ __align__(16) float smem[];
    float* q_s = smem;                       // [kRows][row]  q · scale, zero past head_dim and for idle rows
    float* k_s = q_s + kRows * a.row;        // [32][row]
    float* v_s = k_s + kKeys * a.row;        // [32][dim4]
    float* p_s = v_s + kKeys * a.dim4;       // [kRows][33]   scores, then probabilities
    float* m_s = p_s + kRows * kScoreRow;    // [kRows] running max
    float* l_s = m_s + kRows;                // [kRows] running denominator
    float* corr_s = l_s + kRows;             // [kRows] this tile's rescale e^{m_old − m_new}
    int64_t* range_s = reinterpret_cast<int64_t*>(corr_s + kRows);  // [2] the block's key range (8-aligned: 3·kRows even)

    const int tid = int(threadIdx.x), lane = tid & 31, warp = tid >> 5;
    const int64_t d = a.head_dim;
    const int64_t q_tiles = (a.n_queries + a.positions - 1) / a.positions;
    const bool vec_rows = (d & 3) == 0;  // rows of k, v 16-byte aligned: float4 loads

    for (int64_t item = blockIdx.x; item < a.n_kv_head * q_tiles; item += gridDim.x) {
        const int64_t kvh = item % a.n_kv_head;
        const int64_t t0 = (item / a.n_kv_head) * a.positions;
        const int64_t t_end = min(a.n_queries, t0 + a.positions);

        if (tid == 0) {  // the keys any row of the block may see: [lo, hi)
            int64_t lo = a.key_begin[t0], hi = a.key_end[t0];
            for (int64_t t = t0 + 1; t < t_end; ++t) {
                lo = min(lo, a.key_begin[t]);
                hi = max(hi, a.key_end[t]);
            }
            range_s[0] = max(lo, int64_t(0));
            range_s[1] = min(hi, a.n_keys);
        }
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
        __syncthreads();
        const int64_t lo = range_s[0], hi = range_s[1];

        // This thread's score rows: their spans (idle rows see the whole block range: scores 0, never read).
        const int r0 = kScoreRows * (tid >> 4), j0 = tid & 15;
        int64_t row_begin[kScoreRows], row_end[kScoreRows];
#pragma unroll
        for (int r = 0; r < kScoreRows; ++r) {
            const int row = r0 + r;
            const int64_t t = t0 + row / a.group;
            const bool live = row < a.positions * a.group && t < t_end;
            row_begin[r] = live ? a.key_begin[t] : lo;
            row_end[r] = live ? a.key_end[t] : hi;
        }

        float acc[kRowsPerWarp][kChunks][4];
#pragma unroll
        for (int r = 0; r < kRowsPerWarp; ++r)
#pragma unroll
            for (int u = 0; u < kChunks; ++u)
#pragma unroll
                for (int e = 0; e < 4; ++e) acc[r][u][e] = 0.0f;

        for (int64_t key0 = lo; key0 < hi; key0 += kKeys) {
            __syncthreads();  // the previous tile's K, V and P are consumed
            for (int e = tid; e < kKeys * (a.dim4 / 4); e += kThreads) {
                const int j = e / (a.dim4 / 4), x = 4 * (e % (a.dim4 / 4));
                const int64_t p = key0 + j;
                float4 kv = make_float4(0, 0, 0, 0), vv = make_float4(0, 0, 0, 0);
                if (p < hi) {
                    const int64_t base = (p * a.n_kv_head + kvh) * d;
                    if (vec_rows) {
                        kv = *reinterpret_cast<const float4*>(a.k + base + x);
                        vv = *reinterpret_cast<const float4*>(a.v + base + x);
                    } else {
                        float kf[4], vf[4];
#pragma unroll
                        for (int c = 0; c < 4; ++c) {
                            kf[c] = x + c < d ? a.k[base + x + c] : 0.0f;
                            vf[c] = x + c < d ? a.v[base + x + c] : 0.0f;
                        }
                        kv = make_float4(kf[0], kf[1], kf[2], kf[3]);
                        vv = make_float4(vf[0], vf[1], vf[2], vf[3]);
                    }
                }
                *reinterpret_cast<float4*>(k_s + j * a.row + x) = kv;
                *reinterpret_cast<float4*>(v_s + j * a.dim4 + x) = vv;
            }
            __syncthreads();

            {  // scores: rows r0 .. r0 + kScoreRows − 1, keys j0 and j0 + 16
                float s[kScoreRows][2] = {};
                for (int x = 0; x < a.dim4; x += 4) {
                    const float4 k0 = *reinterpret_cast<const float4*>(k_s + j0 * a.row + x);
                    const float4 k1 = *reinterpret_cast<const float4*>(k_s + (j0 + 16) * a.row + x);
#pragma unroll
                    for (int r = 0; r < kScoreRows; ++r) {
                        const float4 qv = *reinterpret_cast<const float4*>(q_s + (r0 + r) * a.row + x);
                        s[r][0] = fmaf(qv.x, k0.x, fmaf(qv.y, k0.y, fmaf(qv.z, k0.z, fmaf(qv.w, k0.w, s[r][0]))));
                        s[r][1] = fmaf(qv.x, k1.x, fmaf(qv.y, k1.y, fmaf(qv.z, k1.z, fmaf(qv.w, k1.w, s[r][1]))));
                    }
                }
#pragma unroll
                for (int r = 0; r < kScoreRows; ++r)
#pragma unroll
                    for (int c = 0; c < 2; ++c) {
                        const int64_t p = key0 + j0 + 16 * c;
                        const bool visible = p >= row_begin[r] && p < row_end[r];
                        p_s[(r0 + r) * kScoreRow + j0 + 16 * c] = visible ? s[r][c] : -INFINITY;
                    }
            }
            __syncthreads();

            {  // online softmax: row tid / kLanesPerRow, keys kKeysPerLane·part .. +kKeysPerLane − 1
                const int row = tid / kLanesPerRow, part = tid % kLanesPerRow;
                float* pr = p_s + row * kScoreRow + kKeysPerLane * part;
                float tile_max = -INFINITY;
#pragma unroll
                for (int j = 0; j < kKeysPerLane; ++j) tile_max = fmaxf(tile_max, pr[j]);
#pragma unroll
                for (int o = 1; o < kLanesPerRow; o <<= 1)
                    tile_max = fmaxf(tile_max, __shfl_xor_sync(kFullWarpMask, tile_max, o));
                const float m_old = m_s[row];
                const float m_new = fmaxf(m_old, tile_max);
                // −inf when the row's span has not begun yet: then every p and the rescale are 0.
                const float m_ref = m_new == -INFINITY ? 0.0f : m_new;
                float sum = 0.0f;
#pragma unroll
                for (int j = 0; j < kKeysPerLane; ++j) {
                    const float p = expf(pr[j] - m_ref);  // masked: e^{−inf} = 0
                    pr[j] = p;
                    sum += p;
                }
#pragma unroll
                for (int o = 1; o < kLanesPerRow; o <<= 1) sum += __shfl_xor_sync(kFullWarpMask, sum, o);
                __syncwarp();  // every lane of the row has read m_old before lane 0 moves it
                if (part == 0) {
                    const float corr = expf(m_old - m_ref);  // 0 while the row has seen nothing (m_old = −inf)
                    corr_s[row] = corr;
                    l_s[row] = fmaf(l_s[row], corr, sum);
                    m_s[row] = m_new;
                }
            }
            __syncthreads();

            // P V: rows kRowsPerWarp·warp .. +kRowsPerWarp − 1.
#pragma unroll
            for (int r = 0; r < kRowsPerWarp; ++r) {
                const float corr = corr_s[kRowsPerWarp * warp + r];
#pragma unroll
                for (int u = 0; u < kChunks; ++u)
#pragma unroll
                    for (int e = 0; e < 4; ++e) acc[r][u][e] *= corr;
            }
            const int keys_here = int(min(int64_t(kKeys), hi - key0));
            for (int j = 0; j < keys_here; ++j) {
                float4 vv[kChunks];
#pragma unroll
                for (int u = 0; u < kChunks; ++u) {
                    const int x = 4 * lane + 128 * u;
                    vv[u] = x < a.dim4 ? *reinterpret_cast<const float4*>(v_s + j * a.dim4 + x) : make_float4(0, 0, 0, 0);
                }
#pragma unroll
                for (int r = 0; r < kRowsPerWarp; ++r) {
                    const float p = p_s[(kRowsPerWarp * warp + r) * kScoreRow + j];
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
        for (int r = 0; r < kRowsPerWarp; ++r) {
            const int row = kRowsPerWarp * warp + r;
            const int64_t t = t0 + row / a.group;
            if (row >= a.positions * a.group || t >= t_end) continue;
            const int64_t h = kvh * a.group + row % a.group;
            const float inv_l = 1.0f / l_s[row];  // an empty span: 1/0, and the row is written as NaN
            float* o = a.out + (t * a.n_head + h) * d;
#pragma unroll
            for (int u = 0; u < kChunks; ++u)
#pragma unroll
                for (int e = 0; e < 4; ++e) {
                    const int64_t x = 4 * lane + 128 * u + e;
                    if (x < d) o[x] = acc[r][u][e] * inv_l;
                }
        }
        __syncthreads();  // l_s and range_s are read above; the next item resets them
    }
}

template <int kRows, int kChunks>
void launch_spans(const SpanArgs& args, unsigned blocks, cudaStream_t stream) {
    static const bool attribute_set = [] {
        cuda_check(cudaFuncSetAttribute(attention_spans_kernel<kRows, kChunks>,
                                        cudaFuncAttributeMaxDynamicSharedMemorySize,
                                        int(smem_bytes(kRows, 128 * kChunks))),
                   "attention spans shared memory");
        return true;
    }();
    (void)attribute_set;
    attention_spans_kernel<kRows, kChunks><<<blocks, kThreads, smem_bytes(kRows, args.head_dim), stream>>>(args);
}

}  // namespace

int64_t attention_spans_rows_per_block(int64_t head_dim) { return head_dim <= 256 ? 64 : 32; }

void attention_spans(const float* q, const float* k, const float* v, const AttentionSpanDims& dims, double scale,
                     const int64_t* key_begin, const int64_t* key_end, float* out, cudaStream_t stream,
                     int64_t max_blocks) {
    const int64_t rows = attention_spans_rows_per_block(dims.head_dim);
    if (dims.head_dim <= 0 || dims.head_dim > kAttentionSpansMaxHeadDim || dims.n_kv_head <= 0 ||
        dims.n_head % dims.n_kv_head != 0 || dims.n_head / dims.n_kv_head > rows || dims.n_keys < 0) {
        fail_message("attention_spans (cuda): head_dim " + std::to_string(dims.head_dim) + " (at most " +
                     std::to_string(kAttentionSpansMaxHeadDim) + "), n_head " + std::to_string(dims.n_head) +
                     ", n_kv_head " + std::to_string(dims.n_kv_head) + " (at most " + std::to_string(rows) +
                     " query heads per kv head), n_keys " + std::to_string(dims.n_keys) + " is not a supported shape");
    }
    if (dims.n_queries <= 0 || dims.n_head <= 0) return;
    SpanArgs args{};
    args.q = q;
    args.k = k;
    args.v = v;
    args.key_begin = key_begin;
    args.key_end = key_end;
    args.out = out;
    args.n_queries = dims.n_queries;
    args.n_keys = dims.n_keys;
    args.n_head = dims.n_head;
    args.n_kv_head = dims.n_kv_head;
    args.head_dim = dims.head_dim;
    args.group = int(dims.n_head / dims.n_kv_head);
    args.positions = int(rows) / args.group;
    args.dim4 = int((dims.head_dim + 3) / 4 * 4);
    args.row = padded_row(dims.head_dim);
    args.scale = float(scale);
    const int64_t items = dims.n_kv_head * ((dims.n_queries + args.positions - 1) / args.positions);
    const unsigned blocks = max_blocks > 0 ? unsigned(std::min(items, max_blocks)) : grid_blocks(items);
    if (dims.head_dim <= 128)
        launch_spans<64, 1>(args, blocks, stream);
    else if (dims.head_dim <= 256)
        launch_spans<64, 2>(args, blocks, stream);
    else
        launch_spans<32, 4>(args, blocks, stream);
    cuda_check_launch("attention_spans_kernel");
}

}  // namespace deltabit::cuda
