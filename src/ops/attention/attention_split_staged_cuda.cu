// The staged split-K attention kernels (ops/attention/attention_cuda.h, AttentionDecodeVariant::staged_tiles): a block
// streams its split's K and V rows through shared memory in tiles, two tiles in flight (cp.async), and
// computes from shared memory.
//
// Why: the register kernels (ops/attention/attention_split_register.cuh) load a row, wait for it, use it — each warp
// a chain of DRAM round trips. At depth 32K they reach ~40% of the copy bandwidth; at a shallow depth a
// split of 64 keys is ~20 round trips end to end (26 µs per layer of Bonsai-27B). Here the loads of the next
// tile are in flight while this one is computed, and a split's first two tiles are requested together.
//
// f32 rows: tiles of 16 keys (K and V: 2 × 16 KB a stage at head_dim 256), 256 threads in three phases separated by
// __syncthreads:
//   scores   thread (key j, part p) sums its key's dims [p·d/16, (p+1)·d/16) against every query head of
//            the group (q prescaled by log2(e)/sqrt(d), in shared memory): 16 partial sums per score,
//            each a sequential fp32 fmaf chain;
//   softmax  thread (head g, key j): the score is the partials added in order; the tile's max by a
//            butterfly over the head's lanes; the running max m, the weight p = 2^(s − m), and this
//            lane's share of the denominator (summed over the lanes at the end);
//   values   thread i owns dim i of every head: acc = acc · 2^(m_old − m_new) + Σ_j p_j · v_j, keys in
//            order.
// f16 rows: tiles of 32 keys, the same phases with both products on tensor cores
// (attention_split_mma_kernel below).
// A tile's rows at or past the end of what the token sees of the split (the split's end, or the token's
// last visible key) are zero-filled (cp.async zero-fill): their scores are masked to −inf, their weights
// are 0 and their values 0, so every loop runs the whole tile.
// f32 rows in shared memory are padded by 16 bytes so that the rows a warp reads at once sit in different
// banks (the score phase); f16 rows are swizzled instead (TileRing), for ldmatrix, which reads 8 rows at
// one column: unpadded rows start on 128-byte lines, so a warp's copy of a row is 4 whole lines.
// Both kernels have the rows form (attention_split.cuh, SplitArgs): the same body on the block's row's
// arguments, which differ from a single call's only in where the pointers, position and split count come
// from (its table row, read at the top).
#include <cuda_fp16.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <mutex>
#include <string>
#include <tuple>
#include <type_traits>

#include "backend/cuda_buffer.h"
#include "ops/cuda/async_copy.cuh"
#include "ops/attention/attention_split.cuh"
#include "ops/cuda/cuda_math.cuh"
#include "ops/attention/attention_cuda.h"
#include "ops/cuda/programmatic_launch.cuh"
#include "ops/cuda/tensor_core.cuh"

namespace deltabit::cuda {

namespace {

constexpr int kStagedThreads = 256;
constexpr int kStages = 2;           // the tile being computed and the one in flight
constexpr int kRowPadBytes = 16;     // see the file comment: bank spread for the score phase

constexpr int kF32Keys = 16;  // keys per tile of f32 rows (f16 rows: kMmaKeys, below)
constexpr int kF32Parts = kStagedThreads / kF32Keys;  // partial sums per score

// Offsets (bytes) of the f32 kernel's shared arrays: the tiles [kStages][K, V][kF32Keys][row], then
// q [G][d], the score partials [kF32Parts][G][kF32Keys], the weights [G][kF32Keys] and the corrections [G].
struct StagedLayout {
    int row_bytes;
    size_t q, part, weight, correction, total;

