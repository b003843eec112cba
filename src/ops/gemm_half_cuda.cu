// The Q1_0 prompt GEMM on f16 activations (ops/prefill_cuda.h, "Q1_0 GEMM on f16 activations"): Hopper's
// warpgroup tensor cores with f16 inputs and fp32 accumulation, warp-specialised as the int8 kernel
// (gemm_wgmma_ws_cuda.cu) is — one warpgroup copies, two compute.
//
// Why f16 and not int8. The int8 kernel's tensor cores give one exact integer dot per output and per group
// of 128 weights, and every such dot must be turned into a float, scaled by its weight scale and its
// activation group's scale and added: four instructions per output per k-tile, ~290 of a consumer warp's
// ~426 instructions a k-tile, which left the tensor pipe 26% busy (Nsight Compute, docs/bench.md). Here
// the weight scale rides in the operand instead: a 1-bit weight is ±d, and ±d is an exact f16, so the
// A operand is built in registers as f16 ±d (one rotate, one byte permute and one logic op per two
// weights) and the tensor cores accumulate the whole row of K in fp32 — no per-output work until the end.
// The activations are rounded once to f16 per token (a power-of-two scale keeps them in range), which is
// also closer to the fp32 model than int8 per 128 (8 mantissa bits more on every value near a group's max).
//
//   warpgroup 0 (producer)   copies each k-tile's x tile (BM tokens × 128 f16, core-matrix order), the tile's
//                            weight rows' codes (16 bytes each) and the aligned words holding their fp16
//                            scales into a ring of stages (cp.async arriving on the stage's `full` mbarrier).
//   warpgroups 1, 2          (consumers) each own 64·RG weight rows as RG groups of 64: A (weights) from
//                            registers, B the stage's x tile; per group eight m64nBMk16 products a k-tile into
//                            its fp32 accumulator, then the stage goes back (`empty`).
// Tiles of 256 weight rows (RG = 2) for large matrices, not the int8 kernel's 128: an f16 x tile is twice the
// bytes, and at 128 rows the copies from L2 were the limit (Nsight Compute, H200, ssm_qkv at T = 512: L2 65%
// busy, the consumers waiting on `full`, the tensor pipe a third busy; 1.5× the int8 kernel's time). They
// still are: building the next operands while products run (below) changed no tile by 2%. Tiles of 128 rows
// for small matrices, where 256 would leave rows idle; the automatic choice weighs them (detail::half_gemm_plan).
// Thread layout as the int8 kernel's: accumulator d[4j + e] of group h is weight row 64·RG·c + 64h + 16w + g +
// 8·(e / 2) of consumer c, token 8j + 2q + e % 2 of the tile. Measured: docs/bench.md, "The prompt GEMM on f16
// activations".
#include "backend/cuda_buffer.h"
#include "ops/prefill_cuda.h"

#include <cuda_fp16.h>

#include <algorithm>
#include <string>

#include "core/env_switch.h"
#include "ops/async_copy.cuh"
#include "ops/bulk_copy.cuh"
#include "ops/f16_activations.h"
#include "ops/gemm_wgmma_cuda.h"  // wgmma_gemm_available
#include "ops/weight_repack.h"
#include "ops/wgmma.cuh"

