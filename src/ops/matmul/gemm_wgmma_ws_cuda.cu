// The Q1_0 prefill GEMM on warpgroup tensor cores, warp-specialised (ops/matmul/gemm_wgmma_cuda.h): the tile
// GemmTile::wgmma_ws_m128_n128, the automatic choice for Q1_0 prompts on Hopper (ops/matmul/gemm_quant_cuda.cu).
// H200, pp512 (bench_prefill_cuda): 1.6–1.8× the other warpgroup tile on every Bonsai-27B and Bonsai-4B
// matrix; the Bonsai-27B model's matmuls 80.0 ms, 41.5% of the bf16 peak (were 137.8 ms).
//
// Why. The other warpgroup kernel (gemm_wgmma_cuda.cu) has both its warpgroups copy the tiles, expand the
// 1-bit codes into bytes in shared memory, convert the integer dots and wait at two block barriers per
// k-tile: ~600 instructions a warp per k-tile, 6 cycles apart (Nsight Compute), ~195 TFLOP/s on the
// Bonsai-27B prompt — 73% of a pp512 (docs/bench-notes.md). Here the work is split by role:
//   warpgroup 0 (producer)   copies each k-tile's x tile (128 tokens × 128 int8, core-matrix order), the
//                            128 weight rows' codes (16 bytes each) and fp16 scales, and the tokens'
//                            {scale, Σq} into a ring of stages (cp.async); the copies arrive on the stage's
//                            mbarrier `full` when they land (Pipeline); it never waits on the tensor cores.
//   warpgroups 1, 2          (consumers) each own 64 weight rows: the wgmma's A operand comes from
//                            registers, built from the codes with one shift and mask per 4 weights —
//                            no expanded copy in shared memory, no block barrier — and B is the stage's
//                            x tile. They convert the dots and hand the stage back (mbarrier `empty`).
// The two consumers alternate naturally: one converts while the other's wgmmas run.
//
// The roles of the operands are swapped from the other kernel (A = weights, B = tokens), so a thread's
// accumulator d[4j + e] is weight row 16w + g + 8·(e / 2) (+64 for the second consumer) and token
// 8j + 2q + e % 2. Numerics are that kernel's and the mma.sync tiles', term for term: per output and
// k-tile, y = fmaf(float(2·Σbit·q − Σq), d_w · scale_x, y) in k order, so y is theirs bit for bit.
#include "backend/cuda_buffer.h"
#include "ops/matmul/gemm_wgmma_cuda.h"

#include <cuda_fp16.h>

#include <algorithm>
#include <array>
#include <string>
#include <utility>

#include "ops/cuda/async_copy.cuh"
#include "ops/cuda/bulk_copy.cuh"
#include "ops/matmul/gemm_args.h"
#include "ops/matmul/gemm_terms.cuh"
#include "ops/cuda/wgmma.cuh"

