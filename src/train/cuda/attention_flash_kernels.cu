// Causal GQA attention for training on tensor cores, flash-style (contract: attention_flash.h), for the
// bf16 training path at head_dim 64 and 128. mma.m16n8k16 with bf16 operands and fp32 accumulators.
//
// Rows. A block serves one (sequence, kv head); the G = Hq / Hkv query heads of that kv head are
// interleaved into one flat index f = t·G + g (position t, head g of the group), so consecutive rows of a
// tile share every key and each K / V tile read from memory serves the whole group. Row f sees keys
// s ≤ f / G.
//
// Forward (grid: row tiles of kRows, kv heads, sequences). Warp w owns rows 16w .. 16w + 15 of the tile.
// Per tile of kKeys keys: S = Q Kᵀ (A = Q, B = K rows), the online softmax in the log2 domain on the
// accumulators in registers (each thread holds rows g and g + 8 of its warp's 16, 8 keys each), then
// O += P V with P straight from the score accumulators (the C layout of two n-tiles is the A layout of
// one k-step of 16 keys) and V as the B operand through ldmatrix .trans. Tiles past the block's last
// row's position are never visited; masking only where a tile reaches past the first row's position.
// The output is divided by the row's sum at the end; lse = m + log(l) is kept for the backward.
//
// Backward (FA2, probabilities recomputed from lse; no atomics, so two runs give the same bits):
//   row term  Dr[f] = Σ_d dO·O, one warp per row;
//   dK, dV    grid (key tiles of kKeyRows, kv heads, sequences), warp w owning keys 16w .. 16w + 15 and
//             walking the rows f ≥ first key·G in tiles of kKeys in increasing f — the group's heads are
//             summed in that fixed order: Sᵀ = K Qᵀ, dPᵀ = V dOᵀ, Pᵀ = exp(Sᵀ − lse), dSᵀ = Pᵀ(dPᵀ − Dr),
//             dV += Pᵀ dO, dK += dSᵀ Q (the same two warp products as the forward, with keys as the rows);
//   dQ        grid as the forward: S = Q Kᵀ, dP = dO Vᵀ, dS = P(dP − Dr), dQ += dS K.
// Each row of dq, dk, dv is written once, by the block and warp that own it: they are overwritten
// (kernels.h's "(=)"), as the CUDA-core kernels do.
//
// Precision (bf16 path): q, k, v, dO and the weights P and dS each enter an mma rounded to bf16
// (relative error ≤ 2⁻⁸), products exact in fp32, accumulation fp32. A score errs by at most
// 2⁻⁸·scale·Σ_d |q_d k_d| (plus fp32 sums): the same order as the trainer's bf16 matrix products
// (gemm.h), and tests/train/test_cuda_ops.cpp checks each output against the bound that follows.
// Operands are converted to bf16 while being staged into shared memory (plain loads into registers, not
// cp.async: the inputs are fp32 and need converting anyway); the forward and dQ read the next K / V
// tile into registers while computing on this one.
#include "train/cuda/attention_flash.h"
#include "train/cuda/device_common.cuh"
#include "train/cuda/kernel_marks.h"

#include <cuda_bf16.h>

#include <string>

#include "ops/cuda/tensor_core.cuh"

