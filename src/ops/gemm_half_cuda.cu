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
//   warpgroup 0 (producer)   copies each k-tile's x tile (BM tokens × 128 f16, core-matrix order), the 256
//                            weight rows' codes (16 bytes each) and the aligned words holding their fp16
//                            scales into a ring of stages (cp.async arriving on the stage's `full` mbarrier).
//   warpgroups 1, 2          (consumers) each own 128 weight rows as two groups of 64: A (weights) from
//                            registers, B the stage's x tile; per group eight m64nBMk16 products a k-tile into
//                            its fp32 accumulator, then the stage goes back (`empty`). One consumer builds its
//                            operands while the other's products run.
// 256 weight rows a tile, not the int8 kernel's 128: an f16 x tile is twice the bytes, and at 128 rows the
// copies from L2 were the limit (Nsight Compute, H200, ssm_qkv at T = 512: L2 65% busy, the consumers waiting
// on `full`, the tensor pipe a third busy; 1.5× the int8 kernel's time).
// Thread layout as the int8 kernel's: accumulator d[4j + e] of group h is weight row 128c + 64h + 16w + g +
// 8·(e / 2) of consumer c, token 8j + 2q + e % 2 of the tile.
#include "backend/cuda_buffer.h"
#include "ops/prefill_cuda.h"

#include <cuda_fp16.h>

#include <algorithm>
#include <array>
#include <string>

#include "ops/async_copy.cuh"
#include "ops/bulk_copy.cuh"
#include "core/env_switch.h"
#include "ops/cuda_math.cuh"
#include "ops/f16_activations.h"
#include "ops/matmul.h"
#include "ops/gemm_wgmma_cuda.h"
#include "ops/weight_repack.h"
#include "ops/wgmma.cuh"

