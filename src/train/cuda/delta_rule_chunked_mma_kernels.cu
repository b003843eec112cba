// The chunked gated delta rule's forward and its backward's carry on tensor cores (contract:
// delta_rule_chunked_mma.h), for the bf16 training path at key dim 64 and 128: the math of delta_rule_chunked_kernels.cu (whose header
// gives the formulas) with every matrix product on mma.m16n8k16, bf16 operands and fp32 accumulators.
// What stays fp32 (or double) is what the products feed on: the state S carried from chunk to chunk
// (in registers, never rounded; only its copy for the chunk's K S and Q S is), T = (I + A)^{-1} by fp32
// forward substitution, the decays (γ summed and differenced in double), and every elementwise step
// (β ⊙ (V − e^γ ⊙ K S), e^γ ⊙ Q S, λ S). Saved T, M, V' and states are fp32, in the fp32 kernels'
// layout (delta_rule_chunked_common.cuh): the backward's gradients kernel (fp32, CUDA cores) reads
// them unchanged, and the dS and W the carry leaves.
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
// backward_carry_mma_kernel (the backward's first launch) walks the same tiles from the last chunk: see
// its comment.
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
    if (c0 <= r0 + 15) {  // warp-uniform: a tile wholly above the diagonal is zero
        for (int s = 0; s < D / 16; ++s) {
            uint32_t ak[4], aq[4];
            a_fragment<D / 8>(ks, r0, s, ak);
            a_fragment<D / 8>(qs, r0, s, aq);
#pragma unroll
            for (int pair = 0; pair < 2; ++pair) {
                uint32_t bk[4];
                b_fragments_of_transpose<D / 8>(ks, c0 + 16 * pair, s, bk);
                mma_bf16_f32(kk[2 * pair], ak, bk[0], bk[1]);
                mma_bf16_f32(kk[2 * pair + 1], ak, bk[2], bk[3]);
                mma_bf16_f32(qk[2 * pair], aq, bk[0], bk[1]);
                mma_bf16_f32(qk[2 * pair + 1], aq, bk[2], bk[3]);
            }
        }
    }
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
            mma_bf16_f32(k_state[0], ak, bs[0], bs[1]);
            mma_bf16_f32(k_state[1], ak, bs[2], bs[3]);
            mma_bf16_f32(out[0], aq, bs[0], bs[1]);
            mma_bf16_f32(out[1], aq, bs[2], bs[3]);
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
        for (int s = 0; s <= row_block; ++s) {
            uint32_t at[4], bx[4];
            a_fragment<L / 8>(t_tile, r0, s, at);
            b_fragments<kTileChunks>(x_tile, n0, s, bx);
            mma_bf16_f32(v_prime[0], at, bx[0], bx[1]);
            mma_bf16_f32(v_prime[1], at, bx[2], bx[3]);
        }
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
        for (int s = 0; s <= row_block; ++s) {
            uint32_t am[4], bv[4];
            a_fragment<L / 8>(m_tile, r0, s, am);
            b_fragments<kTileChunks>(vn_tile, n0, s, bv);
            mma_bf16_f32(out[0], am, bv[0], bv[1]);
            mma_bf16_f32(out[1], am, bv[2], bv[3]);
        }
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
                mma_bf16_f32(state[2 * pair], ak, bv[0], bv[1]);
                mma_bf16_f32(state[2 * pair + 1], ak, bv[2], bv[3]);
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
        for (int s = 0; s < D / 16; ++s) {
            uint32_t ak[4], bs[4];
            a_fragment<D / 8>(ks, r0, s, ak);
            b_fragments<kTileChunks>(s_tile, n0, s, bs);
            mma_bf16_f32(dv_prime[0], ak, bs[0], bs[1]);
            mma_bf16_f32(dv_prime[1], ak, bs[2], bs[3]);
        }
#pragma unroll
        for (int n = 0; n < 2; ++n)
#pragma unroll
            for (int x = 0; x < 4; ++x) dv_prime[n][x] *= f[r0 + g4 + 8 * (x >> 1)];
        for (int s = row_block; s < L / 16; ++s) {
            uint32_t am[4], bo[4];
            a_fragment_of_transpose<L / 8>(m_tile, r0, s, am);
            b_fragments<kTileChunks>(do_tile, n0, s, bo);
            mma_bf16_f32(dv_prime[0], am, bo[0], bo[1]);
            mma_bf16_f32(dv_prime[1], am, bo[2], bo[3]);
        }
#pragma unroll
        for (int n = 0; n < 2; ++n)
#pragma unroll
            for (int half = 0; half < 2; ++half)
                store_pair<kTileChunks>(dvn_tile, r0 + g4 + 8 * half, n0 + 8 * n + 2 * t4, dv_prime[n][2 * half],
                                        dv_prime[n][2 * half + 1]);
        __syncthreads();
        // W = Tᵀ dV' (Tᵀ unit upper triangular); −e ⊙ β ⊙ W for the state.
        float w[2][4] = {};
        for (int s = row_block; s < L / 16; ++s) {
            uint32_t at[4], bv[4];
            a_fragment_of_transpose<L / 8>(t_tile, r0, s, at);
            b_fragments<kTileChunks>(dvn_tile, n0, s, bv);
            mma_bf16_f32(w[0], at, bv[0], bv[1]);
            mma_bf16_f32(w[1], at, bv[2], bv[3]);
        }
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
                mma_bf16_f32(dstate[2 * pair], aq, bo[0], bo[1]);
                mma_bf16_f32(dstate[2 * pair + 1], aq, bo[2], bo[3]);
                mma_bf16_f32(dstate[2 * pair], ak, bw[0], bw[1]);
                mma_bf16_f32(dstate[2 * pair + 1], ak, bw[2], bw[3]);
            }
        }
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

}  // namespace deltabit::train::cuda
