// Tensor-core GEMM for quantised weights at T > 1 (prefill). Contract and numerics: ops/matmul/gemm_cuda.h.
//
// Shape of the work. y[T][N] is cut into block tiles of BM tokens × BN weight rows; a block walks
// K in tiles of 128 (one activation group) through a ring of cp.async stages. A stage holds the int8
// activations (BM × 128 bytes, rows padded to 144 so ldmatrix is conflict-free) and the weight codes
// exactly as the GEMV layout stores them (Q1_0: BN × 16 bytes — an eighth of an int8 tile). Each warp
// owns 16·MT tokens × 64 weight rows: per k-tile it loads its activation fragments for all four k32
// steps with ldmatrix.x4, then for each n8 tile builds the weight fragments in registers and runs the
// four k-steps into a fresh int32 accumulator — so only one n8 tile's integer dots are live at a time.
//
// Q1_0 fragments. The GEMV layout puts weights 4j..4j+3 of a 32-weight word in the bytes of
// (word >> j) & 0x01010101 — exactly the 4 consecutive k of an m16n8k32 B fragment. The bits stay 0/1
// (one shift and one AND per fragment register) and the ±1 dot comes out once per group as
// 2·Σ bit·q − Σ q, Σ q being the quantiser's per-group sum.
//
// Why int32 then fp32. The weight scale changes every 128 (Q1_0) or 32 (Q8_0) k and the activation
// scale every 128, so the exact integer dot of one scale group becomes one fp32 term
// float(dot) · (d_w · scale_x), added by fmaf — the GEMV's arithmetic. The int → float conversion uses
// the 1.5·2^23 bias trick (an integer add and a float subtract, exact below 2^22) instead of I2F, which
// runs at a quarter of the FP32 rate; for Q1_0 the same add also applies the −Σq correction.
#include "backend/cuda_buffer.h"
#include "ops/matmul/gemm_cuda.h"

#include <cuda_fp16.h>

#include <algorithm>
#include <string>

#include "core/env_switch.h"
#include "ops/cuda/async_copy.cuh"
#include "ops/cuda/cuda_launch.h"
#include "ops/matmul/gemm_args.h"
#include "ops/matmul/gemm_codec.cuh"
#include "ops/matmul/gemm_terms.cuh"
#include "ops/matmul/gemm_wgmma_cuda.h"
#include "ops/elementwise/elementwise_cuda.h"
#include "ops/cuda/tensor_core.cuh"

