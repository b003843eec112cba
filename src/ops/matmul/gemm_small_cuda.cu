// Q1_0 products for a few tokens at once on int8 tensor cores: the batched decode step's matmuls
// (contract in ops/matmul/gemm_cuda.h, gemm_q1_0_small).
//
// Why another kernel. The prompt GEMMs put tokens in the mma's M (16 or more) and build weight fragments
// for every token tile; at 2–32 tokens (a server's batch of conversations) they cost 4–6 decode GEMVs
// (H200, Bonsai-27B: ~15 ms a step for 8 tokens against ~2.7 ms for one token's GEMVs). Here the weights
// are the M side (tiles of 16 rows) and the tokens the N side (one tile of 8): each weight fragment is built
// once from the codes and serves every token, so the weights stream once per step as in the GEMV.
//
// Measured (H200, Bonsai-27B batched step): as a kernel of up to 4 token tiles it lost to the f16 prompt GEMM
// from 16 tokens (31 vs 25 ms a step; 32 tokens 51 vs 36: 178 registers left one block of 8 warps an SM, too
// few to cover the activation loads), and won below (8 tokens 16.8 vs 20.2 ms; 4 tokens 12.5 vs 24 through
// per-token GEMVs). So it takes one tile of 8 tokens, and more go to the prompt GEMM. With its operands
// held in registers (two groups ahead, 122 registers) it ran a Bonsai-27B step of 8 rows in 14.9 ms; through
// the cp.async ring (67 registers, five groups ahead) in 13.3 ms (2 rows: 10.6 → 9.5).
//
// Fragments (mma.m16n8k32, g = lane / 4, t = lane % 4). A (16 weight rows × 32 k, u8): a[0] row g, k 4t..4t+3;
// a[1] row g+8; a[2] row g, k 16+4t..; a[3] row g+8, k 16+4t... The GEMV layout puts weights 4j..4j+3 of a
// 32-weight word in the bytes of (word >> j) & 0x01010101 (ops/matmul/weight_repack.h), so each register is
// one shift and one AND of the row's word: the bits stay 0/1 and the ±1 dot of a group of 128 comes out as
// 2·Σ bit·q − Σ q, Σ q being the quantiser's per-group sum (as gemm_quant_cuda.cu). B (32 k × 8 tokens,
// s8): b[0] k 4t..4t+3 of token g, b[1] k 16+4t.. — four consecutive activation bytes each.
// C (16 × 8, s32): c[0], c[1] row g, tokens 2t, 2t+1; c[2], c[3] row g+8.
//
// Work. A block takes 32 weight rows (two m16 tiles a warp, sharing each activation load); its kWarps warps
// split the activation groups (warp w: groups w, w + kWarps, ...), each streaming its groups' codes, scales,
// activations and meta through a ring of kStages stages in shared memory (cp.async), computing group i
// while groups i + 1 .. i + kStages − 2 are in flight. Per group a warp turns its exact integer dots into
// one fp32 term each, float(dot) · (d_w · scale_x), added by fmaf — the GEMV's terms — and at the end the
// warps' partial sums are added in warp order through shared memory. The wide kernels further down give
// each warp its own rows over all of K instead, with the same bits (DELTABIT_SMALL_GEMM_WIDE, to measure).
#include "ops/matmul/gemm_cuda.h"

#include <cuda_fp16.h>

#include <string>

#include "backend/cuda_buffer.h"
#include "core/env_switch.h"
#include "ops/cuda/async_copy.cuh"
#include "ops/cuda/tensor_core.cuh"

