// Causal GQA attention for prompts over an f16 KV cache, on tensor cores (contract:
// ops/attention/attention_cuda.h, attention_prefill_mma; math: ops/attention.h).
//
// Flash-style: a block owns one kv head and kRows = 128 query rows, row r being position t0 + r / G and
// head kv·G + r % G (G = n_head / n_kv_head), so the G heads of a position share every key and value tile.
// Warp w owns rows 16w .. 16w + 15. Per tile of kKeys = 32 keys, each warp:
//   scores   S = Q Kᵀ with mma.m16n8k16 (f16 × f16 → f32): Q from shared memory (A, ldmatrix), K rows as
//            the B operand (ldmatrix, non-transposed), four n-tiles of 8 keys;
//   softmax  in the log2 domain (q carries log2(e)/sqrt(d)), on the accumulators in registers: each
//            thread holds two rows (g and g + 8) of 8 keys; row maxima by a 4-lane butterfly; running
//            max m, this lane's share of the denominator l, and the rescale of the output accumulators;
//   P V      the weights go straight from the score accumulators into A fragments (the C layout of two
//            n-tiles is the A layout of one k-step of 16 keys), V rows as B (ldmatrix .trans).
// The output accumulators (16 rows × d per warp: d/2 floats a thread) stay in registers for the whole
// walk; K and V tiles stream through a two-stage cp.async ring, the next tile in flight while this one is
// computed. Causal masking only on the tiles that reach past the block's first visible diagonal.
//
// Precision: K and V are the cache's f16 values, exact operands. q and the weights are not f16 numbers,
// so each enters as two f16 terms, hi + lo (as the decode kernel does, attention_split_staged_cuda.cu):
//   q: each row scaled by 2^e (exact) so its largest |element| lies in [2^13, 2^14), hi = f16(x),
//      lo = f16((x − hi)·2^11); the scores are two accumulator chains, combined as hi + lo·2^−11, ·2^−e;
//   p: in [0, 1], scaled by 2^12 (exact) so that the lo term stays a normal f16 down to p ≈ 2^−14,
//      hi = f16(w), lo = f16(w − hi), both accumulated into the same output accumulator (the output
//      divides by 2^12·l at the end).
// So every product is of f32-class precision; what remains is the tensor cores' accumulation (an
// mma adds its 16 products and C as one block aligned to the largest and truncated; measured by Fasi et
// al. 2021), bounded in tests/cuda/test_prefill_attention.cpp.
//
// Grid: (kv head, query tile) items, tiles late in the prompt (the most keys) first, a block per item up to
// the grid cap (ops/cuda/cuda_launch.h), grid-stride past it.
#include <cuda_fp16.h>

#include <algorithm>
#include <cmath>
#include <string>

#include "ops/attention/attention_cuda.h"
#include "ops/cuda/async_copy.cuh"
#include "ops/cuda/cuda_launch.h"
#include "ops/cuda/cuda_math.cuh"
#include "ops/cuda/tensor_core.cuh"