namespace deltabit::cuda {

namespace {

constexpr int kBN = 256;       // weight rows of a tile: 2 consumers × 2 row groups × the wgmma's M (below)
constexpr int kKTile = 128;    // f16 activations a k-tile: one Q1_0 scale group
constexpr int kChunks = kKTile * 2 / 16;  // 16-byte chunks of a token's k-tile
constexpr int kThreads = 384;
[[maybe_unused]] constexpr int kConsumerWarps = 8;

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

// A stage: the x tile, the codes of 256 weight rows, and each row's aligned scale word (as the int8 kernel's).
constexpr int kCodeBytes = kBN * 16;
constexpr int kScaleWordBytes = kBN * 4;
constexpr int x_bytes(int bm) { return bm * kKTile * 2; }
constexpr int scale_offset(int bm) { return x_bytes(bm) + kCodeBytes; }
constexpr int stage_bytes(int bm) { return scale_offset(bm) + kScaleWordBytes; }
constexpr size_t kSmemLimit = 227 * 1024;
// As many stages as fit, at most 24 (a 16-token stage holds 6.5 KB: 24 of them keep ~48 KB of codes in flight).
constexpr int stages_of(int bm) {
    return int(std::min<size_t>(24, (kSmemLimit - 24 * 2 * sizeof(uint64_t)) / size_t(stage_bytes(bm))));
}
constexpr size_t smem_bytes(int bm) {
    return size_t(stages_of(bm)) * size_t(stage_bytes(bm)) + 2 * size_t(stages_of(bm)) * sizeof(uint64_t);
}
static_assert(stage_bytes(16) % 128 == 0 && stage_bytes(128) % 128 == 0, "every stage's x tile starts aligned");
static_assert(smem_bytes(128) <= kSmemLimit && smem_bytes(64) <= kSmemLimit && smem_bytes(32) <= kSmemLimit &&
                  smem_bytes(16) <= kSmemLimit,
              "every ring fits an SM's shared memory");
static_assert(stages_of(128) >= 4, "the 128-token tile keeps a few k-tiles in flight");
[[maybe_unused]] constexpr uint32_t kLeadingBytes = 128, kStrideBytes = kChunks * 128;

#if defined(DELTABIT_WGMMA_COMPILED)

template <int BM>
__device__ __forceinline__ uint8_t* stage_base(uint8_t* smem, int64_t i) {
    return smem + (i % stages_of(BM)) * stage_bytes(BM);
}
template <int BM>
__device__ __forceinline__ uint32_t stage_parity(int64_t i) { return uint32_t((i / stages_of(BM)) & 1); }

template <int BM>
__device__ void produce(const HalfGemmArgs& a, uint8_t* smem, uint64_t* full, uint64_t* empty) {
    const int p = int(threadIdx.x);  // 0 .. 127
    int64_t issued = 0;
    for (int64_t tile = blockIdx.x; tile < a.tiles; tile += gridDim.x) {
        const int64_t m0 = (tile % a.m_tiles) * BM, n0 = (tile / a.m_tiles) * kBN;
        for (int kt = 0; kt < a.k_tiles; ++kt, ++issued) {
            mbarrier_wait_parity(&empty[issued % stages_of(BM)], stage_parity<BM>(issued) ^ 1u);
            uint8_t* st = stage_base<BM>(smem, issued);
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
            for (int half = 0; half < kBN / 128; ++half) {  // weight rows p and p + 128
                const int r = p + 128 * half;
                const bool code_ok = n0 + r < a.n && byte < a.code_row_bytes;
                cp_async16(st + x_bytes(BM) + r * 16, a.codes + (code_ok ? (n0 + r) * a.code_row_bytes + byte : 0),
                           !code_ok);
                const bool scale_ok = n0 + r < a.n && kt < a.scales_per_row;
                const auto scale =
                    reinterpret_cast<uintptr_t>(a.scales + (scale_ok ? (n0 + r) * a.scales_per_row + kt : 0));
                cp_async4(st + scale_offset(BM) + r * 4, reinterpret_cast<const void*>(scale & ~uintptr_t(3)), !scale_ok);
            }
            cp_async_mbarrier_arrive(&full[issued % stages_of(BM)]);
        }
    }
}

__device__ __forceinline__ uint32_t word_of(const uint4& v, int i) { return i == 0 ? v.x : i == 1 ? v.y : i == 2 ? v.z : v.w; }

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

template <int BM>
__device__ void consume(const HalfGemmArgs& a, uint8_t* smem, uint64_t* full, uint64_t* empty) {
    // Consumer c owns weight rows 128c .. 128c + 127 of a tile as two groups of 64 (one wgmma M each), one
    // accumulator each; a k-tile builds one group's operands, runs its eight products, waits, then the other's
    // (a group's operand registers stay live until its products are done: one group's at a time fits).
    const int c = int(threadIdx.x) / 128 - 1, wg_thread = int(threadIdx.x) % 128;
    const int warp = wg_thread / 32, lane = wg_thread % 32, g = lane / 4, q = lane % 4;
    // The code word's bit of weight 2q of each 8-weight chunk p is base + 2p (ops/weight_repack.h: weight
    // 4j + i of a word is bit j + 8i), and weight 2q + 1's is 8 above it.
    const int base = (q >> 1) + 16 * (q & 1);
    const int64_t scales_odd = int64_t((reinterpret_cast<uintptr_t>(a.scales) >> 1) & 1);
    int64_t consumed = 0;
    for (int64_t tile = blockIdx.x; tile < a.tiles; tile += gridDim.x) {
        const int64_t m0 = (tile % a.m_tiles) * BM, n0 = (tile / a.m_tiles) * kBN;
        float acc[2][BM / 2];
#pragma unroll
        for (int h = 0; h < 2; ++h)
#pragma unroll
            for (int i = 0; i < BM / 2; ++i) acc[h][i] = 0.0f;
        for (int kt = 0; kt < a.k_tiles; ++kt, ++consumed) {
            mbarrier_wait_parity(&full[consumed % stages_of(BM)], stage_parity<BM>(consumed));
            fence_proxy_async_shared();  // the copies landed through the generic proxy; the wgmma reads async
            const uint8_t* st = stage_base<BM>(smem, consumed);
#pragma unroll
            for (int h = 0; h < 2; ++h) {
                const int row_lo = 128 * c + 64 * h + 16 * warp + g, row_hi = row_lo + 8;
                auto scale_pair = [&](int row) {
                    const uint32_t word = *reinterpret_cast<const uint32_t*>(st + scale_offset(BM) + row * 4);
                    const int odd = int(((n0 + row) * a.scales_per_row + scales_odd + kt) & 1);
                    const uint32_t bits = odd ? word >> 16 : word & 0xFFFFu;
                    return bits | (bits << 16);
                };
                const uint32_t d_lo = scale_pair(row_lo), d_hi = scale_pair(row_hi);
                const uint4 code_lo = *reinterpret_cast<const uint4*>(st + x_bytes(BM) + row_lo * 16);
                const uint4 code_hi = *reinterpret_cast<const uint4*>(st + x_bytes(BM) + row_hi * 16);
                // k-step s covers chunks 2s (k 0..7 of the step) and 2s + 1 (k 8..15): word s / 2, chunks p, p + 1.
                uint32_t frag[8][4];
#pragma unroll
                for (int s = 0; s < 8; ++s) {
                    const int bit = base + 4 * (s & 1);
                    frag[s][0] = signed_pair(word_of(code_lo, s / 2), bit, d_lo);
                    frag[s][1] = signed_pair(word_of(code_hi, s / 2), bit, d_hi);
                    frag[s][2] = signed_pair(word_of(code_lo, s / 2), bit + 2, d_lo);
                    frag[s][3] = signed_pair(word_of(code_hi, s / 2), bit + 2, d_hi);
                }
#pragma unroll
                for (int i = 0; i < BM / 2; ++i) asm volatile("" : "+f"(acc[h][i])::"memory");
                wgmma_fence();
#pragma unroll
                for (int s = 0; s < 8; ++s)
                    wgmma_m64nNk16_f16_ra<BM>(acc[h], frag[s],
                                              wgmma_descriptor(st + s * 256, kLeadingBytes, kStrideBytes), true);
                wgmma_commit();
                wgmma_wait<0>();
#pragma unroll
                for (int i = 0; i < BM / 2; ++i) asm volatile("" : "+f"(acc[h][i])::"memory");
            }
            __syncwarp();
            if (lane == 0) mbarrier_arrive(&empty[consumed % stages_of(BM)]);
        }
#pragma unroll
        for (int h = 0; h < 2; ++h) {
            const int64_t r_lo = n0 + 128 * c + 64 * h + 16 * warp + g, r_hi = r_lo + 8;
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

template <int BM>
__global__ void __launch_bounds__(kThreads, 1) gemm_q1_0_half_kernel(HalfGemmArgs a) {
#if defined(DELTABIT_WGMMA_COMPILED)
    extern __shared__ __align__(128) uint8_t smem[];
    uint64_t* full = reinterpret_cast<uint64_t*>(smem + size_t(stages_of(BM)) * size_t(stage_bytes(BM)));
    uint64_t* empty = full + stages_of(BM);
    if (threadIdx.x == 0) {
        for (int s = 0; s < stages_of(BM); ++s) {
            mbarrier_init(&full[s], 128);              // every producer thread, once its copies landed
            mbarrier_init(&empty[s], kConsumerWarps);  // one lane of every consumer warp
        }
        fence_mbarrier_init();
    }
    __syncthreads();
    // Registers from the producer to the consumers, whose two accumulators alone are 128 a thread (BM = 128):
    // 128 · 80 + 256 · 208 = 63488 of the launch bound's 64512. ptxas -v (CUDA 13.0): no spills.
    if (threadIdx.x < 128) {
        asm volatile("setmaxnreg.dec.sync.aligned.u32 80;\n" ::: "memory");
        produce<BM>(a, smem, full, empty);
    } else {
        asm volatile("setmaxnreg.inc.sync.aligned.u32 208;\n" ::: "memory");
        consume<BM>(a, smem, full, empty);
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
template <int BM>
constexpr Kernel kKernel = &gemm_q1_0_half_kernel<BM>;

struct Choice {
    Kernel kernel;
    size_t smem;
};
Choice choose(int tokens_per_tile) {
    switch (tokens_per_tile) {
        case 128: return {kKernel<128>, smem_bytes(128)};
        case 64: return {kKernel<64>, smem_bytes(64)};
        case 32: return {kKernel<32>, smem_bytes(32)};
        case 16: return {kKernel<16>, smem_bytes(16)};
        default: fail_message("half gemm: no tile of " + std::to_string(tokens_per_tile) + " tokens");
    }
}

void configure_kernels() {
    static const bool configured = [] {
        for (int bm : {128, 64, 32, 16}) {
            const Choice c = choose(bm);
            cuda_check(cudaFuncSetAttribute(c.kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(c.smem)),
                       "half gemm shared memory");
        }
        return true;
    }();
    (void)configured;
}

struct Launch {
    int64_t tiles = 0, blocks = 0;
};
Launch launch(const HalfActivationRows& x, const GemvWeightView& w, float* y, int64_t ldy, int tokens_per_tile,
              int64_t max_blocks, cudaStream_t stream) {
    const Choice c = choose(tokens_per_tile);
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
    a.m_tiles = (x.rows + tokens_per_tile - 1) / tokens_per_tile;
    a.tiles = a.m_tiles * ((w.rows + kBN - 1) / kBN);
    static const int sms = device_attribute(cudaDevAttrMultiProcessorCount, "SM count");
    const int64_t blocks = std::min<int64_t>(a.tiles, max_blocks > 0 ? max_blocks : sms);
    c.kernel<<<unsigned(blocks), kThreads, c.smem, stream>>>(a);
    cuda_check_launch("gemm_q1_0_half_kernel");
    return {a.tiles, blocks};
}

GemmTile half_tile_of(int tokens) {
    return tokens == 128 ? GemmTile::half_m128_n128
           : tokens == 64 ? GemmTile::half_m64_n128
           : tokens == 32 ? GemmTile::half_m32_n128
                          : GemmTile::half_m16_n128;
}

// Relative cost of one tile (a 128-token tile's = 1), as ws_tail_plan's for the int8 kernel.
// TODO(measure): the f16 kernel's own costs; these are the int8 kernel's (H200, 2026-12-02).
constexpr std::pair<int, double> kTileCosts[] = {{128, 1.0}, {64, 0.86}, {32, 0.52}, {16, 0.43}};

}  // namespace

int half_tile_tokens(GemmTile t) {
    switch (t) {
        case GemmTile::half_m128_n128: return 128;
        case GemmTile::half_m64_n128: return 64;
        case GemmTile::half_m32_n128: return 32;
        case GemmTile::half_m16_n128: return 16;
        default: return 0;
    }
}

bool half_gemm_available() { return detail::wgmma_gemm_available(); }

bool half_prompt_gemm_enabled() {
    // Off by default: on the H200 the int8 kernel is still the faster of the two on the bench models (the
    // Bonsai-27B pp512 matmuls 70.8 ms int8, 78.0 ms f16 — docs/bench.md).
    static const bool enabled = env_switch("DELTABIT_GEMM_F16", false);
    return enabled && half_gemm_available();
}

bool half_gemm_serves(const GemvWeightView& w, int64_t tokens) {
    static_assert(kGemmMinTokens == cpu::kPromptGemmMinTokens, "the CPU reference rounds as the engine does");
    return tokens >= kGemmMinTokens && w.dtype == DType::Q1_0 && w.cols % kKTile == 0 && half_prompt_gemm_enabled();
}

size_t half_activation_rows_bytes(int64_t rows, int64_t cols) {
    // The halves, then the scales 16-byte aligned (cols is a multiple of 128 for every Q1_0 matrix).
    const size_t halves = (size_t(rows) * size_t(cols) * sizeof(uint16_t) + 15) / 16 * 16;
    return halves + size_t(rows) * sizeof(float);
}

HalfActivationRows half_activation_rows_view(void* buffer, int64_t rows, int64_t cols) {
    auto* base = static_cast<uint8_t*>(buffer);
    const size_t halves = (size_t(rows) * size_t(cols) * sizeof(uint16_t) + 15) / 16 * 16;
    return {reinterpret_cast<uint16_t*>(base), reinterpret_cast<float*>(base + halves), rows, cols};
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
        const int bm = half_tile_tokens(tile);
        if (bm == 0) fail_message(std::string("cuda half gemm: not a half tile: ") + gemm_tile_name(tile));
        const Launch l = launch(x, w, y, w.rows, bm, max_blocks, stream);
        return {tile, l.tiles, l.blocks};
    }
    // Automatic: the tile whose rounds of one tile per SM cost least, then — for the 128-token tile — the
    // matrix cut so that its last weight rows fill the last round with a narrower tile (ws_tail_plan).
    static const int sms = device_attribute(cudaDevAttrMultiProcessorCount, "SM count");
    const int64_t row_blocks = (w.rows + kBN - 1) / kBN;
    int best = 128;
    double best_cost = 1e300;
    for (const auto& [tokens, cost] : kTileCosts) {
        const int64_t tiles = (x.rows + tokens - 1) / tokens * row_blocks;
        const double c = double((tiles + sms - 1) / sms) * cost;
        if (c < best_cost * 0.999) best_cost = c, best = tokens;
    }
    const detail::WsTailPlan plan = best == 128 && max_blocks == 0 ? detail::ws_tail_plan(x.rows, w.rows, sms, kBN)
                                                                   : detail::WsTailPlan{};
    if (plan.tail_tokens == 0) {
        const Launch l = launch(x, w, y, w.rows, best, max_blocks, stream);
        return {half_tile_of(best), l.tiles, l.blocks};
    }
    Launch head;
    if (plan.head_rows > 0) head = launch(x, w.slice_rows(0, plan.head_rows), y, w.rows, 128, 0, stream);
    const Launch tail = launch(x, w.slice_rows(plan.head_rows, w.rows - plan.head_rows), y + plan.head_rows, w.rows,
                               plan.tail_tokens, 0, stream);
    if (plan.head_rows == 0) return {half_tile_of(plan.tail_tokens), tail.tiles, tail.blocks};
    return {GemmTile::half_m128_n128, head.tiles + tail.tiles, std::max(head.blocks, tail.blocks),
            half_tile_of(plan.tail_tokens), w.rows - plan.head_rows};
}

}  // namespace deltabit::cuda