namespace deltabit::cuda {

namespace {

constexpr int kRowTiles = 2;  // m16 tiles of weight rows a warp holds: both share each activation load
constexpr int kRows = 16 * kRowTiles;  // weight rows of a block
constexpr int kWarps = 8;    // warps of a block, splitting K
constexpr int kThreads = 32 * kWarps;
constexpr int kGroupBytes = kActivationGroup / 8;  // Q1_0 codes of one group of 128 weights
static_assert(kSmallGemmMaxTokens == 8, "one n8 tile of tokens");

struct SmallGemmArgs {
    const uint8_t* codes;    // N rows of code_row_bytes
    const uint16_t* scales;  // N rows of `groups` fp16 bits
    const int8_t* q;         // T rows of groups·128 int8
    const ActivationGroupMeta* meta;  // T rows of `groups`
    float* y;                // [T][N]
    int64_t n, groups, code_row_bytes, tokens;
};

// The warps' partial sums (this lane's acc: row tile m's rows g, g + 8 for tokens 2t, 2t + 1) added in warp
// order through shared memory, and y written.
__device__ __forceinline__ void store_partials_and_reduce(float (&partial)[kWarps][8][kRows],
                                                          const float (&acc)[kRowTiles][4], const SmallGemmArgs& a,
                                                          int64_t row0, int warp, int g, int t) {
#pragma unroll
    for (int m = 0; m < kRowTiles; ++m)
#pragma unroll
        for (int j = 0; j < 2; ++j) {
            partial[warp][2 * t + j][16 * m + g] = acc[m][j];
            partial[warp][2 * t + j][16 * m + g + 8] = acc[m][2 + j];
        }
    __syncthreads();
    for (int e = int(threadIdx.x); e < 8 * kRows; e += kThreads) {
        const int tok = e / kRows, r = e % kRows;
        if (tok >= a.tokens || row0 + r >= a.n) continue;
        float sum = partial[0][tok][r];
#pragma unroll
        for (int w = 1; w < kWarps; ++w) sum += partial[w][tok][r];
        a.y[int64_t(tok) * a.n + row0 + r] = sum;
    }
}

// One group's dots of a warp's two row tiles, added into acc as the GEMV's terms: lo/hi are the codes of rows
// g and g + 8 of each tile, d their scales, b this lane's activation words, meta its tokens' group meta.
template <int kTiles>
__device__ __forceinline__ void group_terms(float (&acc)[kTiles][4], const uint4 (&codes)[kTiles][2],
                                            const float (&d)[kTiles][2], const uint32_t (&b)[8],
                                            const ActivationGroupMeta (&meta)[2], int t, int64_t T) {
#pragma unroll
    for (int m = 0; m < kTiles; ++m) {
        const uint32_t lo[4] = {codes[m][0].x, codes[m][0].y, codes[m][0].z, codes[m][0].w};
        const uint32_t hi[4] = {codes[m][1].x, codes[m][1].y, codes[m][1].z, codes[m][1].w};
        int dot[4] = {0, 0, 0, 0};
#pragma unroll
        for (int ks = 0; ks < 4; ++ks) {
            const uint32_t wl = lo[ks] >> t, wh = hi[ks] >> t;
            const uint32_t frag[4] = {wl & 0x01010101u, wh & 0x01010101u, (wl >> 4) & 0x01010101u,
                                      (wh >> 4) & 0x01010101u};
            mma_u8_s8_s32(dot, frag, b[2 * ks], b[2 * ks + 1]);
        }
#pragma unroll
        for (int j = 0; j < 2; ++j) {
            if (2 * t + j < T) {
                const float s = meta[j].scale;
                acc[m][j] = fmaf(float(2 * dot[j] - meta[j].sum), d[m][0] * s, acc[m][j]);
                acc[m][2 + j] = fmaf(float(2 * dot[2 + j] - meta[j].sum), d[m][1] * s, acc[m][2 + j]);
            }
        }
    }
}

// A warp's operands for kStages groups travel by cp.async into a ring in shared memory, so the bytes in
// flight are not held in registers: five groups' codes (2.5 KB) a warp ahead of its computation.
constexpr int kStages = 6;
constexpr int kTokenStride = 144;  // bytes between tokens' activations in a stage: 16-aligned, and lanes
                                   // (g, t) reading word 36g + t + 8ks hit 32 distinct banks
// This lane's B words of a group from a stage's activations (token j at j·kTokenStride).
__device__ __forceinline__ void activation_words(const int8_t* stage_x, int g, int t, uint32_t (&b)[8]) {
    const uint32_t* x = reinterpret_cast<const uint32_t*>(stage_x + g * kTokenStride + 4 * t);
#pragma unroll
    for (int ks = 0; ks < 4; ++ks) {
        b[2 * ks] = x[8 * ks];
        b[2 * ks + 1] = x[8 * ks + 4];
    }
}

struct RingStage {
    uint4 codes[kRows];                  // row r of the block: 16 bytes, the group's 128 weights
    int8_t x[8 * kTokenStride];          // token j's 128 activations at j·kTokenStride
    ActivationGroupMeta meta[8];         // token j's {scale, sum}
    uint32_t scale_words[kRows];         // the aligned word holding row r's fp16 scale
};
constexpr size_t kRingBytes = sizeof(RingStage) * kStages * kWarps;

__global__ void __launch_bounds__(kThreads) gemm_q1_0_small_ring_kernel(SmallGemmArgs a) {
    extern __shared__ __align__(16) unsigned char ring_memory[];
    __shared__ float partial[kWarps][8][kRows];
    const int lane = int(threadIdx.x) & 31, warp = int(threadIdx.x) >> 5, g = lane >> 2, t = lane & 3;
    const int64_t row0 = int64_t(blockIdx.x) * kRows, G = a.groups, T = a.tokens;
    RingStage* ring = reinterpret_cast<RingStage*>(ring_memory) + warp * kStages;

    // What this lane copies into a stage: row `lane`'s codes and scale word, activation chunks `lane` and
    // `lane + 32` (chunk c: token c / 8, bytes 16·(c % 8)), and (lanes 0..7) token `lane`'s meta. Rows past N
    // copy the last row; tokens past T copy zeros (their terms are never written).
    const int64_t my_row = min(row0 + lane, a.n - 1);
    const uint8_t* code_src = a.codes + my_row * a.code_row_bytes;
    const uint16_t* scale_src = a.scales + my_row * G;
    const int c0 = lane, c1 = lane + 32;
    const int8_t* x_src0 = a.q + min(int64_t(c0 / 8), T - 1) * G * kActivationGroup + 16 * (c0 % 8);
    const int8_t* x_src1 = a.q + min(int64_t(c1 / 8), T - 1) * G * kActivationGroup + 16 * (c1 % 8);
    const ActivationGroupMeta* meta_src = a.meta + min(int64_t(lane % 8), T - 1) * G;
    const auto issue = [&](int64_t grp, RingStage& st) {
        cp_async16(&st.codes[lane], code_src + grp * kGroupBytes);
        cp_async4(&st.scale_words[lane], reinterpret_cast<const void*>(
                                             reinterpret_cast<uintptr_t>(scale_src + grp) & ~uintptr_t(3)));
        cp_async16(st.x + (c0 / 8) * kTokenStride + 16 * (c0 % 8), x_src0 + grp * kActivationGroup, c0 / 8 >= T);
        cp_async16(st.x + (c1 / 8) * kTokenStride + 16 * (c1 % 8), x_src1 + grp * kActivationGroup, c1 / 8 >= T);
        if (lane < 8) cp_async8(&st.meta[lane], meta_src + grp, lane >= T);
    };
    // This warp's groups: warp, warp + kWarps, ...
    const int64_t mine = G > warp ? (G - warp + kWarps - 1) / kWarps : 0;
#pragma unroll
    for (int i = 0; i < kStages - 1; ++i) {
        if (i < mine) issue(warp + int64_t(i) * kWarps, ring[i]);
        cp_async_commit_group();
    }
    float acc[kRowTiles][4] = {};
    for (int64_t i = 0; i < mine; ++i) {
        cp_async_wait_group<kStages - 2>();
        __syncwarp();  // every lane's copies of stage i have landed
        const RingStage& st = ring[i % kStages];
        const int64_t grp = warp + i * kWarps;
        uint4 codes[kRowTiles][2];
        float d[kRowTiles][2];
#pragma unroll
        for (int m = 0; m < kRowTiles; ++m)
#pragma unroll
            for (int h = 0; h < 2; ++h) {
                const int r = 16 * m + 8 * h + g;
                codes[m][h] = st.codes[r];
                const uintptr_t address = reinterpret_cast<uintptr_t>(a.scales + min(row0 + r, a.n - 1) * G + grp);
                const uint32_t word = st.scale_words[r];
                d[m][h] = __half2float(__ushort_as_half(uint16_t((address & 2) ? word >> 16 : word & 0xFFFFu)));
            }
        uint32_t b[8];
        activation_words(st.x, g, t, b);
        const ActivationGroupMeta meta[2] = {st.meta[2 * t], st.meta[2 * t + 1]};
        group_terms(acc, codes, d, b, meta, t, T);
        // The slot of group i − 1, which every lane finished reading before the __syncwarp above, takes the
        // group kStages − 1 ahead.
        const int64_t next = i + kStages - 1;
        if (next < mine) issue(warp + next * kWarps, ring[next % kStages]);
        cp_async_commit_group();
    }
    cp_async_wait_group<0>();
    store_partials_and_reduce(partial, acc, a, row0, warp, g, t);
}


// ---- The wide kernel: warps that own their rows and walk every group (DELTABIT_SMALL_GEMM_WIDE) ----
//
// Why. The kernel above gives a block 32 rows and splits K over its 8 warps. On Bonsai-27B's matrices
// (K = 5120: 40 groups) a warp takes 5 groups, so its 6-stage ring barely fills before it is done, a
// block reads only 32 × 640 B = 20 KB of codes, and every block reads all the activations (8 tokens × K
// bytes = 40 KB): twice the block's weight bytes, from L2. Here each warp owns 16·kTiles rows (kTiles m16
// tiles sharing each activation load) and walks all K groups in order; a block of kWideWarps warps stages
// each chunk of kChunkGroups groups' activations and metas once for all its warps, and its warps' codes and
// scales for the same chunk, kWideBuffers chunks in a ring (cp.async). A block's activation bytes per group
// (8 tokens · 128 B) against its codes (16 B a row) fall from 2× to 1× (4 warps × 16 rows), 1/2 (4 × 32)
// or 1/4 (8 × 32), and a warp streams its rows' whole length (640 B a row at K = 5120) instead of an eighth.
// The price is fewer blocks: N = 5120 gives 80, 40 or 20 of them for the GPU's 132 SMs (the split kernel:
// 160), N = 17408 gives 272, 136 or 68 — hence the three shapes, for the GPU to choose.
//
// Numerics: bit for bit the kernel above. Group i's term goes into accumulator i % 8 (the chunk's group
// index, chunks start at multiples of 8), by the same fmaf as the split kernel's warp i % 8, and the 8
// accumulators are added in order at the end as the split kernel adds its 8 warps' partial sums.
constexpr int kChunkGroups = 8;   // = kWarps of the split kernel: accumulator i % 8 is its warp i % 8
constexpr int kWideBuffers = 3;   // chunks in the ring: computing one, two in flight
constexpr int kScaleWords = 5;    // aligned words spanning a row's 8 fp16 scales of a chunk
static_assert(kChunkGroups == kWarps, "the wide kernel's accumulators mirror the split kernel's warps");

template <int kWideWarps, int kTiles>
struct WideStage {
    uint4 codes[kWideWarps][kChunkGroups][16 * kTiles];   // warp's row r, chunk group i: 16 bytes
    uint32_t scale_words[kWideWarps][16 * kTiles][kScaleWords];  // from the aligned word holding the chunk's
                                                                  // first scale
    int8_t x[kChunkGroups][8 * kTokenStride];    // group i, token j's 128 activations at j·kTokenStride
    ActivationGroupMeta meta[kChunkGroups][8];   // group i, token j
};
template <int kWideWarps, int kTiles>
constexpr size_t kWideRingBytes = sizeof(WideStage<kWideWarps, kTiles>) * kWideBuffers;

// kWideWarps warps of 16·kTiles rows each.
template <int kWideWarps, int kTiles>
__global__ void __launch_bounds__(32 * kWideWarps) gemm_q1_0_small_wide_kernel(SmallGemmArgs a) {
    extern __shared__ __align__(16) unsigned char wide_memory[];
    using Stage = WideStage<kWideWarps, kTiles>;
    constexpr int kWarpRows = 16 * kTiles;
    Stage* stages = reinterpret_cast<Stage*>(wide_memory);
    constexpr int kBlockThreads = 32 * kWideWarps;
    const int tid = int(threadIdx.x), lane = tid & 31, warp = tid >> 5, g = lane >> 2, t = lane & 3;
    const int64_t G = a.groups, T = a.tokens, chunks = (G + kChunkGroups - 1) / kChunkGroups;
    const int64_t warp_row0 = (int64_t(blockIdx.x) * kWideWarps + warp) * kWarpRows;
    // Lanes below kWarpRows copy row `lane`'s scale words of the warp (rows past N read the last row).
    const uint16_t* my_scales = a.scales + min(warp_row0 + lane, a.n - 1) * G;

    const auto issue = [&](int64_t c, Stage& st) {
        const int64_t grp0 = c * kChunkGroups;
        const int count = int(min(int64_t(kChunkGroups), G - grp0));
        // Activations, shared by the block: group i, token j, 16-byte piece p (tokens past T: zeros).
        for (int e = tid; e < kChunkGroups * 64; e += kBlockThreads) {
            const int i = e >> 6, j = (e >> 3) & 7, p = e & 7;
            if (i < count)
                cp_async16(st.x[i] + j * kTokenStride + 16 * p,
                           a.q + (min(int64_t(j), T - 1) * G + grp0 + i) * kActivationGroup + 16 * p, j >= T);
        }
        for (int e = tid; e < kChunkGroups * 8; e += kBlockThreads) {
            const int i = e >> 3, j = e & 7;
            if (i < count) cp_async8(&st.meta[i][j], a.meta + min(int64_t(j), T - 1) * G + grp0 + i, j >= T);
        }
        // This warp's codes: 4 rows × 8 groups a pass, each row's chunk 128 contiguous bytes.
#pragma unroll
        for (int pass = 0; pass < kWarpRows / 4; ++pass) {
            const int e = 32 * pass + lane, r = e >> 3, i = e & 7;
            if (i < count)
                cp_async16(&st.codes[warp][i][r],
                           a.codes + min(warp_row0 + r, a.n - 1) * a.code_row_bytes + (grp0 + i) * kGroupBytes);
        }
        // Row `lane`'s scales of the chunk: the words from the one holding the first, as many as they span.
        const uintptr_t first = reinterpret_cast<uintptr_t>(my_scales + grp0);
        const int parity = int((first >> 1) & 1);
        const uint32_t* words = reinterpret_cast<const uint32_t*>(first & ~uintptr_t(3));
#pragma unroll
        for (int w = 0; w < kScaleWords; ++w)
            if (lane < kWarpRows && 2 * w < parity + count) cp_async4(&st.scale_words[warp][lane][w], words + w);
    };

#pragma unroll
    for (int s = 0; s < kWideBuffers - 1; ++s) {
        if (s < chunks) issue(s, stages[s]);
        cp_async_commit_group();
    }
    float acc[kChunkGroups][kTiles][4] = {};
    for (int64_t c = 0; c < chunks; ++c) {
        cp_async_wait_group<kWideBuffers - 2>();
        __syncthreads();  // every thread's copies of chunk c landed; chunk c − 1's buffer is read by all
        const int64_t ahead = c + kWideBuffers - 1;
        if (ahead < chunks) issue(ahead, stages[ahead % kWideBuffers]);
        cp_async_commit_group();

        const Stage& st = stages[c % kWideBuffers];
        const int64_t grp0 = c * kChunkGroups;
        const int count = int(min(int64_t(kChunkGroups), G - grp0));
        int parity[kTiles][2];  // where each of this lane's rows' first scale of the chunk sits in its word
#pragma unroll
        for (int m = 0; m < kTiles; ++m)
#pragma unroll
            for (int h = 0; h < 2; ++h) {
                const int64_t row = min(warp_row0 + 16 * m + 8 * h + g, a.n - 1);
                parity[m][h] = int((reinterpret_cast<uintptr_t>(a.scales + row * G + grp0) >> 1) & 1);
            }
#pragma unroll
        for (int i = 0; i < kChunkGroups; ++i) {
            if (i >= count) break;
            uint4 codes[kTiles][2];
            float d[kTiles][2];
#pragma unroll
            for (int m = 0; m < kTiles; ++m)
#pragma unroll
                for (int h = 0; h < 2; ++h) {
                    const int r = 16 * m + 8 * h + g, half = parity[m][h] + i;
                    codes[m][h] = st.codes[warp][i][r];
                    const uint32_t word = st.scale_words[warp][r][half >> 1];
                    d[m][h] = __half2float(__ushort_as_half(uint16_t((half & 1) ? word >> 16 : word & 0xFFFFu)));
                }
            uint32_t b[8];
            activation_words(st.x[i], g, t, b);
            const ActivationGroupMeta meta[2] = {st.meta[i][2 * t], st.meta[i][2 * t + 1]};
            group_terms(acc[i], codes, d, b, meta, t, T);
        }
    }
    cp_async_wait_group<0>();
    // The 8 accumulators in order, as the split kernel adds its warps' partial sums.
#pragma unroll
    for (int m = 0; m < kTiles; ++m)
#pragma unroll
        for (int q = 0; q < 4; ++q) {
            const int64_t row = warp_row0 + 16 * m + g + 8 * (q >> 1);
            const int tok = 2 * t + (q & 1);
            float sum = acc[0][m][q];
#pragma unroll
            for (int i = 1; i < kChunkGroups; ++i) sum += acc[i][m][q];
            if (tok < T && row < a.n) a.y[int64_t(tok) * a.n + row] = sum;
        }
}

template <int kWideWarps, int kTiles>
void launch_wide(const SmallGemmArgs& args, cudaStream_t stream) {
    constexpr size_t bytes = kWideRingBytes<kWideWarps, kTiles>;
    static const bool sized = [] {  // past the 48 KB a launch gets unasked
        cuda_check(cudaFuncSetAttribute(gemm_q1_0_small_wide_kernel<kWideWarps, kTiles>,
                                        cudaFuncAttributeMaxDynamicSharedMemorySize, int(bytes)),
                   "gemm_q1_0_small: shared memory of the wide kernel");
        return true;
    }();
    (void)sized;
    const int64_t rows = 16 * kTiles * kWideWarps;
    gemm_q1_0_small_wide_kernel<kWideWarps, kTiles>
        <<<dim3(unsigned((args.n + rows - 1) / rows)), dim3(32 * kWideWarps), bytes, stream>>>(args);
}

void launch_split(const SmallGemmArgs& args, cudaStream_t stream) {
    const dim3 grid(unsigned((args.n + kRows - 1) / kRows)), block(kThreads);
    static const bool sized = [] {  // the ring's shared memory is past the 48 KB a launch gets unasked
        cuda_check(cudaFuncSetAttribute(gemm_q1_0_small_ring_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                        int(kRingBytes)),
                   "gemm_q1_0_small: shared memory of the ring");
        return true;
    }();
    (void)sized;
    gemm_q1_0_small_ring_kernel<<<grid, block, kRingBytes, stream>>>(args);
}

}  // namespace

SmallGemmKernel small_gemm_kernel() {
    static const SmallGemmKernel kernel = [] {
        switch (env_number("DELTABIT_SMALL_GEMM_WIDE", {64, 128, 256}, 0, "the split-K kernel")) {
            case 64: return SmallGemmKernel::wide64;
            case 128: return SmallGemmKernel::wide128;
            case 256: return SmallGemmKernel::wide256;
            default: return SmallGemmKernel::split;
        }
    }();
    return kernel;
}

void gemm_q1_0_small(const QuantizedActivationRows& x, const GemvWeightView& w, float* y, cudaStream_t stream) {
    gemm_q1_0_small(x, w, y, stream, small_gemm_kernel());
}

void gemm_q1_0_small(const QuantizedActivationRows& x, const GemvWeightView& w, float* y, cudaStream_t stream,
                     SmallGemmKernel kernel) {
    const auto shape = [&] {
        return std::to_string(x.rows) + " rows of " + std::to_string(x.cols) + " activations, weights " +
               std::to_string(w.rows) + "×" + std::to_string(w.cols) + " " + std::string(dtype_name(w.dtype));
    };
    if (w.dtype != DType::Q1_0 || w.cols % kActivationGroup != 0)
        fail_message("cuda gemm_q1_0_small: Q1_0 weights with K a multiple of 128 only; got " + shape());
    if (x.cols != w.cols || x.rows < 1 || x.rows > kSmallGemmMaxTokens || w.rows < 1)
        fail_message("cuda gemm_q1_0_small: 1 to " + std::to_string(kSmallGemmMaxTokens) +
                     " rows whose K is the weights'; got " + shape());
    const SmallGemmArgs args{w.codes, w.scales, x.q, x.meta, y, w.rows, w.cols / kActivationGroup,
                             int64_t(gemv_code_row_bytes(w.dtype, w.cols)), x.rows};
    switch (kernel) {
        case SmallGemmKernel::wide64: launch_wide<4, 1>(args, stream); break;
        case SmallGemmKernel::wide128: launch_wide<4, 2>(args, stream); break;
        case SmallGemmKernel::wide256: launch_wide<8, 2>(args, stream); break;
        case SmallGemmKernel::split: launch_split(args, stream); break;
    }
    cuda_check_launch("gemm_q1_0_small");
}

}  // namespace deltabit::cuda