namespace deltabit::cuda::detail {

namespace {

// Tokens of a tile, the wgmma's N: 128 (GemmTile::wgmma_ws_m128_n128), or 64, 32, 16 for short prompts
// (wgmma_ws_m64_n128 .. m16_n128: a 16-token tile reads each weight tile for 16 tokens, not for 128 of which
// 112 are padding; the automatic choice for prompts of ≤ 64 tokens and for the last rows of a matrix whose
// last round of 128-token tiles would be mostly idle, ops/matmul/gemm_wgmma_cuda.h ws_tail_plan).
constexpr int kBN = 128;  // weight rows of a tile: 2 consumers × the wgmma's M
constexpr int kKTile = 128;  // one activation group = one Q1_0 scale group
constexpr int kThreads = 384;
[[maybe_unused]] constexpr int kConsumerWarps = 8;
// The stage ring: how many stages, and how the producer learns that a stage's copies have landed.
//   lag > 0: a producer thread keeps `lag` batches in flight and waits for the oldest (cp.async.wait_group)
//            before it publishes that stage itself; lag < stages, or it would wait for a stage its consumers
//            cannot have been given.
//   lag = 0: the copies themselves arrive on the stage's `full` barrier when they land
//            (cp.async.mbarrier.arrive); the producer never waits for a copy, only for empty stages.
// halves = 2 (BM = 128 only): each consumer issues its 128 tokens as two m64n64 products in two commit
// groups and converts the first half's dots while the second half's run on the tensor cores — overlap inside
// a warpgroup, with the registers of one m64n128 accumulator (measured within ±3% of the default ring).
struct Pipeline {
    int stages, lag, halves = 1;
};
// H200, pp512 (bench_prefill_cuda pipelines, 2026-12-02): lag 3, 5, 7, 8 at 6, 8, 10, 11 stages were
// slower the deeper (233.6, 235.0, 239.4, 251.1 µs on ffn_gate/up); copies arriving by themselves 1–8%
// faster than lag 3 on every Bonsai-27B and Bonsai-4B matrix at 6 and 8 stages, best at 8 (default). The
// last, in halves, within ±3% of the default (ffn_gate/up 239.5 vs 236.5 µs).
constexpr Pipeline kPipelines[] = {{6, 3}, {6, 0}, {8, 0}, {11, 0}, {8, 0, 2}};
constexpr int kPipelineCount = int(sizeof(kPipelines) / sizeof(kPipelines[0]));
// A stage: the x tile (BM tokens × 128 int8, core-matrix order), the codes of 128 weight rows, the tokens'
// {scale, Σq}, and for each weight row the aligned 4-byte word that holds its fp16 scale (a row's scales
// start on any 2-byte boundary; GemvWeights pads the plane to 16 bytes, so the word is always inside it).
// The scales come through the ring like everything else a k-tile reads: a consumer that loaded them from
// global memory itself waited a memory latency every k-tile (one k-tile's prefetch could not cover it).
constexpr int kCodeBytes = kBN * 16;
constexpr int kScaleWordBytes = kBN * 4;
constexpr int x_bytes(int bm) { return bm * kKTile; }
constexpr int meta_offset(int bm) { return x_bytes(bm) + kCodeBytes; }
constexpr int scale_offset(int bm) { return meta_offset(bm) + bm * int(sizeof(ActivationGroupMeta)); }
constexpr int stage_bytes(int bm) { return scale_offset(bm) + kScaleWordBytes; }
static_assert(stage_bytes(16) % 128 == 0 && stage_bytes(32) % 128 == 0 && stage_bytes(64) % 128 == 0 &&
                  stage_bytes(128) % 128 == 0,
              "every stage's x tile starts 128-byte aligned");
constexpr size_t smem_bytes(int bm, int stages) {
    return size_t(stages) * size_t(stage_bytes(bm)) + 2 * size_t(stages) * sizeof(uint64_t);
}
static_assert(smem_bytes(128, 11) <= 227 * 1024, "the deepest ring fits an SM's shared memory");
// The narrower tiles' rings (copies arriving by themselves): deeper, as a stage holds less — about as many
// weight bytes in flight per SM as 24 stages of codes (48 KB) — a 16-token tile streams weights.
constexpr int narrow_stages(int bm) { return bm == 64 ? 12 : bm == 32 ? 16 : 24; }
static_assert(smem_bytes(16, narrow_stages(16)) <= 227 * 1024 && smem_bytes(32, narrow_stages(32)) <= 227 * 1024 &&
                  smem_bytes(64, narrow_stages(64)) <= 227 * 1024,
              "the narrow rings fit an SM's shared memory");
// The core-matrix layout's strides (ops/cuda/wgmma.cuh): next 16 bytes of K, next 8 rows.
[[maybe_unused]] constexpr uint32_t kLeadingBytes = 128, kStrideBytes = 1024;
static_assert(kKTile == kActivationGroup, "a k-tile is one activation group");

#if defined(DELTABIT_WGMMA_COMPILED)

template <int BM, int Stages>
__device__ __forceinline__ uint8_t* stage_base(uint8_t* smem, int64_t i) {
    return smem + (i % Stages) * stage_bytes(BM);
}
template <int Stages>
__device__ __forceinline__ uint32_t stage_parity(int64_t i) { return uint32_t((i / Stages) & 1); }

// Warpgroup 0: every k-tile of every tile of this block, in the consumers' order.
template <int BM, int Stages, int Lag>
__device__ void produce(const GemmArgs& a, uint8_t* smem, uint64_t* full, uint64_t* empty) {
    constexpr Pipeline P{Stages, Lag};
    const int p = int(threadIdx.x);  // 0 .. 127
    const int64_t x_row_bytes = int64_t(a.k_tiles) * kKTile;
    int64_t issued = 0;
    for (int64_t tile = blockIdx.x; tile < a.tiles; tile += gridDim.x) {
        const int64_t m0 = (tile % a.m_tiles) * BM, n0 = (tile / a.m_tiles) * kBN;
        for (int kt = 0; kt < a.k_tiles; ++kt, ++issued) {
            // The stage's last use (issued − stages) handed back by all 8 consumer warps; on the ring's first
            // round this is the phase before the first, complete already.
            mbarrier_wait_parity(&empty[issued % P.stages], stage_parity<P.stages>(issued) ^ 1u);
            uint8_t* st = stage_base<BM, P.stages>(smem, issued);
            // x: c → (row, chunk) with the row's low 3 bits fastest, 8 lanes filling one core matrix's 128 bytes.
#pragma unroll
            for (int i = 0; i < BM * 8 / 128; ++i) {
                const int c = p + i * 128;
                const int row = (c & 7) + 8 * (c >> 6), chunk = (c >> 3) & 7;
                const bool ok = m0 + row < a.m;
                const int8_t* src = a.xq + (ok ? (m0 + row) * x_row_bytes + int64_t(kt) * kKTile + chunk * 16 : 0);
                cp_async16(st + core_matrix_offset(row, chunk), src, !ok);
            }
            {  // the codes and the scale word of weight row p, and the {scale, Σq} of token p
                const int64_t byte = int64_t(kt) * 16;
                const bool code_ok = n0 + p < a.n && byte < a.code_row_bytes;
                cp_async16(st + x_bytes(BM) + p * 16, a.codes + (code_ok ? (n0 + p) * a.code_row_bytes + byte : 0),
                           !code_ok);
                const bool scale_ok = n0 + p < a.n && kt < a.scales_per_row;
                const auto scale = reinterpret_cast<uintptr_t>(a.scales + (scale_ok ? (n0 + p) * a.scales_per_row + kt : 0));
                cp_async4(st + scale_offset(BM) + p * 4, reinterpret_cast<const void*>(scale & ~uintptr_t(3)), !scale_ok);
                if (p < BM) {
                    const bool meta_ok = m0 + p < a.m;
                    cp_async8(st + meta_offset(BM) + p * int(sizeof(ActivationGroupMeta)),
                              a.x_meta + (meta_ok ? (m0 + p) * a.k_tiles + kt : 0), !meta_ok);
                }
            }
            if constexpr (P.lag == 0) {
                cp_async_mbarrier_arrive(&full[issued % P.stages]);
            } else {
                cp_async_commit_group();
                if (issued >= P.lag) {
                    cp_async_wait_group<P.lag>();  // this thread's copies of stage issued − lag have landed
                    fence_proxy_async_shared();    // ... and are visible to the wgmma's reads (async proxy)
                    mbarrier_arrive(&full[(issued - P.lag) % P.stages]);
                }
            }
        }
    }
    if constexpr (P.lag > 0) {
        cp_async_wait_group<0>();
        fence_proxy_async_shared();
        for (int64_t i = std::max<int64_t>(0, issued - P.lag); i < issued; ++i) mbarrier_arrive(&full[i % P.stages]);
    }
}

__device__ __forceinline__ uint32_t word_of(const uint4& v, int i) { return i == 0 ? v.x : i == 1 ? v.y : i == 2 ? v.z : v.w; }

// Warpgroups 1 and 2: consumer c owns weight rows 64c .. 64c + 63 of each tile.
template <int BM, int Stages, int Lag, int Halves>
__device__ void consume(const GemmArgs& a, uint8_t* smem, uint64_t* full, uint64_t* empty) {
    constexpr Pipeline P{Stages, Lag, Halves};
    static_assert(Halves == 1 || (Halves == 2 && BM == 128), "halves of a 128-token tile only");
    constexpr int kHalfBM = BM / Halves;  // tokens of one product
    const int c = int(threadIdx.x) / 128 - 1, wg_thread = int(threadIdx.x) % 128;
    const int warp = wg_thread / 32, lane = wg_thread % 32, g = lane / 4, q = lane % 4;
    const int row_lo = 64 * c + 16 * warp + g, row_hi = row_lo + 8;  // this thread's weight rows in the tile
    // Which half of a scale word is the scale: the parity of its element's address.
    const int64_t scales_odd = int64_t((reinterpret_cast<uintptr_t>(a.scales) >> 1) & 1);
    int64_t consumed = 0;
    for (int64_t tile = blockIdx.x; tile < a.tiles; tile += gridDim.x) {
        const int64_t m0 = (tile % a.m_tiles) * BM, n0 = (tile / a.m_tiles) * kBN;
        const int odd_lo = int(((n0 + row_lo) * a.scales_per_row + scales_odd) & 1);  // at k-tile 0
        const int odd_hi = int(((n0 + row_hi) * a.scales_per_row + scales_odd) & 1);
        float acc[BM / 2];
#pragma unroll
        for (int i = 0; i < BM / 2; ++i) acc[i] = 0.0f;
        for (int kt = 0; kt < a.k_tiles; ++kt, ++consumed) {
            mbarrier_wait_parity(&full[consumed % P.stages], stage_parity<P.stages>(consumed));
            // Copies that arrived by themselves (lag 0) were written through the generic proxy and never
            // fenced by their thread: this thread, having acquired them, orders them before its wgmmas.
            if constexpr (P.lag == 0) fence_proxy_async_shared();
            const uint8_t* st = stage_base<BM, P.stages>(smem, consumed);
            // The rows' scales (0 for rows past N: the copy zero-filled their words).
            auto weight_scale = [&](int row, int odd) {
                const uint32_t word = *reinterpret_cast<const uint32_t*>(st + scale_offset(BM) + row * 4);
                return __half2float(__ushort_as_half(uint16_t(((odd ^ kt) & 1) ? word >> 16 : word)));
            };
            const float w_lo = weight_scale(row_lo, odd_lo), w_hi = weight_scale(row_hi, odd_hi);

            // A: k-step s is code word s of each row (weights 32s .. 32s + 31); the register layout of
            // wgmma_m64nNk32_s8_ra wants k 4q .. 4q + 3 and 16 + 4q .. of rows g and g + 8.
            const uint4 code_lo = *reinterpret_cast<const uint4*>(st + x_bytes(BM) + row_lo * 16);
            const uint4 code_hi = *reinterpret_cast<const uint4*>(st + x_bytes(BM) + row_hi * 16);
            uint32_t frag[4][4];
#pragma unroll
            for (int s = 0; s < 4; ++s) {
                frag[s][0] = q1_twos(word_of(code_lo, s), q);  // q1_twos: ops/matmul/gemm_terms.cuh
                frag[s][1] = q1_twos(word_of(code_hi, s), q);
                frag[s][2] = q1_twos(word_of(code_lo, s), q + 4);
                frag[s][3] = q1_twos(word_of(code_hi, s), q + 4);
            }
            // The products: half h covers tokens kHalfBM·h .. (its x rows start 1024 bytes per 8 tokens on).
            int d[Halves][kHalfBM / 2];
#pragma unroll
            for (int h = 0; h < Halves; ++h)
#pragma unroll
                for (int i = 0; i < kHalfBM / 2; ++i) wgmma_fence_operand(d[h][i]);
            wgmma_fence();
#pragma unroll
            for (int h = 0; h < Halves; ++h) {
                const uint8_t* x_half = st + h * (kHalfBM / 8) * int(kStrideBytes);
#pragma unroll
                for (int s = 0; s < 4; ++s)
                    wgmma_m64nNk32_s8_ra<kHalfBM>(d[h], frag[s],
                                                  wgmma_descriptor(x_half + s * 2 * 128, kLeadingBytes, kStrideBytes),
                                                  s > 0);
                wgmma_commit();
            }

            // The dots into the fp32 sums: the other kernel's term, element by element; half 0 while half 1's
            // products may still run.
            const auto* meta = reinterpret_cast<const ActivationGroupMeta*>(st + meta_offset(BM));
#pragma unroll
            for (int h = 0; h < Halves; ++h) {
                if (h + 1 < Halves) wgmma_wait<1>();
                else wgmma_wait<0>();
#pragma unroll
                for (int i = 0; i < kHalfBM / 2; ++i) wgmma_fence_operand(d[h][i]);
#pragma unroll
                for (int jh = 0; jh < kHalfBM / 8; ++jh) {
                    const int j = h * (kHalfBM / 8) + jh;  // tokens 8j + 2q, + 1 of the tile
                    const float4 tokens = *reinterpret_cast<const float4*>(meta + 8 * j + 2 * q);
                    const float x_scale[2] = {tokens.x, tokens.z};
                    const int bias[2] = {kMagicBits - __float_as_int(tokens.y), kMagicBits - __float_as_int(tokens.w)};
#pragma unroll
                    for (int e = 0; e < 4; ++e) {
                        const float w_scale = (e >> 1) ? w_hi : w_lo;
                        const float v = exact_float(d[h][4 * jh + e] + bias[e & 1]);  // d = 2·Σbit·q
                        acc[4 * j + e] = fmaf(v, w_scale * x_scale[e & 1], acc[4 * j + e]);
                    }
                }
            }
            // This warp's reads of the stage (codes, meta; the wgmma's, waited above) are done.
            __syncwarp();
            if (lane == 0) mbarrier_arrive(&empty[consumed % P.stages]);
        }

#pragma unroll
        for (int j = 0; j < BM / 8; ++j)
#pragma unroll
            for (int e = 0; e < 4; ++e) {
                const int64_t token = m0 + 8 * j + 2 * q + (e & 1), row = n0 + ((e >> 1) ? row_hi : row_lo);
                if (token < a.m && row < a.n) a.y[token * a.ldy + row] = acc[4 * j + e];
            }
    }
}

#endif  // DELTABIT_WGMMA_COMPILED

// Templated on the numbers, not on a Pipeline: nvcc's host stubs do not take class-type parameters.
template <int BM, int Stages, int Lag, int Halves>
__global__ void __launch_bounds__(kThreads, 1) gemm_q1_0_wgmma_ws_kernel(GemmArgs a) {
#if defined(DELTABIT_WGMMA_COMPILED)
    constexpr Pipeline P{Stages, Lag, Halves};
    extern __shared__ __align__(128) uint8_t smem[];
    uint64_t* full = reinterpret_cast<uint64_t*>(smem + size_t(P.stages) * size_t(stage_bytes(BM)));
    uint64_t* empty = full + P.stages;
    if (threadIdx.x == 0) {
        for (int s = 0; s < P.stages; ++s) {
            mbarrier_init(&full[s], 128);              // every producer thread, once its copies landed
            mbarrier_init(&empty[s], kConsumerWarps);  // one lane of every consumer warp
        }
        fence_mbarrier_init();
    }
    __syncthreads();
    // Registers move from the producer, which holds addresses, to the consumers, whose 64 dots and 64 sums
    // alone are 128 a thread (BM = 128): 128 · 80 + 256 · 208 = 63488 of the 64512 the launch bound gives the
    // block. ptxas -v (CUDA 13.0): without this, 52 bytes of spills at the launch bound's 168; the producer,
    // which also copies the scale words, spills 4 bytes at 72, none at 80; the consumers none at 208.
    if (threadIdx.x < 128) {
        asm volatile("setmaxnreg.dec.sync.aligned.u32 80;\n" ::: "memory");
        produce<BM, Stages, Lag>(a, smem, full, empty);
    } else {
        asm volatile("setmaxnreg.inc.sync.aligned.u32 208;\n" ::: "memory");
        consume<BM, Stages, Lag, Halves>(a, smem, full, empty);
    }
#endif
}

using Kernel = void (*)(GemmArgs);
template <int... I>
constexpr auto kernel_table(std::integer_sequence<int, I...>) {
    return std::array<Kernel, sizeof...(I)>{
        &gemm_q1_0_wgmma_ws_kernel<128, kPipelines[I].stages, kPipelines[I].lag, kPipelines[I].halves>...};
}
constexpr auto kKernels = kernel_table(std::make_integer_sequence<int, kPipelineCount>{});

template <int BM>
constexpr Kernel kNarrowKernel = &gemm_q1_0_wgmma_ws_kernel<BM, narrow_stages(BM), 0, 1>;

struct Choice {
    Kernel kernel;
    size_t smem;
};
Choice choose(int tokens_per_tile, int pipeline) {
    if (pipeline < 0) pipeline = kDefaultWsPipeline;
    if (pipeline >= kPipelineCount) fail_message("wgmma ws gemm: no pipeline " + std::to_string(pipeline));
    switch (tokens_per_tile) {
        case 128: return {kKernels[size_t(pipeline)], smem_bytes(128, kPipelines[pipeline].stages)};
        case 64: return {kNarrowKernel<64>, smem_bytes(64, narrow_stages(64))};
        case 32: return {kNarrowKernel<32>, smem_bytes(32, narrow_stages(32))};
        case 16: return {kNarrowKernel<16>, smem_bytes(16, narrow_stages(16))};
        default: fail_message("wgmma ws gemm: no tile of " + std::to_string(tokens_per_tile) + " tokens");
    }
}

// Every kernel's shared-memory allowance, once for the process (thread-safe: a static's initialiser).
void configure_kernels() {
    static const bool configured = [] {
        auto allow = [](Kernel kernel, size_t smem) {
            cuda_check(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(smem)),
                       "wgmma ws gemm shared memory");
        };
        for (int p = 0; p < kPipelineCount; ++p) allow(kKernels[size_t(p)], smem_bytes(128, kPipelines[p].stages));
        for (int bm : {64, 32, 16}) {
            const Choice c = choose(bm, -1);
            allow(c.kernel, c.smem);
        }
        return true;
    }();
    (void)configured;
}

}  // namespace

