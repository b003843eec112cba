// The Q1_0 prefill GEMM on warpgroup tensor cores, warp-specialised (ops/gemm_wgmma_cuda.h): the tile
// GemmTile::wgmma_ws_m128_n128. EXPERIMENT: written without a GPU to run it on (2026-12-02); its parity
// test (tests/cuda/test_prefill_gemm.cpp: bit for bit the m64 tile's y) and bench_prefill_cuda's "ws us"
// column are for the next device run. The automatic choice takes it only with DELTABIT_GEMM_WS=1.
//
// Why. The other warpgroup kernel (gemm_wgmma_cuda.cu) has both its warpgroups copy the tiles, expand the
// 1-bit codes into bytes in shared memory, convert the integer dots and wait at two block barriers per
// k-tile: ~600 instructions a warp per k-tile, 6 cycles apart (Nsight Compute), ~195 TFLOP/s on the
// Bonsai-27B prompt — 73% of a pp512 (docs/bench.md). Here the work is split by role:
//   warpgroup 0 (producer)   copies each k-tile's x tile (128 tokens × 128 int8, core-matrix order), the
//                            128 weight rows' codes (16 bytes each) and the tokens' {scale, Σq} into a
//                            ring of kStages stages (cp.async), and publishes a stage when its copies
//                            have landed (mbarrier `full`); it never waits on the tensor cores.
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
#include "ops/gemm_wgmma_cuda.h"

#include <cuda_fp16.h>

#include <algorithm>

#include "ops/async_copy.cuh"
#include "ops/bulk_copy.cuh"
#include "ops/gemm_args.h"
#include "ops/gemm_terms.cuh"
#include "ops/wgmma.cuh"