namespace deltabit::cuda {

namespace {

constexpr int kKTile = 128;  // = kActivationGroup: one activation scale per k-tile
constexpr int kKSteps = kKTile / 32;
constexpr int kAStride = kKTile + 16;  // 144-byte rows: 8 rows of an ldmatrix land in 8 distinct bank quads
static_assert(kKTile == kActivationGroup);

using detail::Codec;  // ops/matmul/gemm_codec.cuh

// Rows of weight codes in shared memory: 16 bytes of padding past 16 keeps the 8 rows a fragment
// load touches in distinct banks (strides 48, 80, 144 bytes).
template <DType T>
constexpr int b_stride() {
    return Codec<T>::kTileBytes + (Codec<T>::kTileBytes > 16 ? 16 : 0);
}

using detail::GemmArgs;

// A block is WM × WN warp tiles, each computed by KS warps that split the k-tiles between them
// (warp k-part p takes k-tiles p, p + KS, ...; their fp32 partial sums are added at the end in order
// p = 0, 1, .. — a different summation order, the same terms). KS > 1 gives short prompts, whose
// tiles are few, enough warps in flight.
template <int MT, int WM, int WN, int KS>
struct TileShape {
    static constexpr int kThreads = WM * WN * KS * 32;
    static constexpr int kBM = 16 * MT * WM, kBN = 64 * WN;
    // Stages hold whole rounds of KS k-tiles, 3 rounds in flight. (For the m16 tile, 1 or 3 rounds in
    // flight measured the same on an H200 — 34 µs for 10240 × 5120 at any T ≤ 16 — so its cost is not
    // load latency.)
    static constexpr int kRounds = 4;
    static constexpr int kStages = KS * kRounds;
};

template <DType T, int MT, int WM, int WN, int KS>
constexpr size_t gemm_smem_bytes() {
    using S = TileShape<MT, WM, WN, KS>;
    const size_t stages = size_t(S::kStages) * (size_t(S::kBM) * kAStride + size_t(S::kBN) * b_stride<T>());
    const size_t reduce = size_t(KS - 1) * WM * WN * 32 * (MT * 8 * 4) * sizeof(float);
    return stages > reduce ? stages : reduce;
}

using detail::exact_float;  // ops/matmul/gemm_terms.cuh
using detail::kMagicBits;

// Warp tile: 16·MT tokens × 64 weight rows (8 n8 tiles). Tiles are numbered token-tile fastest, so
// the blocks running together share weight tiles (weights stream from HBM once; the small int8
// activations stay in L2).
// Register caps from the resident blocks wanted per SM: 2 × 128 threads for the MT = 2 tiles (they
// need ~200 registers: two m16 tiles' fp32 sums and four k-steps of fragments), 1 × 512 (≤ 128) for
// the MT = 1 tile. Tighter caps were measured to spill (ptxas: 172 bytes at 168 registers).
template <int Threads>
constexpr int min_blocks() {
    return Threads <= 256 ? 2 : 1;
}

template <DType T, int MT, int WM, int WN, int KS>
__global__ void __launch_bounds__(WM* WN* KS * 32, min_blocks<WM * WN * KS * 32>()) gemm_kernel(GemmArgs a) {
    using C = Codec<T>;
    using S = TileShape<MT, WM, WN, KS>;
    constexpr int kBM = S::kBM, kBN = S::kBN, kThreads = S::kThreads, kStages = S::kStages, kRounds = S::kRounds;
    constexpr int kBStride = b_stride<T>();
    constexpr int kAStage = kBM * kAStride, kBStage = kBN * kBStride;
    constexpr int kStepsPerScale = C::kScaleGroup / 32;
    constexpr int kScalesPerTile = kKSteps / kStepsPerScale;
    constexpr int kBChunks = C::kTileBytes / 16;
    // Q1_0 keeps its bits as 0/1 bytes (one AND per fragment register) and corrects once per group:
    // Σ sign·q = 2·Σ bit·q − Σ q, with Σ q from the quantiser.
    constexpr bool kZeroOne = T == DType::Q1_0;

    extern __shared__ __align__(16) uint8_t smem[];
    uint8_t* a_smem = smem;
    uint8_t* b_smem = smem + kStages * kAStage;

    const int tid = int(threadIdx.x);
    const int lane = tid & 31, warp = tid >> 5;
    const int k_part = warp / (WM * WN), warp_mn = warp % (WM * WN);
    const int warp_m = warp_mn / WN, warp_n = warp_mn % WN;
    const int group = lane >> 2, quad = lane & 3;
    const int64_t x_row_bytes = int64_t(a.k_tiles) * kKTile;
    const int rounds = (a.k_tiles + KS - 1) / KS;

    for (int64_t tile = blockIdx.x; tile < a.tiles; tile += gridDim.x) {
        const int64_t m0 = (tile % a.m_tiles) * kBM;
        const int64_t n0 = (tile / a.m_tiles) * kBN;

        // Round r's k-tiles r·KS .. r·KS + KS − 1 into their stages, one commit group per round.
        auto load_round = [&](int r) {
            for (int kt = r * KS; kt < min(r * KS + KS, a.k_tiles); ++kt) {
                uint8_t* as = a_smem + (kt % kStages) * kAStage;
                for (int c = tid; c < kBM * 8; c += kThreads) {
                    const int row = c >> 3, ch = c & 7;
                    const bool ok = m0 + row < a.m;
                    const int8_t* src = a.xq + (ok ? (m0 + row) * x_row_bytes + int64_t(kt) * kKTile + ch * 16 : 0);
                    cp_async16(as + row * kAStride + ch * 16, src, !ok);
                }
                uint8_t* bs = b_smem + (kt % kStages) * kBStage;
                for (int c = tid; c < kBN * kBChunks; c += kThreads) {
                    const int row = c / kBChunks, ch = c % kBChunks;
                    const int64_t byte = int64_t(kt) * C::kTileBytes + ch * 16;
                    const bool ok = n0 + row < a.n && byte < a.code_row_bytes;  // a last partial k-tile reads zeros
                    const uint8_t* src = a.codes + (ok ? (n0 + row) * a.code_row_bytes + byte : 0);
                    cp_async16(bs + row * kBStride + ch * 16, src, !ok);
                }
            }
            cp_async_commit_group();
        };

        // This thread's token rows (2 per m16 tile) and first weight row (+ 8·j + {0, 1}).
        int my_rows[MT][2];  // T < 2^31; widened where it indexes memory
#pragma unroll
        for (int i = 0; i < MT; ++i)
#pragma unroll
            for (int h = 0; h < 2; ++h) my_rows[i][h] = int(m0) + warp_m * 16 * MT + i * 16 + group + 8 * h;
        const int64_t my_col0 = n0 + warp_n * 64 + 2 * quad;

        // Scales of a k-tile: the activation scale (and, for Q1_0, the bias that turns 2·Σbit·q into
        // Σsign·q and the int into a float at once) per token row; d_w per weight row and scale group.
        // d_w is prefetched with the rest when a k-tile has at most two weight groups; Q4_0 and Q8_0
        // (four) read theirs at use, which keeps their registers in bounds.
        constexpr bool kPrefetchW = kScalesPerTile <= 2;
        struct TileScales {
            float x[MT][2];
            int bias[MT][2];
            __half2 w[kPrefetchW ? kScalesPerTile : 1][8];  // fp16 pairs: half the registers of floats
        };
        auto weight_scale_bits = [&](int kt, int g, int j, int e) -> unsigned short {
            const int s = (kt * kKTile + g * C::kScaleGroup) / C::kScaleGroup;
            const int64_t col = my_col0 + 8 * j + e;
            return col < a.n && s < a.scales_per_row && kt < a.k_tiles ? __ldg(a.scales + col * a.scales_per_row + s)
                                                                         : (unsigned short)0;
        };
        auto load_scales = [&](int kt, TileScales& sc) {
#pragma unroll
            for (int i = 0; i < MT; ++i)
#pragma unroll
                for (int h = 0; h < 2; ++h) {
                    const bool ok = my_rows[i][h] < a.m && kt < a.k_tiles;
                    const ActivationGroupMeta meta =
                        ok ? a.x_meta[int64_t(my_rows[i][h]) * a.k_tiles + kt] : ActivationGroupMeta{0.0f, 0};
                    sc.x[i][h] = meta.scale;
                    sc.bias[i][h] = kMagicBits - (kZeroOne ? meta.sum : 0);
                }
            if constexpr (kPrefetchW) {
#pragma unroll
                for (int g = 0; g < kScalesPerTile; ++g)
#pragma unroll
                    for (int j = 0; j < 8; ++j)
                        sc.w[g][j] = __halves2half2(__ushort_as_half(weight_scale_bits(kt, g, j, 0)),
                                                    __ushort_as_half(weight_scale_bits(kt, g, j, 1)));
            }
        };

        float acc[MT][8][4];
#pragma unroll
        for (int i = 0; i < MT; ++i)
#pragma unroll
            for (int j = 0; j < 8; ++j)
#pragma unroll
                for (int e = 0; e < 4; ++e) acc[i][j][e] = 0.0f;

#pragma unroll
        for (int r = 0; r < kRounds - 1; ++r) {
            if (r < rounds) load_round(r);
            else cp_async_commit_group();
        }
        TileScales scales;
        load_scales(k_part, scales);  // prefetched one k-tile ahead from here on

        for (int r = 0; r < rounds; ++r) {
            cp_async_wait_group<kRounds - 2>();
            __syncthreads();  // round r is visible; everyone is done with round r − 1, refilled next
            if (r + kRounds - 1 < rounds) load_round(r + kRounds - 1);
            else cp_async_commit_group();
            const int kt = r * KS + k_part;
            if (kt >= a.k_tiles) continue;  // (no barrier below: the loop's next barrier is shared)
            const TileScales cur = scales;
            load_scales(kt + KS, scales);

            const uint8_t* as = a_smem + (kt % kStages) * kAStage + (warp_m * 16 * MT) * kAStride;
            const uint8_t* bs = b_smem + (kt % kStages) * kBStage + (warp_n * 64 + group) * kBStride;
            uint32_t a_frag[kKSteps][MT][4];
#pragma unroll
            for (int ks = 0; ks < kKSteps; ++ks)
#pragma unroll
                for (int i = 0; i < MT; ++i)
                    ldmatrix_x4(as + (i * 16 + (lane & 15)) * kAStride + ks * 32 + (lane >> 4) * 16, a_frag[ks][i]);

#pragma unroll
            for (int j = 0; j < 8; ++j) {
                const uint8_t* b_row = bs + j * 8 * kBStride;
                uint4 unit = make_uint4(0, 0, 0, 0);
                if constexpr (kZeroOne) unit = *reinterpret_cast<const uint4*>(b_row);
#pragma unroll
                for (int g = 0; g < kScalesPerTile; ++g) {
                    int dot[MT][4];
#pragma unroll
                    for (int i = 0; i < MT; ++i)
#pragma unroll
                        for (int e = 0; e < 4; ++e) dot[i][e] = 0;
#pragma unroll
                    for (int step = 0; step < kStepsPerScale; ++step) {
                        const int ks = g * kStepsPerScale + step;
                        uint32_t b0, b1;
                        if constexpr (kZeroOne) {
                            const uint32_t word = (ks == 0 ? unit.x : ks == 1 ? unit.y : ks == 2 ? unit.z : unit.w) >> quad;
                            b0 = word & 0x01010101u;         // bits of weights 4·quad + j
                            b1 = (word >> 4) & 0x01010101u;  // bits of weights 16 + 4·quad + j
                        } else {
                            C::fragment(b_row, ks, quad, b0, b1);
                        }
#pragma unroll
                        for (int i = 0; i < MT; ++i) mma_s8_s32(dot[i], a_frag[ks][i], b0, b1);
                    }
                    // The GEMV's term: float(dot) · (d_w · scale_x), one fmaf.
                    float w_scale[2];
                    if constexpr (kPrefetchW) {
                        const float2 wf = __half22float2(cur.w[g][j]);
                        w_scale[0] = wf.x;
                        w_scale[1] = wf.y;
                    } else {
#pragma unroll
                        for (int e = 0; e < 2; ++e) w_scale[e] = __half2float(__ushort_as_half(weight_scale_bits(kt, g, j, e)));
                    }
#pragma unroll
                    for (int i = 0; i < MT; ++i)
#pragma unroll
                        for (int e = 0; e < 4; ++e) {
                            const int biased = kZeroOne ? 2 * dot[i][e] + cur.bias[i][e >> 1] : dot[i][e] + kMagicBits;
                            acc[i][j][e] = fmaf(exact_float(biased), w_scale[e & 1] * cur.x[i][e >> 1], acc[i][j][e]);
                        }
                }
            }
        }
        cp_async_wait_group<0>();
        __syncthreads();  // the stages are free: reused below for the k-part reduction, then refilled

        if constexpr (KS > 1) {
            float* part = reinterpret_cast<float*>(smem);  // [KS − 1][WM·WN][32 lanes][MT·8·4]
            constexpr int kPer = MT * 8 * 4;
            if (k_part > 0) {
                float* mine = part + ((size_t(k_part - 1) * WM * WN + warp_mn) * 32 + lane) * kPer;
#pragma unroll
                for (int i = 0; i < MT; ++i)
#pragma unroll
                    for (int j = 0; j < 8; ++j)
#pragma unroll
                        for (int e = 0; e < 4; ++e) mine[(i * 8 + j) * 4 + e] = acc[i][j][e];
            }
            __syncthreads();
            if (k_part == 0) {
#pragma unroll 1
                for (int p = 1; p < KS; ++p) {
                    const float* theirs = part + ((size_t(p - 1) * WM * WN + warp_mn) * 32 + lane) * kPer;
#pragma unroll
                    for (int i = 0; i < MT; ++i)
#pragma unroll
                        for (int j = 0; j < 8; ++j)
#pragma unroll
                            for (int e = 0; e < 4; ++e) acc[i][j][e] += theirs[(i * 8 + j) * 4 + e];
                }
            }
            __syncthreads();  // the partial sums are read before the next tile's loads overwrite them
        }

        if (k_part == 0) {
#pragma unroll
            for (int i = 0; i < MT; ++i)
#pragma unroll
                for (int h = 0; h < 2; ++h) {
                    const int64_t row = my_rows[i][h];
                    if (row >= a.m) continue;
                    float* y_row = a.y + row * a.n;
#pragma unroll
                    for (int j = 0; j < 8; ++j)
#pragma unroll
                        for (int e = 0; e < 2; ++e) {
                            const int64_t col = my_col0 + 8 * j + e;
                            if (col < a.n) y_row[col] = acc[i][j][2 * h + e];
                        }
                }
        }
    }
}

struct DeviceLimits {
    int sms = 0, smem_optin = 0;
};
DeviceLimits device_limits() {
    DeviceLimits d;
    d.sms = device_attribute(cudaDevAttrMultiProcessorCount, "SM count");
    d.smem_optin = device_attribute(cudaDevAttrMaxSharedMemoryPerBlockOptin, "smem limit");
    return d;
}

struct TilePlan {
    int bm = 0, bn = 0, threads = 0;
    size_t smem = 0;
    int per_sm = 0;  // resident blocks per SM
};

template <DType T, int MT, int WM, int WN, int KS>
TilePlan prepare() {
    using S = TileShape<MT, WM, WN, KS>;
    const auto kernel = gemm_kernel<T, MT, WM, WN, KS>;
    TilePlan p{S::kBM, S::kBN, S::kThreads, gemm_smem_bytes<T, MT, WM, WN, KS>(), 0};
    cuda_check(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(p.smem)),
               "gemm shared memory");
    cuda_check(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&p.per_sm, kernel, p.threads, p.smem), "gemm occupancy");
    return p;
}

