// The Q1_0 prompt GEMM on f16 activations (ops/matmul/gemm_cuda.h, "Q1_0 GEMM on f16 activations"): Hopper's
// warpgroup tensor cores with f16 inputs and fp32 accumulation, warp-specialised as the int8 kernel
// (gemm_wgmma_ws_cuda.cu) is — one warpgroup copies, two compute.
//
// Why f16 and not int8. The int8 kernel's tensor cores give one exact integer dot per output and per group
// of 128 weights, and every such dot must be turned into a float, scaled by its weight scale and its
// activation group's scale and added: four instructions per output per k-tile, ~290 of a consumer warp's
// ~426 instructions a k-tile, which left the tensor pipe 26% busy (Nsight Compute, docs/bench-notes.md). Here
// the weight scale rides in the operand instead: a 1-bit weight is ±d, and ±d is an exact f16, so the
// A operand is built in registers as f16 ±d (one rotate, one byte permute and one logic op per two
// weights) and the tensor cores accumulate the whole row of K in fp32 — no per-output work until the end.
// The activations are rounded once to f16 per token (a power-of-two scale keeps them in range), which is
// also closer to the fp32 model than int8 per 128 (8 mantissa bits more on every value near a group's max).
//
//   warpgroup 0 (producer)   brings each k-tile's x tile (BM tokens × 128 f16, by the copy engine from a
//                            tensor map, 128-byte swizzled), the tile's weight rows' codes (16 bytes each,
//                            the same way) and the aligned words holding their fp16 scales (cp.async) into a
//                            ring of stages, all arriving on the stage's `full` mbarrier.
//   warpgroups 1, 2          (consumers) each own 64·RG weight rows as RG groups of 64: A (weights) from
//                            registers, B the stage's x tile; per group eight m64nBMk16 products a k-tile into
//                            its fp32 accumulator, then the stage goes back (`empty`).
// Tiles of 256 or 128 weight rows (RG = 2 or 1) and 16 to 128 tokens; the automatic choice weighs them by
// measured round costs (detail::half_gemm_plan). The copies set the pace while they were cp.asyncs of 16
// bytes a thread (produce(), below); through the copy engine the 128 × 256 tile's round at K = 5120 went
// from 101.6 to 64.2 µs (H200), and a pipelined consumer (the next operands built while products run) is
// what keeps its tensor cores fed: 810 TFLOP/s for the consumers alone with their operands in place.
// Thread layout as the int8 kernel's: accumulator d[4j + e] of group h is weight row 64·RG·c + 64h + 16w + g +
// 8·(e / 2) of consumer c, token 8j + 2q + e % 2 of the tile. Measured: docs/bench-notes.md, "The prompt GEMM on f16
// activations".
#include "backend/cuda_buffer.h"
#include "ops/matmul/gemm_cuda.h"

#include <cuda_fp16.h>

#include <algorithm>
#include <string>

#include "core/env_switch.h"
#include "ops/cuda/async_copy.cuh"
#include "ops/cuda/bulk_copy.cuh"
#include "ops/cuda/cluster.cuh"
#include "ops/matmul/gemm_wgmma_cuda.h"  // wgmma_gemm_available
#include "ops/cuda/tensor_map_cuda.h"
#include "ops/matmul/weight_repack.h"
#include "ops/cuda/wgmma.cuh"