namespace deltabit::cuda::detail {

namespace {

constexpr int kBM = 128;  // tokens of a tile: the wgmma's N
constexpr int kBN = 128;  // weight rows of a tile: 2 consumers × the wgmma's M
constexpr int kKTile = 128;  // one activation group = one Q1_0 scale group
constexpr int kThreads = 384;
[[maybe_unused]] constexpr int kConsumerWarps = 8;
constexpr int kStages = 6;
// Stages whose copies a producer thread keeps in flight before it publishes the oldest: publishing stage
// i waits for all but the newest kLag batches. kLag < kStages, or the producer would wait for a stage its
// consumers cannot have been given.
constexpr int kLag = 3;
static_assert(kLag < kStages, "the producer publishes a stage before it needs that stage back");
constexpr int kXBytes = kBM * kKTile;
constexpr int kCodeBytes = kBN * 16;
constexpr int kMetaBytes = kBM * int(sizeof(ActivationGroupMeta));
constexpr int kStageBytes = kXBytes + kCodeBytes + kMetaBytes;
static_assert(kStageBytes % 128 == 0, "every stage's x tile starts 128-byte aligned");
constexpr size_t kSmemBytes = size_t(kStages) * kStageBytes + 2 * kStages * sizeof(uint64_t);
// The core-matrix layout's strides (ops/wgmma.cuh): next 16 bytes of K, next 8 rows.
[[maybe_unused]] constexpr uint32_t kLeadingBytes = 128, kStrideBytes = 1024;
static_assert(kKTile == kActivationGroup, "a k-tile is one activation group");

#if defined(DELTABIT_WGMMA_COMPILED)

__device__ __forceinline__ uint8_t* stage_base(uint8_t* smem, int64_t i) { return smem + (i % kStages) * kStageBytes; }
__device__ __forceinline__ uint32_t stage_parity(int64_t i) { return uint32_t((i / kStages) & 1); }

// Warpgroup 0: every k-tile of every tile of this block, in the consumers' order.
__device__ void produce(const GemmArgs& a, uint8_t* smem, uint64_t* full, uint64_t* empty) {
    const int p = int(threadIdx.x);  // 0 .. 127
    const int64_t x_row_bytes = int64_t(a.k_tiles) * kKTile;
    int64_t issued = 0;
    for (int64_t tile = blockIdx.x; tile < a.tiles; tile += gridDim.x) {
        const int64_t m0 = (tile % a.m_tiles) * kBM, n0 = (tile / a.m_tiles) * kBN;
        for (int kt = 0; kt < a.k_tiles; ++kt, ++issued) {
            // The stage's last use (issued − kStages) handed back by all 8 consumer warps; on the ring's first
            // round this is the phase before the first, complete already.
            mbarrier_wait_parity(&empty[issued % kStages], stage_parity(issued) ^ 1u);
            uint8_t* st = stage_base(smem, issued);
            // x: c → (row, chunk) with the row's low 3 bits fastest, 8 lanes filling one core matrix's 128 bytes.
#pragma unroll
            for (int i = 0; i < kBM * 8 / 128; ++i) {
                const int c = p + i * 128;
                const int row = (c & 7) + 8 * (c >> 6), chunk = (c >> 3) & 7;
                const bool ok = m0 + row < a.m;
                const int8_t* src = a.xq + (ok ? (m0 + row) * x_row_bytes + int64_t(kt) * kKTile + chunk * 16 : 0);
                cp_async16(st + core_matrix_offset(row, chunk), src, !ok);
            }
            {  // the codes of weight row p, and the {scale, Σq} of token p
                const int64_t byte = int64_t(kt) * 16;
                const bool code_ok = n0 + p < a.n && byte < a.code_row_bytes;
                cp_async16(st + kXBytes + p * 16, a.codes + (code_ok ? (n0 + p) * a.code_row_bytes + byte : 0), !code_ok);
                const bool meta_ok = m0 + p < a.m;
                cp_async8(st + kXBytes + kCodeBytes + p * int(sizeof(ActivationGroupMeta)),
                          a.x_meta + (meta_ok ? (m0 + p) * a.k_tiles + kt : 0), !meta_ok);
            }
            cp_async_commit_group();
            if (issued >= kLag) {
                cp_async_wait_group<kLag>();  // this thread's copies of stage issued − kLag have landed
                fence_proxy_async_shared();   // ... and are visible to the wgmma's reads (async proxy)
                mbarrier_arrive(&full[(issued - kLag) % kStages]);
            }
        }
    }
    cp_async_wait_group<0>();
    fence_proxy_async_shared();
    for (int64_t i = std::max<int64_t>(0, issued - kLag); i < issued; ++i) mbarrier_arrive(&full[i % kStages]);
}

__device__ __forceinline__ uint32_t word_of(const uint4& v, int i) { return i == 0 ? v.x : i == 1 ? v.y : i == 2 ? v.z : v.w; }

// Warpgroups 1 and 2: consumer c owns weight rows 64c .. 64c + 63 of each tile.
__device__ void consume(const GemmArgs& a, uint8_t* smem, uint64_t* full, uint64_t* empty) {
    const int c = int(threadIdx.x) / 128 - 1, wg_thread = int(threadIdx.x) % 128;
    const int warp = wg_thread / 32, lane = wg_thread % 32, g = lane / 4, q = lane % 4;
    const int row_lo = 64 * c + 16 * warp + g, row_hi = row_lo + 8;  // this thread's weight rows in the tile
    int64_t consumed = 0;
    for (int64_t tile = blockIdx.x; tile < a.tiles; tile += gridDim.x) {
        const int64_t m0 = (tile % a.m_tiles) * kBM, n0 = (tile / a.m_tiles) * kBN;
        auto weight_scale = [&](int row, int kt) {
            return n0 + row < a.n && kt < a.k_tiles
                       ? __half2float(__ushort_as_half(__ldg(a.scales + (n0 + row) * a.scales_per_row + kt)))
                       : 0.0f;
        };
        float acc[64];
#pragma unroll
        for (int i = 0; i < 64; ++i) acc[i] = 0.0f;
        float w_lo = weight_scale(row_lo, 0), w_hi = weight_scale(row_hi, 0);
        for (int kt = 0; kt < a.k_tiles; ++kt, ++consumed) {
            // The next k-tile's row scales, requested now: they arrive while this one is computed.
            const float next_lo = weight_scale(row_lo, kt + 1), next_hi = weight_scale(row_hi, kt + 1);
            mbarrier_wait_parity(&full[consumed % kStages], stage_parity(consumed));
            const uint8_t* st = stage_base(smem, consumed);

            // A: k-step s is code word s of each row (weights 32s .. 32s + 31); the register layout of
            // wgmma_m64n128k32_s8_ra wants k 4q .. 4q + 3 and 16 + 4q .. of rows g and g + 8.
            const uint4 code_lo = *reinterpret_cast<const uint4*>(st + kXBytes + row_lo * 16);
            const uint4 code_hi = *reinterpret_cast<const uint4*>(st + kXBytes + row_hi * 16);
            uint32_t frag[4][4];
#pragma unroll
            for (int s = 0; s < 4; ++s) {
                frag[s][0] = q1_twos(word_of(code_lo, s), q);  // q1_twos: ops/gemm_terms.cuh
                frag[s][1] = q1_twos(word_of(code_hi, s), q);
                frag[s][2] = q1_twos(word_of(code_lo, s), q + 4);
                frag[s][3] = q1_twos(word_of(code_hi, s), q + 4);
            }
            int d[64];
#pragma unroll
            for (int i = 0; i < 64; ++i) wgmma_fence_operand(d[i]);
            wgmma_fence();
#pragma unroll
            for (int s = 0; s < 4; ++s)
                wgmma_m64n128k32_s8_ra(d, frag[s], wgmma_descriptor(st + s * 2 * 128, kLeadingBytes, kStrideBytes), s > 0);
            wgmma_commit();
            wgmma_wait<0>();
#pragma unroll
            for (int i = 0; i < 64; ++i) wgmma_fence_operand(d[i]);

            // The dots into the fp32 sums: the other kernel's term, element by element.
            const ActivationGroupMeta* meta = reinterpret_cast<const ActivationGroupMeta*>(st + kXBytes + kCodeBytes);
#pragma unroll
            for (int j = 0; j < 16; ++j) {
                const float4 tokens = *reinterpret_cast<const float4*>(meta + 8 * j + 2 * q);  // tokens 8j + 2q, + 1
                const float x_scale[2] = {tokens.x, tokens.z};
                const int bias[2] = {kMagicBits - __float_as_int(tokens.y), kMagicBits - __float_as_int(tokens.w)};
#pragma unroll
                for (int e = 0; e < 4; ++e) {
                    const float w_scale = (e >> 1) ? w_hi : w_lo;
                    const float v = exact_float(d[4 * j + e] + bias[e & 1]);  // d = 2·Σbit·q
                    acc[4 * j + e] = fmaf(v, w_scale * x_scale[e & 1], acc[4 * j + e]);
                }
            }
            // This warp's reads of the stage (codes, meta; the wgmma's, waited above) are done.
            __syncwarp();
            if (lane == 0) mbarrier_arrive(&empty[consumed % kStages]);
            w_lo = next_lo, w_hi = next_hi;
        }

#pragma unroll
        for (int j = 0; j < 16; ++j)
#pragma unroll
            for (int e = 0; e < 4; ++e) {
                const int64_t token = m0 + 8 * j + 2 * q + (e & 1), row = n0 + ((e >> 1) ? row_hi : row_lo);
                if (token < a.m && row < a.n) a.y[token * a.n + row] = acc[4 * j + e];
            }
    }
}

#endif  // DELTABIT_WGMMA_COMPILED

__global__ void __launch_bounds__(kThreads, 1) gemm_q1_0_wgmma_ws_kernel(GemmArgs a) {
#if defined(DELTABIT_WGMMA_COMPILED)
    extern __shared__ __align__(128) uint8_t smem[];
    uint64_t* full = reinterpret_cast<uint64_t*>(smem + size_t(kStages) * kStageBytes);
    uint64_t* empty = full + kStages;
    if (threadIdx.x == 0) {
        for (int s = 0; s < kStages; ++s) {
            mbarrier_init(&full[s], 128);              // every producer thread, once its copies landed
            mbarrier_init(&empty[s], kConsumerWarps);  // one lane of every consumer warp
        }
        fence_mbarrier_init();
    }
    __syncthreads();
    // Registers move from the producer, which holds addresses, to the consumers, whose 64 dots and 64 sums
    // alone are 128 a thread: 128 · 72 + 256 · 216 = 64512 of the SM's 65536. ptxas -v (CUDA 13.0): without
    // this, 52 bytes of spills at the launch bound's 168; the producer spills below 72.
    if (threadIdx.x < 128) {
        asm volatile("setmaxnreg.dec.sync.aligned.u32 72;\n" ::: "memory");
        produce(a, smem, full, empty);
    } else {
        asm volatile("setmaxnreg.inc.sync.aligned.u32 216;\n" ::: "memory");
        consume(a, smem, full, empty);
    }
#endif
}

}  // namespace

WgmmaGemmLaunch gemm_q1_0_wgmma_ws(const QuantizedActivationRows& x, const GemvWeightView& w, float* y,
                                   cudaStream_t stream, int64_t max_blocks) {
    static const bool configured = [] {
        cuda_check(cudaFuncSetAttribute(gemm_q1_0_wgmma_ws_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                        int(kSmemBytes)),
                   "wgmma ws gemm shared memory");
        return true;
    }();
    (void)configured;
    const GemmArgs a = gemm_args(x, w, y, kBM, kBN);
    const int sms = device_attribute(cudaDevAttrMultiProcessorCount, "SM count");
    // One block per SM (its ~117 KB of shared memory and 384 threads allow one), walking tiles.
    const int64_t blocks = std::min<int64_t>(a.tiles, max_blocks > 0 ? max_blocks : sms);
    gemm_q1_0_wgmma_ws_kernel<<<unsigned(blocks), kThreads, kSmemBytes, stream>>>(a);
    cuda_check_launch("gemm_q1_0_wgmma_ws_kernel");
    return WgmmaGemmLaunch{a.tiles, blocks};
}

}  // namespace deltabit::cuda::detail