template <DType T, int MT, int WM, int WN, int KS>
void launch(const TilePlan& p, const GemmArgs& a, int64_t blocks, cudaStream_t stream) {
    gemm_kernel<T, MT, WM, WN, KS><<<unsigned(blocks), p.threads, p.smem, stream>>>(a);
}

// The tiles of one dtype: m16 = 16 tokens × 64 rows with the k-tiles split over 4 warps; m64 = 64 × 128
// (2 × 2 warps of 32 × 64); m128 = 128 × 128 (8 × 2 warps of 16 × 64).
template <DType T>
struct TileSet {
    // Prepared once per tile (attribute + occupancy queries cost host time on every call otherwise).
    static TilePlan plan(GemmTile t) {
        switch (t) {
            case GemmTile::m16_n64: {
                static const TilePlan p = prepare<T, 1, 1, 1, 4>();
                return p;
            }
            case GemmTile::m64_n128: {
                static const TilePlan p = prepare<T, 2, 2, 2, 1>();
                return p;
            }
            default: {
                static const TilePlan p = prepare<T, 1, 8, 2, 1>();
                return p;
            }
        }
    }
    static void run(GemmTile t, const TilePlan& p, const GemmArgs& a, int64_t blocks, cudaStream_t s) {
        switch (t) {
            case GemmTile::m16_n64: launch<T, 1, 1, 1, 4>(p, a, blocks, s); break;
            case GemmTile::m64_n128: launch<T, 2, 2, 2, 1>(p, a, blocks, s); break;
            default: launch<T, 1, 8, 2, 1>(p, a, blocks, s); break;
        }
    }
};

