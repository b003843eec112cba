// The staged split-K attention kernel (ops/decode_cuda.h, AttentionDecodeVariant::staged_tiles): a block
// streams its split's K and V rows through shared memory in tiles, two tiles in flight (cp.async), and
// computes from shared memory.
//
// Why: the register kernels (attention_decode_cuda.cu) load a row, wait for it, use it — each warp a chain
// of DRAM round trips. At depth 32K they reach ~40% of the copy bandwidth; at a shallow depth a split of
// 64 keys is ~20 round trips end to end (26 µs per layer of Bonsai-27B). Here the loads of the next tile
// are in flight while this one is computed, and a split's first two tiles are requested together.
//
// Per tile of kTileKeys keys (32 for f16 rows, 16 for f32: one stage is 2 × 16 KB + padding either way),
// 256 threads in three phases separated by __syncthreads:
//   scores   thread (key j, part p) sums its key's dims [p·d/P, (p+1)·d/P) against every query head of the
//            group (q prescaled by log2(e)/sqrt(d), in shared memory): P = 256 / kTileKeys partial sums
//            per score, each a sequential fp32 fmaf chain;
//   softmax  thread (head g, key j): the score is the P partials added in order; the tile's max by a
//            butterfly over the head's kTileKeys lanes; the running max m, the weight p = 2^(s − m), and
//            this lane's share of the denominator (summed over the lanes at the end);
//   values   thread i owns dim i of every head: acc = acc · 2^(m_old − m_new) + Σ_j p_j · v_j, keys in
//            order.
// A tile past the end of the split is filled with zero rows (cp.async zero-fill): their scores are
// masked to −inf, their weights are 0 and their values 0, so every loop runs the whole tile.
// Rows in shared memory are padded by 16 bytes so that the 32 keys a warp scores sit in different banks.
#include <cuda_fp16.h>

#include <algorithm>
#include <cmath>
#include <string>

#include "backend/cuda_buffer.h"
#include "ops/async_copy.cuh"
#include "ops/attention_split.cuh"
#include "ops/cuda_math.cuh"
#include "ops/decode_cuda.h"
#include "ops/programmatic_launch.cuh"

namespace deltabit::cuda {

namespace {

constexpr int kStagedThreads = 256;
constexpr int kStages = 2;           // the tile being computed and the one in flight
constexpr int kRowPadBytes = 16;     // see the file comment: bank spread for the score phase

template <typename KvT>
constexpr int kTileKeys = sizeof(KvT) == 2 ? 32 : 16;

// Offsets (bytes) of the block's shared arrays: the tiles [kStages][K, V][kTileKeys][row], then
// q [G][d], the score partials [P][G][kTileKeys], the weights [G][kTileKeys] and the corrections [G].
struct StagedLayout {
    int row_bytes;
    size_t q, part, weight, correction, total;