namespace deltabit::train::cuda {
namespace {

using deltabit::cuda::cuda_check;
using deltabit::cuda::cuda_check_launch;
using deltabit::cuda::ldmatrix_x4;
using deltabit::cuda::ldmatrix_x4_trans;
using deltabit::cuda::mma_bf16_f32;

constexpr int kWarps = 4;
constexpr int kThreads = 32 * kWarps;
constexpr int kRows = 16 * kWarps;     // query rows per forward / dQ block
constexpr int kKeyRows = 16 * kWarps;  // keys per dK / dV block
constexpr int kKeys = 32;              // the inner loop's tile: keys (forward, dQ) or query rows (dK, dV)
constexpr float kLog2e = 1.4426950408889634f;
constexpr float kLn2 = 0.6931471805599453f;

// Byte offset of 16-byte chunk c of row r in an array of rows of D bf16 values: chunk c is stored at
// c ^ (r % 8), so the 8 rows one ldmatrix matrix reads at the same column fall in different banks.
template <int D>
__device__ __forceinline__ int swizzled(int r, int c) {
    return r * (2 * D) + ((c ^ (r & 7)) << 4);
}

__device__ __forceinline__ uint32_t pack_bf16(float first, float second) {
    return uint32_t(__bfloat16_as_ushort(__float2bfloat16_rn(first))) |
           (uint32_t(__bfloat16_as_ushort(__float2bfloat16_rn(second))) << 16);
}

// A tile of `Rows` rows of D floats on its way to shared memory as swizzled bf16: load() issues every
// global read of this thread's chunks at once into registers (row_of(r) is the row's address, nullptr
// for a row past the data, stored as zeros), store() converts and writes them. Between the two the
// block computes on the previous tile, so the reads' latency is hidden behind it.
template <int D, int Rows>
struct TileLoader {
    static constexpr int kChunks = D / 8;
    static constexpr int kPerThread = Rows * kChunks / kThreads;
    static_assert(Rows * kChunks % kThreads == 0, "whole chunks per thread");
    float4 x[kPerThread][2];