int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

// Fraction of the launched block slots that do useful work when `tiles` tiles run in waves of
// sms·per_sm blocks.
double wave_efficiency(int64_t tiles, const TilePlan& p, int sms) {
    const int64_t slots = int64_t(std::max(p.per_sm, 1)) * sms;
    return double(tiles) / double(ceil_div(tiles, slots) * slots);
}

// DELTABIT_GEMM_WS=0: the automatic choice never takes the warp-specialised tile (for measuring what it
// brings: docs/bench-notes.md). DELTABIT_GEMM_WS_NARROW=0: it never takes that kernel's 16-, 32- and 64-token tiles
// (for prompts of ≤ 64 tokens, and for a matrix's last rows: ws_tail_plan).
bool warp_specialised_gemm() {
    static const bool on = env_switch("DELTABIT_GEMM_WS", true);
    return on;
}
bool narrow_warp_specialised_gemm() {
    static const bool on = env_switch("DELTABIT_GEMM_WS_NARROW", true);
    return on;
}

// Whether the warp-specialised kernel serves weights of type t with `rows` rows here: Q1_0 on Hopper in an
// sm_90a build, unless the rows are too few to give it more than a handful of 128-row tiles (H200, pp512,
// bench/prefill_cuda.cpp: 1.6–1.8× the other warpgroup tile on every Bonsai-27B matrix of ≥ 1024 rows, even
// at 32 tiles for 132 SMs; at 48 rows m16 was twice as fast).
bool warp_specialised_serves(DType t, int64_t rows) {
    return t == DType::Q1_0 && rows >= 256 && warp_specialised_gemm() && detail::wgmma_gemm_available();
}