namespace deltabit::cuda {

namespace {

// A tile: BM tokens (16, 32, 64, 128) × 128·RG weight rows (RG row groups of 64 per consumer: 1 or 2).
constexpr int kKTile = 128;    // f16 activations a k-tile: one Q1_0 scale group
constexpr int kSpan = 64;      // f16 of a 128-byte swizzle span: a k-tile's x tile is two copies of spans
constexpr int kThreads = 384;
[[maybe_unused]] constexpr int kConsumerWarps = 8;
constexpr int rows_of(int rg) { return 128 * rg; }

// x ([m][k] binary16) and the codes reach the kernel as tensor maps (its other parameters).
struct HalfGemmArgs {
    const float* inv_scale;   // [m]
    const uint16_t* scales;
    float* y;
    float4* partials;         // split k: a slot of one tile's sums per (cluster, rank ≥ 1)
    int64_t m, n, ldy;
    int64_t m_tiles, tiles;
    int k_tiles, scales_per_row;
    int splits;               // blocks a cluster, each summing its share of the k-tiles (1: no cluster)
};

// A stage: the x tile (two spans of BM rows × 128 bytes, 128-byte swizzled as the copy engine writes them),
// the codes of the tile's weight rows (16 bytes each), and each row's aligned scale word (as the int8
// kernel's: a row's scales start on any 2-byte boundary, the plane is padded so that the word is inside it).
// Stages start on 1024 bytes, as the swizzled tiles must.
constexpr int x_bytes(int bm) { return bm * kKTile * 2; }
[[maybe_unused]] constexpr int span_bytes(int bm) { return bm * kSpan * 2; }
constexpr int code_bytes(int rg) { return rows_of(rg) * 16; }
constexpr int scale_offset(int bm, int rg) { return x_bytes(bm) + code_bytes(rg); }
constexpr int stage_bytes(int bm, int rg) { return (scale_offset(bm, rg) + rows_of(rg) * 4 + 1023) / 1024 * 1024; }
constexpr size_t kSmemLimit = 227 * 1024;
constexpr size_t kAlignSlack = 1024;  // the dynamic shared memory's start rounded up to 1024 bytes
// As many stages as fit, at most 24 (a 16-token stage of 128 rows holds 7 KB: 24 keep ~48 KB of codes in
// flight, as the int8 kernel's narrow rings do).
constexpr int stages_of(int bm, int rg) {
    return int(std::min<size_t>(24, (kSmemLimit - kAlignSlack - (24 * 2 + 2) * sizeof(uint64_t)) /
                                        size_t(stage_bytes(bm, rg))));
}
// The stages, then their full and empty barriers and the two barriers of split k (ready, freed).
constexpr size_t smem_bytes(int bm, int rg) {
    return kAlignSlack + size_t(stages_of(bm, rg)) * size_t(stage_bytes(bm, rg)) +
           (2 * size_t(stages_of(bm, rg)) + 2) * sizeof(uint64_t);
}
static_assert(smem_bytes(128, 2) <= kSmemLimit && smem_bytes(16, 1) <= kSmemLimit, "every ring fits an SM");
static_assert(stages_of(128, 2) >= 4, "the widest tile keeps a few k-tiles in flight");
// One phase of a stage's `full` barrier: the copy engine's bytes and an arrival from every producer thread.
static_assert(x_bytes(128) + code_bytes(2) < (1 << 20), "a stage's bytes fit a barrier phase");

#if defined(DELTABIT_WGMMA_COMPILED)

template <int BM, int RG>
__device__ __forceinline__ uint8_t* stage_base(uint8_t* smem, int64_t i) {
    return smem + (i % stages_of(BM, RG)) * stage_bytes(BM, RG);
}
template <int BM, int RG>
__device__ __forceinline__ uint32_t stage_parity(int64_t i) { return uint32_t((i / stages_of(BM, RG)) & 1); }

// The blocks of a launch form clusters of a.splits consecutive blocks (a lone block when 1): cluster i takes
// tiles i, i + clusters, …, and its block of rank r sums the k-tiles [kt_begin, kt_end) of each.
struct Walk {
    int64_t cluster, clusters;
    int rank, kt_begin, kt_end;
};
__device__ __forceinline__ Walk walk_of(const HalfGemmArgs& a) {
    const int rank = int(blockIdx.x % unsigned(a.splits));
    return {int64_t(blockIdx.x / unsigned(a.splits)), int64_t(gridDim.x / unsigned(a.splits)), rank,
            int(int64_t(a.k_tiles) * rank / a.splits), int(int64_t(a.k_tiles) * (rank + 1) / a.splits)};
}

// The x tile and the codes come by the copy engine (thread 0 asks for three boxes: the two 64-f16 spans of
// the tile's tokens, 128-byte swizzled, and the rows' 16 code bytes; rows past the matrix read as zeros);
// the scale words by cp.async from every thread. When the copies went through cp.async too (16 bytes a
// thread, rows 10 KB apart: half of every 32-byte sector fetched twice from L2), they set the pace: the
// 128 × 256 tile took 101.6 µs for a round that runs in 77.3 µs with x already in place (H200, K = 5120).
template <int BM, int RG>
__device__ void produce(const CUtensorMap* x_map, const CUtensorMap* code_map, const HalfGemmArgs& a, uint8_t* smem,
                        uint64_t* full, uint64_t* empty) {
    constexpr int kStages = stages_of(BM, RG);
    const int p = int(threadIdx.x);  // 0 .. 127
    const Walk walk = walk_of(a);
    int64_t issued = 0;
    for (int64_t tile = walk.cluster; tile < a.tiles; tile += walk.clusters) {
        const int m0 = int((tile % a.m_tiles) * BM), n0 = int((tile / a.m_tiles) * rows_of(RG));
        for (int kt = walk.kt_begin; kt < walk.kt_end; ++kt, ++issued) {
            uint64_t* stage_full = &full[issued % kStages];
            mbarrier_wait_parity(&empty[issued % kStages], stage_parity<BM, RG>(issued) ^ 1u);
            uint8_t* st = stage_base<BM, RG>(smem, issued);
            if (p == 0) {
                fence_proxy_async_shared();  // the consumers' reads of this stage before the copy engine's writes
                mbarrier_arrive_expect_tx(stage_full, uint32_t(x_bytes(BM) + code_bytes(RG)));
                tensor_copy_2d_to_shared(st, x_map, kt * kKTile, m0, stage_full);
                tensor_copy_2d_to_shared(st + span_bytes(BM), x_map, kt * kKTile + kSpan, m0, stage_full);
                tensor_copy_2d_to_shared(st + x_bytes(BM), code_map, kt * 16, n0, stage_full);
            }
#pragma unroll
            for (int group = 0; group < RG; ++group) {  // weight rows p, p + 128
                const int r = p + 128 * group;
                const bool scale_ok = n0 + r < a.n && kt < a.scales_per_row;
                const auto scale =
                    reinterpret_cast<uintptr_t>(a.scales + (scale_ok ? (n0 + r) * a.scales_per_row + kt : 0));
                cp_async4(st + scale_offset(BM, RG) + r * 4, reinterpret_cast<const void*>(scale & ~uintptr_t(3)),
                          !scale_ok);
            }
            cp_async_mbarrier_arrive(stage_full);
        }
    }
}

// Two weights of a row as the f16x2 operand word {±d, ±d}: the weights whose bits are `bit` (low half) and
// bit + 8 (high half) of the code word, + d where the bit is set (core/quant.cpp dequantize_q1_0). d2 is
// {d, d}. The rotate brings the bits to the sign positions of bytes 0 and 1, the byte permute replicates
// those signs over both halves, and the last step clears the sign of d where the bit is set.
__device__ __forceinline__ uint32_t signed_pair(uint32_t word, int bit, uint32_t d2) {
    const uint32_t r = __funnelshift_l(word, word, uint32_t(7 - bit) & 31u);
    uint32_t set;
    asm("prmt.b32 %0, %1, 0, 0x9988;" : "=r"(set) : "r"(r));  // bytes 1, 0 ← sign of byte 0; 3, 2 ← byte 1's
    return (~set & 0x80008000u) ^ d2;
}

// Split k: the sums of the blocks of rank ≥ 1 go to their slots in a.partials, and the block of rank 0 adds
// them to its own in rank order before it stores y — the same y whichever block finishes first. A slot is
// the tile's sums thread by thread (float4 i of consumer thread t at i · 256 + t: stores coalesce). `ready`
// (in rank 0) collects a warp's arrival from every block of rank ≥ 1 once its slot is written; `freed` (in
// each of them) one from each of rank 0's warps once it has read them, before the slot is written again.
template <int BM, int RG>
struct SplitSlots {
    static constexpr int kFloat4s = 2 * 128 * RG * BM / 8;  // per consumer thread RG · BM / 8
    float4* base;
    __device__ float4* slot(const Walk& w, int rank, int splits) const {
        return base + (w.cluster * (splits - 1) + rank - 1) * kFloat4s;
    }
};

template <int BM, int RG>
__device__ __forceinline__ void hand_over_sums(float (&acc)[RG][BM / 2], float4* slot, int t) {
#pragma unroll
    for (int h = 0; h < RG; ++h)
#pragma unroll
        for (int i = 0; i < BM / 8; ++i)
            __stcg(&slot[(h * BM / 8 + i) * 256 + t],
                   make_float4(acc[h][4 * i], acc[h][4 * i + 1], acc[h][4 * i + 2], acc[h][4 * i + 3]));
}

template <int BM, int RG>
__device__ __forceinline__ void add_handed_sums(float (&acc)[RG][BM / 2], const float4* slot, int t) {
#pragma unroll
    for (int h = 0; h < RG; ++h)
#pragma unroll
        for (int i = 0; i < BM / 8; ++i) {
            const float4 v = __ldcg(&slot[(h * BM / 8 + i) * 256 + t]);  // past L1: written by another SM
            acc[h][4 * i] += v.x;
            acc[h][4 * i + 1] += v.y;
            acc[h][4 * i + 2] += v.z;
            acc[h][4 * i + 3] += v.w;
        }
}

// Consumer c owns weight rows 64·RG·c .. of a tile, RG groups of 64 (one wgmma M each) with an accumulator
// each. A k-tile is 2·RG pieces — (group, first or second half of the k-steps) — of four m64nBMk16 products
// each, pipelined one deep within the k-tile: a piece's operands are built while the previous piece's
// products run (two operand buffers, wgmma_wait<1> before reusing one).
template <int BM, int RG>
__device__ void consume(const HalfGemmArgs& a, uint8_t* smem, uint64_t* full, uint64_t* empty, uint64_t* ready,
                        uint64_t* freed) {
    constexpr int kStages = stages_of(BM, RG);
    const int c = int(threadIdx.x) / 128 - 1, wg_thread = int(threadIdx.x) % 128;
    const int warp = wg_thread / 32, lane = wg_thread % 32, g = lane / 4, q = lane % 4;
    // The code word's bit of weight 2q of each 8-weight chunk p is base + 2p (ops/matmul/weight_repack.h: weight
    // 4j + i of a word is bit j + 8i), and weight 2q + 1's is 8 above it.
    const int base = (q >> 1) + 16 * (q & 1);
    const int64_t scales_odd = int64_t((reinterpret_cast<uintptr_t>(a.scales) >> 1) & 1);
    const Walk walk = walk_of(a);
    const SplitSlots<BM, RG> slots{a.partials};
    const int t = int(threadIdx.x) - 128;  // consumer thread 0 .. 255
    int64_t consumed = 0, handed = 0;      // k-tiles consumed; split-k tiles handed over (or gathered)
    for (int64_t tile = walk.cluster; tile < a.tiles; tile += walk.clusters) {
        const int64_t m0 = (tile % a.m_tiles) * BM, n0 = (tile / a.m_tiles) * rows_of(RG);
        float acc[RG][BM / 2];
#pragma unroll
        for (int h = 0; h < RG; ++h)
#pragma unroll
            for (int i = 0; i < BM / 2; ++i) acc[h][i] = 0.0f;
        uint32_t frag[2][4][4];  // two operand buffers of four k-steps
        for (int kt = walk.kt_begin; kt < walk.kt_end; ++kt, ++consumed) {
            // The x tile arrived through the async proxy the wgmma reads with, so no proxy fence.
            mbarrier_wait_parity(&full[consumed % kStages], stage_parity<BM, RG>(consumed));
            const uint8_t* st = stage_base<BM, RG>(smem, consumed);
#pragma unroll
            for (int piece = 0; piece < 2 * RG; ++piece) {
                const int h = piece / 2, half = piece % 2;
                uint32_t (&f)[4][4] = frag[piece % 2];
                if (piece >= 2) wgmma_wait<1>();  // the piece that last used f is done (the one before may run)
                const int row_lo = 64 * RG * c + 64 * h + 16 * warp + g, row_hi = row_lo + 8;
                auto scale_pair = [&](int row) {
                    const uint32_t word = *reinterpret_cast<const uint32_t*>(st + scale_offset(BM, RG) + row * 4);
                    const int odd = int(((n0 + row) * a.scales_per_row + scales_odd + kt) & 1);
                    const uint32_t bits = odd ? word >> 16 : word & 0xFFFFu;
                    return bits | (bits << 16);
                };
                const uint32_t d_lo = scale_pair(row_lo), d_hi = scale_pair(row_hi);
                // Code words 2·half and 2·half + 1 of each row: k-steps 4·half .. 4·half + 3.
                const uint2 code_lo = *reinterpret_cast<const uint2*>(st + x_bytes(BM) + row_lo * 16 + half * 8);
                const uint2 code_hi = *reinterpret_cast<const uint2*>(st + x_bytes(BM) + row_hi * 16 + half * 8);
                // k-step s covers chunks 2s (k 0..7 of the step) and 2s + 1 (k 8..15): chunks p and p + 1 of its word.
#pragma unroll
                for (int s = 0; s < 4; ++s) {
                    const uint32_t lo = (s / 2) ? code_lo.y : code_lo.x, hi = (s / 2) ? code_hi.y : code_hi.x;
                    const int bit = base + 4 * (s & 1);
                    f[s][0] = signed_pair(lo, bit, d_lo);
                    f[s][1] = signed_pair(hi, bit, d_hi);
                    f[s][2] = signed_pair(lo, bit + 2, d_lo);
                    f[s][3] = signed_pair(hi, bit + 2, d_hi);
                }
                wgmma_fence();
#pragma unroll
                for (int s = 0; s < 4; ++s)
                    wgmma_m64nNk16_f16_ra<BM>(
                        acc[h], f[s], wgmma_descriptor_swizzle128(st + half * span_bytes(BM) + s * 32), true);
                wgmma_commit();
            }
            // Drained at the end of every k-tile: ptxas tracks which products are in flight only within
            // straight-line code, and serialises every wgmma (C7513) if operands are built across the loop's
            // back edge with products running. The other consumer's products fill this gap.
            wgmma_wait<0>();
#pragma unroll
            for (int h = 0; h < RG; ++h)
#pragma unroll
                for (int i = 0; i < BM / 2; ++i) asm volatile("" : "+f"(acc[h][i])::"memory");
            __syncwarp();
            if (lane == 0) mbarrier_arrive(&empty[consumed % kStages]);
        }
        if (a.splits > 1) {
            if (walk.rank > 0) {
                if (handed > 0) mbarrier_wait_parity<true>(freed, uint32_t((handed - 1) & 1));
                hand_over_sums<BM, RG>(acc, slots.slot(walk, walk.rank, a.splits), t);
                __threadfence();
                __syncwarp();
                if (lane == 0) mbarrier_arrive_remote(cluster_shared_address(ready, 0));
                ++handed;
                continue;
            }
            mbarrier_wait_parity<true>(ready, uint32_t(handed & 1));
            for (int r = 1; r < a.splits; ++r) add_handed_sums<BM, RG>(acc, slots.slot(walk, r, a.splits), t);
            __syncwarp();
            if (lane == 0)
                for (int r = 1; r < a.splits; ++r) mbarrier_arrive_remote(cluster_shared_address(freed, uint32_t(r)));
            ++handed;
        }
#pragma unroll
        for (int h = 0; h < RG; ++h) {
            const int64_t r_lo = n0 + 64 * RG * c + 64 * h + 16 * warp + g, r_hi = r_lo + 8;
#pragma unroll
            for (int j = 0; j < BM / 8; ++j)
#pragma unroll
                for (int e = 0; e < 2; ++e) {
                    const int64_t token = m0 + 8 * j + 2 * q + e;
                    if (token >= a.m) continue;
                    const float inv = a.inv_scale[token];
                    if (r_lo < a.n) a.y[token * a.ldy + r_lo] = acc[h][4 * j + e] * inv;
                    if (r_hi < a.n) a.y[token * a.ldy + r_hi] = acc[h][4 * j + 2 + e] * inv;
                }
        }
    }
    // Rank 0's warps arrive on this block's `freed` after their last read of its slot: stay until they have.
    if (a.splits > 1 && walk.rank > 0 && handed > 0) mbarrier_wait_parity<true>(freed, uint32_t((handed - 1) & 1));
}

#endif  // DELTABIT_WGMMA_COMPILED

template <int BM, int RG>
__global__ void __launch_bounds__(kThreads, 1)
    gemm_q1_0_half_kernel(const __grid_constant__ CUtensorMap x_map, const __grid_constant__ CUtensorMap code_map,
                          HalfGemmArgs a) {
#if defined(DELTABIT_WGMMA_COMPILED)
    constexpr int kStages = stages_of(BM, RG);
    extern __shared__ __align__(1024) uint8_t smem_raw[];
    uint8_t* smem = smem_raw + ((kAlignSlack - (shared_address(smem_raw) & (kAlignSlack - 1))) & (kAlignSlack - 1));
    uint64_t* full = reinterpret_cast<uint64_t*>(smem + size_t(kStages) * size_t(stage_bytes(BM, RG)));
    uint64_t* empty = full + kStages;
    uint64_t* ready = empty + kStages;
    uint64_t* freed = ready + 1;
    if (threadIdx.x == 0) {
        for (int s = 0; s < kStages; ++s) {
            mbarrier_init(&full[s], 128 + 1);          // every producer thread's cp.async, thread 0's expect_tx
            mbarrier_init(&empty[s], kConsumerWarps);  // one lane of every consumer warp
        }
        mbarrier_init(ready, uint32_t(kConsumerWarps * (a.splits > 1 ? a.splits - 1 : 1)));
        mbarrier_init(freed, kConsumerWarps);
        fence_mbarrier_init();
    }
    __syncthreads();
    if (a.splits > 1) cluster_sync();  // no block arrives on another's barriers before they are initialised
    // Registers from the producer to the consumers, whose two accumulators alone are 128 a thread (BM = 128,
    // RG = 2): 128 · 80 + 256 · 208 = 63488 of the launch bound's 64512. ptxas -v (CUDA 13.0): no spills.
    if (threadIdx.x < 128) {
        asm volatile("setmaxnreg.dec.sync.aligned.u32 80;\n" ::: "memory");
        produce<BM, RG>(&x_map, &code_map, a, smem, full, empty);
    } else {
        asm volatile("setmaxnreg.inc.sync.aligned.u32 208;\n" ::: "memory");
        consume<BM, RG>(a, smem, full, empty, ready, freed);
    }
#endif
}

using Kernel = void (*)(CUtensorMap, CUtensorMap, HalfGemmArgs);

// The tiles: tokens × weight rows, the kernel, its shared memory, and the relative cost of one round of one
// tile per SM (the 128 × 256 tile's = 1; H200, bench_prefill_cuda half, Bonsai-27B ssm_gate, K = 5120).
struct HalfTile {
    GemmTile tile;
    int tokens, rows;
    Kernel kernel;
    size_t smem;
    double cost;
};
template <int BM, int RG>
constexpr HalfTile half_tile(GemmTile t, double cost) {
    return {t, BM, rows_of(RG), &gemm_q1_0_half_kernel<BM, RG>, smem_bytes(BM, RG), cost};
}
// Measured with the copy engine's copies (one round of the 128 × 256 tile: 64.2 µs; e.g. 16 × 128: 12 rounds in
// 232.6 µs); they predict ffn_gate/up's single-tile times within 3%.
const HalfTile kHalfTiles[] = {
    half_tile<128, 2>(GemmTile::half_m128_n256, 1.0),   half_tile<64, 2>(GemmTile::half_m64_n256, 0.70),
    half_tile<32, 2>(GemmTile::half_m32_n256, 0.58),    half_tile<16, 2>(GemmTile::half_m16_n256, 0.51),
    half_tile<128, 1>(GemmTile::half_m128_n128, 0.52),  half_tile<64, 1>(GemmTile::half_m64_n128, 0.375),
    half_tile<32, 1>(GemmTile::half_m32_n128, 0.33),    half_tile<16, 1>(GemmTile::half_m16_n128, 0.30),
};

void configure_kernels() {
    static const bool configured = [] {
        for (const HalfTile& h : kHalfTiles)
            cuda_check(cudaFuncSetAttribute(h.kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(h.smem)),
                       "half gemm shared memory");
        return true;
    }();
    (void)configured;
}

// How many clusters of s blocks of the widest tile's kernel the device runs at once (s = 1: one block an SM);
// every tile's kernel takes a whole SM's shared memory, so the counts hold for all of them.
// A launch of `blocks` blocks in clusters of `splits`; the cluster attribute lives in *attribute.
cudaLaunchConfig_t cluster_launch(unsigned blocks, size_t smem, cudaStream_t stream, int splits,
                                  cudaLaunchAttribute* attribute) {
    cudaLaunchConfig_t config{};
    config.gridDim = dim3(blocks);
    config.blockDim = dim3(kThreads);
    config.dynamicSmemBytes = smem;
    config.stream = stream;
    *attribute = {};
    attribute->id = cudaLaunchAttributeClusterDimension;
    attribute->val.clusterDim.x = unsigned(splits);
    attribute->val.clusterDim.y = attribute->val.clusterDim.z = 1;
    config.attrs = attribute;
    config.numAttrs = 1;
    return config;
}

const detail::HalfGemmClusters& device_clusters() {
    static const detail::HalfGemmClusters clusters = [] {
        configure_kernels();
        detail::HalfGemmClusters c;
        c.of[1] = device_attribute(cudaDevAttrMultiProcessorCount, "SM count");
        for (int s = 2; s <= detail::kHalfGemmMaxSplits; ++s) {
            cudaLaunchAttribute cluster;
            const cudaLaunchConfig_t config =
                cluster_launch(unsigned(s * c.of[1]), kHalfTiles[0].smem, nullptr, s, &cluster);
            int count = 0;
            cuda_check(cudaOccupancyMaxActiveClusters(&count, kHalfTiles[0].kernel, &config),
                       "half gemm cluster occupancy");
            c.of[size_t(s)] = std::max(count, 1);
        }
        return c;
    }();
    return clusters;
}

// Partial sums `clusters` clusters of `splits` blocks on tile t hand over at once: a tile's per block of rank ≥ 1.
size_t split_floats(int64_t clusters, int splits, const HalfTile& t) {
    return size_t(clusters) * size_t(splits - 1) * size_t(t.tokens) * size_t(t.rows);
}

struct Launch {
    int64_t tiles = 0, blocks = 0;
};
// One launch of tile t over x and w, its k split over `splits` blocks a cluster; max_blocks (0: as many as run at
// once) caps the blocks.
Launch launch(const HalfActivationRows& x, const GemvWeightView& w, float* y, int64_t ldy, const HalfTile& t,
              int splits, int64_t max_blocks, cudaStream_t stream) {
    configure_kernels();
    HalfGemmArgs a{};
    a.inv_scale = x.inv_scale;
    a.scales = w.scales;
    a.y = y;
    a.partials = reinterpret_cast<float4*>(x.partials);
    a.m = x.rows;
    a.n = w.rows;
    a.ldy = ldy;
    a.splits = splits;
    const auto code_row_bytes = uint64_t(gemv_code_row_bytes(w.dtype, w.cols));
    const CUtensorMap x_map = tensor_map_2d(x.h, 2, uint64_t(x.cols), uint64_t(x.rows), uint64_t(x.cols) * 2,
                                            kSpan, uint32_t(t.tokens), TensorMapSwizzle::bytes128);
    const CUtensorMap code_map = tensor_map_2d(w.codes, 1, code_row_bytes, uint64_t(w.rows), code_row_bytes, 16,
                                               uint32_t(t.rows), TensorMapSwizzle::none);
    a.k_tiles = int(w.cols / kKTile);
    a.scales_per_row = int(w.cols / kKTile);
    a.m_tiles = (x.rows + t.tokens - 1) / t.tokens;
    a.tiles = a.m_tiles * ((w.rows + t.rows - 1) / t.rows);
    const int64_t cap = max_blocks > 0 ? std::max<int64_t>(1, max_blocks / splits) : device_clusters().of[size_t(splits)];
    const int64_t clusters = std::min<int64_t>(a.tiles, cap);
    if (splits > 1 && (splits > a.k_tiles || split_floats(clusters, splits, t) > x.partial_floats))
        fail_message("cuda half gemm: " + std::to_string(splits) + " splits of " + std::to_string(a.k_tiles) +
                     " k-tiles need " + std::to_string(split_floats(clusters, splits, t)) +
                     " floats of partial sums; the rows hold " + std::to_string(x.partial_floats));
    const unsigned blocks = unsigned(clusters * splits);
    if (splits == 1) {
        t.kernel<<<blocks, kThreads, t.smem, stream>>>(x_map, code_map, a);
    } else {
        cudaLaunchAttribute cluster;
        const cudaLaunchConfig_t config = cluster_launch(blocks, t.smem, stream, splits, &cluster);
        cuda_check(cudaLaunchKernelEx(&config, t.kernel, x_map, code_map, a), "gemm_q1_0_half_kernel (clusters)");
    }
    cuda_check_launch("gemm_q1_0_half_kernel");
    return {a.tiles, int64_t(blocks)};
}

int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

// The round costs were measured at K = 5120: 40 k-tiles.
constexpr double kCostKTiles = 40.0;
// What a split adds to each of its rounds, in the same unit (a round of the 128 × 256 tile at K = 5120,
// 64.2 µs): ~5 µs whatever the tile (a shorter walk's pipeline fill, the cluster's start and hand-over) and
// ~4 µs for each block of rank ≥ 1 whose sums rank 0 reads, per 128 KB of them (a 128 × 256 tile's). Fitted on
// the H200 (bench_prefill_cuda half, "split k"): attn_k/v at T = 512 on 128 × 256 tiles, split 2/3/4 measured
// 42.4/35.7/32.4 µs against 41/34/33 modelled; Bonsai-4B ffn_down split 2 67.9 against 70; ffn_down at
// T = 16 split 4 33.2 against 34. Splits of 6 and 8 measured slower than 4 on every shape (few such clusters
// fit a GPC), so the automatic choice stops at 4.
constexpr double kSplitFixedCost = 5.0 / 64.2, kSplitSumsCost = 4.0 / 64.2;
constexpr int kMinKTilesPerSplit = 4;
constexpr int kAutomaticSplits[] = {2, 3, 4};
// A split must beat the best unsplit tile by this much: its costs are the least certain part of the model.
constexpr double kSplitMargin = 0.9;

// Rounds of clusters times the cost of one: the model the automatic choice minimises.
double rounds_cost(const HalfTile& t, int64_t tokens, int64_t rows, int64_t k_tiles, int splits, int clusters) {
    if (rows <= 0) return 0.0;
    const int64_t rounds = ceil_div(ceil_div(tokens, t.tokens) * ceil_div(rows, t.rows), clusters);
    const double split_cost =
        splits > 1 ? kSplitFixedCost + kSplitSumsCost * (splits - 1) * double(t.tokens * t.rows) / (128.0 * 256.0)
                   : 0.0;
    return double(rounds) * (t.cost * double(k_tiles) / kCostKTiles / splits + split_cost);
}

const HalfTile& tile_of(GemmTile t) {
    for (const HalfTile& h : kHalfTiles)
        if (h.tile == t) return h;
    fail_message(std::string("cuda half gemm: not a half tile: ") + gemm_tile_name(t));
}

// Partial sums of the largest tile for every block a launch can run at once (any tile may be named for any
// number of tokens).
size_t partial_floats() {
    static const int sms = device_attribute(cudaDevAttrMultiProcessorCount, "SM count");
    return size_t(sms) * 128 * 256;
}

}  // namespace

int half_tile_tokens(GemmTile t) {
    for (const HalfTile& h : kHalfTiles)
        if (h.tile == t) return h.tokens;
    return 0;
}

// The cheapest of: one tile for the whole matrix, unsplit or (when that clearly gains, kSplitMargin) with its
// k split over 2 to 4 blocks a cluster (at least kMinKTilesPerSplit k-tiles each); or — when a clear gain over
// that (3%; the second launch's start is not in the costs) — the widest tile on the weight rows that fill its
// whole rounds and the cheapest tile for the rest. y does not depend on the cut (each output is still one
// block's, summed in k order); a split sums each block's k-tiles in k order and the blocks' sums in rank order.
detail::HalfGemmPlan detail::half_gemm_plan(int64_t tokens, int64_t rows, int64_t k_tiles, const HalfGemmClusters& c) {
    HalfGemmPlan single, split, cut;
    double single_cost = 1e300, split_cost = 1e300, cut_cost = 1e300;
    for (const HalfTile& t : kHalfTiles) {
        const double cost = rounds_cost(t, tokens, rows, k_tiles, 1, c.of[1]);
        if (cost < single_cost) single_cost = cost, single = {GemmTile::automatic, 0, t.tile, 1};
        for (int splits : kAutomaticSplits) {
            if (k_tiles < int64_t(splits) * kMinKTilesPerSplit) continue;
            const double s = rounds_cost(t, tokens, rows, k_tiles, splits, c.of[size_t(splits)]);
            if (s < split_cost) split_cost = s, split = {GemmTile::automatic, 0, t.tile, splits};
        }
    }
    if (split_cost < kSplitMargin * single_cost) single = split, single_cost = split_cost;
    const int sms = c.of[1];
    const HalfTile& wide = kHalfTiles[0];
    const int64_t m_tiles = ceil_div(tokens, wide.tokens);
    const int64_t head_rows = (m_tiles * ceil_div(rows, wide.rows) / sms) * sms / m_tiles * wide.rows;
    if (head_rows > 0 && head_rows < rows) {
        for (const HalfTile& t : kHalfTiles) {
            const double cost = rounds_cost(wide, tokens, head_rows, k_tiles, 1, sms) +
                                rounds_cost(t, tokens, rows - head_rows, k_tiles, 1, sms);
            if (cost < cut_cost) cut_cost = cost, cut = {wide.tile, head_rows, t.tile, 1};
        }
    }
    return cut_cost < 0.97 * single_cost ? cut : single;
}

detail::HalfGemmClusters detail::half_gemm_device_clusters() { return device_clusters(); }

detail::HalfGemmClusters detail::half_gemm_clusters_for(int sms) {
    HalfGemmClusters c;
    for (int s = 1; s <= kHalfGemmMaxSplits; ++s) c.of[size_t(s)] = std::max(1, sms / s);
    return c;
}

bool half_gemm_available() { return detail::wgmma_gemm_available(); }

bool half_prompt_gemm_enabled() {
    static const bool enabled = env_switch("DELTABIT_GEMM_F16", true);
    return enabled && half_gemm_available();
}

bool half_gemm_serves(const GemvWeightView& w, int64_t tokens) {
    // A Q1_0 row is whole blocks of 128 — one k-tile each — so every Q1_0 matrix fits the kernel.
    return tokens >= kGemmMinTokens && w.dtype == DType::Q1_0 && half_prompt_gemm_enabled();
}

// The halves, then the row scales from the next 16-byte boundary.
size_t halves_bytes(int64_t rows, int64_t cols) { return (size_t(rows) * size_t(cols) * sizeof(uint16_t) + 15) / 16 * 16; }

// The halves, the row scales, then (from a 16-byte boundary) the partial sums of split k.
size_t scales_end(int64_t rows, int64_t cols) { return (halves_bytes(rows, cols) + size_t(rows) * sizeof(float) + 15) / 16 * 16; }

size_t half_activation_rows_bytes(int64_t rows, int64_t cols) {
    return scales_end(rows, cols) + partial_floats() * sizeof(float);
}

HalfActivationRows half_activation_rows_view(void* buffer, int64_t rows, int64_t cols) {
    auto* base = static_cast<uint8_t*>(buffer);
    return {reinterpret_cast<uint16_t*>(base), reinterpret_cast<float*>(base + halves_bytes(rows, cols)), rows, cols,
            reinterpret_cast<float*>(base + scales_end(rows, cols)), partial_floats()};
}

GemmLaunchReport gemm_q1_0_half(const HalfActivationRows& x, const GemvWeightView& w, float* y, cudaStream_t stream,
                                GemmTile tile, int64_t max_blocks, int splits) {
    if (w.dtype != DType::Q1_0 || w.cols <= 0 || w.cols % kKTile != 0 || w.rows < 0)
        fail_message("cuda half gemm: Q1_0 weights with a multiple of 128 columns, not " +
                     std::string(dtype_name(w.dtype)) + " " + std::to_string(w.rows) + "×" + std::to_string(w.cols));
    if (x.cols != w.cols)
        fail_message("cuda half gemm: " + std::to_string(x.cols) + " activations per row for " +
                     std::to_string(w.cols) + " weight columns");
    if (!half_gemm_available())
        fail_message("cuda half gemm: needs sm_90a machine code (CMAKE_CUDA_ARCHITECTURES with 90a) on a compute "
                     "capability 9.0 device");
    if (splits < 0 || splits > detail::kHalfGemmMaxSplits || (tile == GemmTile::automatic && splits > 0))
        fail_message("cuda half gemm: " + std::to_string(splits) + " splits (0 for the planner's choice, or 1 to " +
                     std::to_string(detail::kHalfGemmMaxSplits) + " with a named tile)");
    if (x.rows == 0 || w.rows == 0) return {};
    if (tile != GemmTile::automatic) {
        const int s = std::max(splits, 1);
        const Launch l = launch(x, w, y, w.rows, tile_of(tile), s, max_blocks, stream);
        return {tile, l.tiles, l.blocks, GemmTile::automatic, 0, s};
    }
    const detail::HalfGemmClusters& clusters = device_clusters();
    detail::HalfGemmPlan plan = max_blocks > 0 ? detail::HalfGemmPlan{GemmTile::automatic, 0, kHalfTiles[0].tile, 1}
                                               : detail::half_gemm_plan(x.rows, w.rows, w.cols / kKTile, clusters);
    const HalfTile& rest = tile_of(plan.tile);
    // Rows viewed without room for partial sums (not through half_activation_rows_view) run unsplit.
    if (plan.splits > 1 && split_floats(clusters.of[size_t(plan.splits)], plan.splits, rest) > x.partial_floats)
        plan.splits = 1;
    if (plan.head_rows == 0) {
        const Launch l = launch(x, w, y, w.rows, rest, plan.splits, max_blocks, stream);
        return {plan.tile, l.tiles, l.blocks, GemmTile::automatic, 0, plan.splits};
    }
    const Launch head = launch(x, w.slice_rows(0, plan.head_rows), y, w.rows, tile_of(plan.head_tile), 1, 0, stream);
    const Launch tail = launch(x, w.slice_rows(plan.head_rows, w.rows - plan.head_rows), y + plan.head_rows, w.rows,
                               rest, 1, 0, stream);
    return {plan.head_tile, head.tiles + tail.tiles, std::max(head.blocks, tail.blocks), plan.tile,
            w.rows - plan.head_rows, 1};
}

}  // namespace deltabit::cuda