    __host__ __device__ StagedLayout(int d, int groups) {
        constexpr int tile_keys = kF32Keys;
        row_bytes = d * int(sizeof(float)) + kRowPadBytes;
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

// The block's ring of kStages tiles in shared memory: tile i at stage i % kStages, its kKeys K rows then
// its kKeys V rows, row_bytes apart. Thread tid copies 16-byte piece tid % pieces of rows
// tid / pieces + k·(threads / pieces) (pieces = a row's 16-byte pieces divides the block:
// staged_attention_supports), so a copy costs no division.
// kSwizzled: rows are not padded but their 16-byte chunks permuted, chunk c of row j stored at
// swizzled_chunk(j, c) — the 8 rows an ldmatrix reads at one column land in 8 different bank groups,
// and every row starts on a 128-byte line. Needs row_step a multiple of 8 (then a thread's rows share
// j % 8 and its permuted piece is one number) and at least 8 chunks a row.
__device__ __forceinline__ int swizzled_chunk(int row, int chunk) { return chunk ^ (row & 7); }

template <typename KvT, int kKeys, bool kSwizzled = false>
struct TileRing {
    static constexpr int kPerCopy = 16 / int(sizeof(KvT));  // elements per 16-byte copy
    unsigned char* base;
    int row_bytes, piece, first_row, row_step;
    int stored_piece;  // where piece `piece` of this thread's rows sits in shared memory
    const KvT* k_head;  // this kv head's dims of position 0
    const KvT* v_head;
    int64_t row_stride;  // elements between positions

    __device__ TileRing(unsigned char* smem, const SplitArgs& a, int64_t kh, int rb)
        : base(smem), row_bytes(rb), k_head(static_cast<const KvT*>(a.k.data) + kh * a.head_dim),
          v_head(static_cast<const KvT*>(a.v.data) + kh * a.head_dim), row_stride(a.n_kv_head * a.head_dim) {
        const int pieces = int(a.head_dim) / kPerCopy, tid = int(threadIdx.x);
        first_row = tid / pieces;
        row_step = int(blockDim.x) / pieces;
        piece = tid % pieces;
        stored_piece = kSwizzled ? swizzled_chunk(first_row, piece) : piece;
    }
    __device__ unsigned char* keys(int64_t i) const { return base + size_t(i % kStages) * 2 * kKeys * row_bytes; }
    __device__ unsigned char* values(int64_t i) const { return keys(i) + kKeys * row_bytes; }
    // Tile i = keys [first, first + kKeys), rows at or past `end` zero-filled (from row `first`'s address);
    // one commit group.
    __device__ void issue(int64_t i, int64_t first, int64_t end) const {
        unsigned char* k_tile = keys(i) + stored_piece * 16;
        unsigned char* v_tile = k_tile + kKeys * row_bytes;
        const KvT* k_rows = k_head + first * row_stride + piece * kPerCopy;
        const KvT* v_rows = v_head + first * row_stride + piece * kPerCopy;
        const int valid = end - first < kKeys ? int(end - first) : kKeys;
#pragma unroll 4
        for (int j = first_row; j < kKeys; j += row_step) {
            const bool past = j >= valid;
            const int64_t at = past ? 0 : j * row_stride;
            cp_async16(k_tile + j * row_bytes, k_rows + at, past);
            cp_async16(v_tile + j * row_bytes, v_rows + at, past);
        }
        cp_async_commit_group();
    }
    // Before computing tile i of n_tiles (keys [first, first + kKeys)): requests tile i + 1 into the other
    // stage (or commits an empty batch, so that "all but the newest batch" is tile i), waits for this
    // thread's copies of tile i, then for the whole block's (which also publishes what the block wrote to
    // shared memory before).
    __device__ void next_tile(int64_t i, int64_t n_tiles, int64_t first, int64_t end) const {
        if (i + 1 < n_tiles) issue(i + 1, first + kKeys, end);
        else cp_async_commit_group();
        cp_async_wait_group<1>();
        __syncthreads();
    }
};

// One tile's online-softmax step for the lane of key `key` of a head whose kKeys keys sit in kKeys
// consecutive lanes: the score (−inf for a key past the end), the tile's max by a butterfly over those
// lanes, then the running max m and this lane's share l of the denominator. Returns the key's weight
// 2^(s − m); `correction` = 2^(m_old − m_new), 0 on the first tile (m = −inf). The tile's first key is
// never past the end, so its max is finite. Every lane of the warp must call it.
template <int kKeys>
__device__ __forceinline__ float online_softmax_step(float score, bool past_end, float& m, float& l,
                                                     float& correction) {
    if (past_end) score = -INFINITY;
    float tile_max = score;
#pragma unroll
    for (int offset = kKeys / 2; offset > 0; offset >>= 1)
        tile_max = fmaxf(tile_max, __shfl_xor_sync(kFullWarpMask, tile_max, offset));
    const float m_new = fmaxf(m, tile_max);
    correction = exp2f(m - m_new);
    const float weight = exp2f(score - m_new);  // 0 for a key past the end
    l = fmaf(l, correction, weight);
    m = m_new;
    return weight;
}

// f32 rows. G >= query heads per kv head; head_dim 128 or 256 (staged_attention_supports). kRows: the rows
// form (SplitArgs; `a` is the block's row's, split_row_args).
template <int G, bool kRows>
__device__ __forceinline__ void split_f32(const SplitArgs& a) {
    constexpr int kKeys = kF32Keys, kParts = kF32Parts;
    static_assert(G * kKeys <= kStagedThreads, "one softmax thread per (head, key) of a tile");
    extern __shared__ __align__(16) unsigned char smem[];
    wait_for_predecessor();  // ops/cuda/programmatic_launch.cuh: nothing of the step is read before this
    allow_dependents();
    const int tid = int(threadIdx.x);
    const int64_t split = blockIdx.x, kh = split_kv_head<kRows>(a);
    if (kRows && split >= a.splits) return;  // past its row's splits (the grid is planned for the largest row)
    const int d = int(a.head_dim);
    const int64_t group = a.n_head / a.n_kv_head;
    const SplitSpan span = split_span(a, split);
    if (span.empty(a.n_tokens)) return;  // past the end of the cache: this split has no keys
    const int64_t n_past = span.n_past, per_split = span.per_split, p_begin = span.begin;

    const StagedLayout layout(d, G);
    const int row_bytes = layout.row_bytes;
    float* s_q = reinterpret_cast<float*>(smem + layout.q);
    float* s_part = reinterpret_cast<float*>(smem + layout.part);
    float* s_weight = reinterpret_cast<float*>(smem + layout.weight);
    float* s_correction = reinterpret_cast<float*>(smem + layout.correction);
    const TileRing<float, kKeys> ring(smem, a, kh, row_bytes);

    const int key = tid % kKeys, row_group = tid / kKeys;  // scores: part row_group; softmax: head row_group
    const int dims_per_part = d / kParts;
    for (int64_t t = blockIdx.z; t < a.n_tokens; t += gridDim.z) {
        const int64_t visible = n_past + t + 1;
        const int64_t p_end = p_begin + per_split < visible ? p_begin + per_split : visible;
        const int64_t n_tiles = p_end > p_begin ? (p_end - p_begin + kKeys - 1) / kKeys : 0;
        if (n_tiles > 0) ring.issue(0, p_begin, p_end);
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
            ring.next_tile(i, n_tiles, first, p_end);
            const unsigned char* k_tile = ring.keys(i);
            const unsigned char* v_tile = ring.values(i);

            {  // scores: partial p of key j for every head
                const float* k_row = reinterpret_cast<const float*>(k_tile + key * row_bytes);
                float s[G];
#pragma unroll
                for (int g = 0; g < G; ++g) s[g] = 0.0f;
                const int c0 = row_group * dims_per_part;
                for (int c = c0; c < c0 + dims_per_part; c += 8) {
                    float kv[8];
                    load8_shared(k_row + c, kv);
#pragma unroll
                    for (int g = 0; g < G; ++g) s[g] = fma8(&s_q[g * d + c], kv, s[g]);
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
                float correction;
                const float weight = online_softmax_step<kKeys>(score, first + key >= p_end, m, l, correction);
                if (row_group < G) {
                    s_weight[g * kKeys + key] = weight;
                    if (key == 0) s_correction[g] = correction;
                }
            }
            __syncthreads();

            if (tid < d) {  // values: dim tid of every head
                const unsigned char* v_col = v_tile + tid * sizeof(float);
#pragma unroll
                for (int g = 0; g < G; ++g) acc[g] *= s_correction[g];
#pragma unroll 2
                for (int j = 0; j < kKeys; j += 4) {
                    float v4[4];
#pragma unroll
                    for (int u = 0; u < 4; ++u) v4[u] = *reinterpret_cast<const float*>(v_col + (j + u) * row_bytes);
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
        __syncthreads();  // defensive: the last tile's barrier already ordered q's reads before the next token
    }
}

// A single call's launch runs the body on its own arguments, as they are; the rows form's on its row's, read
// from the table before the body's wait (no kernel writes the table).
template <int G, bool kRows>
__global__ void __launch_bounds__(kStagedThreads) attention_split_f32_kernel(SplitArgs a) {
    if constexpr (kRows) split_f32<G, true>(split_row_args(a));
    else split_f32<G, false>(a);
}
// ---- f16 rows on tensor cores ----
// The same pipeline, tile and softmax as above with the two products on mma.m16n8k16 (f16 · f16 → f32;
// ops/cuda/tensor_core.cuh): the fp32 arithmetic of the CUDA-core kernel bound it at ~45% of the copy
// bandwidth over f16 rows (twice f32's work per byte). Eight warps; the MMA's 8 columns are the query
// heads of the group (zero-padded).
//   scores  warp w takes keys [16·(w % 2), +16) and dims [(w / 2)·d/4, +d/4): A = the K tile rows
//           (ldmatrix), B = q (its fragments loaded into registers once per token). q is fp32, so it goes
//           in as two f16 terms: per head, q·2^e (e puts the head's largest |q| in [2^13, 2^14))
//           = hi + lo·2^−11 with hi = f16(q·2^e), lo = f16((q·2^e − hi)·2^11);
//           the two MMAs accumulate separately and the partial is (c_hi + c_lo·2^−11)·2^−e: each q_j
//           enters within 2^−22·|q_j| (a lo below f16's normal range loses at most 2^−36 in units of
//           q·2^e, whose largest element is ≥ 2^13). The four partials of a score are added in order by
//           the softmax thread.
//   values  warp w takes dims [16·(w + 8k), +16): A = the V tile transposed (ldmatrix.trans), B = the
//           weights, split the same way: w = hi + lo·2^−11 (weights are ≤ 1, no scaling), two accumulator
//           sets per dim tile carried across tiles, rescaled per tile by the running max's correction.
constexpr int kMmaKeys = 32;
constexpr int kMmaHeads = 8;      // the MMA's n
constexpr int kMmaScoreParts = 4;  // dim slices per score: 8 warps = 2 key halves × 4 slices
constexpr float kLoScale = 2048.0f;  // 2^11: lo terms are scaled up by it before rounding to f16
constexpr int kMaxScoreSteps = kStagedThreads / 16 / kMmaScoreParts;  // 16-dim MMA steps of a slice, head_dim 256
// Row strides of the per-tile exchange arrays, padded so that an MMA fragment's lanes (row = lane / 4 and
// col = lane % 4 step through the head and the key) fall in 32 different banks: the score partials
// [part][head][key] are stored with head = 2·col + r, key = row + …, so a head's row is 36 floats
// (bank 8·col + row); the weights [head][key] are read as pairs with head = row, key = 2·col + …, so a
// head's row is 40 halves (bank 20·row + col). Unpadded (32 keys: 32 floats, 32 halves), 4 lanes shared a
// bank and the shared-memory pipe, not DRAM, set the kernel's pace (Nsight Compute, 2026-12-02).
constexpr int kPartStride = kMmaKeys + 4;
constexpr int kWeightStride = kMmaKeys + 8;

struct MmaLayout {
    int row_bytes;
    size_t q_hi, q_lo, q_unscale, part, w_hi, w_lo, correction, total;

    __host__ __device__ explicit MmaLayout(int d) {
        row_bytes = d * 2;  // unpadded: TileRing's swizzle spreads the banks
        q_hi = size_t(kStages) * 2 * kMmaKeys * row_bytes;
        q_lo = q_hi + size_t(kMmaHeads) * d * 2;
        q_unscale = q_lo + size_t(kMmaHeads) * d * 2;
        part = q_unscale + kMmaHeads * sizeof(float);
        w_hi = part + size_t(kMmaScoreParts) * kMmaHeads * kPartStride * sizeof(float);
        w_lo = w_hi + size_t(kMmaHeads) * kWeightStride * 2;
        correction = w_lo + size_t(kMmaHeads) * kWeightStride * 2;
        total = correction + kMmaHeads * sizeof(float);
    }
};

__device__ __forceinline__ uint32_t half_pair(const __half* p) { return *reinterpret_cast<const uint32_t*>(p); }

// ilogbf and ldexpf's results without their library calls (the q conversion below was ~1 µs of a shallow
// split): the exponent of a positive finite x (ilogbf's for a subnormal), and 2^e for |e| ≤ 126 — x · 2^e is
// then ldexpf(x, e) exactly, one correctly rounded product.
__device__ __forceinline__ int exponent_of(float x) {
    const int field = (__float_as_int(x) >> 23) & 0xff;
    return field != 0 ? field - 127 : ilogbf(x);
}
__device__ __forceinline__ float power_of_two(int e) { return __int_as_float((e + 127) << 23); }

// fn(k, r, dim, head) for each value output this lane holds of a head in the group: the mma accumulators of
// the dim tiles warp (k = 0) and warp + 8 (k = 1), element r of the C fragment (dims row, row + 8; heads 2·col,
// 2·col + 1).
template <typename Fn>
__device__ __forceinline__ void for_each_value_output(int warp, int row, int col, int m_tiles, int64_t group,
                                                      const Fn& fn) {
#pragma unroll
    for (int k = 0; k < 2; ++k) {
        const int mt = warp + 8 * k;
        if (mt >= m_tiles) break;
#pragma unroll
        for (int r = 0; r < 4; ++r) {
            const int dim = 16 * mt + row + (r >> 1) * 8, head = 2 * col + (r & 1);
            if (head < group) fn(k, r, dim, head);
        }
    }
}

// G >= query heads per kv head (<= 8); head_dim 64, 128 or 256. kRows: as split_f32's.
template <int G, bool kRows>
__device__ __forceinline__ void split_mma(const SplitArgs& a) {
    static_assert(G <= kMmaHeads && G * kMmaKeys <= kStagedThreads, "a warp per head for the softmax");
    extern __shared__ __align__(16) unsigned char smem[];
    wait_for_predecessor();  // ops/cuda/programmatic_launch.cuh: nothing of the step is read before this
    allow_dependents();
    const int tid = int(threadIdx.x), warp = tid >> 5, lane = tid & 31, row = lane >> 2, col = lane & 3;
    const int64_t split = blockIdx.x, kh = split_kv_head<kRows>(a);
    if (kRows && split >= a.splits) return;  // past its row's splits (the grid is planned for the largest row)
    const int d = int(a.head_dim);
    const int64_t group = a.n_head / a.n_kv_head;
    const SplitSpan span = split_span(a, split);
    if (span.empty(a.n_tokens)) return;  // past the end of the cache: this split has no keys
    const int64_t n_past = span.n_past, per_split = span.per_split, p_begin = span.begin;

    const MmaLayout layout(d);
    __half* s_q_hi = reinterpret_cast<__half*>(smem + layout.q_hi);  // [kMmaHeads][d]
    __half* s_q_lo = reinterpret_cast<__half*>(smem + layout.q_lo);
    float* s_q_unscale = reinterpret_cast<float*>(smem + layout.q_unscale);  // 2^−e per head
    float* s_part = reinterpret_cast<float*>(smem + layout.part);            // [part][head][key], kPartStride
    __half* s_w_hi = reinterpret_cast<__half*>(smem + layout.w_hi);          // [head][key], kWeightStride
    __half* s_w_lo = reinterpret_cast<__half*>(smem + layout.w_lo);
    float* s_correction = reinterpret_cast<float*>(smem + layout.correction);
    const TileRing<__half, kMmaKeys, true> ring(smem, a, kh, layout.row_bytes);
    const int row_bytes = layout.row_bytes;
    const int m_tiles = d / 16;  // of the values: 16 dims each
    // The rows this lane addresses in ldmatrix (a_key, k0 + v_key below) are ≡ lane (mod 8), so their
    // chunks' permutation (TileRing's swizzled_chunk) is this one number.
    const int row_swizzle = lane & 7;

    for (int64_t t = blockIdx.z; t < a.n_tokens; t += gridDim.z) {
        const int64_t visible = n_past + t + 1;
        const int64_t p_end = p_begin + per_split < visible ? p_begin + per_split : visible;
        const int64_t n_tiles = p_end > p_begin ? (p_end - p_begin + kMmaKeys - 1) / kMmaKeys : 0;
        if (n_tiles > 0) ring.issue(0, p_begin, p_end);
        {  // q of head `warp` (zero past the group) as hi and lo f16 terms
            const int g = warp;
            const float* q = a.q + (t * a.n_head + kh * group + g) * a.head_dim;
            float largest = 0.0f;
            for (int i = lane; i < d; i += 32) largest = fmaxf(largest, g < group ? fabsf(q[i] * a.score_scale) : 0.0f);
#pragma unroll
            for (int offset = 16; offset > 0; offset >>= 1)
                largest = fmaxf(largest, __shfl_xor_sync(kFullWarpMask, largest, offset));
            // (|e| <= 100 keeps 2^−e a normal float for a head of tiny values; such a head scores ~0.)
            const int e = largest > 0.0f ? min(100, max(-100, 13 - exponent_of(largest))) : 0;
            for (int i = lane; i < d; i += 32) {
                const float x = g < group ? q[i] * a.score_scale * power_of_two(e) : 0.0f;
                const __half hi = __float2half_rn(x);
                s_q_hi[g * d + i] = hi;
                s_q_lo[g * d + i] = __float2half_rn((x - __half2float(hi)) * kLoScale);
            }
            if (lane == 0) s_q_unscale[g] = power_of_two(-e);
        }
        __syncthreads();
        // This warp's B fragments of q for its slice of the scores, in registers for every tile: read from
        // shared memory per tile, 8 rows of q one bank apart cost the loads 8-way conflicts.
        const int score_part = warp >> 1, slice = d / kMmaScoreParts;
        uint32_t q_hi_frag[kMaxScoreSteps][2], q_lo_frag[kMaxScoreSteps][2];
#pragma unroll
        for (int s = 0; s < kMaxScoreSteps; ++s) {
            if (16 * s >= slice) break;
            const int k0 = score_part * slice + 16 * s;
            const __half* q_hi = s_q_hi + row * d + k0 + 2 * col;
            const __half* q_lo = s_q_lo + row * d + k0 + 2 * col;
            q_hi_frag[s][0] = half_pair(q_hi), q_hi_frag[s][1] = half_pair(q_hi + 8);
            q_lo_frag[s][0] = half_pair(q_lo), q_lo_frag[s][1] = half_pair(q_lo + 8);
        }
        float m = -INFINITY, l = 0.0f;  // softmax warps: head `warp`'s running max, this lane's share of l
        float acc_hi[2][4] = {}, acc_lo[2][4] = {};  // values: dim tiles warp and warp + 8

        for (int64_t i = 0; i < n_tiles; ++i) {
            const int64_t first = p_begin + i * kMmaKeys;
            ring.next_tile(i, n_tiles, first, p_end);
            const unsigned char* k_tile = ring.keys(i);
            const unsigned char* v_tile = ring.values(i);

            {  // scores: keys [16·(warp % 2), +16) × dims of slice warp / 2
                const int key0 = 16 * (warp & 1);
                float c_hi[4] = {}, c_lo[4] = {};
                const int a_key = key0 + (lane & 7) + ((lane >> 3) & 1) * 8, a_dim = ((lane >> 4) & 1) * 8;
#pragma unroll
                for (int s = 0; s < kMaxScoreSteps; ++s) {
                    if (16 * s >= slice) break;
                    const int k0 = score_part * slice + 16 * s;
                    uint32_t frag[4];
                    ldmatrix_x4(k_tile + a_key * row_bytes + (((k0 + a_dim) / 8) ^ row_swizzle) * 16, frag);
                    mma_f16_f32(c_hi, frag, q_hi_frag[s][0], q_hi_frag[s][1]);
                    mma_f16_f32(c_lo, frag, q_lo_frag[s][0], q_lo_frag[s][1]);
                }
#pragma unroll
                for (int r = 0; r < 4; ++r) {
                    const int key = key0 + row + (r >> 1) * 8, head = 2 * col + (r & 1);
                    s_part[(score_part * kMmaHeads + head) * kPartStride + key] =
                        fmaf(c_lo[r], 1.0f / kLoScale, c_hi[r]) * s_q_unscale[head];
                }
            }
            __syncthreads();

            if (warp < G) {  // softmax: lane = key of head `warp`
                const int g = warp, key = lane;
                float score = s_part[g * kPartStride + key];
#pragma unroll
                for (int p = 1; p < kMmaScoreParts; ++p) score += s_part[(p * kMmaHeads + g) * kPartStride + key];
                float correction;
                const float weight = online_softmax_step<kMmaKeys>(score, first + key >= p_end, m, l, correction);
                const __half hi = __float2half_rn(weight);
                s_w_hi[g * kWeightStride + key] = hi;
                s_w_lo[g * kWeightStride + key] = __float2half_rn((weight - __half2float(hi)) * kLoScale);
                if (key == 0) s_correction[g] = correction;
            } else if (warp < kMmaHeads) {  // padding heads: zero weights (their columns are never stored)
                s_w_hi[warp * kWeightStride + lane] = __float2half_rn(0.0f);
                s_w_lo[warp * kWeightStride + lane] = __float2half_rn(0.0f);
                if (lane == 0) s_correction[warp] = 0.0f;
            }
            __syncthreads();

            {  // values: O^T[dim][head] += V^T[dim][key] · W^T[key][head]
                const float c0 = s_correction[2 * col], c1 = s_correction[2 * col + 1];
#pragma unroll
                for (int k = 0; k < 2; ++k) {
                    acc_hi[k][0] *= c0, acc_hi[k][1] *= c1, acc_hi[k][2] *= c0, acc_hi[k][3] *= c1;
                    acc_lo[k][0] *= c0, acc_lo[k][1] *= c1, acc_lo[k][2] *= c0, acc_lo[k][3] *= c1;
                }
                const int v_key = (lane & 7) + ((lane >> 4) & 1) * 8, v_dim = ((lane >> 3) & 1) * 8;
#pragma unroll
                for (int k0 = 0; k0 < kMmaKeys; k0 += 16) {
                    const __half* w_hi = s_w_hi + row * kWeightStride + k0 + 2 * col;
                    const __half* w_lo = s_w_lo + row * kWeightStride + k0 + 2 * col;
                    const uint32_t bh0 = half_pair(w_hi), bh1 = half_pair(w_hi + 8);
                    const uint32_t bl0 = half_pair(w_lo), bl1 = half_pair(w_lo + 8);
#pragma unroll
                    for (int k = 0; k < 2; ++k) {
                        const int mt = warp + 8 * k;
                        if (mt >= m_tiles) break;
                        uint32_t frag[4];
                        ldmatrix_x4_trans(v_tile + (k0 + v_key) * row_bytes + (((16 * mt + v_dim) / 8) ^ row_swizzle) * 16,
                                          frag);
                        mma_f16_f32(acc_hi[k], frag, bh0, bh1);
                        mma_f16_f32(acc_lo[k], frag, bl0, bl1);
                    }
                }
            }
            __syncthreads();  // tile i's stage, the partials and the weights are rewritten next
        }

        // The partials: (m, Σ lanes' l) from each head's warp, acc from the dim tiles' owners. A token that
        // saw no key of this split writes m = −inf, l = 0, acc = 0 (the combine gives it weight 0).
        if (warp < group) {
            const float l_sum = warp_sum(l);
            if (lane == 0) {
                const int64_t part = (t * a.n_head + kh * group + warp) * a.splits + split;
                a.part_ml[2 * part] = m;
                a.part_ml[2 * part + 1] = l_sum;
            }
        }
        for_each_value_output(warp, row, col, m_tiles, group, [&](int k, int r, int dim, int head) {
            const int64_t part = (t * a.n_head + kh * group + head) * a.splits + split;
            a.part_acc[part * a.head_dim + dim] = fmaf(acc_lo[k][r], 1.0f / kLoScale, acc_hi[k][r]);
        });
        __syncthreads();  // defensive: the last tile's barrier already ordered q's reads before the next token
    }
}

// Two blocks an SM (__launch_bounds__: at most 128 registers a thread), as the shared memory allows.
template <int G, bool kRows>
__global__ void __launch_bounds__(kStagedThreads, 2) attention_split_mma_kernel(SplitArgs a) {
    if constexpr (kRows) split_mma<G, true>(split_row_args(a));
    else split_mma<G, false>(a);
}

// f(std::integral_constant<int, G>) with G the kernels' head count for `group` query heads per kv head.
template <typename F>
void with_heads(int64_t group, F&& f) {
    if (group <= 1) f(std::integral_constant<int, 1>{});
    else if (group <= 2) f(std::integral_constant<int, 2>{});
    else if (group <= 4) f(std::integral_constant<int, 4>{});
    else if (group <= 6) f(std::integral_constant<int, 6>{});
    else f(std::integral_constant<int, 8>{});
}

// The kernel a launch over `element` rows runs (a shape staged_attention_supports) and its dynamic shared
// memory, allowed above the 48 KB default.
struct StagedKernel {
    void (*kernel)(SplitArgs) = nullptr;
    size_t smem = 0;
};
// rows: the rows form's instantiation (SplitArgs).
StagedKernel staged_kernel(KvElement element, int d, int64_t group, bool rows) {
    StagedKernel k;
    with_heads(group, [&](auto heads) {
        constexpr int G = decltype(heads)::value;
        if (element == KvElement::f16)
            k = {rows ? attention_split_mma_kernel<G, true> : attention_split_mma_kernel<G, false>, MmaLayout(d).total};
        else
            k = {rows ? attention_split_f32_kernel<G, true> : attention_split_f32_kernel<G, false>,
                 StagedLayout(d, G).total};
    });
    cuda_check(cudaFuncSetAttribute(k.kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(k.smem)),
               "attention_split_staged shared memory");
    return k;
}

}  // namespace

bool staged_attention_supports(KvElement element, int64_t head_dim, int64_t group) {
    if (element == KvElement::kivi4 || head_dim <= 0 || head_dim > kStagedThreads || group > kAttentionDecodeMaxGroup)
        return false;
    // f32: each of the 16 score partials covers head_dim / 16 dims in steps of 8; f16: each of the 4 dim
    // slices (8 warps) whole 16-dim MMA steps. And a row's 16-byte pieces must divide the block (TileRing;
    // for f16 that also makes the swizzle's row step, 256 / pieces with 8 to 32 pieces, a multiple of 8).
    const bool f16 = element == KvElement::f16;
    const int64_t pieces = head_dim * (f16 ? 2 : 4) / 16;
    const int64_t slice = f16 ? 16 * kMmaScoreParts : 8 * kF32Parts;
    return head_dim % slice == 0 && kStagedThreads % pieces == 0;
}

int64_t staged_attention_resident_blocks(KvElement element, int64_t head_dim, int64_t group) {
    if (!staged_attention_supports(element, head_dim, group)) return 0;
    // Asked of the driver once per shape and device: the split planner asks on every eager or captured decode
    // attention call.
    int device = 0;
    cuda_check(cudaGetDevice(&device), "current device");
    static std::mutex mutex;
    static std::map<std::tuple<int, KvElement, int64_t, int64_t>, int64_t> known;
    const std::lock_guard<std::mutex> lock(mutex);
    const auto key = std::make_tuple(device, element, head_dim, group);
    if (const auto at = known.find(key); at != known.end()) return at->second;
    int per_sm = 0;
    const StagedKernel k = staged_kernel(element, int(head_dim), group, /*rows=*/false);
    cuda_check(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, k.kernel, kStagedThreads, k.smem),
               "attention_split_staged occupancy");
    const int64_t resident = int64_t(per_sm) * device_attribute(cudaDevAttrMultiProcessorCount, "SM count");
    known.emplace(key, resident);  // only once the driver answered: a failed query is asked again
    return resident;
}

bool launch_attention_split_staged(dim3 grid, const SplitArgs& args, KvElement element, cudaStream_t stream) {
    const int64_t group = args.n_head / args.n_kv_head;
    if (!staged_attention_supports(element, args.head_dim, group)) return false;
    const bool rows = args.rows != nullptr;
    const StagedKernel k = staged_kernel(element, int(args.head_dim), group, rows);
    launch_programmatic(k.kernel, grid, dim3(kStagedThreads), k.smem, stream,
                        rows ? "attention_split_staged_rows" : "attention_split_staged", args);
    return true;
}


}  // namespace deltabit::cuda