// Tokens a tile of a warp-specialised tile, 0 for the others.
int ws_tokens_per_tile(GemmTile t) {
    switch (t) {
        case GemmTile::wgmma_ws_m128_n128: return 128;
        case GemmTile::wgmma_ws_m64_n128: return 64;
        case GemmTile::wgmma_ws_m32_n128: return 32;
        case GemmTile::wgmma_ws_m16_n128: return 16;
        default: return 0;
    }
}

// The narrowest warp-specialised tile covering `tokens` (≤ 128).
GemmTile ws_tile_covering(int64_t tokens) {
    return tokens <= 16 ? GemmTile::wgmma_ws_m16_n128
           : tokens <= 32 ? GemmTile::wgmma_ws_m32_n128
           : tokens <= 64 ? GemmTile::wgmma_ws_m64_n128
                          : GemmTile::wgmma_ws_m128_n128;
}

// The launches of a ws_tail_plan: rows [0, head_rows) on the 128-token tile (none when head_rows is 0), the
// rest on the narrow one, each writing its columns of the one y.
GemmLaunchReport run_ws_with_tail(const QuantizedActivationRows& x, const GemvWeightView& w, float* y,
                                  cudaStream_t stream, const detail::WsTailPlan& plan) {
    detail::WgmmaGemmLaunch head;
    if (plan.head_rows > 0)
        head = detail::gemm_q1_0_wgmma_ws(x, w.slice_rows(0, plan.head_rows), y, stream, 0, -1, 128, w.rows);
    const int64_t tail_rows = w.rows - plan.head_rows;
    const detail::WgmmaGemmLaunch tail = detail::gemm_q1_0_wgmma_ws(
        x, w.slice_rows(plan.head_rows, tail_rows), y + plan.head_rows, stream, 0, -1, plan.tail_tokens, w.rows);
    const GemmTile narrow = ws_tile_covering(plan.tail_tokens);
    if (plan.head_rows == 0) return GemmLaunchReport{narrow, tail.tiles, tail.blocks};
    return GemmLaunchReport{GemmTile::wgmma_ws_m128_n128, head.tiles + tail.tiles, std::max(head.blocks, tail.blocks),
                            narrow, tail_rows};
}