    __host__ __device__ StagedLayout(int d, int element_bytes, int tile_keys, int groups) {
        row_bytes = d * element_bytes + kRowPadBytes;
        q = size_t(kStages) * 2 * tile_keys * row_bytes;
        part = q + size_t(groups) * d * sizeof(float);
        weight = part + size_t(kStagedThreads / tile_keys) * groups * tile_keys * sizeof(float);
        correction = weight + size_t(groups) * tile_keys * sizeof(float);
        total = correction + size_t(groups) * sizeof(float);
    }
};

__device__ __forceinline__ void load8_shared(const float* p, float (&out)[8]) {
    const float4 a = reinterpret_cast<const float4*>(p)[0], b = reinterpret_cast<const float4*>(p)[1];
    out[0] = a.x, out[1] = a.y, out[2] = a.z, out[3] = a.w, out[4] = b.x, out[5] = b.y, out[6] = b.z, out[7] = b.w;
}
__device__ __forceinline__ void load8_shared(const __half* p, float (&out)[8]) {
    const uint4 u = *reinterpret_cast<const uint4*>(p);
    const uint32_t w[4] = {u.x, u.y, u.z, u.w};
#pragma unroll
    for (int c = 0; c < 4; ++c) {
        const float2 f = __half22float2(*reinterpret_cast<const __half2*>(&w[c]));
        out[2 * c] = f.x;
        out[2 * c + 1] = f.y;
    }
}
__device__ __forceinline__ float to_float(float x) { return x; }
__device__ __forceinline__ float to_float(__half x) { return __half2float(x); }

// G >= query heads per kv head; head_dim a multiple of 8·P (staged_attention_supports).
template <typename KvT, int G>
__global__ void __launch_bounds__(kStagedThreads) attention_split_staged_kernel(SplitArgs a) {
    constexpr int kKeys = kTileKeys<KvT>;
    constexpr int kParts = kStagedThreads / kKeys;
    constexpr int kPerCopy = 16 / int(sizeof(KvT));  // elements per 16-byte copy
    static_assert(G * kKeys <= kStagedThreads, "one softmax thread per (head, key) of a tile");
    extern __shared__ __align__(16) unsigned char smem[];
    wait_for_predecessor();  // ops/programmatic_launch.cuh: nothing of the step is read before this
    allow_dependents();
    const int tid = int(threadIdx.x);
    const int64_t split = blockIdx.x, kh = blockIdx.y;
    const int d = int(a.head_dim);
    const int64_t group = a.n_head / a.n_kv_head, row_stride = a.n_kv_head * a.head_dim;
    const int64_t n_past = *a.n_past;
    const int64_t per_split = keys_per_split(n_past + a.n_tokens, a.splits);
    const int64_t p_begin = split * per_split;
    if (p_begin >= n_past + a.n_tokens) return;  // past the end of the cache: this split has no keys

    const StagedLayout layout(d, int(sizeof(KvT)), kKeys, G);
    const int row_bytes = layout.row_bytes;
    float* s_q = reinterpret_cast<float*>(smem + layout.q);
    float* s_part = reinterpret_cast<float*>(smem + layout.part);
    float* s_weight = reinterpret_cast<float*>(smem + layout.weight);
    float* s_correction = reinterpret_cast<float*>(smem + layout.correction);
    const KvT* k_head = static_cast<const KvT*>(a.k.data) + kh * a.head_dim;
    const KvT* v_head = static_cast<const KvT*>(a.v.data) + kh * a.head_dim;
    // Thread tid copies piece tid % copies_per_row of rows tid / copies_per_row + k·row_step of a tile
    // (copies_per_row divides the block: staged_attention_supports), so a copy costs no division.
    const int copies_per_row = d / kPerCopy;
    const int piece = tid % copies_per_row, row_step = kStagedThreads / copies_per_row;
    const auto tile_at = [&](int64_t i) { return smem + size_t(i % kStages) * 2 * kKeys * row_bytes; };
    // Tile `i` of keys [first, first + kKeys), rows at or past `end` zero-filled (from row `first`'s address).
    const auto issue_tile = [&](int64_t i, int64_t first, int64_t end) {
        unsigned char* k_tile = tile_at(i) + piece * 16;
        unsigned char* v_tile = k_tile + kKeys * row_bytes;
        const KvT* k_rows = k_head + first * row_stride + piece * kPerCopy;
        const KvT* v_rows = v_head + first * row_stride + piece * kPerCopy;
        const int valid = end - first < kKeys ? int(end - first) : kKeys;
#pragma unroll 4
        for (int j = tid / copies_per_row; j < kKeys; j += row_step) {
            const bool past = j >= valid;
            const int64_t at = past ? 0 : j * row_stride;
            cp_async16(k_tile + j * row_bytes, k_rows + at, past);
            cp_async16(v_tile + j * row_bytes, v_rows + at, past);
        }
        cp_async_commit_group();
    };

    const int key = tid % kKeys, row_group = tid / kKeys;  // scores: part row_group; softmax: head row_group
    const int dims_per_part = d / kParts;
    for (int64_t t = blockIdx.z; t < a.n_tokens; t += gridDim.z) {
        const int64_t visible = n_past + t + 1;
        const int64_t p_end = p_begin + per_split < visible ? p_begin + per_split : visible;
        const int64_t n_tiles = p_end > p_begin ? (p_end - p_begin + kKeys - 1) / kKeys : 0;
        if (n_tiles > 0) issue_tile(0, p_begin, p_end);
        for (int idx = tid; idx < G * d; idx += kStagedThreads) {
            const int g = idx / d, i = idx % d;
            s_q[idx] = g < group ? a.q[(t * a.n_head + kh * group + g) * a.head_dim + i] * a.score_scale : 0.0f;
        }
        float m = -INFINITY, l = 0.0f;  // softmax threads: head row_group's running max, this lane's share of l
        float acc[G];
#pragma unroll
        for (int g = 0; g < G; ++g) acc[g] = 0.0f;

        for (int64_t i = 0; i < n_tiles; ++i) {
            const int64_t first = p_begin + i * kKeys;
            if (i + 1 < n_tiles) issue_tile(i + 1, first + kKeys, p_end);
            else cp_async_commit_group();  // an empty batch keeps "all but the newest batch" = tile i
            cp_async_wait_group<1>();
            __syncthreads();  // every thread's copies of tile i landed (and s_q is written)
            const unsigned char* k_tile = tile_at(i);
            const unsigned char* v_tile = k_tile + kKeys * row_bytes;

            {  // scores: partial p of key j for every head
                const KvT* k_row = reinterpret_cast<const KvT*>(k_tile + key * row_bytes);
                float s[G];
#pragma unroll
                for (int g = 0; g < G; ++g) s[g] = 0.0f;
                const int c0 = row_group * dims_per_part;
                for (int c = c0; c < c0 + dims_per_part; c += 8) {
                    float kv[8];
                    load8_shared(k_row + c, kv);
#pragma unroll
                    for (int g = 0; g < G; ++g) {
                        const float4 qa = *reinterpret_cast<const float4*>(&s_q[g * d + c]);
                        const float4 qb = *reinterpret_cast<const float4*>(&s_q[g * d + c + 4]);
                        s[g] = fmaf(qa.x, kv[0], s[g]);
                        s[g] = fmaf(qa.y, kv[1], s[g]);
                        s[g] = fmaf(qa.z, kv[2], s[g]);
                        s[g] = fmaf(qa.w, kv[3], s[g]);
                        s[g] = fmaf(qb.x, kv[4], s[g]);
                        s[g] = fmaf(qb.y, kv[5], s[g]);
                        s[g] = fmaf(qb.z, kv[6], s[g]);
                        s[g] = fmaf(qb.w, kv[7], s[g]);
                    }
                }
#pragma unroll
                for (int g = 0; g < G; ++g) s_part[(row_group * G + g) * kKeys + key] = s[g];
            }
            __syncthreads();

            // softmax: whole warps take part in the butterfly; lanes past the last head only shuffle.
            if (tid / 32 * 32 < G * kKeys) {
                const int g = row_group < G ? row_group : G - 1;
                float score = s_part[g * kKeys + key];
#pragma unroll
                for (int p = 1; p < kParts; ++p) score += s_part[(p * G + g) * kKeys + key];
                if (first + key >= p_end) score = -INFINITY;
                float tile_max = score;
#pragma unroll
                for (int offset = kKeys / 2; offset > 0; offset >>= 1)
                    tile_max = fmaxf(tile_max, __shfl_xor_sync(kFullWarpMask, tile_max, offset));
                // Key `first` is < p_end, so tile_max is finite; the correction is 0 on the first tile.
                const float m_new = fmaxf(m, tile_max);
                const float correction = exp2f(m - m_new);
                const float weight = exp2f(score - m_new);  // 0 for a key past the end
                l = fmaf(l, correction, weight);
                m = m_new;
                if (row_group < G) {
                    s_weight[g * kKeys + key] = weight;
                    if (key == 0) s_correction[g] = correction;
                }
            }
            __syncthreads();

            if (tid < d) {  // values: dim tid of every head
                const unsigned char* v_col = v_tile + tid * sizeof(KvT);
#pragma unroll
                for (int g = 0; g < G; ++g) acc[g] *= s_correction[g];
#pragma unroll 2
                for (int j = 0; j < kKeys; j += 4) {
                    float v4[4];
#pragma unroll
                    for (int u = 0; u < 4; ++u) v4[u] = to_float(*reinterpret_cast<const KvT*>(v_col + (j + u) * row_bytes));
#pragma unroll
                    for (int g = 0; g < G; ++g) {
                        const float4 w = *reinterpret_cast<const float4*>(&s_weight[g * kKeys + j]);
                        acc[g] = fmaf(w.x, v4[0], acc[g]);
                        acc[g] = fmaf(w.y, v4[1], acc[g]);
                        acc[g] = fmaf(w.z, v4[2], acc[g]);
                        acc[g] = fmaf(w.w, v4[3], acc[g]);
                    }
                }
            }
            __syncthreads();  // tile i's stage, the partials and the weights are rewritten next
        }

        // The partials: (m, Σ lanes' l) from each head's key-0 lane, acc from the dim owners. A token that
        // saw no key of this split writes m = −inf, l = 0, acc = 0 (the combine gives it weight 0).
        if (tid / 32 * 32 < G * kKeys) {
            float l_sum = l;
#pragma unroll
            for (int offset = kKeys / 2; offset > 0; offset >>= 1) l_sum += __shfl_xor_sync(kFullWarpMask, l_sum, offset);
            if (row_group < group && key == 0) {
                const int64_t part = (t * a.n_head + kh * group + row_group) * a.splits + split;
                a.part_ml[2 * part] = m;
                a.part_ml[2 * part + 1] = l_sum;
            }
        }
        if (tid < d) {
#pragma unroll
            for (int g = 0; g < G; ++g) {
                if (g >= group) continue;
                const int64_t part = (t * a.n_head + kh * group + g) * a.splits + split;
                a.part_acc[part * a.head_dim + tid] = acc[g];
            }
        }
        __syncthreads();  // s_q is rewritten for the next token
    }
}

template <typename KvT, int G>
void launch_staged(dim3 grid, const SplitArgs& args, cudaStream_t stream) {
    const auto kernel = attention_split_staged_kernel<KvT, G>;
    const size_t smem = StagedLayout(int(args.head_dim), int(sizeof(KvT)), kTileKeys<KvT>, G).total;
    cuda_check(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(smem)),
               "attention_split_staged shared memory");
    launch_programmatic(kernel, grid, dim3(kStagedThreads), smem, stream, "attention_split_staged", args);
}

template <typename KvT>
void launch_staged(dim3 grid, const SplitArgs& args, int64_t group, cudaStream_t stream) {
    if (group <= 1) launch_staged<KvT, 1>(grid, args, stream);
    else if (group <= 2) launch_staged<KvT, 2>(grid, args, stream);
    else if (group <= 4) launch_staged<KvT, 4>(grid, args, stream);
    else if (group <= 6) launch_staged<KvT, 6>(grid, args, stream);
    else launch_staged<KvT, 8>(grid, args, stream);
}

}  // namespace

bool staged_attention_supports(KvElement element, int64_t head_dim, int64_t group) {
    if (element == KvElement::kivi4 || head_dim <= 0 || head_dim > kStagedThreads || group > kAttentionDecodeMaxGroup)
        return false;
    // Each score partial covers head_dim / P dims in steps of 8: P = 8 (f16) or 16 (f32); a row's 16-byte
    // pieces must divide the block's threads (issue_tile).
    const bool f16 = element == KvElement::f16;
    const int64_t parts = kStagedThreads / (f16 ? kTileKeys<__half> : kTileKeys<float>);
    const int64_t pieces = head_dim * (f16 ? 2 : 4) / 16;
    return head_dim % (8 * parts) == 0 && kStagedThreads % pieces == 0;
}

bool launch_attention_split_staged(dim3 grid, const SplitArgs& args, KvElement element, cudaStream_t stream) {
    const int64_t group = args.n_head / args.n_kv_head;
    if (!staged_attention_supports(element, args.head_dim, group)) return false;
    if (element == KvElement::f16) launch_staged<__half>(grid, args, group, stream);
    else launch_staged<float>(grid, args, group, stream);
    return true;
}

}  // namespace deltabit::cuda