namespace deltabit::cuda {

namespace {

constexpr int kWarps = 8;
constexpr int kThreads = 32 * kWarps;
constexpr int kRows = 16 * kWarps;  // query rows (position × head) per block
constexpr int kKeys = 32;           // keys per tile: four n-tiles of the scores, two k-steps of P V
constexpr int kStages = 2;          // the tile being computed and the one in flight
constexpr float kLoScale = 2048.0f;     // 2^11: q's lo term is scaled up by it before rounding
constexpr float kWeightScale = 4096.0f;  // 2^12: the weights' scale (see the file comment)

// Shared memory of a block for head_dim D: q's hi and lo terms [kRows][D], then the ring of stages, each
// K [kKeys][D] then V [kKeys][D], all f16 rows of D/8 16-byte chunks, swizzled (swizzle below); then
// 2^−e of each row. D = 256: 64 + 64 + 64 KiB + 512 B.
template <int D>
struct Layout {
    static constexpr int kRowBytes = 2 * D;
    static constexpr size_t kQHi = 0;
    static constexpr size_t kQLo = kQHi + size_t(kRows) * kRowBytes;
    static constexpr size_t kRing = kQLo + size_t(kRows) * kRowBytes;
    static constexpr size_t kStageBytes = size_t(2) * kKeys * kRowBytes;
    static constexpr size_t kUnscale = kRing + kStages * kStageBytes;
    static constexpr size_t kTotal = kUnscale + kRows * sizeof(float);
};

// Byte offset of 16-byte chunk c of row r in an array of rows of D halves: chunk c is stored at c ^ (r % 8),
// so the 8 rows that one ldmatrix matrix reads at the same column fall in 8 different bank groups
// (unswizzled, rows of 128·k bytes would all start in the same bank).
template <int D>
__device__ __forceinline__ int swizzled(int r, int c) {
    return r * (2 * D) + ((c ^ (r & 7)) << 4);
}

__device__ __forceinline__ uint32_t pack_halves(__half lo_index, __half hi_index) {
    return uint32_t(__half_as_ushort(lo_index)) | (uint32_t(__half_as_ushort(hi_index)) << 16);
}

// ilogbf's exponent of a positive finite float and 2^e for |e| ≤ 126, without library calls.
__device__ __forceinline__ int exponent_of(float x) {
    const int field = (__float_as_int(x) >> 23) & 0xff;
    return field != 0 ? field - 127 : ilogbf(x);
}
__device__ __forceinline__ float power_of_two(int e) { return __int_as_float((e + 127) << 23); }

struct MmaPrefillArgs {
    const float* q;
    const __half* k;
    const __half* v;
    const float* gate;
    float* out;
    int64_t n_tokens, n_past, n_head, n_kv_head;
    int group;      // query heads per kv head
    int positions;  // query positions per block: kRows / group
    float score_scale;  // log2(e) / sqrt(d)
};

// Issue the copies of keys [key0, key0 + kKeys) of kv head `kvh` into `stage`; rows at or past `n_keys`
// are zero-filled (their scores are masked, their values multiply weight 0).
template <int D>
__device__ __forceinline__ void issue_tile(const MmaPrefillArgs& a, unsigned char* stage, int64_t kvh, int key0,
                                           int n_keys) {
    constexpr int kChunks = D / 8;
    for (int e = int(threadIdx.x); e < 2 * kKeys * kChunks; e += kThreads) {
        const int which = e / (kKeys * kChunks), rest = e % (kKeys * kChunks);
        const int j = rest / kChunks, c = rest % kChunks;
        const int p = key0 + j;
        const bool past = p >= n_keys;
        const __half* base = which == 0 ? a.k : a.v;
        const __half* src = base + ((past ? 0 : int64_t(p)) * a.n_kv_head + kvh) * D + 8 * c;
        cp_async16(stage + size_t(which) * kKeys * 2 * D + swizzled<D>(j, c), src, past);
    }
}

// One item: query positions t0 .. t0 + positions − 1 (those in the prompt) of kv head kvh.
template <int D>
__device__ __forceinline__ void attend_item(const MmaPrefillArgs& a, unsigned char* smem, int64_t kvh, int64_t t0) {
    using L = Layout<D>;
    constexpr int kChunks = D / 8;
    constexpr int kSteps = D / 16;  // k-steps of the scores, and pairs of dim n-tiles of P V
    unsigned char* q_hi = smem + L::kQHi;
    unsigned char* q_lo = smem + L::kQLo;
    float* unscale = reinterpret_cast<float*>(smem + L::kUnscale);
    const int warp = int(threadIdx.x) >> 5, lane = int(threadIdx.x) & 31, g = lane >> 2, tq = lane & 3;
    const int64_t t_end = min(a.n_tokens, t0 + a.positions);
    // Key indices fit in 32 bits (attention_prefill_mma refuses longer contexts): fewer registers.
    const int n_keys = int(a.n_past + t_end);  // keys any row of the block may see
    const int n_tiles = (n_keys + kKeys - 1) / kKeys;
    const int live_rows = int(t_end - t0) * a.group;
    // ldmatrix lane addresses: A of q (rows 0..15, chunks +0/+1), B of K (keys of an n-tile pair, chunks
    // +0/+1), B of V transposed (keys of a k-step, dim chunks +0/+1).
    const int a_row = 16 * warp + (lane & 15), a_chunk = lane >> 4;
    const int k_key = (lane & 7) + ((lane >> 4) << 3), k_chunk = (lane >> 3) & 1;
    const int v_key = (lane & 7) + (((lane >> 3) & 1) << 3), v_chunk = lane >> 4;

    issue_tile<D>(a, smem + L::kRing, kvh, 0, n_keys);
    cp_async_commit_group();

    // q of this warp's rows as hi and lo f16 terms (an idle row, past the prompt or the block's
    // positions, is zero: its scores are 0, it sees every key, and it is never stored).
    for (int i = 0; i < 16; ++i) {
        const int r = 16 * warp + i;
        const bool live = r < live_rows;
        const float* q = live ? a.q + ((t0 + r / a.group) * a.n_head + kvh * a.group + r % a.group) * D : a.q;
        float largest = 0.0f;
        if (live)
            for (int x = lane; x < D; x += 32) largest = fmaxf(largest, fabsf(q[x] * a.score_scale));
#pragma unroll
        for (int offset = 16; offset > 0; offset >>= 1)
            largest = fmaxf(largest, __shfl_xor_sync(kFullWarpMask, largest, offset));
        // (|e| ≤ 100 keeps 2^−e a normal float for a row of tiny values; such a row scores ~0.)
        const int e = largest > 0.0f ? min(100, max(-100, 13 - exponent_of(largest))) : 0;
        const float up = power_of_two(e);
        for (int c = lane; c < kChunks; c += 32) {
            __align__(16) __half hi[8], lo[8];
#pragma unroll
            for (int u = 0; u < 8; ++u) {
                const float x = live ? q[8 * c + u] * a.score_scale * up : 0.0f;
                hi[u] = __float2half_rn(x);
                lo[u] = __float2half_rn((x - __half2float(hi[u])) * kLoScale);
            }
            *reinterpret_cast<uint4*>(q_hi + swizzled<D>(r, c)) = *reinterpret_cast<const uint4*>(hi);
            *reinterpret_cast<uint4*>(q_lo + swizzled<D>(r, c)) = *reinterpret_cast<const uint4*>(lo);
        }
        if (lane == 0) unscale[r] = power_of_two(-e);
    }
    __syncwarp();

    // This thread's two rows (g and g + 8 of the warp's 16): what they see, and 2^−e.
    int last_visible[2];
    float row_unscale[2];
#pragma unroll
    for (int h = 0; h < 2; ++h) {
        const int r = 16 * warp + g + 8 * h;
        last_visible[h] = r < live_rows ? int(a.n_past + t0) + r / a.group : n_keys - 1;
        row_unscale[h] = unscale[r];
    }
    // Every key below this one is visible to every row of the block: tiles wholly below it need no mask.
    const int all_see = int(a.n_past + t0) + 1;

    float o[2 * kSteps][4];
#pragma unroll
    for (int n = 0; n < 2 * kSteps; ++n) o[n][0] = o[n][1] = o[n][2] = o[n][3] = 0.0f;
    float m[2] = {-INFINITY, -INFINITY}, l[2] = {0.0f, 0.0f};

    for (int i = 0; i < n_tiles; ++i) {
        const int key0 = i * kKeys;
        if (i + 1 < n_tiles) issue_tile<D>(a, smem + L::kRing + ((i + 1) % kStages) * L::kStageBytes, kvh, key0 + kKeys, n_keys);
        cp_async_commit_group();
        cp_async_wait_group<1>();
        __syncthreads();
        const unsigned char* k_tile = smem + L::kRing + (i % kStages) * L::kStageBytes;
        const unsigned char* v_tile = k_tile + size_t(kKeys) * 2 * D;

        float s_hi[4][4] = {}, s_lo[4][4] = {};
#pragma unroll
        for (int ks = 0; ks < kSteps; ++ks) {
            uint32_t qa_hi[4], qa_lo[4];
            ldmatrix_x4(q_hi + swizzled<D>(a_row, 2 * ks + a_chunk), qa_hi);
            ldmatrix_x4(q_lo + swizzled<D>(a_row, 2 * ks + a_chunk), qa_lo);
#pragma unroll
            for (int np = 0; np < 2; ++np) {
                uint32_t kb[4];
                ldmatrix_x4(k_tile + swizzled<D>(16 * np + k_key, 2 * ks + k_chunk), kb);
                mma_f16_f32(s_hi[2 * np], qa_hi, kb[0], kb[1]);
                mma_f16_f32(s_hi[2 * np + 1], qa_hi, kb[2], kb[3]);
                mma_f16_f32(s_lo[2 * np], qa_lo, kb[0], kb[1]);
                mma_f16_f32(s_lo[2 * np + 1], qa_lo, kb[2], kb[3]);
            }
        }

        // Scores (log2 domain), masked past each row's last visible key; accumulator element c of n-tile n
        // is row g + 8·(c / 2), key key0 + 8n + 2·tq + c % 2.
        const bool needs_mask = key0 + kKeys > all_see;
        float s[4][4];
#pragma unroll
        for (int n = 0; n < 4; ++n)
#pragma unroll
            for (int c = 0; c < 4; ++c) {
                const float score = fmaf(s_lo[n][c], 1.0f / kLoScale, s_hi[n][c]) * row_unscale[c >> 1];
                const int key = key0 + 8 * n + 2 * tq + (c & 1);
                s[n][c] = needs_mask && key > last_visible[c >> 1] ? -INFINITY : score;
            }

        // Online softmax per row; the weights, scaled by 2^12, as hi and lo A fragments.
        uint32_t p_hi[2][4], p_lo[2][4];
#pragma unroll
        for (int h = 0; h < 2; ++h) {
            float tile_max = -INFINITY;
#pragma unroll
            for (int n = 0; n < 4; ++n) tile_max = fmaxf(tile_max, fmaxf(s[n][2 * h], s[n][2 * h + 1]));
            tile_max = fmaxf(tile_max, __shfl_xor_sync(kFullWarpMask, tile_max, 1));
            tile_max = fmaxf(tile_max, __shfl_xor_sync(kFullWarpMask, tile_max, 2));
            // Finite after the first tile: key 0 is visible to every row.
            const float m_new = fmaxf(m[h], tile_max);
            const float correction = exp2f(m[h] - m_new);  // 0 on the first tile (m = −inf)
            m[h] = m_new;
            float sum = 0.0f;
#pragma unroll
            for (int n = 0; n < 4; ++n) {
                const float p0 = exp2f(s[n][2 * h] - m_new), p1 = exp2f(s[n][2 * h + 1] - m_new);
                sum += p0 + p1;
                const float w0 = p0 * kWeightScale, w1 = p1 * kWeightScale;
                const __half h0 = __float2half_rn(w0), h1 = __float2half_rn(w1);
                // A fragment of k-step n / 2: register (n % 2)·2 + h holds row g + 8h, keys 8(n % 2) + 2tq, +1.
                p_hi[n >> 1][((n & 1) << 1) + h] = pack_halves(h0, h1);
                p_lo[n >> 1][((n & 1) << 1) + h] =
                    pack_halves(__float2half_rn(w0 - __half2float(h0)), __float2half_rn(w1 - __half2float(h1)));
            }
            l[h] = fmaf(l[h], correction, sum);
#pragma unroll
            for (int n = 0; n < 2 * kSteps; ++n) {
                o[n][2 * h] *= correction;
                o[n][2 * h + 1] *= correction;
            }
        }

        // P V: O[16 rows][D] += P[16][32 keys] · V[32 keys][D], two k-steps of 16 keys.
#pragma unroll
        for (int kk = 0; kk < 2; ++kk) {
#pragma unroll
            for (int dp = 0; dp < kSteps; ++dp) {
                uint32_t vb[4];
                ldmatrix_x4_trans(v_tile + swizzled<D>(16 * kk + v_key, 2 * dp + v_chunk), vb);
                mma_f16_f32(o[2 * dp], p_hi[kk], vb[0], vb[1]);
                mma_f16_f32(o[2 * dp + 1], p_hi[kk], vb[2], vb[3]);
                mma_f16_f32(o[2 * dp], p_lo[kk], vb[0], vb[1]);
                mma_f16_f32(o[2 * dp + 1], p_lo[kk], vb[2], vb[3]);
            }
        }
        __syncthreads();  // this stage is refilled by the next iteration's issue
    }
    cp_async_wait_group<0>();

    // out = O / (2^12 · l) (· sigmoid(gate)); l summed over the row's four lanes.
#pragma unroll
    for (int h = 0; h < 2; ++h) {
        float total = l[h];
        total += __shfl_xor_sync(kFullWarpMask, total, 1);
        total += __shfl_xor_sync(kFullWarpMask, total, 2);
        const int r = 16 * warp + g + 8 * h;
        if (r >= live_rows) continue;
        const int64_t t = t0 + r / a.group, head = kvh * a.group + r % a.group;
        const float inv = 1.0f / (total * kWeightScale);
        float* out = a.out + (t * a.n_head + head) * D;
        const float* gate = a.gate != nullptr ? a.gate + (t * a.n_head + head) * D : nullptr;
#pragma unroll
        for (int n = 0; n < 2 * kSteps; ++n) {
            const int x = 8 * n + 2 * tq;
            float2 value = make_float2(o[n][2 * h] * inv, o[n][2 * h + 1] * inv);
            if (gate != nullptr) {
                value.x *= sigmoid_f(gate[x]);
                value.y *= sigmoid_f(gate[x + 1]);
            }
            *reinterpret_cast<float2*>(out + x) = value;
        }
    }
}

template <int D>
__global__ void __launch_bounds__(kThreads, D == 256 ? 1 : 2) attention_prefill_mma_kernel(MmaPrefillArgs a) {
    extern __shared__ __align__(128) unsigned char smem[];
    const int64_t q_tiles = (a.n_tokens + a.positions - 1) / a.positions;
    // Longest rows first: a tile late in the prompt sees the most keys.
    for (int64_t item = blockIdx.x; item < a.n_kv_head * q_tiles; item += gridDim.x) {
        attend_item<D>(a, smem, item % a.n_kv_head, (q_tiles - 1 - item / a.n_kv_head) * a.positions);
        __syncthreads();  // q's rows and the ring are rewritten by the next item
    }
}

template <int D>
void launch(const MmaPrefillArgs& args, unsigned blocks, cudaStream_t stream) {
    static const bool attributes_set = [] {
        cuda_check(cudaFuncSetAttribute(attention_prefill_mma_kernel<D>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                        int(Layout<D>::kTotal)),
                   "attention prefill (tensor cores) shared memory");
        return true;
    }();
    (void)attributes_set;
    attention_prefill_mma_kernel<D><<<blocks, kThreads, Layout<D>::kTotal, stream>>>(args);
    cuda_check_launch("attention_prefill_mma_kernel");
}

}  // namespace

bool attention_prefill_mma_supported(const AttentionDims& dims) {
    return (dims.head_dim == 64 || dims.head_dim == 128 || dims.head_dim == 256) && dims.n_kv_head > 0 &&
           dims.n_head % dims.n_kv_head == 0 && dims.n_head / dims.n_kv_head <= kRows && dims.n_past >= 0;
}

void attention_prefill_mma(const float* q, const uint16_t* k, const uint16_t* v, const float* gate,
                           const AttentionDims& dims, float* out, cudaStream_t stream, int64_t max_blocks) {
    if (!attention_prefill_mma_supported(dims)) {
        fail_message("attention_prefill_mma (cuda): head_dim " + std::to_string(dims.head_dim) +
                     " (64, 128 or 256), n_head " + std::to_string(dims.n_head) + ", n_kv_head " +
                     std::to_string(dims.n_kv_head) + " (at most " + std::to_string(kRows) +
                     " query heads per kv head), n_past " + std::to_string(dims.n_past) + " is not a supported shape");
    }
    if (dims.n_tokens <= 0 || dims.n_head <= 0) return;
    if (dims.n_past + dims.n_tokens > int64_t(INT32_MAX) - kKeys)
        fail_message("attention_prefill_mma (cuda): " + std::to_string(dims.n_past + dims.n_tokens) +
                     " positions exceed the kernel's 32-bit key indices");
    MmaPrefillArgs args{};
    args.q = q;
    args.k = reinterpret_cast<const __half*>(k);
    args.v = reinterpret_cast<const __half*>(v);
    args.gate = gate;
    args.out = out;
    args.n_tokens = dims.n_tokens;
    args.n_past = dims.n_past;
    args.n_head = dims.n_head;
    args.n_kv_head = dims.n_kv_head;
    args.group = int(dims.n_head / dims.n_kv_head);
    args.positions = kRows / args.group;
    args.score_scale = float(1.4426950408889634 / std::sqrt(double(dims.head_dim)));
    const int64_t items = dims.n_kv_head * ((dims.n_tokens + args.positions - 1) / args.positions);
    const unsigned blocks = max_blocks > 0 ? unsigned(std::min(items, max_blocks)) : grid_blocks(items);
    switch (dims.head_dim) {
        case 64: launch<64>(args, blocks, stream); break;
        case 128: launch<128>(args, blocks, stream); break;
        default: launch<256>(args, blocks, stream); break;
    }
}

}  // namespace deltabit::cuda