template <DType T>
GemmLaunchReport run_gemm(const QuantizedActivationRows& x, const GemvWeightView& w, float* y, cudaStream_t stream,
                          GemmTile requested, int64_t max_blocks) {
    static const DeviceLimits limits = device_limits();
    GemmTile tile = requested;
    if (tile == GemmTile::automatic) {
        // Short prompts: 16-token tiles (a 64-row tile would be 3/4 idle). Few weight rows: the same,
        // as 64 × 128 tiles would not give every SM a block (measured on an H200 at T = 512: N = 48
        // 24 µs on m16 vs 79 µs on m64, N = 1024 64 vs 82; N = 5120 370 vs 211). Otherwise m64 unless
        // m128 fills the waves of the grid clearly better (m64 was the faster of the two on every
        // Bonsai-27B matrix at T = 512: bench/prefill_cuda.cpp).
        // Q1_0 on Hopper: the warp-specialised warpgroup tile (warp_specialised_serves).
        const TilePlan mid = TileSet<T>::plan(GemmTile::m64_n128);
        const bool ws = warp_specialised_serves(T, w.rows);
        if (ws && x.rows <= 64 && narrow_warp_specialised_gemm()) {
            tile = ws_tile_covering(x.rows);
        } else if (ws && x.rows > 16) {
            tile = GemmTile::wgmma_ws_m128_n128;
        } else if (x.rows <= 16 || ceil_div(x.rows, mid.bm) * ceil_div(w.rows, mid.bn) < limits.sms) {
            tile = GemmTile::m16_n64;
        } else {
            const TilePlan big = TileSet<T>::plan(GemmTile::m128_n128);
            const double e_big = wave_efficiency(ceil_div(x.rows, big.bm) * ceil_div(w.rows, big.bn), big, limits.sms);
            const double e_mid = wave_efficiency(ceil_div(x.rows, mid.bm) * ceil_div(w.rows, mid.bn), mid, limits.sms);
            tile = e_big > 1.15 * e_mid ? GemmTile::m128_n128 : GemmTile::m64_n128;
            // Q1_0 on Hopper without the warp-specialised tile: the other warpgroup tile when its 128 × 128
            // tiles give every SM one at least and K is long enough to amortise its pipeline fill (one block an
            // SM: nothing hides it). H200, pp512: 0–15% faster than m64 on every Bonsai-27B matrix (K ≥ 5120,
            // ≥ 160 tiles); Bonsai-4B (K = 2560) was 11–18% slower with it.
            if (T == DType::Q1_0 && detail::wgmma_gemm_available() && w.cols >= 5120 &&
                ceil_div(x.rows, 128) * ceil_div(w.rows, 128) >= limits.sms)
                tile = GemmTile::wgmma_m128_n128;
        }
    }
    if (requested == GemmTile::automatic && tile == GemmTile::wgmma_ws_m128_n128 && max_blocks == 0 &&
        narrow_warp_specialised_gemm()) {
        const detail::WsTailPlan plan = detail::ws_tail_plan(x.rows, w.rows, limits.sms);
        if (plan.tail_tokens > 0) return run_ws_with_tail(x, w, y, stream, plan);
    }
    if (tile == GemmTile::wgmma_m128_n128 || ws_tokens_per_tile(tile) > 0) {
        const detail::WgmmaGemmLaunch launch =
            tile == GemmTile::wgmma_m128_n128
                ? detail::gemm_q1_0_wgmma(x, w, y, stream, max_blocks)
                : detail::gemm_q1_0_wgmma_ws(x, w, y, stream, max_blocks, -1, ws_tokens_per_tile(tile));
        return GemmLaunchReport{tile, launch.tiles, launch.blocks};
    }
    const TilePlan p = TileSet<T>::plan(tile);
    if (p.smem > size_t(limits.smem_optin))
        fail_message("cuda gemm: a tile needs " + std::to_string(p.smem) + " bytes of shared memory, the device has " +
                     std::to_string(limits.smem_optin));
    const GemmArgs a = detail::gemm_args(x, w, y, p.bm, p.bn);
    // One block per tile up to the grid cap; past it blocks walk tiles grid-stride, so any T·N runs.
    const int64_t blocks = max_blocks > 0 ? std::min(a.tiles, max_blocks) : int64_t(grid_blocks(a.tiles));
    TileSet<T>::run(tile, p, a, blocks, stream);
    cuda_check_launch("gemm_kernel");
    return GemmLaunchReport{tile, a.tiles, blocks};
}

std::string shape_text(const GemvWeightView& w) {
    return std::string(dtype_name(w.dtype)) + " " + std::to_string(w.rows) + "×" + std::to_string(w.cols);
}

}  // namespace

const char* gemm_tile_name(GemmTile t) {
    switch (t) {
        case GemmTile::m16_n64: return "m16_n64";
        case GemmTile::m64_n128: return "m64_n128";
        case GemmTile::m128_n128: return "m128_n128";
        case GemmTile::wgmma_m128_n128: return "wgmma_m128_n128";
        case GemmTile::wgmma_ws_m128_n128: return "wgmma_ws_m128_n128";
        case GemmTile::wgmma_ws_m64_n128: return "wgmma_ws_m64_n128";
        case GemmTile::wgmma_ws_m32_n128: return "wgmma_ws_m32_n128";
        case GemmTile::wgmma_ws_m16_n128: return "wgmma_ws_m16_n128";
        case GemmTile::half_m128_n256: return "half_m128_n256";
        case GemmTile::half_m64_n256: return "half_m64_n256";
        case GemmTile::half_m32_n256: return "half_m32_n256";
        case GemmTile::half_m16_n256: return "half_m16_n256";
        case GemmTile::half_m128_n128: return "half_m128_n128";
        case GemmTile::half_m64_n128: return "half_m64_n128";
        case GemmTile::half_m32_n128: return "half_m32_n128";
        case GemmTile::half_m16_n128: return "half_m16_n128";
        default: return "automatic";
    }
}

bool gemm_tile_supported(GemmTile tile, DType t) {
    if (half_tile_tokens(tile) > 0) return false;  // gemm_q1_0_half's, on f16 activations
    if (tile != GemmTile::wgmma_m128_n128 && ws_tokens_per_tile(tile) == 0) return true;
    return t == DType::Q1_0 && detail::wgmma_gemm_available();
}

ActivationRowsScratch::ActivationRowsScratch(int64_t rows, int64_t cols)
    : buffer(size_t(rows) * size_t(activation_groups(cols)) * (kActivationGroup + sizeof(ActivationGroupMeta))),
      max_rows(rows),
      max_cols(cols) {}