int ws_pipeline_count() { return kPipelineCount; }

std::string ws_pipeline_name(int pipeline) {
    const Pipeline p = kPipelines[pipeline];
    return std::to_string(p.stages) + (p.lag == 0 ? " stages, copies arrive" : " stages, lag " + std::to_string(p.lag)) +
           (p.halves == 2 ? ", two halves" : "");
}

WgmmaGemmLaunch gemm_q1_0_wgmma_ws(const QuantizedActivationRows& x, const GemvWeightView& w, float* y,
                                   cudaStream_t stream, int64_t max_blocks, int pipeline, int tokens_per_tile,
                                   int64_t y_row_stride) {
    const Choice c = choose(tokens_per_tile, pipeline);
    configure_kernels();
    GemmArgs a = gemm_args(x, w, y, tokens_per_tile, kBN);
    if (y_row_stride > 0) a.ldy = y_row_stride;
    static const int sms = device_attribute(cudaDevAttrMultiProcessorCount, "SM count");
    // One block per SM (its 108–215 KB of shared memory, 384 threads and the consumers' registers allow
    // one), walking tiles.
    const int64_t blocks = std::min<int64_t>(a.tiles, max_blocks > 0 ? max_blocks : sms);
    c.kernel<<<unsigned(blocks), kThreads, c.smem, stream>>>(a);
    cuda_check_launch("gemm_q1_0_wgmma_ws_kernel");
    return WgmmaGemmLaunch{a.tiles, blocks};
}

}  // namespace deltabit::cuda::detail
