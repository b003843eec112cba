// The chunked gated delta rule's forward, its backward's carry and its gradients on tensor cores (contract:
// delta_rule_chunked_mma.h), for the bf16 training path at key dim 64 and 128: the math of delta_rule_chunked_kernels.cu (whose header
// gives the formulas) with every matrix product on mma.m16n8k16, bf16 operands and fp32 accumulators.
// What stays fp32 (or double) is what the products feed on: the state S carried from chunk to chunk
// (in registers, never rounded; only its copy for the chunk's K S and Q S is), T = (I + A)^{-1} by fp32
// forward substitution, the decays (γ summed and differenced in double), and every elementwise step
// (β ⊙ (V − e^γ ⊙ K S), e^γ ⊙ Q S, λ S). Saved T, M, V' and states are fp32, in the fp32 kernels'
// layout (delta_rule_chunked_common.cuh): either backward reads them unchanged, and the gradients
// kernel reads the dS and W the carry leaves.
//
// The forward's two launches, as the fp32 forward's:
//   chunk_factors_mma_kernel  grid (chunks, Hv, B). K Kᵀ and Q Kᵀ [L][L] over dk, warp w owning rows
//                             16(w % 4) .. +15 and columns 32(w / 4) .. +31 (the two tiles wholly above
//                             the diagonal skip their products); then A, M and T as the fp32 kernel.
//   forward_walk_mma_kernel   grid (tiles of 32 value columns, Hv, B), chunk after chunk:
//     K S, Q S [L][32] over dk   warp w: rows 16(w % 4) .. +15, columns 16(w / 4) .. +15
//     V' = T x, O += M V'        the same tiles; T and M are lower triangular, so the warp of rows
//                                16r .. 16r + 15 takes k-steps 0 .. r only
//     S ← λ S + Kᵀ (f ⊙ V')      [dk][32] over the chunk's L tokens, warp w: rows 16(w % (dk/16)) .. +15,
//                                dk/32 n-tiles; these accumulators ARE the fp32 state, kept in registers
//                                across chunks.
// backward_carry_mma_kernel (the backward's first launch) walks the same tiles from the last chunk, and
// backward_gradients_mma_kernel (its second) forms every gradient of a chunk: see their comments.
// Products are formed from bf16 tiles in shared memory through ldmatrix (.trans where the stored
// layout is the transpose of the fragment's: S, x, V' are stored [k][column], and Kᵀ is read from K's
// rows). No atomics: two runs give the same bits.
//
// Precision: each operand is rounded once to bf16 (relative error ≤ u = 2⁻⁸), products exact in fp32,
// fp32 accumulation (the tensor cores' is aligned and truncated: tensor_core.cuh). The resulting bound
// per output element, carried through T's inverse and the state from chunk to chunk, is
// tests/train/delta_rule_bf16_bounds.h; tests/train/test_cuda_delta_rule.cpp checks every element against it.
#include "train/cuda/delta_rule_chunked_common.cuh"
#include "train/cuda/delta_rule_chunked_mma.h"
#include "train/cuda/device_common.cuh"
#include "train/cuda/kernel_marks.h"

#include <cuda_bf16.h>

#include "ops/cuda/tensor_core.cuh"