QuantizedActivationRows ActivationRowsScratch::view(int64_t rows, int64_t cols) const {
    // Fits when the codes and the metadata of rows × cols fit in the codes / metadata areas of the
    // max_rows × max_cols layout.
    const int64_t groups = activation_groups(cols), max_groups = activation_groups(max_cols);
    if (rows < 0 || cols < 0 || rows * groups > max_rows * max_groups) {
        fail_message("cuda matmul_prefill: activation scratch holds " + std::to_string(max_rows) + "×" +
                     std::to_string(max_cols) + " inputs, asked for " + std::to_string(rows) + "×" +
                     std::to_string(cols));
    }
    auto* base = buffer.get<uint8_t>();
    const size_t q_bytes = size_t(max_rows * max_groups) * kActivationGroup;
    return {reinterpret_cast<int8_t*>(base), reinterpret_cast<ActivationGroupMeta*>(base + q_bytes), rows, cols};
}

void quantize_activation_rows(const float* x, const QuantizedActivationRows& out, cudaStream_t stream) {
    if (out.rows == 0 || out.cols == 0) return;
    const int64_t groups = activation_groups(out.cols);
    if (out.cols % kActivationGroup == 0) {
        // Every group is whole, so row t's groups are groups t·G .. t·G+G−1 of the flat vector.
        quantize_activations(x, QuantizedActivationsView{out.q, out.meta, out.rows * out.cols}, stream);
        return;
    }
    for (int64_t t = 0; t < out.rows; ++t) {
        quantize_activations(x + t * out.cols,
                             QuantizedActivationsView{out.q + t * groups * kActivationGroup, out.meta + t * groups, out.cols},
                             stream);
    }
}

GemmLaunchReport gemm_quantized(const QuantizedActivationRows& x, const GemvWeightView& w, float* y,
                                cudaStream_t stream, GemmTile tile, int64_t max_blocks) {
    if (!gemv_layout_supports(w.dtype) || w.cols <= 0 || w.rows < 0 || !row_fits_blocks(w.dtype, uint64_t(w.cols)))
        fail_message("cuda gemm: unsupported weights " + shape_text(w));
    if (x.cols != w.cols)
        fail_message("cuda gemm: " + std::to_string(x.cols) + " activations per row for weights " + shape_text(w));
    if (x.rows == 0 || w.rows == 0) return {};
    if (!gemm_tile_supported(tile, w.dtype))
        fail_message("cuda gemm: the wgmma tiles run Q1_0 weights on a compute capability 9.0 device in an "
                     "sm_90a build (CMAKE_CUDA_ARCHITECTURES with 90a); asked for " + shape_text(w));
    switch (w.dtype) {
        case DType::Q1_0: return run_gemm<DType::Q1_0>(x, w, y, stream, tile, max_blocks);
        case DType::Q2_0: return run_gemm<DType::Q2_0>(x, w, y, stream, tile, max_blocks);
        case DType::Q2_0_G64: return run_gemm<DType::Q2_0_G64>(x, w, y, stream, tile, max_blocks);
        case DType::Q4_0: return run_gemm<DType::Q4_0>(x, w, y, stream, tile, max_blocks);
        case DType::Q8_0: return run_gemm<DType::Q8_0>(x, w, y, stream, tile, max_blocks);
        default: fail_message("cuda gemm: unsupported weights " + shape_text(w));
    }
    return {};
}

size_t activation_rows_bytes(int64_t rows, int64_t cols) {
    return size_t(rows) * size_t(activation_groups(cols)) * (kActivationGroup + sizeof(ActivationGroupMeta));
}

QuantizedActivationRows activation_rows_view(void* buffer, int64_t rows, int64_t cols) {
    auto* base = static_cast<uint8_t*>(buffer);
    const size_t q_bytes = size_t(rows) * size_t(activation_groups(cols)) * kActivationGroup;
    return {reinterpret_cast<int8_t*>(base), reinterpret_cast<ActivationGroupMeta*>(base + q_bytes), rows, cols};
}

bool matmul_prefill(const float* x, const GemvWeightView& w, int64_t n_tokens, float* y,
                    const QuantizedActivationRows& rows, cudaStream_t stream) {
    if (rows.rows < std::min<int64_t>(n_tokens, 1) || rows.cols != w.cols)
        fail_message("cuda matmul_prefill: quantised rows " + std::to_string(rows.rows) + "×" +
                     std::to_string(rows.cols) + " for " + std::to_string(n_tokens) + " tokens and weights " +
                     shape_text(w));
    if (n_tokens < kGemmMinTokens) {
        const QuantizedActivationsView xq{rows.q, rows.meta, w.cols};
        for (int64_t t = 0; t < n_tokens; ++t) {
            quantize_activations(x + t * w.cols, xq, stream);
            gemv_quantized(xq, w, y + t * w.rows, stream);
        }
        return false;
    }
    if (rows.rows < n_tokens)
        fail_message("cuda matmul_prefill: quantised rows for " + std::to_string(rows.rows) + " tokens, got " +
                     std::to_string(n_tokens));
    QuantizedActivationRows xq = rows;
    xq.rows = n_tokens;
    quantize_activation_rows(x, xq, stream);
    gemm_quantized(xq, w, y, stream);
    return true;
}