    template <typename RowOf>
    __device__ __forceinline__ void load(RowOf row_of) {
#pragma unroll
        for (int i = 0; i < kPerThread; ++i) {
            const int e = int(threadIdx.x) + i * kThreads, r = e / kChunks, c = e % kChunks;
            const float* src = row_of(r);
            if (src != nullptr) {
                x[i][0] = *reinterpret_cast<const float4*>(src + 8 * c);
                x[i][1] = *reinterpret_cast<const float4*>(src + 8 * c + 4);
            } else {
                x[i][0] = x[i][1] = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
            }
        }
    }
    __device__ __forceinline__ void store(unsigned char* dst) const {
#pragma unroll
        for (int i = 0; i < kPerThread; ++i) {
            const int e = int(threadIdx.x) + i * kThreads, r = e / kChunks, c = e % kChunks;
            uint4 packed;
            packed.x = pack_bf16(x[i][0].x, x[i][0].y);
            packed.y = pack_bf16(x[i][0].z, x[i][0].w);
            packed.z = pack_bf16(x[i][1].x, x[i][1].y);
            packed.w = pack_bf16(x[i][1].z, x[i][1].w);
            *reinterpret_cast<uint4*>(dst + swizzled<D>(r, c)) = packed;
        }
    }
};

// Load and store at once: tiles staged once per block.
template <int D, int Rows, typename RowOf>
__device__ __forceinline__ void stage_rows(unsigned char* dst, RowOf row_of) {
    TileLoader<D, Rows> tile;
    tile.load(row_of);
    tile.store(dst);
}

// s[16 rows][32 columns] += A[a0 .. a0 + 15] · B[0 .. 31]ᵀ over D: both operands rows of D values in
// shared memory. s[n] is the C fragment of columns 8n .. 8n + 7.
template <int D>
__device__ __forceinline__ void products_16x32(const unsigned char* a, int a0, const unsigned char* b,
                                               float (&s)[4][4]) {
    const int lane = int(threadIdx.x) & 31;
    const int a_row = a0 + (lane & 15), a_chunk = lane >> 4;                          // A: rows, chunks +0/+1
    const int b_row = (lane & 7) + ((lane >> 4) << 3), b_chunk = (lane >> 3) & 1;  // B: two n-tiles
#pragma unroll
    for (int ks = 0; ks < D / 16; ++ks) {
        uint32_t af[4];
        ldmatrix_x4(a + swizzled<D>(a_row, 2 * ks + a_chunk), af);
#pragma unroll
        for (int pair = 0; pair < 2; ++pair) {
            uint32_t bf[4];
            ldmatrix_x4(b + swizzled<D>(16 * pair + b_row, 2 * ks + b_chunk), bf);
            mma_bf16_f32(s[2 * pair], af, bf[0], bf[1]);
            mma_bf16_f32(s[2 * pair + 1], af, bf[2], bf[3]);
        }
    }
}

// acc[16 rows][D] += w[16][32] · B[0 .. 31][D]: w in the C layout products_16x32 leaves (rounded to bf16
// here), B rows of D values in shared memory read transposed. acc[n] is the C fragment of columns 8n ...
template <int D>
__device__ __forceinline__ void accumulate_16xD(const float (&w)[4][4], const unsigned char* b,
                                                float (&acc)[D / 8][4]) {
    const int lane = int(threadIdx.x) & 31;
    const int b_row = (lane & 7) + (((lane >> 3) & 1) << 3), b_chunk = lane >> 4;
#pragma unroll
    for (int j = 0; j < 2; ++j) {
        const uint32_t a[4] = {pack_bf16(w[2 * j][0], w[2 * j][1]), pack_bf16(w[2 * j][2], w[2 * j][3]),
                               pack_bf16(w[2 * j + 1][0], w[2 * j + 1][1]),
                               pack_bf16(w[2 * j + 1][2], w[2 * j + 1][3])};
#pragma unroll
        for (int dn = 0; dn < D / 16; ++dn) {
            uint32_t bf[4];
            ldmatrix_x4_trans(b + swizzled<D>(16 * j + b_row, 2 * dn + b_chunk), bf);
            mma_bf16_f32(acc[2 * dn], a, bf[0], bf[1]);
            mma_bf16_f32(acc[2 * dn + 1], a, bf[2], bf[3]);
        }
    }
}

// Addresses of one (sequence, kv head): flat row f = t·G + g of q, o, dO; key s of k, v.
struct Rows {
    int64_t T, Hq, Hkv;
    int G;
    int64_t b, kvh;
    __device__ int64_t query(int f) const { return (b * T + f / G) * Hq + kvh * G + f % G; }
    __device__ int64_t key(int s) const { return (b * T + s) * Hkv + kvh; }
};

__device__ __forceinline__ Rows block_rows(int64_t T, int64_t Hq, int64_t Hkv) {
    return Rows{T, Hq, Hkv, int(Hq / Hkv), int64_t(blockIdx.z), int64_t(blockIdx.y)};
}

// grid (row tiles, Hkv, B), the tiles with the most keys first; shared: Q [kRows], K, V [kKeys] rows.
template <int D>
__global__ void __launch_bounds__(kThreads)
    flash_forward_kernel(const float* q, const float* k, const float* v, int64_t T, int64_t Hq, int64_t Hkv,
                         float scale, float* o, float* lse) {
    extern __shared__ __align__(16) unsigned char smem[];
    unsigned char* qs = smem;
    unsigned char* ks = qs + kRows * 2 * D;
    unsigned char* vs = ks + kKeys * 2 * D;
    const Rows rows = block_rows(T, Hq, Hkv);
    const int G = rows.G, n_rows = int(T) * G;
    const int f0 = int(gridDim.x - 1 - blockIdx.x) * kRows, f_end = min(n_rows, f0 + kRows);
    const int n_keys = (f_end - 1) / G + 1;  // keys any row of the block sees
    const int warp = int(threadIdx.x) >> 5, lane = int(threadIdx.x) & 31, g = lane >> 2, tq = lane & 3;
    stage_rows<D, kRows>(qs, [&](int r) -> const float* {
        return f0 + r < f_end ? q + rows.query(f0 + r) * D : nullptr;
    });
    // This thread's rows 16w + g and 16w + g + 8: the last key each sees (a row past the data is zero
    // and sees every key, so its maximum stays finite; it is never stored).
    int last_visible[2];
#pragma unroll
    for (int h = 0; h < 2; ++h) {
        const int f = f0 + 16 * warp + g + 8 * h;
        last_visible[h] = f < f_end ? f / G : n_keys - 1;
    }
    const int all_see = f0 / G + 1;  // keys below it are visible to every row of the block
    const float scale_log2 = scale * kLog2e;

    float acc[D / 8][4];
#pragma unroll
    for (int n = 0; n < D / 8; ++n) acc[n][0] = acc[n][1] = acc[n][2] = acc[n][3] = 0.0f;
    float m[2] = {-INFINITY, -INFINITY}, l[2] = {0.0f, 0.0f};

    // K and V rows of the tile at key0 (zeros past the block's keys), read into registers one tile ahead.
    TileLoader<D, kKeys> k_next, v_next;
    auto load_tile = [&](int key0) {
        k_next.load([&](int r) -> const float* { return key0 + r < n_keys ? k + rows.key(key0 + r) * D : nullptr; });
        v_next.load([&](int r) -> const float* { return key0 + r < n_keys ? v + rows.key(key0 + r) * D : nullptr; });
    };
    load_tile(0);
    for (int key0 = 0; key0 < n_keys; key0 += kKeys) {
        __syncthreads();  // the previous tile's readers are done
        k_next.store(ks);
        v_next.store(vs);
        __syncthreads();
        if (key0 + kKeys < n_keys) load_tile(key0 + kKeys);
        float s[4][4] = {};
        products_16x32<D>(qs, 16 * warp, ks, s);
        const bool masked = key0 + kKeys > all_see;
#pragma unroll
        for (int h = 0; h < 2; ++h) {
            float top = -INFINITY;
#pragma unroll
            for (int n = 0; n < 4; ++n)
#pragma unroll
                for (int u = 0; u < 2; ++u) {
                    float& x = s[n][2 * h + u];
                    x = masked && key0 + 8 * n + 2 * tq + u > last_visible[h] ? -INFINITY : x * scale_log2;
                    top = fmaxf(top, x);
                }
            top = fmaxf(top, __shfl_xor_sync(0xffffffffu, top, 1));
            top = fmaxf(top, __shfl_xor_sync(0xffffffffu, top, 2));
            // Key 0 is in the first tile and visible to every row, so m is finite from the first tile on.
            const float m_new = fmaxf(m[h], top);
            const float rescale = exp2f(m[h] - m_new);
            float sum = 0.0f;
#pragma unroll
            for (int n = 0; n < 4; ++n)
#pragma unroll
                for (int u = 0; u < 2; ++u) {
                    float& x = s[n][2 * h + u];
                    x = exp2f(x - m_new);
                    sum += x;
                }
            l[h] = l[h] * rescale + sum;
            m[h] = m_new;
#pragma unroll
            for (int n = 0; n < D / 8; ++n) {
                acc[n][2 * h] *= rescale;
                acc[n][2 * h + 1] *= rescale;
            }
        }
        accumulate_16xD<D>(s, vs, acc);
    }
#pragma unroll
    for (int h = 0; h < 2; ++h) {
        l[h] += __shfl_xor_sync(0xffffffffu, l[h], 1);
        l[h] += __shfl_xor_sync(0xffffffffu, l[h], 2);
        const int f = f0 + 16 * warp + g + 8 * h;
        if (f >= f_end) continue;
        const int64_t row = rows.query(f);
        const float inv = 1.0f / l[h];
#pragma unroll
        for (int n = 0; n < D / 8; ++n)
            *reinterpret_cast<float2*>(o + row * D + 8 * n + 2 * tq) =
                make_float2(acc[n][2 * h] * inv, acc[n][2 * h + 1] * inv);
        if (tq == 0) lse[row] = (m[h] + log2f(l[h])) * kLn2;
    }
}

// Dr[row] = Σ_d dout·o, a warp per row (coalesced), grid-stride.
__global__ void flash_row_dot_kernel(const float* o, const float* dout, int64_t n_rows, int64_t dh, float* Dr) {
    const int lane = int(threadIdx.x) & 31;
    const int64_t warps = int64_t(gridDim.x) * (blockDim.x / 32);
    for (int64_t r = int64_t(blockIdx.x) * (blockDim.x / 32) + threadIdx.x / 32; r < n_rows; r += warps) {
        float sum = 0.0f;
        for (int64_t d = lane; d < dh; d += 32) sum += o[r * dh + d] * dout[r * dh + d];
        sum = warp_sum(sum);
        if (lane == 0) Dr[r] = sum;
    }
}

// grid as the forward; shared: Q, dO [kRows], K, V [kKeys] rows.
template <int D>
__global__ void __launch_bounds__(kThreads)
    flash_dq_kernel(const float* q, const float* k, const float* v, const float* lse, const float* dout,
                    const float* Dr, int64_t T, int64_t Hq, int64_t Hkv, float scale, float* dq) {
    extern __shared__ __align__(16) unsigned char smem[];
    unsigned char* qs = smem;
    unsigned char* dos = qs + kRows * 2 * D;
    unsigned char* ks = dos + kRows * 2 * D;
    unsigned char* vs = ks + kKeys * 2 * D;
    const Rows rows = block_rows(T, Hq, Hkv);
    const int G = rows.G, n_rows = int(T) * G;
    const int f0 = int(gridDim.x - 1 - blockIdx.x) * kRows, f_end = min(n_rows, f0 + kRows);
    const int n_keys = (f_end - 1) / G + 1;
    const int warp = int(threadIdx.x) >> 5, lane = int(threadIdx.x) & 31, g = lane >> 2, tq = lane & 3;
    stage_rows<D, kRows>(qs, [&](int r) -> const float* {
        return f0 + r < f_end ? q + rows.query(f0 + r) * D : nullptr;
    });
    stage_rows<D, kRows>(dos, [&](int r) -> const float* {
        return f0 + r < f_end ? dout + rows.query(f0 + r) * D : nullptr;
    });
    int last_visible[2];
    float row_lse[2], row_D[2];  // a row past the data: zero q and dO, so its dS is 0
#pragma unroll
    for (int h = 0; h < 2; ++h) {
        const int f = f0 + 16 * warp + g + 8 * h;
        const bool live = f < f_end;
        last_visible[h] = live ? f / G : n_keys - 1;
        row_lse[h] = live ? lse[rows.query(f)] * kLog2e : 0.0f;
        row_D[h] = live ? Dr[rows.query(f)] : 0.0f;
    }
    const int all_see = f0 / G + 1;
    const float scale_log2 = scale * kLog2e;

    float acc[D / 8][4];
#pragma unroll
    for (int n = 0; n < D / 8; ++n) acc[n][0] = acc[n][1] = acc[n][2] = acc[n][3] = 0.0f;

    TileLoader<D, kKeys> k_next, v_next;  // one tile ahead, as the forward
    auto load_tile = [&](int key0) {
        k_next.load([&](int r) -> const float* { return key0 + r < n_keys ? k + rows.key(key0 + r) * D : nullptr; });
        v_next.load([&](int r) -> const float* { return key0 + r < n_keys ? v + rows.key(key0 + r) * D : nullptr; });
    };
    load_tile(0);
    for (int key0 = 0; key0 < n_keys; key0 += kKeys) {
        __syncthreads();
        k_next.store(ks);
        v_next.store(vs);
        __syncthreads();
        if (key0 + kKeys < n_keys) load_tile(key0 + kKeys);
        float s[4][4] = {}, dp[4][4] = {};
        products_16x32<D>(qs, 16 * warp, ks, s);
        products_16x32<D>(dos, 16 * warp, vs, dp);
        const bool masked = key0 + kKeys > all_see;
#pragma unroll
        for (int n = 0; n < 4; ++n)
#pragma unroll
            for (int i = 0; i < 4; ++i) {
                const int h = i >> 1, key = key0 + 8 * n + 2 * tq + (i & 1);
                const float p = masked && key > last_visible[h] ? 0.0f : exp2f(s[n][i] * scale_log2 - row_lse[h]);
                s[n][i] = p * (dp[n][i] - row_D[h]);  // dS
            }
        accumulate_16xD<D>(s, ks, acc);
    }
#pragma unroll
    for (int h = 0; h < 2; ++h) {
        const int f = f0 + 16 * warp + g + 8 * h;
        if (f >= f_end) continue;
        float* dst = dq + rows.query(f) * D;
#pragma unroll
        for (int n = 0; n < D / 8; ++n) {
            *reinterpret_cast<float2*>(dst + 8 * n + 2 * tq) =
                make_float2(scale * acc[n][2 * h], scale * acc[n][2 * h + 1]);
        }
    }
}

// grid (key tiles of kKeyRows, Hkv, B), the first keys (the most rows) first; shared: K, V [kKeyRows],
// Q, dO [kKeys] rows, then the tile's rows' lse·log2(e) and Dr (kKeys floats each).
template <int D>
__global__ void __launch_bounds__(kThreads)
    flash_dkv_kernel(const float* q, const float* k, const float* v, const float* lse, const float* dout,
                     const float* Dr, int64_t T, int64_t Hq, int64_t Hkv, float scale, float* dk, float* dv) {
    extern __shared__ __align__(16) unsigned char smem[];
    unsigned char* ks = smem;
    unsigned char* vs = ks + kKeyRows * 2 * D;
    unsigned char* qs = vs + kKeyRows * 2 * D;
    unsigned char* dos = qs + kKeys * 2 * D;
    float* tile_lse = reinterpret_cast<float*>(dos + kKeys * 2 * D);
    float* tile_D = tile_lse + kKeys;
    const Rows rows = block_rows(T, Hq, Hkv);
    const int G = rows.G, n_rows = int(T) * G;
    const int k0 = int(blockIdx.x) * kKeyRows, k_end = min(int(T), k0 + kKeyRows);
    const int warp = int(threadIdx.x) >> 5, lane = int(threadIdx.x) & 31, g = lane >> 2, tq = lane & 3;
    stage_rows<D, kKeyRows>(ks, [&](int r) -> const float* {
        return k0 + r < k_end ? k + rows.key(k0 + r) * D : nullptr;
    });
    stage_rows<D, kKeyRows>(vs, [&](int r) -> const float* {
        return k0 + r < k_end ? v + rows.key(k0 + r) * D : nullptr;
    });
    int my_key[2];
#pragma unroll
    for (int h = 0; h < 2; ++h) my_key[h] = k0 + 16 * warp + g + 8 * h;
    const float scale_log2 = scale * kLog2e;

    float acc_k[D / 8][4], acc_v[D / 8][4];
#pragma unroll
    for (int n = 0; n < D / 8; ++n)
#pragma unroll
        for (int i = 0; i < 4; ++i) acc_k[n][i] = acc_v[n][i] = 0.0f;

    // Rows before k0·G see none of these keys.
    for (int fq = k0 * G; fq < n_rows; fq += kKeys) {
        __syncthreads();
        // (Staged without reading ahead: the dK / dV accumulators leave no registers for it.)
        stage_rows<D, kKeys>(qs, [&](int r) -> const float* {
            return fq + r < n_rows ? q + rows.query(fq + r) * D : nullptr;
        });
        stage_rows<D, kKeys>(dos, [&](int r) -> const float* {
            return fq + r < n_rows ? dout + rows.query(fq + r) * D : nullptr;
        });
        if (threadIdx.x < kKeys) {
            const int f = fq + int(threadIdx.x);
            tile_lse[threadIdx.x] = f < n_rows ? lse[rows.query(f)] * kLog2e : 0.0f;
            tile_D[threadIdx.x] = f < n_rows ? Dr[rows.query(f)] : 0.0f;
        }
        __syncthreads();
        float s[4][4] = {}, dp[4][4] = {};
        products_16x32<D>(ks, 16 * warp, qs, s);    // Sᵀ: keys × rows
        products_16x32<D>(vs, 16 * warp, dos, dp);  // dPᵀ
        // Every (key, row) pair of the tile is visible when the tile's first row's position is at or past
        // the block's last key and no row lies past the data.
        const bool masked = fq / G < k0 + kKeyRows - 1 || fq + kKeys > n_rows;
#pragma unroll
        for (int n = 0; n < 4; ++n)
#pragma unroll
            for (int i = 0; i < 4; ++i) {
                const int col = 8 * n + 2 * tq + (i & 1), f = fq + col;
                const bool visible = !masked || (f < n_rows && my_key[i >> 1] <= f / G);
                const float p = visible ? exp2f(s[n][i] * scale_log2 - tile_lse[col]) : 0.0f;
                s[n][i] = p;
                dp[n][i] = p * (dp[n][i] - tile_D[col]);  // dSᵀ
            }
        accumulate_16xD<D>(s, dos, acc_v);
        accumulate_16xD<D>(dp, qs, acc_k);
    }
#pragma unroll
    for (int h = 0; h < 2; ++h) {
        if (my_key[h] >= k_end) continue;
        const int64_t row = rows.key(my_key[h]);
#pragma unroll
        for (int n = 0; n < D / 8; ++n) {
            *reinterpret_cast<float2*>(dk + row * D + 8 * n + 2 * tq) =
                make_float2(scale * acc_k[n][2 * h], scale * acc_k[n][2 * h + 1]);
            *reinterpret_cast<float2*>(dv + row * D + 8 * n + 2 * tq) =
                make_float2(acc_v[n][2 * h], acc_v[n][2 * h + 1]);
        }
    }
}

template <typename Kernel>
void allow_shared(Kernel kernel, size_t bytes, const char* what) {
    if (bytes > 48 * 1024)
        cuda_check(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(bytes)), what);
}

template <int D>
void forward(const float* q, const float* k, const float* v, int64_t B, int64_t T, int64_t Hq, int64_t Hkv,
             float scale, float* o, float* lse) {
    const int64_t row_tiles = (T * (Hq / Hkv) + kRows - 1) / kRows;
    const size_t shared = size_t(kRows + 2 * kKeys) * 2 * D;
    allow_shared(flash_forward_kernel<D>, shared, "flash_forward_kernel");
    flash_forward_kernel<D><<<dim3(unsigned(row_tiles), unsigned(Hkv), unsigned(B)), kThreads, shared>>>(q, k, v, T, Hq, Hkv, scale, o, lse);
    cuda_check_launch("flash_forward_kernel");
}

template <int D>
void backward(const float* q, const float* k, const float* v, const float* o, const float* lse, const float* dout,
              int64_t B, int64_t T, int64_t Hq, int64_t Hkv, float scale, float* dq, float* dk, float* dv,
              float* workspace) {
    const int64_t n_rows = B * T * Hq;
    flash_row_dot_kernel<<<blocks_for(n_rows, kBlock / 32), kBlock>>>(o, dout, n_rows, D, workspace);
    cuda_check_launch("flash_row_dot_kernel");
    mark_kernel("attention: flash_row_dot_kernel");
    const int64_t row_tiles = (T * (Hq / Hkv) + kRows - 1) / kRows;
    const size_t dq_shared = size_t(2 * kRows + 2 * kKeys) * 2 * D;
    allow_shared(flash_dq_kernel<D>, dq_shared, "flash_dq_kernel");
    flash_dq_kernel<D><<<dim3(unsigned(row_tiles), unsigned(Hkv), unsigned(B)), kThreads, dq_shared>>>(q, k, v, lse, dout, workspace, T, Hq, Hkv, scale, dq);
    cuda_check_launch("flash_dq_kernel");
    mark_kernel("attention: flash_dq_kernel");
    const int64_t key_tiles = (T + kKeyRows - 1) / kKeyRows;
    const size_t dkv_shared = size_t(2 * kKeyRows + 2 * kKeys) * 2 * D + 2 * kKeys * sizeof(float);
    allow_shared(flash_dkv_kernel<D>, dkv_shared, "flash_dkv_kernel");
    flash_dkv_kernel<D><<<dim3(unsigned(key_tiles), unsigned(Hkv), unsigned(B)), kThreads, dkv_shared>>>(q, k, v, lse, dout, workspace, T, Hq, Hkv, scale, dk, dv);
    cuda_check_launch("flash_dkv_kernel");
    mark_kernel("attention: flash_dkv_kernel");
}

[[noreturn]] void refuse(int64_t dh) {
    fail_message("train cuda: the flash attention kernels take head_dim 64 or 128, not " + std::to_string(dh));
}

}  // namespace

bool flash_attention_supported(int64_t dh) { return dh == 64 || dh == 128; }

void attention_flash_forward(const float* q, const float* k, const float* v, int64_t B, int64_t T, int64_t Hq,
                             int64_t Hkv, int64_t dh, float scale, float* o, float* lse) {
    if (dh == 64) return forward<64>(q, k, v, B, T, Hq, Hkv, scale, o, lse);
    if (dh == 128) return forward<128>(q, k, v, B, T, Hq, Hkv, scale, o, lse);
    refuse(dh);
}

void attention_flash_backward(const float* q, const float* k, const float* v, const float* o, const float* lse,
                              const float* dout, int64_t B, int64_t T, int64_t Hq, int64_t Hkv, int64_t dh,
                              float scale, float* dq, float* dk, float* dv, float* workspace) {
    if (dh == 64) return backward<64>(q, k, v, o, lse, dout, B, T, Hq, Hkv, scale, dq, dk, dv, workspace);
    if (dh == 128) return backward<128>(q, k, v, o, lse, dout, B, T, Hq, Hkv, scale, dq, dk, dv, workspace);
    refuse(dh);
}

}  // namespace deltabit::train::cuda