namespace deltabit::train::cuda {
namespace {

using namespace delta_chunked;
using deltabit::cuda::cuda_check_launch;
using deltabit::cuda::ldmatrix_x4;
using deltabit::cuda::ldmatrix_x4_trans;
using deltabit::cuda::mma_bf16_f32;

constexpr int kThreads = 256;  // 8 warps
constexpr int kTile = 32;      // value columns per walk block, as the fp32 walk
static_assert(L == 64 && kThreads == 8 * 32, "the warp tiles assume 8 warps over 64-token chunks");

// bf16 rows of `Chunks` 16-byte chunks (8 values each). Chunk c of row r is stored at c ^ (r % 8), or
// c ^ (r / 2 % 4) in rows of 4 chunks, so that the 8 rows one ldmatrix matrix reads at the same
// column fall in 8 different 16-byte bank groups.
template <int Chunks>
__device__ __forceinline__ int swizzled(int r, int c) {
    static_assert(Chunks == 4 || Chunks == 8 || Chunks == 16, "rows of 32, 64 or 128 bf16 values");
    const int s = Chunks == 4 ? (r >> 1) & 3 : r & 7;
    return r * Chunks * 16 + ((c ^ s) << 4);
}

__device__ __forceinline__ uint32_t pack_bf16(float first, float second) {
    return uint32_t(__bfloat16_as_ushort(__float2bfloat16_rn(first))) |
           (uint32_t(__bfloat16_as_ushort(__float2bfloat16_rn(second))) << 16);
}

// Values (r, col) and (r, col + 1), col even, rounded into a bf16 tile.
template <int Chunks>
__device__ __forceinline__ void store_pair(unsigned char* tile, int r, int col, float first, float second) {
    *reinterpret_cast<uint32_t*>(tile + swizzled<Chunks>(r, col >> 3) + ((col & 7) << 1)) = pack_bf16(first, second);
}

// Fragments (layouts: ops/cuda/tensor_core.cuh) for k-step s (k = 16s .. 16s + 15).
// A = rows a0 .. a0 + 15 of a tile stored [row][k].
template <int Chunks>
__device__ __forceinline__ void a_fragment(const unsigned char* tile, int a0, int s, uint32_t (&a)[4]) {
    const int lane = int(threadIdx.x) & 31;
    ldmatrix_x4(tile + swizzled<Chunks>(a0 + (lane & 15), 2 * s + (lane >> 4)), a);
}
// A = rows a0 .. a0 + 15 of Xᵀ, X stored [k][row] (Kᵀ from K's token rows): matrix m of the four is
// X's rows 16s + 8(m / 2) .. +7 at columns a0 + 8(m % 2) .. +7, transposed.
template <int Chunks>
__device__ __forceinline__ void a_fragment_of_transpose(const unsigned char* tile, int a0, int s, uint32_t (&a)[4]) {
    const int lane = int(threadIdx.x) & 31, m = lane >> 3;
    ldmatrix_x4_trans(tile + swizzled<Chunks>(16 * s + (lane & 7) + ((m >> 1) << 3), (a0 >> 3) + (m & 1)), a);
}
// B of columns n0 .. n0 + 15 (two n-tiles: b[0], b[1] for n0 .., b[2], b[3] for n0 + 8 ..) of a tile
// stored [k][column].
template <int Chunks>
__device__ __forceinline__ void b_fragments(const unsigned char* tile, int n0, int s, uint32_t (&b)[4]) {
    const int lane = int(threadIdx.x) & 31;
    ldmatrix_x4_trans(tile + swizzled<Chunks>(16 * s + (lane & 7) + (((lane >> 3) & 1) << 3), (n0 >> 3) + (lane >> 4)),
                      b);
}
// The same of Xᵀ, X stored [column][k] (Kᵀ as the B of K Kᵀ).
template <int Chunks>
__device__ __forceinline__ void b_fragments_of_transpose(const unsigned char* tile, int n0, int s, uint32_t (&b)[4]) {
    const int lane = int(threadIdx.x) & 31;
    ldmatrix_x4(tile + swizzled<Chunks>(n0 + (lane & 7) + ((lane >> 4) << 3), 2 * s + ((lane >> 3) & 1)), b);
}

// One k-step of a warp's 16 × 16 product: lo (columns n0 .. n0 + 7) and hi (n0 + 8 .. n0 + 15) += A times
// the two n-tiles one b_fragments (or b_fragments_of_transpose) call loaded, lo first.
__device__ __forceinline__ void mma_16x16(float (&lo)[4], float (&hi)[4], const uint32_t (&a)[4],
                                          const uint32_t (&b)[4]) {
    mma_bf16_f32(lo, a, b[0], b[1]);
    mma_bf16_f32(hi, a, b[2], b[3]);
}

// acc [16 rows a0 ..][16 columns n0 ..] += A · B over k-steps first .. last − 1, in that order: A's rows
// from a tile stored [row][k] (a_fragment), or [k][row] when ATransposed (Mᵀ, Tᵀ from M's and T's rows);
// B from a [k][kTile] tile (S, x, V', dO).
template <int AChunks, bool ATransposed>
__device__ __forceinline__ void accumulate_16x16(const unsigned char* a_tile, int a0, const unsigned char* b_tile,
                                                 int n0, int first, int last, float (&acc)[2][4]) {
    for (int s = first; s < last; ++s) {
        uint32_t a[4], b[4];
        if constexpr (ATransposed)
            a_fragment_of_transpose<AChunks>(a_tile, a0, s, a);
        else
            a_fragment<AChunks>(a_tile, a0, s, a);
        b_fragments<kTile / 8>(b_tile, n0, s, b);
        mma_16x16(acc[0], acc[1], a, b);
    }
}

// K Kᵀ and Q Kᵀ on a warp's tile of rows r0 .. r0 + 15 and key tokens c0 .. c0 + 31, over the D key
// columns (the factors kernel's A and M; the gradients kernel's pass through them).
template <int D>
__device__ __forceinline__ void key_products_16x32(const unsigned char* ks, const unsigned char* qs, int r0, int c0,
                                                   float (&kk)[4][4], float (&qk)[4][4]) {
    for (int s = 0; s < D / 16; ++s) {
        uint32_t ak[4], aq[4];
        a_fragment<D / 8>(ks, r0, s, ak);
        a_fragment<D / 8>(qs, r0, s, aq);
#pragma unroll
        for (int pair = 0; pair < 2; ++pair) {
            uint32_t bk[4];
            b_fragments_of_transpose<D / 8>(ks, c0 + 16 * pair, s, bk);
            mma_16x16(kk[2 * pair], kk[2 * pair + 1], ak, bk);
            mma_16x16(qk[2 * pair], qk[2 * pair + 1], aq, bk);
        }
    }
}

// Rows t0 .. t0 + L − 1 of key head kh of q or k [B·T][Hk][D] as bf16 [L][D], zeros past len.
// Both stagers have a fixed trip count per thread, unrolled by 4 so that a thread's global loads go
// out four at a time (fully unrolled, the walk needed 251 registers at dk = 128: one block an SM).
template <int D>
__device__ void stage_key_rows(const float* src, const Dims& d, int64_t b, int64_t kh, int64_t t0, int len,
                               unsigned char* dst) {
    static_assert(L * D / 2 % kThreads == 0, "whole pairs per thread");
#pragma unroll 4
    for (int pass = 0; pass < L * D / 2 / kThreads; ++pass) {
        const int e = int(threadIdx.x) + pass * kThreads, i = e / (D / 2), x = 2 * (e % (D / 2));
        float first = 0.0f, second = 0.0f;
        if (i < len) {
            const float* row = src + (d.token(b, t0 + i) * d.Hk + kh) * D;
            first = row[x];
            second = row[x + 1];
        }
        store_pair<D / 8>(dst, i, x, first, second);
    }
}

// An fp32 [L][L] factor (T or M) as bf16 [L][L].
__device__ void stage_square(const float* src, unsigned char* dst) {
    static_assert(L * L / 2 % kThreads == 0, "whole pairs per thread");
#pragma unroll 4
    for (int pass = 0; pass < L * L / 2 / kThreads; ++pass) {
        const int e = int(threadIdx.x) + pass * kThreads, i = e / (L / 2), j = 2 * (e % (L / 2));
        store_pair<L / 8>(dst, i, j, src[i * L + j], src[i * L + j + 1]);
    }
}

// The two walks' shared steps (the forward's S, the carry's dS: the same layouts, the same operands).

// The fp32 state this thread holds (element e of n-tile n is S[sr0 + g4 + 8(e / 2)][sc0 + 8n + 2t4 + e % 2])
// into s_tile as bf16 [D][kTile], the products' operand, and as fp32 into `saved` [dk][dv] (columns v0 …).
template <int kStateTiles>
__device__ void publish_state(const float (&state)[kStateTiles][4], int sr0, int sc0, int g4, int t4, int64_t v0,
                              int64_t dv, unsigned char* s_tile, float* saved) {
#pragma unroll
    for (int n = 0; n < kStateTiles; ++n)
#pragma unroll
        for (int half = 0; half < 2; ++half) {
            const int x = sr0 + g4 + 8 * half, col = sc0 + 8 * n + 2 * t4;
            store_pair<kTile / 8>(s_tile, x, col, state[n][2 * half], state[n][2 * half + 1]);
            if (v0 + col < dv) saved[x * dv + v0 + col] = state[n][2 * half];
            if (v0 + col + 1 < dv) saved[x * dv + v0 + col + 1] = state[n][2 * half + 1];
        }
}

// A chunk's state-free operands: K and Q rows and T and M as bf16; e^γ, e^{γ_ℓ−γ} and β (zero past len) fp32.
template <int D>
__device__ void stage_chunk(const float* q, const float* k, const float* beta, const float* chunk_factors,
                            const Dims& d, int64_t b, int64_t h, int64_t kh, int64_t t0, int len, unsigned char* ks,
                            unsigned char* qs, unsigned char* t_tile, unsigned char* m_tile, float* e, float* f,
                            float* bt) {
    stage_key_rows<D>(k, d, b, kh, t0, len, ks);
    stage_key_rows<D>(q, d, b, kh, t0, len, qs);
    stage_square(chunk_factors, t_tile);
    stage_square(chunk_factors + L * L, m_tile);
    for (int i = int(threadIdx.x); i < L; i += kThreads) {
        e[i] = chunk_factors[2 * L * L + i];
        f[i] = chunk_factors[2 * L * L + L + i];
        bt[i] = i < len ? beta[d.token(b, t0 + i) * d.Hv + h] : 0.0f;
    }
}

// ---- state-free factors: grid (chunks, Hv, B) ----

template <int D>
size_t factors_shared_bytes() {
    return size_t(L) * sizeof(double) + size_t(2 * L * D) * 2 + size_t(2 * L * kSquareRow + L) * sizeof(float);
}

template <int D>
__global__ void __launch_bounds__(kThreads)
    chunk_factors_mma_kernel(const float* q, const float* k, const float* g, const float* beta, Dims d,
                             float* factors) {
    extern __shared__ __align__(16) unsigned char smem[];
    double* gamma = reinterpret_cast<double*>(smem);  // [L]
    unsigned char* ks = smem + L * sizeof(double);    // bf16 [L][D]
    unsigned char* qs = ks + L * D * 2;
    float* a = reinterpret_cast<float*>(qs + L * D * 2);  // [L][kSquareRow]
    float* t_mat = a + L * kSquareRow;
    float* bt = t_mat + L * kSquareRow;
    const int64_t c = blockIdx.x, h = blockIdx.y, b = blockIdx.z, t0 = c * L, kh = d.key_head(h);
    const int len = chunk_length(d, c);
    stage_key_rows<D>(k, d, b, kh, t0, len, ks);
    stage_key_rows<D>(q, d, b, kh, t0, len, qs);
    cumulative_decay(g, d, b, h, t0, len, gamma);
    for (int i = int(threadIdx.x); i < L; i += kThreads) bt[i] = i < len ? beta[d.token(b, t0 + i) * d.Hv + h] : 0.0f;
    __syncthreads();
    const int warp = int(threadIdx.x) >> 5, lane = int(threadIdx.x) & 31, g4 = lane >> 2, t4 = lane & 3;
    const int r0 = 16 * (warp & 3), c0 = 32 * (warp >> 2);
    float kk[4][4] = {}, qk[4][4] = {};
    if (c0 <= r0 + 15) key_products_16x32<D>(ks, qs, r0, c0, kk, qk);  // warp-uniform: skips tiles above the diagonal
    float* out = factors + d.factor_offset(b, h, c);
#pragma unroll
    for (int n = 0; n < 4; ++n)
#pragma unroll
        for (int e = 0; e < 4; ++e) {
            const int i = r0 + g4 + 8 * (e >> 1), j = c0 + 8 * n + 2 * t4 + (e & 1);
            const float decay = j <= i ? float(exp(gamma[i] - gamma[j])) : 0.0f;
            a[i * kSquareRow + j] = j < i ? bt[i] * kk[n][e] * decay : 0.0f;
            out[L * L + i * L + j] = qk[n][e] * decay;  // M
        }
    if (threadIdx.x < L) {
        out[2 * L * L + threadIdx.x] = float(exp(gamma[threadIdx.x]));
        out[2 * L * L + L + threadIdx.x] = float(exp(gamma[L - 1] - gamma[threadIdx.x]));
    }
    __syncthreads();
    unit_lower_inverse(a, t_mat);
    __syncthreads();
    for (int x = int(threadIdx.x); x < L * L; x += kThreads) out[x] = t_mat[(x / L) * kSquareRow + x % L];
}

// ---- forward walk: grid (value tiles, Hv, B) ----

template <int D>
size_t walk_shared_bytes() {
    return size_t(2 * L * D + 2 * L * L + D * kTile + 3 * L * kTile) * 2 + size_t(3 * L) * sizeof(float);
}

template <int D>
__global__ void __launch_bounds__(kThreads)
    forward_walk_mma_kernel(const float* q, const float* k, const float* v, const float* beta, const float* factors,
                            Dims d, float* o, float* states, float* v_new) {
    extern __shared__ __align__(16) unsigned char smem[];
    unsigned char* ks = smem;                           // K rows, bf16 [L][D]
    unsigned char* qs = ks + L * D * 2;                 // Q rows
    unsigned char* t_tile = qs + L * D * 2;             // T, bf16 [L][L]
    unsigned char* m_tile = t_tile + L * L * 2;         // M
    unsigned char* s_tile = m_tile + L * L * 2;         // the state entering the chunk, bf16 [D][kTile]
    unsigned char* x_tile = s_tile + D * kTile * 2;     // β ⊙ (V − e^γ ⊙ K S), bf16 [L][kTile]
    unsigned char* vn_tile = x_tile + L * kTile * 2;    // V'
    unsigned char* fv_tile = vn_tile + L * kTile * 2;   // e^{γ_ℓ−γ} ⊙ V'
    float* e = reinterpret_cast<float*>(fv_tile + L * kTile * 2);
    float* f = e + L;
    float* bt = f + L;
    constexpr int kTileChunks = kTile / 8;
    constexpr int kStateRowBlocks = D / 16, kStateTiles = D / 32;  // the state's [D][32] over 8 warps
    const int64_t h = blockIdx.y, b = blockIdx.z, v0 = int64_t(blockIdx.x) * kTile, kh = d.key_head(h);
    const int warp = int(threadIdx.x) >> 5, lane = int(threadIdx.x) & 31, g4 = lane >> 2, t4 = lane & 3;
    const int r0 = 16 * (warp & 3), n0 = 16 * (warp >> 2), row_block = warp & 3;  // token rows × columns
    const int sr0 = 16 * (warp % kStateRowBlocks), sc0 = (warp / kStateRowBlocks) * 8 * kStateTiles;
    // The fp32 state: element e of n-tile n is S[sr0 + g4 + 8(e / 2)][sc0 + 8n + 2t4 + e % 2].
    float state[kStateTiles][4] = {};
    for (int64_t c = 0; c < d.chunks; ++c) {
        const int64_t t0 = c * L;
        const int len = chunk_length(d, c);
        __syncthreads();  // the previous chunk is done with all of shared memory
        publish_state(state, sr0, sc0, g4, t4, v0, d.dv, s_tile, states + d.state_offset(b, h, c));
        const float* chunk_factors = factors + d.factor_offset(b, h, c);
        stage_chunk<D>(q, k, beta, chunk_factors, d, b, h, kh, t0, len, ks, qs, t_tile, m_tile, e, f, bt);
        __syncthreads();
        // K S and Q S; x = β ⊙ (V − e^γ ⊙ K S) to x_tile; O starts as e^γ ⊙ Q S. This thread's values of
        // V are read first, their latency behind the products.
        float v_at[2][4];
#pragma unroll
        for (int n = 0; n < 2; ++n)
#pragma unroll
            for (int x = 0; x < 4; ++x) {
                const int i = r0 + g4 + 8 * (x >> 1), col = n0 + 8 * n + 2 * t4 + (x & 1);
                v_at[n][x] = i < len && v0 + col < d.dv ? v[(d.token(b, t0 + i) * d.Hv + h) * d.dv + v0 + col] : 0.0f;
            }
        float k_state[2][4] = {}, out[2][4] = {};
        for (int s = 0; s < D / 16; ++s) {
            uint32_t ak[4], aq[4], bs[4];
            a_fragment<D / 8>(ks, r0, s, ak);
            a_fragment<D / 8>(qs, r0, s, aq);
            b_fragments<kTileChunks>(s_tile, n0, s, bs);
            mma_16x16(k_state[0], k_state[1], ak, bs);
            mma_16x16(out[0], out[1], aq, bs);
        }
#pragma unroll
        for (int n = 0; n < 2; ++n)
#pragma unroll
            for (int half = 0; half < 2; ++half) {
                const int i = r0 + g4 + 8 * half, col = n0 + 8 * n + 2 * t4;
                store_pair<kTileChunks>(x_tile, i, col, bt[i] * (v_at[n][2 * half] - e[i] * k_state[n][2 * half]),
                                        bt[i] * (v_at[n][2 * half + 1] - e[i] * k_state[n][2 * half + 1]));
                out[n][2 * half] *= e[i];
                out[n][2 * half + 1] *= e[i];
            }
        __syncthreads();
        // V' = T x (T unit lower triangular: k-steps up to the warp's diagonal block).
        float v_prime[2][4] = {};
        accumulate_16x16<L / 8, false>(t_tile, r0, x_tile, n0, 0, row_block + 1, v_prime);
#pragma unroll
        for (int n = 0; n < 2; ++n)
#pragma unroll
            for (int half = 0; half < 2; ++half) {
                const int i = r0 + g4 + 8 * half, col = n0 + 8 * n + 2 * t4;
                const float first = v_prime[n][2 * half], second = v_prime[n][2 * half + 1];
                store_pair<kTileChunks>(vn_tile, i, col, first, second);
                store_pair<kTileChunks>(fv_tile, i, col, f[i] * first, f[i] * second);
                float* row = v_new + (d.token(b, t0 + i) * d.Hv + h) * d.dv + v0 + col;
                if (i < len && v0 + col < d.dv) row[0] = first;
                if (i < len && v0 + col + 1 < d.dv) row[1] = second;
            }
        __syncthreads();
        // O += M V' (M lower triangular).
        accumulate_16x16<L / 8, false>(m_tile, r0, vn_tile, n0, 0, row_block + 1, out);
#pragma unroll
        for (int n = 0; n < 2; ++n)
#pragma unroll
            for (int half = 0; half < 2; ++half) {
                const int i = r0 + g4 + 8 * half, col = n0 + 8 * n + 2 * t4;
                float* row = o + (d.token(b, t0 + i) * d.Hv + h) * d.dv + v0 + col;
                if (i < len && v0 + col < d.dv) row[0] = out[n][2 * half];
                if (i < len && v0 + col + 1 < d.dv) row[1] = out[n][2 * half + 1];
            }
        // S ← e^{γ_ℓ} S + Kᵀ (f ⊙ V'); K's rows past len are zero, so those tokens add nothing.
        const float lambda = e[L - 1];
#pragma unroll
        for (int n = 0; n < kStateTiles; ++n)
#pragma unroll
            for (int x = 0; x < 4; ++x) state[n][x] *= lambda;
        for (int s = 0; s < L / 16; ++s) {
            uint32_t ak[4];
            a_fragment_of_transpose<D / 8>(ks, sr0, s, ak);
#pragma unroll
            for (int pair = 0; pair < kStateTiles / 2; ++pair) {
                uint32_t bv[4];
                b_fragments<kTileChunks>(fv_tile, sc0 + 16 * pair, s, bv);
                mma_16x16(state[2 * pair], state[2 * pair + 1], ak, bv);
            }
        }
    }
}

// ---- backward carry: grid (value tiles, Hv, B), chunk after chunk from the last ----
//   dV' = f ⊙ K dS + Mᵀ dO,  W = Tᵀ dV',  dS ← λ dS + Qᵀ (e ⊙ dO) − Kᵀ (e ⊙ β ⊙ W)
// (backward_carry_kernel's math) with the forward walk's tiles: Mᵀ and Tᵀ are read transposed from
// their rows, upper triangular now, so the warp of rows 16r .. 16r + 15 takes k-steps r .. 3; dS, the
// fp32 accumulators, stays in registers from chunk to chunk as the walk's S.

template <int D>
size_t carry_shared_bytes() {
    return size_t(2 * L * D + 2 * L * L + D * kTile + 4 * L * kTile) * 2 + size_t(3 * L) * sizeof(float);
}

template <int D>
__global__ void __launch_bounds__(kThreads)
    backward_carry_mma_kernel(const float* q, const float* k, const float* beta, const float* dout,
                              const float* factors, Dims d, float* dstates, float* w_out) {
    extern __shared__ __align__(16) unsigned char smem[];
    unsigned char* ks = smem;                            // K rows, bf16 [L][D]
    unsigned char* qs = ks + L * D * 2;                  // Q rows
    unsigned char* t_tile = qs + L * D * 2;              // T, bf16 [L][L]
    unsigned char* m_tile = t_tile + L * L * 2;          // M
    unsigned char* s_tile = m_tile + L * L * 2;          // dS at the chunk's end, bf16 [D][kTile]
    unsigned char* do_tile = s_tile + D * kTile * 2;     // dO, bf16 [L][kTile]
    unsigned char* edo_tile = do_tile + L * kTile * 2;   // e^γ ⊙ dO
    unsigned char* dvn_tile = edo_tile + L * kTile * 2;  // dV'
    unsigned char* ebw_tile = dvn_tile + L * kTile * 2;  // −e^γ ⊙ β ⊙ W
    float* e = reinterpret_cast<float*>(ebw_tile + L * kTile * 2);
    float* f = e + L;
    float* bt = f + L;
    constexpr int kTileChunks = kTile / 8;
    constexpr int kStateRowBlocks = D / 16, kStateTiles = D / 32;
    const int64_t h = blockIdx.y, b = blockIdx.z, v0 = int64_t(blockIdx.x) * kTile, kh = d.key_head(h);
    const int warp = int(threadIdx.x) >> 5, lane = int(threadIdx.x) & 31, g4 = lane >> 2, t4 = lane & 3;
    const int r0 = 16 * (warp & 3), n0 = 16 * (warp >> 2), row_block = warp & 3;
    const int sr0 = 16 * (warp % kStateRowBlocks), sc0 = (warp / kStateRowBlocks) * 8 * kStateTiles;
    float dstate[kStateTiles][4] = {};  // as the walk's `state`
    for (int64_t c = d.chunks - 1; c >= 0; --c) {
        const int64_t t0 = c * L;
        const int len = chunk_length(d, c);
        __syncthreads();
        publish_state(dstate, sr0, sc0, g4, t4, v0, d.dv, s_tile, dstates + d.state_offset(b, h, c));
        const float* chunk_factors = factors + d.factor_offset(b, h, c);
        stage_chunk<D>(q, k, beta, chunk_factors, d, b, h, kh, t0, len, ks, qs, t_tile, m_tile, e, f, bt);
        for (int x = int(threadIdx.x); x < L * kTile / 2; x += kThreads) {
            const int i = x / (kTile / 2), col = 2 * (x % (kTile / 2));
            const float* row = dout + (d.token(b, t0 + i) * d.Hv + h) * d.dv + v0 + col;
            const float first = i < len && v0 + col < d.dv ? row[0] : 0.0f;
            const float second = i < len && v0 + col + 1 < d.dv ? row[1] : 0.0f;
            const float ei = chunk_factors[2 * L * L + i];
            store_pair<kTileChunks>(do_tile, i, col, first, second);
            store_pair<kTileChunks>(edo_tile, i, col, ei * first, ei * second);
        }
        __syncthreads();
        // dV' = f ⊙ K dS + Mᵀ dO (Mᵀ upper triangular).
        float dv_prime[2][4] = {};
        accumulate_16x16<D / 8, false>(ks, r0, s_tile, n0, 0, D / 16, dv_prime);
#pragma unroll
        for (int n = 0; n < 2; ++n)
#pragma unroll
            for (int x = 0; x < 4; ++x) dv_prime[n][x] *= f[r0 + g4 + 8 * (x >> 1)];
        accumulate_16x16<L / 8, true>(m_tile, r0, do_tile, n0, row_block, L / 16, dv_prime);
#pragma unroll
        for (int n = 0; n < 2; ++n)
#pragma unroll
            for (int half = 0; half < 2; ++half)
                store_pair<kTileChunks>(dvn_tile, r0 + g4 + 8 * half, n0 + 8 * n + 2 * t4, dv_prime[n][2 * half],
                                        dv_prime[n][2 * half + 1]);
        __syncthreads();
        // W = Tᵀ dV' (Tᵀ unit upper triangular); −e ⊙ β ⊙ W for the state.
        float w[2][4] = {};
        accumulate_16x16<L / 8, true>(t_tile, r0, dvn_tile, n0, row_block, L / 16, w);
#pragma unroll
        for (int n = 0; n < 2; ++n)
#pragma unroll
            for (int half = 0; half < 2; ++half) {
                const int i = r0 + g4 + 8 * half, col = n0 + 8 * n + 2 * t4;
                const float first = w[n][2 * half], second = w[n][2 * half + 1], scale = -(e[i] * bt[i]);
                store_pair<kTileChunks>(ebw_tile, i, col, scale * first, scale * second);
                float* row = w_out + (d.token(b, t0 + i) * d.Hv + h) * d.dv + v0 + col;
                if (i < len && v0 + col < d.dv) row[0] = first;
                if (i < len && v0 + col + 1 < d.dv) row[1] = second;
            }
        __syncthreads();
        // dS ← λ dS + Qᵀ (e ⊙ dO) − Kᵀ (e ⊙ β ⊙ W).
        const float lambda = e[L - 1];
#pragma unroll
        for (int n = 0; n < kStateTiles; ++n)
#pragma unroll
            for (int x = 0; x < 4; ++x) dstate[n][x] *= lambda;
        for (int s = 0; s < L / 16; ++s) {
            uint32_t aq[4], ak[4];
            a_fragment_of_transpose<D / 8>(qs, sr0, s, aq);
            a_fragment_of_transpose<D / 8>(ks, sr0, s, ak);
#pragma unroll
            for (int pair = 0; pair < kStateTiles / 2; ++pair) {
                uint32_t bo[4], bw[4];
                b_fragments<kTileChunks>(edo_tile, sc0 + 16 * pair, s, bo);
                b_fragments<kTileChunks>(ebw_tile, sc0 + 16 * pair, s, bw);
                mma_16x16(dstate[2 * pair], dstate[2 * pair + 1], aq, bo);
                mma_16x16(dstate[2 * pair], dstate[2 * pair + 1], ak, bw);
            }
        }
    }
}

// ---- the gradients of every chunk: grid (chunks, Hv, B) ----
// backward_gradients_kernel's math (delta_rule_chunked_kernels.cu; the formulas are
// ref::delta_rule_chunked_backward's) with every product on mma. Per tile of 32 value columns:
//   K S, Q S, K dS [L][32] over dk          warp w: rows 16(w % 4) .. +15, columns 16(w / 4) .. +15 (the
//                                           walks' tiles); the elementwise steps (dv, r, the row sums
//                                           for dβ and dg) on those elements, in fp32
//   dM += dO V'ᵀ, dA += (−W) V'ᵀ [L][L]     rows 16(w % 4) .. +15, columns 32(w / 4) .. +31, summed over
//                                           every value column in the fp32 accumulators; the two tiles
//                                           wholly above the diagonal skip them
//   dq += (e ⊙ dO) Sᵀ, dk += (f ⊙ V') dSᵀ + (−e ⊙ β ⊙ W) Sᵀ   [L][dk], rows 16(w % 4) .. +15, key
//                                           columns (w / 4)·dk/2 .. + dk/2 (dk/16 n-tiles)
// then once: K Kᵀ and Q Kᵀ on dM's tiles; N = dM ⊙ decay, P = dA ⊙ β_i decay, dβ's pair sums and the
// span sums dM ⊙ M + dA ⊙ A in fp32 as the fp32 kernel forms them; and dq += N K, dk += Nᵀ Q + (P + Pᵀ) K
// on the dq, dk tiles (N lower triangular: the warp of rows 16r .. takes k-steps 0 .. r, Nᵀ r .. 3).
// Row sums (dβ, de, df) go over the 4 lanes of a row and then the two warps of its columns, in that
// order; ⟨S, dS⟩ is summed from the fp32 states; dg's sums are the fp32 kernel's loops. No atomics.

// Shared memory: K and Q rows stay; the dv loop's bf16 tiles (S, dS [D][32]; dO, e ⊙ dO, V', f ⊙ V',
// −W, −e ⊙ β ⊙ W [L][32]) are dead after it, and N, P + Pᵀ (bf16) and P, the span sums (fp32) take
// their bytes.
template <int D>
constexpr int gradients_region_bytes() {
    constexpr int loop = (2 * D * kTile + 6 * L * kTile) * 2, after = 2 * L * L * 2 + 2 * L * kSquareRow * 4;
    return loop > after ? loop : after;
}

template <int D>
size_t gradients_shared_bytes() {
    return size_t(L) * sizeof(double) + size_t(2 * L * D) * 2 + size_t(gradients_region_bytes<D>()) +
           size_t(13 * L + 32) * sizeof(float);
}

template <int D>
__global__ void __launch_bounds__(kThreads, 1)
    backward_gradients_mma_kernel(const float* q, const float* k, const float* v, const float* g, const float* beta,
                                  const float* dout, const float* states, const float* v_new, const float* dstates,
                                  const float* w_in, Dims d, float* dv_out, float* dq_part, float* dk_part,
                                  float* dg_out, float* dbeta_out) {
    extern __shared__ __align__(16) unsigned char smem[];
    double* gamma = reinterpret_cast<double*>(smem);  // [L]
    unsigned char* ks = smem + L * sizeof(double);    // K rows, bf16 [L][D]
    unsigned char* qs = ks + L * D * 2;               // Q rows
    unsigned char* region = qs + L * D * 2;
    unsigned char* s_tile = region;                       // S, bf16 [D][kTile]
    unsigned char* ds_tile = s_tile + D * kTile * 2;      // dS
    unsigned char* do_tile = ds_tile + D * kTile * 2;     // dO, bf16 [L][kTile]
    unsigned char* edo_tile = do_tile + L * kTile * 2;    // e^γ ⊙ dO
    unsigned char* vn_tile = edo_tile + L * kTile * 2;    // V'
    unsigned char* fvn_tile = vn_tile + L * kTile * 2;    // e^{γ_ℓ−γ} ⊙ V'
    unsigned char* nw_tile = fvn_tile + L * kTile * 2;    // −W
    unsigned char* ebw_tile = nw_tile + L * kTile * 2;    // −e^γ ⊙ β ⊙ W
    unsigned char* n_tile = region;                       // after the dv loop: N = dM ⊙ decay, bf16 [L][L]
    unsigned char* psym_tile = n_tile + L * L * 2;        // P + Pᵀ
    float* p_mat = reinterpret_cast<float*>(psym_tile + L * L * 2);  // P = dA ⊙ β_i decay, fp32 [L][kSquareRow]
    float* span = p_mat + L * kSquareRow;  // dM ⊙ M + dA ⊙ A, then its row prefix sums
    float* e = reinterpret_cast<float*>(region + gradients_region_bytes<D>());
    float* f = e + L;
    float* bt = f + L;
    float* from_start = bt + L;
    float* to_end = from_start + L;
    float* row_de = to_end + L;         // [2][L]: a row's sums over the two warps of its columns
    float* row_df = row_de + 2 * L;
    float* row_dbeta = row_df + 2 * L;  // Σ_c W r
    float* row_pairs = row_dbeta + 2 * L;  // Σ_j dA_ij (k_i·k_j) e^{γ_i−γ_j}
    float* reduce = row_pairs + 2 * L;  // [32]
    constexpr int kTileChunks = kTile / 8, kKeyTiles = D / 16;
    const int64_t c = blockIdx.x, h = blockIdx.y, b = blockIdx.z, t0 = c * L, kh = d.key_head(h);
    const int len = chunk_length(d, c);
    const int warp = int(threadIdx.x) >> 5, lane = int(threadIdx.x) & 31, g4 = lane >> 2, t4 = lane & 3;
    const int r0 = 16 * (warp & 3), row_block = warp & 3, half_col = warp >> 2;
    const int n0 = 16 * half_col, c0 = 32 * half_col, x0 = half_col * (D / 2);
    const bool below = c0 <= r0 + 15;  // warp-uniform: dM's tile reaches the diagonal
    stage_key_rows<D>(k, d, b, kh, t0, len, ks);
    stage_key_rows<D>(q, d, b, kh, t0, len, qs);
    cumulative_decay(g, d, b, h, t0, len, gamma);
    for (int i = int(threadIdx.x); i < L; i += kThreads) bt[i] = i < len ? beta[d.token(b, t0 + i) * d.Hv + h] : 0.0f;
    __syncthreads();
    if (threadIdx.x < L) {  // published by the dv loop's first barrier
        e[threadIdx.x] = float(exp(gamma[threadIdx.x]));
        f[threadIdx.x] = float(exp(gamma[L - 1] - gamma[threadIdx.x]));
    }
    const float* S = states + d.state_offset(b, h, c);
    const float* dS = dstates + d.state_offset(b, h, c);
    // dq and dk: element e of n-tile n is row r0 + g4 + 8(e / 2), key x0 + 8n + 2t4 + e % 2; dM and dA:
    // row r0 + g4 + 8(e / 2), token c0 + 8n + 2t4 + e % 2.
    float acc_q[kKeyTiles][4] = {}, acc_k[kKeyTiles][4] = {}, dm[4][4] = {}, da[4][4] = {};
    float de[2] = {}, df[2] = {}, dbeta_row[2] = {}, carried = 0.0f;
    for (int64_t v0 = 0; v0 < d.dv; v0 += kTile) {
        __syncthreads();  // the previous tile's products are done with the tiles
        // S and dS as bf16 [D][kTile], and ⟨S, dS⟩ from their fp32 values.
#pragma unroll 4
        for (int pass = 0; pass < D * kTile / 2 / kThreads; ++pass) {
            const int x = int(threadIdx.x) + pass * kThreads, r = x / (kTile / 2), col = 2 * (x % (kTile / 2));
            const bool first = v0 + col < d.dv, second = v0 + col + 1 < d.dv;
            const int64_t at = int64_t(r) * d.dv + v0 + col;
            const float s0 = first ? S[at] : 0.0f, s1 = second ? S[at + 1] : 0.0f;
            const float d0 = first ? dS[at] : 0.0f, d1 = second ? dS[at + 1] : 0.0f;
            store_pair<kTileChunks>(s_tile, r, col, s0, s1);
            store_pair<kTileChunks>(ds_tile, r, col, d0, d1);
            carried += s0 * d0;
            carried += s1 * d1;
        }
        // The token tiles (zeros past len and dv), with their fp32 scalings.
#pragma unroll 4
        for (int pass = 0; pass < L * kTile / 2 / kThreads; ++pass) {
            const int x = int(threadIdx.x) + pass * kThreads, i = x / (kTile / 2), col = 2 * (x % (kTile / 2));
            const bool first = i < len && v0 + col < d.dv, second = i < len && v0 + col + 1 < d.dv;
            float o0 = 0.0f, o1 = 0.0f, n0v = 0.0f, n1v = 0.0f, w0 = 0.0f, w1 = 0.0f;
            if (first) {
                const int64_t at = (d.token(b, t0 + i) * d.Hv + h) * d.dv + v0 + col;
                o0 = dout[at];
                n0v = v_new[at];
                w0 = w_in[at];
                if (second) {
                    o1 = dout[at + 1];
                    n1v = v_new[at + 1];
                    w1 = w_in[at + 1];
                }
            }
            const float ei = e[i], fi = f[i], scale = -(ei * bt[i]);
            store_pair<kTileChunks>(do_tile, i, col, o0, o1);
            store_pair<kTileChunks>(edo_tile, i, col, ei * o0, ei * o1);
            store_pair<kTileChunks>(vn_tile, i, col, n0v, n1v);
            store_pair<kTileChunks>(fvn_tile, i, col, fi * n0v, fi * n1v);
            store_pair<kTileChunks>(nw_tile, i, col, -w0, -w1);
            store_pair<kTileChunks>(ebw_tile, i, col, scale * w0, scale * w1);
        }
        __syncthreads();
        // K S, Q S, K dS.
        float k_state[2][4] = {}, q_state[2][4] = {}, k_dstate[2][4] = {};
        for (int s = 0; s < D / 16; ++s) {
            uint32_t ak[4], aq[4], bs[4], bd[4];
            a_fragment<D / 8>(ks, r0, s, ak);
            a_fragment<D / 8>(qs, r0, s, aq);
            b_fragments<kTileChunks>(s_tile, n0, s, bs);
            b_fragments<kTileChunks>(ds_tile, n0, s, bd);
            mma_16x16(k_state[0], k_state[1], ak, bs);
            mma_16x16(q_state[0], q_state[1], aq, bs);
            mma_16x16(k_dstate[0], k_dstate[1], ak, bd);
        }
        // dv = β ⊙ W; dβ's Σ W ⊙ R with R = V − e^γ ⊙ K S; dg's Σ (Q S ⊙ dO − K S ⊙ dR) and Σ K dS ⊙ V'.
#pragma unroll
        for (int n = 0; n < 2; ++n)
#pragma unroll
            for (int x = 0; x < 4; ++x) {
                const int half = x >> 1, i = r0 + g4 + 8 * half, col = n0 + 8 * n + 2 * t4 + (x & 1);
                const bool valid = i < len && v0 + col < d.dv;
                float vi = 0.0f, w = 0.0f, o_i = 0.0f, vn_i = 0.0f;
                const int64_t at = (d.token(b, t0 + i) * d.Hv + h) * d.dv + v0 + col;
                if (valid) {
                    vi = v[at];
                    w = w_in[at];
                    o_i = dout[at];
                    vn_i = v_new[at];
                }
                const float r = vi - e[i] * k_state[n][x], dr = bt[i] * w;
                if (valid) dv_out[at] = dr;
                dbeta_row[half] += w * r;
                de[half] += q_state[n][x] * o_i - k_state[n][x] * dr;
                df[half] += k_dstate[n][x] * vn_i;
            }
        // dM += dO V'ᵀ, dA += (−W) V'ᵀ.
        if (below)
            for (int s = 0; s < kTile / 16; ++s) {
                uint32_t ao[4], aw[4];
                a_fragment<kTileChunks>(do_tile, r0, s, ao);
                a_fragment<kTileChunks>(nw_tile, r0, s, aw);
#pragma unroll
                for (int pair = 0; pair < 2; ++pair) {
                    uint32_t bv[4];
                    b_fragments_of_transpose<kTileChunks>(vn_tile, c0 + 16 * pair, s, bv);
                    mma_16x16(dm[2 * pair], dm[2 * pair + 1], ao, bv);
                    mma_16x16(da[2 * pair], da[2 * pair + 1], aw, bv);
                }
            }
        // dq += (e ⊙ dO) Sᵀ;  dk += (f ⊙ V') dSᵀ + (−e ⊙ β ⊙ W) Sᵀ.
        for (int s = 0; s < kTile / 16; ++s) {
            uint32_t aeo[4], afv[4], aebw[4];
            a_fragment<kTileChunks>(edo_tile, r0, s, aeo);
            a_fragment<kTileChunks>(fvn_tile, r0, s, afv);
            a_fragment<kTileChunks>(ebw_tile, r0, s, aebw);
#pragma unroll
            for (int pair = 0; pair < kKeyTiles / 2; ++pair) {
                uint32_t bs[4], bd[4];
                b_fragments_of_transpose<kTileChunks>(s_tile, x0 + 16 * pair, s, bs);
                b_fragments_of_transpose<kTileChunks>(ds_tile, x0 + 16 * pair, s, bd);
                mma_16x16(acc_q[2 * pair], acc_q[2 * pair + 1], aeo, bs);
                mma_16x16(acc_k[2 * pair], acc_k[2 * pair + 1], afv, bd);
                mma_16x16(acc_k[2 * pair], acc_k[2 * pair + 1], aebw, bs);
            }
        }
    }
    // A row's sums: its 4 lanes, then the two warps of its columns (in that order, below).
#pragma unroll
    for (int half = 0; half < 2; ++half) {
        de[half] = quad_sum(de[half]);
        df[half] = quad_sum(df[half]);
        dbeta_row[half] = quad_sum(dbeta_row[half]);
        if (t4 == 0) {
            const int i = r0 + g4 + 8 * half;
            row_de[half_col * L + i] = de[half];
            row_df[half_col * L + i] = df[half];
            row_dbeta[half_col * L + i] = dbeta_row[half];
        }
    }
    // e^{γ_ℓ} ⟨S, dS⟩. block_sum's first barrier also ends every read of the dv loop's tiles, whose
    // bytes N, P and the span sums take next.
    carried = e[L - 1] * block_sum(carried, reduce);

    // Through M and A: K Kᵀ and Q Kᵀ on dM's tiles.
    float kk[4][4] = {}, qk[4][4] = {};
    if (below) key_products_16x32<D>(ks, qs, r0, c0, kk, qk);
    float dbeta_pairs[2] = {};
#pragma unroll
    for (int n = 0; n < 4; ++n)
#pragma unroll
        for (int half = 0; half < 2; ++half) {
            const int i = r0 + g4 + 8 * half, j0 = c0 + 8 * n + 2 * t4;
            float n_pair[2];
#pragma unroll
            for (int y = 0; y < 2; ++y) {
                const int j = j0 + y, x = 2 * half + y;
                const float decay = j <= i ? float(exp(gamma[i] - gamma[j])) : 0.0f;
                const float dm_ij = j <= i ? dm[n][x] : 0.0f, da_ij = j < i ? da[n][x] : 0.0f;
                n_pair[y] = dm_ij * decay;
                p_mat[i * kSquareRow + j] = da_ij * bt[i] * decay;
                span[i * kSquareRow + j] = dm_ij * qk[n][x] * decay + da_ij * bt[i] * kk[n][x] * decay;
                dbeta_pairs[half] += da_ij * kk[n][x] * decay;
            }
            store_pair<L / 8>(n_tile, i, j0, n_pair[0], n_pair[1]);
        }
#pragma unroll
    for (int half = 0; half < 2; ++half) {
        dbeta_pairs[half] = quad_sum(dbeta_pairs[half]);
        if (t4 == 0) row_pairs[half_col * L + r0 + g4 + 8 * half] = dbeta_pairs[half];
    }
    __syncthreads();
    // P + Pᵀ (summed in fp32, as the fp32 kernel's p_sym) as bf16; e^γ de and e^{γ_ℓ−γ} df.
#pragma unroll 4
    for (int pass = 0; pass < L * L / 2 / kThreads; ++pass) {
        const int x = int(threadIdx.x) + pass * kThreads, i = x / (L / 2), j = 2 * (x % (L / 2));
        store_pair<L / 8>(psym_tile, i, j, p_mat[i * kSquareRow + j] + p_mat[j * kSquareRow + i],
                          p_mat[i * kSquareRow + j + 1] + p_mat[(j + 1) * kSquareRow + i]);
    }
    if (threadIdx.x < L) {
        const int i = int(threadIdx.x);
        from_start[i] = e[i] * (row_de[i] + row_de[L + i]);
        to_end[i] = f[i] * (row_df[i] + row_df[L + i]);
        if (i < len)
            dbeta_out[d.token(b, t0 + i) * d.Hv + h] =
                (row_dbeta[i] + row_dbeta[L + i]) + (row_pairs[i] + row_pairs[L + i]);
    }
    __syncthreads();
    // dg's span sums: row prefix sums Σ_{j' < j} span_ij' (read by the loop at the end).
    if (threadIdx.x < L) {
        float run = 0.0f;
        for (int j = 0; j < L; ++j) {
            const float x = span[threadIdx.x * kSquareRow + j];
            span[threadIdx.x * kSquareRow + j] = run;
            run += x;
        }
    }
    // dq += N K;  dk += Nᵀ Q + (P + Pᵀ) K.
    for (int s = 0; s < L / 16; ++s) {
        const bool lower = s <= row_block, upper = s >= row_block;  // warp-uniform
        uint32_t ap[4], an[4], ant[4];
        a_fragment<L / 8>(psym_tile, r0, s, ap);
        if (lower) a_fragment<L / 8>(n_tile, r0, s, an);
        if (upper) a_fragment_of_transpose<L / 8>(n_tile, r0, s, ant);
#pragma unroll
        for (int pair = 0; pair < kKeyTiles / 2; ++pair) {
            uint32_t bk[4];
            b_fragments<D / 8>(ks, x0 + 16 * pair, s, bk);
            mma_16x16(acc_k[2 * pair], acc_k[2 * pair + 1], ap, bk);
            if (lower) mma_16x16(acc_q[2 * pair], acc_q[2 * pair + 1], an, bk);
            if (upper) {
                uint32_t bq[4];
                b_fragments<D / 8>(qs, x0 + 16 * pair, s, bq);
                mma_16x16(acc_k[2 * pair], acc_k[2 * pair + 1], ant, bq);
            }
        }
    }
#pragma unroll
    for (int n = 0; n < kKeyTiles; ++n)
#pragma unroll
        for (int half = 0; half < 2; ++half) {
            const int i = r0 + g4 + 8 * half, x = x0 + 8 * n + 2 * t4;
            if (i < len) {
                const int64_t at = (d.token(b, t0 + i) * d.Hv + h) * D + x;
                dq_part[at] = acc_q[n][2 * half];
                dq_part[at + 1] = acc_q[n][2 * half + 1];
                dk_part[at] = acc_k[n][2 * half];
                dk_part[at + 1] = acc_k[n][2 * half + 1];
            }
        }
    __syncthreads();
    // dg_m = e^{γ_ℓ}⟨S, dS⟩ + Σ_{i≥m} e_i de_i + Σ_{i<m} f_i df_i + Σ_{i≥m>j} span_ij, as the fp32 kernel.
    if (threadIdx.x < len) {
        const int m = int(threadIdx.x);
        float sum = carried;
        for (int r = m; r < L; ++r) sum += from_start[r] + span[r * kSquareRow + m];
        for (int r = 0; r < m; ++r) sum += to_end[r];
        dg_out[d.token(b, t0 + m) * d.Hv + h] = sum;
    }
}

template <int D>
void forward(const float* q, const float* k, const float* v, const float* g, const float* beta, const Dims& d,
             float* o, float* saved) {
    const Saved s(saved, d);
    const size_t factor_bytes = factors_shared_bytes<D>(), walk_bytes = walk_shared_bytes<D>();
    allow_shared(chunk_factors_mma_kernel<D>, factor_bytes, d, "chunk_factors_mma_kernel");
    chunk_factors_mma_kernel<D><<<dim3(unsigned(d.chunks), unsigned(d.Hv), unsigned(d.B)), kThreads, factor_bytes>>>(
        q, k, g, beta, d, s.factors);
    cuda_check_launch("chunk_factors_mma_kernel");
    mark_kernel("delta: chunk_factors_mma_kernel");
    allow_shared(forward_walk_mma_kernel<D>, walk_bytes, d, "forward_walk_mma_kernel");
    forward_walk_mma_kernel<D><<<dim3(unsigned((d.dv + kTile - 1) / kTile), unsigned(d.Hv), unsigned(d.B)), kThreads,
                                 walk_bytes>>>(q, k, v, beta, s.factors, d, o, s.states, s.v_new);
    cuda_check_launch("forward_walk_mma_kernel");
    mark_kernel("delta: forward_walk_mma_kernel");
}

template <int D>
void backward_carry(const float* q, const float* k, const float* beta, const float* dout, const float* factors,
                    const Dims& d, float* dstates, float* w) {
    const size_t bytes = carry_shared_bytes<D>();
    allow_shared(backward_carry_mma_kernel<D>, bytes, d, "backward_carry_mma_kernel");
    backward_carry_mma_kernel<D><<<dim3(unsigned((d.dv + kTile - 1) / kTile), unsigned(d.Hv), unsigned(d.B)), kThreads,
                                   bytes>>>(q, k, beta, dout, factors, d, dstates, w);
    cuda_check_launch("backward_carry_mma_kernel");
    mark_kernel("delta: backward_carry_mma_kernel");
}

template <int D>
void backward_gradients(const float* q, const float* k, const float* v, const float* g, const float* beta,
                        const float* dout, const float* states, const float* v_new, const float* dstates,
                        const float* w, const Dims& d, float* dv_out, float* dq_part, float* dk_part, float* dg,
                        float* dbeta) {
    const size_t bytes = gradients_shared_bytes<D>();
    allow_shared(backward_gradients_mma_kernel<D>, bytes, d, "backward_gradients_mma_kernel");
    backward_gradients_mma_kernel<D><<<dim3(unsigned(d.chunks), unsigned(d.Hv), unsigned(d.B)), kThreads, bytes>>>(
        q, k, v, g, beta, dout, states, v_new, dstates, w, d, dv_out, dq_part, dk_part, dg, dbeta);
    cuda_check_launch("backward_gradients_mma_kernel");
    mark_kernel("delta: backward_gradients_mma_kernel");
}

}  // namespace

bool delta_rule_mma_supported(int64_t dk) { return dk == 64 || dk == 128; }

void delta_rule_mma_forward(const float* q, const float* k, const float* v, const float* g, const float* beta,
                            int64_t B, int64_t T, int64_t Hk, int64_t Hv, int64_t dk, int64_t dv, float* o,
                            float* saved) {
    if (B * T == 0) return;
    const Dims d = dims_of(B, T, Hk, Hv, dk, dv);
    check_shape(d);
    if (dk == 64) return forward<64>(q, k, v, g, beta, d, o, saved);
    if (dk == 128) return forward<128>(q, k, v, g, beta, d, o, saved);
    fail_message("train cuda: delta rule: the tensor-core forward has no key dim " + std::to_string(dk) +
                 " (64 or 128)");
}

}  // namespace deltabit::train::cuda