size_t prompt_scratch_bytes(const GemvWeightView& w, int64_t n_tokens) {
    return half_gemm_serves(w, n_tokens) ? half_activation_rows_bytes(n_tokens, w.cols)
                                         : activation_rows_bytes(std::max<int64_t>(n_tokens, 1), w.cols);
}

PromptRows prepare_prompt_rows(const float* x, const GemvWeightView& like, int64_t n_tokens, void* scratch,
                               cudaStream_t stream) {
    if (n_tokens < kGemmMinTokens)
        fail_message("cuda prepare_prompt_rows: " + std::to_string(n_tokens) + " tokens; the GEMM takes " +
                     std::to_string(kGemmMinTokens) + " or more (matmul_prompt runs fewer through the GEMV)");
    PromptRows rows;
    if (half_gemm_serves(like, n_tokens)) {
        rows.path = PromptMatmulPath::f16_gemm;
        rows.half = half_activation_rows_view(scratch, n_tokens, like.cols);
        round_activation_rows_f16(x, rows.half, stream);
    } else {
        rows.path = PromptMatmulPath::int8_gemm;
        rows.int8 = activation_rows_view(scratch, n_tokens, like.cols);
        quantize_activation_rows(x, rows.int8, stream);
    }
    return rows;
}

PromptRows prepare_prompt_rows_swiglu(const float* gate, const float* up, float* act, const GemvWeightView& like,
                                      int64_t n_tokens, void* scratch, cudaStream_t stream) {
    if (half_gemm_serves(like, n_tokens)) {  // which also means at least kGemmMinTokens tokens
        PromptRows rows;
        rows.path = PromptMatmulPath::f16_gemm;
        rows.half = half_activation_rows_view(scratch, n_tokens, like.cols);
        round_swiglu_rows_f16(gate, up, rows.half, stream);
        return rows;
    }
    swiglu(gate, up, n_tokens * like.cols, act, stream);
    return prepare_prompt_rows(act, like, n_tokens, scratch, stream);
}

void gemm_prompt_rows(const PromptRows& rows, const GemvWeightView& w, float* y, cudaStream_t stream) {
    const bool f16 = rows.path == PromptMatmulPath::f16_gemm;
    const int64_t tokens = f16 ? rows.half.rows : rows.int8.rows;
    if (half_gemm_serves(w, tokens) != f16)
        fail_message("cuda gemm_prompt_rows: rows prepared as " + std::string(f16 ? "f16" : "int8") +
                     " for weights " + shape_text(w) + " that matmul_prompt would give the other rounding");
    if (f16) gemm_q1_0_half(rows.half, w, y, stream);
    else gemm_quantized(rows.int8, w, y, stream);
}

PromptMatmulPath matmul_prompt(const float* x, const GemvWeightView& w, int64_t n_tokens, float* y, void* scratch,
                               cudaStream_t stream) {
    if (n_tokens < kGemmMinTokens) {
        matmul_prefill(x, w, n_tokens, y, activation_rows_view(scratch, std::max<int64_t>(n_tokens, 1), w.cols), stream);
        return PromptMatmulPath::gemv;
    }
    const PromptRows rows = prepare_prompt_rows(x, w, n_tokens, scratch, stream);
    gemm_prompt_rows(rows, w, y, stream);
    return rows.path;
}

bool matmul_prefill(const float* x, const GemvWeightView& w, int64_t n_tokens, float* y,
                    const ActivationRowsScratch& scratch, cudaStream_t stream) {
    return matmul_prefill(x, w, n_tokens, y, scratch.view(std::max<int64_t>(n_tokens, 1), w.cols), stream);
}

// ws_tail_plan's tile costs, in units of a 128-token tile's (H200, 2026-12-02, bench_prefill_cuda pipelines +
// crossover: a round of one tile per SM on Bonsai-27B ffn_gate/up, K = 5120 / ffn_down, K = 17408, took
// 47 / 153 µs at 128 tokens, 41 / 126 at 64, 26 / 75 at 32, 21 / 63 at 16).
detail::WsTailPlan detail::ws_tail_plan(int64_t tokens, int64_t rows, int sms) {
    struct Narrow {
        int tokens;
        double cost;
    };
    constexpr Narrow kNarrow[] = {{64, 0.86}, {32, 0.52}, {16, 0.43}};
    const int64_t m_tiles = ceil_div(tokens, 128), row_blocks = ceil_div(rows, 128), tiles = m_tiles * row_blocks;
    const int64_t head_blocks = (tiles / sms) * sms / m_tiles;  // the row blocks that fill whole rounds
    const double head = double(ceil_div(head_blocks * m_tiles, sms));
    WsTailPlan best;
    double best_cost = 1e300;
    for (const Narrow& n : kNarrow) {
        const double cost = head + double(ceil_div(ceil_div(tokens, n.tokens) * (row_blocks - head_blocks), sms)) * n.cost;
        if (cost < best_cost) best_cost = cost, best = {head_blocks * 128, n.tokens};
    }
    // Cut only for a clear gain over one launch (the second launch's start is not in the costs).
    return best_cost < 0.97 * double(ceil_div(tiles, sms)) ? best : WsTailPlan{};
}

}  // namespace deltabit::cuda