namespace deltabit::cuda {

namespace {

// A tile: BM tokens (16, 32, 64, 128) × 128·RG weight rows (RG row groups of 64 per consumer: 1 or 2).
constexpr int kKTile = 128;    // f16 activations a k-tile: one Q1_0 scale group
constexpr int kChunks = kKTile * 2 / 16;  // 16-byte chunks of a token's k-tile
constexpr int kThreads = 384;
[[maybe_unused]] constexpr int kConsumerWarps = 8;
constexpr int rows_of(int rg) { return 128 * rg; }

struct HalfGemmArgs {
    const uint16_t* x;        // [m][k] binary16
    const float* inv_scale;   // [m]
    const uint8_t* codes;
    const uint16_t* scales;
    float* y;
    int64_t m, n, k, ldy;
    int64_t code_row_bytes;
    int64_t m_tiles, tiles;
    int k_tiles, scales_per_row;
};

// A stage: the x tile, the codes of the tile's weight rows, and each row's aligned scale word (as the int8
// kernel's: a row's scales start on any 2-byte boundary, the plane is padded so that the word is inside it).
constexpr int x_bytes(int bm) { return bm * kKTile * 2; }
constexpr int scale_offset(int bm, int rg) { return x_bytes(bm) + rows_of(rg) * 16; }
constexpr int stage_bytes(int bm, int rg) { return scale_offset(bm, rg) + rows_of(rg) * 4; }
constexpr size_t kSmemLimit = 227 * 1024;
// As many stages as fit, at most 24 (a 16-token stage of 128 rows holds 6.5 KB: 24 keep ~48 KB of codes in
// flight, as the int8 kernel's narrow rings do).
constexpr int stages_of(int bm, int rg) {
    return int(std::min<size_t>(24, (kSmemLimit - 24 * 2 * sizeof(uint64_t)) / size_t(stage_bytes(bm, rg))));
}
constexpr size_t smem_bytes(int bm, int rg) {
    return size_t(stages_of(bm, rg)) * size_t(stage_bytes(bm, rg)) + 2 * size_t(stages_of(bm, rg)) * sizeof(uint64_t);
}
static_assert(stage_bytes(16, 1) % 128 == 0 && stage_bytes(16, 2) % 128 == 0, "every stage's x tile starts aligned");
static_assert(smem_bytes(128, 2) <= kSmemLimit && smem_bytes(16, 1) <= kSmemLimit, "every ring fits an SM");
static_assert(stages_of(128, 2) >= 4, "the widest tile keeps a few k-tiles in flight");
[[maybe_unused]] constexpr uint32_t kLeadingBytes = 128, kStrideBytes = kChunks * 128;

#if defined(DELTABIT_WGMMA_COMPILED)

template <int BM, int RG>
__device__ __forceinline__ uint8_t* stage_base(uint8_t* smem, int64_t i) {
    return smem + (i % stages_of(BM, RG)) * stage_bytes(BM, RG);
}
template <int BM, int RG>
__device__ __forceinline__ uint32_t stage_parity(int64_t i) { return uint32_t((i / stages_of(BM, RG)) & 1); }

template <int BM, int RG>
__device__ void produce(const HalfGemmArgs& a, uint8_t* smem, uint64_t* full, uint64_t* empty) {
    constexpr int kStages = stages_of(BM, RG);
    const int p = int(threadIdx.x);  // 0 .. 127
    int64_t issued = 0;
    for (int64_t tile = blockIdx.x; tile < a.tiles; tile += gridDim.x) {
        const int64_t m0 = (tile % a.m_tiles) * BM, n0 = (tile / a.m_tiles) * rows_of(RG);
        for (int kt = 0; kt < a.k_tiles; ++kt, ++issued) {
            mbarrier_wait_parity(&empty[issued % kStages], stage_parity<BM, RG>(issued) ^ 1u);
            uint8_t* st = stage_base<BM, RG>(smem, issued);
            // x: c → (row, chunk) with the row's low 3 bits fastest, 8 lanes filling one core matrix's 128 bytes.
            // Unrolled by 4, not fully: 16 copies' addresses at once spill the producer's registers.
#pragma unroll 4
            for (int i = 0; i < BM * kChunks / 128; ++i) {
                const int c = p + i * 128;
                const int row = (c & 7) + 8 * (c >> 7), chunk = (c >> 3) & (kChunks - 1);
                const bool ok = m0 + row < a.m;
                const uint16_t* src = a.x + (ok ? (m0 + row) * a.k + int64_t(kt) * kKTile + chunk * 8 : 0);
                cp_async16(st + core_matrix_offset_wide<kChunks>(row, chunk), src, !ok);
            }
            const int64_t byte = int64_t(kt) * 16;
#pragma unroll
            for (int group = 0; group < RG; ++group) {  // weight rows p, p + 128
                const int r = p + 128 * group;
                const bool code_ok = n0 + r < a.n && byte < a.code_row_bytes;
                cp_async16(st + x_bytes(BM) + r * 16, a.codes + (code_ok ? (n0 + r) * a.code_row_bytes + byte : 0),
                           !code_ok);
                const bool scale_ok = n0 + r < a.n && kt < a.scales_per_row;
                const auto scale =
                    reinterpret_cast<uintptr_t>(a.scales + (scale_ok ? (n0 + r) * a.scales_per_row + kt : 0));
                cp_async4(st + scale_offset(BM, RG) + r * 4, reinterpret_cast<const void*>(scale & ~uintptr_t(3)),
                          !scale_ok);
            }
            cp_async_mbarrier_arrive(&full[issued % kStages]);
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

// Consumer c owns weight rows 64·RG·c .. of a tile, RG groups of 64 (one wgmma M each) with an accumulator
// each. A k-tile is 2·RG pieces — (group, first or second half of the k-steps) — of four m64nBMk16 products
// each, pipelined one deep within the k-tile: a piece's operands are built while the previous piece's
// products run (two operand buffers, wgmma_wait<1> before reusing one).
template <int BM, int RG>
__device__ void consume(const HalfGemmArgs& a, uint8_t* smem, uint64_t* full, uint64_t* empty) {
    constexpr int kStages = stages_of(BM, RG);
    const int c = int(threadIdx.x) / 128 - 1, wg_thread = int(threadIdx.x) % 128;
    const int warp = wg_thread / 32, lane = wg_thread % 32, g = lane / 4, q = lane % 4;
    // The code word's bit of weight 2q of each 8-weight chunk p is base + 2p (ops/weight_repack.h: weight
    // 4j + i of a word is bit j + 8i), and weight 2q + 1's is 8 above it.
    const int base = (q >> 1) + 16 * (q & 1);
    const int64_t scales_odd = int64_t((reinterpret_cast<uintptr_t>(a.scales) >> 1) & 1);
    int64_t consumed = 0;
    for (int64_t tile = blockIdx.x; tile < a.tiles; tile += gridDim.x) {
        const int64_t m0 = (tile % a.m_tiles) * BM, n0 = (tile / a.m_tiles) * rows_of(RG);
        float acc[RG][BM / 2];
#pragma unroll
        for (int h = 0; h < RG; ++h)
#pragma unroll
            for (int i = 0; i < BM / 2; ++i) acc[h][i] = 0.0f;
        uint32_t frag[2][4][4];  // two operand buffers of four k-steps
        for (int kt = 0; kt < a.k_tiles; ++kt, ++consumed) {
            mbarrier_wait_parity(&full[consumed % kStages], stage_parity<BM, RG>(consumed));
            fence_proxy_async_shared();  // the copies landed through the generic proxy; the wgmma reads async
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
                        acc[h], f[s], wgmma_descriptor(st + (4 * half + s) * 256, kLeadingBytes, kStrideBytes), true);
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
}

#endif  // DELTABIT_WGMMA_COMPILED

template <int BM, int RG>
__global__ void __launch_bounds__(kThreads, 1) gemm_q1_0_half_kernel(HalfGemmArgs a) {
#if defined(DELTABIT_WGMMA_COMPILED)
    constexpr int kStages = stages_of(BM, RG);
    extern __shared__ __align__(128) uint8_t smem[];
    uint64_t* full = reinterpret_cast<uint64_t*>(smem + size_t(kStages) * size_t(stage_bytes(BM, RG)));
    uint64_t* empty = full + kStages;
    if (threadIdx.x == 0) {
        for (int s = 0; s < kStages; ++s) {
            mbarrier_init(&full[s], 128);              // every producer thread, once its copies landed
            mbarrier_init(&empty[s], kConsumerWarps);  // one lane of every consumer warp
        }
        fence_mbarrier_init();
    }
    __syncthreads();
    // Registers from the producer to the consumers, whose two accumulators alone are 128 a thread (BM = 128,
    // RG = 2): 128 · 80 + 256 · 208 = 63488 of the launch bound's 64512. ptxas -v (CUDA 13.0): no spills.
    if (threadIdx.x < 128) {
        asm volatile("setmaxnreg.dec.sync.aligned.u32 80;\n" ::: "memory");
        produce<BM, RG>(a, smem, full, empty);
    } else {
        asm volatile("setmaxnreg.inc.sync.aligned.u32 208;\n" ::: "memory");
        consume<BM, RG>(a, smem, full, empty);
    }
#endif
}

// Row t rounded to f16 at its power-of-two scale (cpu::f16_activation_exponent): one block a row, the
// row's max by the block, then every value scaled and rounded (the second read hits L1/L2).
constexpr int kRoundThreads = 256;
__global__ void __launch_bounds__(kRoundThreads) round_rows_f16_kernel(const float* x, uint16_t* h, float* inv_scale,
                                                                      int64_t rows, int64_t cols) {
    __shared__ float warp_max[kRoundThreads / 32];
    for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
        const float4* row = reinterpret_cast<const float4*>(x + r * cols);
        const int64_t quads = cols / 4;
        float amax = 0.0f;
        for (int64_t i = threadIdx.x; i < quads; i += kRoundThreads) {
            const float4 v = row[i];
            amax = fmaxf(amax, fmaxf(fmaxf(fabsf(v.x), fabsf(v.y)), fmaxf(fabsf(v.z), fabsf(v.w))));
        }
#pragma unroll
        for (int offset = 16; offset > 0; offset /= 2) amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, offset));
        if (threadIdx.x % 32 == 0) warp_max[threadIdx.x / 32] = amax;
        __syncthreads();
        amax = warp_max[0];
#pragma unroll
        for (int w = 1; w < kRoundThreads / 32; ++w) amax = fmaxf(amax, warp_max[w]);
        __syncthreads();  // warp_max is rewritten by the next row
        const int e = f16_activation_exponent(__float_as_uint(amax));
        const float s = __uint_as_float(power_of_two_bits(e)), inv = __uint_as_float(power_of_two_bits(-e));
        if (threadIdx.x == 0) inv_scale[r] = inv;
        uint2* out = reinterpret_cast<uint2*>(h + r * cols);
        for (int64_t i = threadIdx.x; i < quads; i += kRoundThreads) {
            const float4 v = row[i];
            const __half2 lo = __halves2half2(__float2half_rn(v.x * s), __float2half_rn(v.y * s));
            const __half2 hi = __halves2half2(__float2half_rn(v.z * s), __float2half_rn(v.w * s));
            out[i] = make_uint2(*reinterpret_cast<const uint32_t*>(&lo), *reinterpret_cast<const uint32_t*>(&hi));
        }
    }
}

using Kernel = void (*)(HalfGemmArgs);

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
// Measured at 6228b73 (one round of the 128 × 256 tile: 91.1 µs; e.g. 16 × 128: 12 rounds in 287.0 µs).
const HalfTile kHalfTiles[] = {
    half_tile<128, 2>(GemmTile::half_m128_n256, 1.0),  half_tile<64, 2>(GemmTile::half_m64_n256, 0.61),
    half_tile<32, 2>(GemmTile::half_m32_n256, 0.48),   half_tile<16, 2>(GemmTile::half_m16_n256, 0.44),
    half_tile<128, 1>(GemmTile::half_m128_n128, 0.80), half_tile<64, 1>(GemmTile::half_m64_n128, 0.45),
    half_tile<32, 1>(GemmTile::half_m32_n128, 0.32),   half_tile<16, 1>(GemmTile::half_m16_n128, 0.26),
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

struct Launch {
    int64_t tiles = 0, blocks = 0;
};
Launch launch(const HalfActivationRows& x, const GemvWeightView& w, float* y, int64_t ldy, const HalfTile& t,
              int64_t max_blocks, cudaStream_t stream) {
    configure_kernels();
    HalfGemmArgs a{};
    a.x = x.h;
    a.inv_scale = x.inv_scale;
    a.codes = w.codes;
    a.scales = w.scales;
    a.y = y;
    a.m = x.rows;
    a.n = w.rows;
    a.k = w.cols;
    a.ldy = ldy;
    a.code_row_bytes = int64_t(gemv_code_row_bytes(w.dtype, w.cols));
    a.k_tiles = int(w.cols / kKTile);
    a.scales_per_row = int(w.cols / kKTile);
    a.m_tiles = (x.rows + t.tokens - 1) / t.tokens;
    a.tiles = a.m_tiles * ((w.rows + t.rows - 1) / t.rows);
    static const int sms = device_attribute(cudaDevAttrMultiProcessorCount, "SM count");
    const int64_t blocks = std::min<int64_t>(a.tiles, max_blocks > 0 ? max_blocks : sms);
    t.kernel<<<unsigned(blocks), kThreads, t.smem, stream>>>(a);
    cuda_check_launch("gemm_q1_0_half_kernel");
    return {a.tiles, blocks};
}

int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

// Rounds of one tile per SM times the tile's cost: the model the automatic choice minimises.
double rounds_cost(const HalfTile& t, int64_t tokens, int64_t rows, int sms) {
    return rows <= 0 ? 0.0 : double(ceil_div(ceil_div(tokens, t.tokens) * ceil_div(rows, t.rows), sms)) * t.cost;
}

const HalfTile& tile_of(GemmTile t) {
    for (const HalfTile& h : kHalfTiles)
        if (h.tile == t) return h;
    fail_message(std::string("cuda half gemm: not a half tile: ") + gemm_tile_name(t));
}

}  // namespace

int half_tile_tokens(GemmTile t) {
    for (const HalfTile& h : kHalfTiles)
        if (h.tile == t) return h.tokens;
    return 0;
}

// The cheapest tile for the whole matrix, or — when a clear gain over it (3%; the second launch's start is not
// in the costs) — the widest tile on the weight rows that fill its whole rounds and the cheapest tile for the
// rest (each output is still one block's, so y does not depend on the cut).
detail::HalfGemmPlan detail::half_gemm_plan(int64_t tokens, int64_t rows, int sms) {
    HalfGemmPlan single, cut;
    double single_cost = 1e300, cut_cost = 1e300;
    for (const HalfTile& t : kHalfTiles) {
        const double c = rounds_cost(t, tokens, rows, sms);
        if (c < single_cost) single_cost = c, single = {GemmTile::automatic, 0, t.tile};
    }
    const HalfTile& wide = kHalfTiles[0];
    const int64_t m_tiles = ceil_div(tokens, wide.tokens);
    const int64_t head_rows = (m_tiles * ceil_div(rows, wide.rows) / sms) * sms / m_tiles * wide.rows;
    if (head_rows > 0 && head_rows < rows) {
        for (const HalfTile& t : kHalfTiles) {
            const double c = rounds_cost(wide, tokens, head_rows, sms) + rounds_cost(t, tokens, rows - head_rows, sms);
            if (c < cut_cost) cut_cost = c, cut = {wide.tile, head_rows, t.tile};
        }
    }
    return cut_cost < 0.97 * single_cost ? cut : single;
}

bool half_gemm_available() { return detail::wgmma_gemm_available(); }

bool half_prompt_gemm_enabled() {
    // Off by default: on the H200 the two are even on the Bonsai-27B pp512 matmuls (70.8 ms int8, 70.4 f16),
    // but the model's pp512 is slower with it (108.1 vs 103.1 ms; docs/bench.md).
    static const bool enabled = env_switch("DELTABIT_GEMM_F16", false);
    return enabled && half_gemm_available();
}

bool half_gemm_serves(const GemvWeightView& w, int64_t tokens) {
    // A Q1_0 row is whole blocks of 128 — one k-tile each — so every Q1_0 matrix fits the kernel.
    return tokens >= kGemmMinTokens && w.dtype == DType::Q1_0 && half_prompt_gemm_enabled();
}

// The halves, then the row scales from the next 16-byte boundary.
size_t halves_bytes(int64_t rows, int64_t cols) { return (size_t(rows) * size_t(cols) * sizeof(uint16_t) + 15) / 16 * 16; }

size_t half_activation_rows_bytes(int64_t rows, int64_t cols) {
    return halves_bytes(rows, cols) + size_t(rows) * sizeof(float);
}

HalfActivationRows half_activation_rows_view(void* buffer, int64_t rows, int64_t cols) {
    auto* base = static_cast<uint8_t*>(buffer);
    return {reinterpret_cast<uint16_t*>(base), reinterpret_cast<float*>(base + halves_bytes(rows, cols)), rows, cols};
}

void round_activation_rows_f16(const float* x, const HalfActivationRows& out, cudaStream_t stream) {
    if (out.rows == 0 || out.cols == 0) return;
    if (out.cols % 4 != 0) fail_message("cuda round_activation_rows_f16: " + std::to_string(out.cols) +
                                        " values a row (a multiple of 4 is needed)");
    const unsigned blocks = unsigned(std::min<int64_t>(out.rows, 65535));
    round_rows_f16_kernel<<<blocks, kRoundThreads, 0, stream>>>(x, out.h, out.inv_scale, out.rows, out.cols);
    cuda_check_launch("round_rows_f16_kernel");
}

GemmLaunchReport gemm_q1_0_half(const HalfActivationRows& x, const GemvWeightView& w, float* y, cudaStream_t stream,
                                GemmTile tile, int64_t max_blocks) {
    if (w.dtype != DType::Q1_0 || w.cols <= 0 || w.cols % kKTile != 0 || w.rows < 0)
        fail_message("cuda half gemm: Q1_0 weights with a multiple of 128 columns, not " +
                     std::string(dtype_name(w.dtype)) + " " + std::to_string(w.rows) + "×" + std::to_string(w.cols));
    if (x.cols != w.cols)
        fail_message("cuda half gemm: " + std::to_string(x.cols) + " activations per row for " +
                     std::to_string(w.cols) + " weight columns");
    if (!half_gemm_available())
        fail_message("cuda half gemm: needs sm_90a machine code (CMAKE_CUDA_ARCHITECTURES with 90a) on a compute "
                     "capability 9.0 device");
    if (x.rows == 0 || w.rows == 0) return {};
    if (tile != GemmTile::automatic) {
        const Launch l = launch(x, w, y, w.rows, tile_of(tile), max_blocks, stream);
        return {tile, l.tiles, l.blocks};
    }
    static const int sms = device_attribute(cudaDevAttrMultiProcessorCount, "SM count");
    const detail::HalfGemmPlan plan = max_blocks > 0 ? detail::HalfGemmPlan{GemmTile::automatic, 0, kHalfTiles[0].tile}
                                                     : detail::half_gemm_plan(x.rows, w.rows, sms);
    const HalfTile& rest = tile_of(plan.tile);
    if (plan.head_rows == 0) {
        const Launch l = launch(x, w, y, w.rows, rest, max_blocks, stream);
        return {plan.tile, l.tiles, l.blocks};
    }
    const Launch head = launch(x, w.slice_rows(0, plan.head_rows), y, w.rows, tile_of(plan.head_tile), 0, stream);
    const Launch tail =
        launch(x, w.slice_rows(plan.head_rows, w.rows - plan.head_rows), y + plan.head_rows, w.rows, rest, 0, stream);
    return {plan.head_tile, head.tiles + tail.tiles, std::max(head.blocks, tail.blocks), plan.tile,
            w.rows - plan.head_rows};
}

}  // namespace deltabit::cuda