namespace deltabit::train::cuda {

void delta_rule_mma_backward_carry(const float* q, const float* k, const float* beta, const float* dout,
                                   const float* factors, int64_t B, int64_t T, int64_t Hk, int64_t Hv, int64_t dk,
                                   int64_t dv, float* dstates, float* w) {
    const Dims d = dims_of(B, T, Hk, Hv, dk, dv);
    check_shape(d);
    if (dk == 64) return backward_carry<64>(q, k, beta, dout, factors, d, dstates, w);
    if (dk == 128) return backward_carry<128>(q, k, beta, dout, factors, d, dstates, w);
    fail_message("train cuda: delta rule: the tensor-core carry has no key dim " + std::to_string(dk) + " (64 or 128)");
}

void delta_rule_mma_backward_gradients(const float* q, const float* k, const float* v, const float* g,
                                       const float* beta, const float* dout, const float* states,
                                       const float* v_new, const float* dstates, const float* w, int64_t B, int64_t T,
                                       int64_t Hk, int64_t Hv, int64_t dk, int64_t dv, float* dv_out, float* dq_part,
                                       float* dk_part, float* dg, float* dbeta) {
    const Dims d = dims_of(B, T, Hk, Hv, dk, dv);
    check_shape(d);
    if (dk == 64)
        return backward_gradients<64>(q, k, v, g, beta, dout, states, v_new, dstates, w, d, dv_out, dq_part, dk_part,
                                      dg, dbeta);
    if (dk == 128)
        return backward_gradients<128>(q, k, v, g, beta, dout, states, v_new, dstates, w, d, dv_out, dq_part, dk_part,
                                       dg, dbeta);
    fail_message("train cuda: delta rule: the tensor-core gradients have no key dim " + std::to_string(dk) +
                 " (64 or 128)");
}

}  // namespace deltabit::train::cuda
