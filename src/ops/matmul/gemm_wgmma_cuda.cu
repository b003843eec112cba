// The Q1_0 prefill GEMM on warpgroup tensor cores (ops/matmul/gemm_wgmma_cuda.h).
//
// Why a second kernel. The mma.sync tiles of gemm_quant_cuda.cu build every weight fragment in registers,
// per warp, from the 1-bit codes: ~15 instructions for each m16n8k32 mma (ncu, H200), so they run at
// ~200 TOPS with the tensor cores mostly idle. Here the codes of a k-tile are expanded ONCE per block
// into int8 bytes in shared memory, where wgmma reads them for 128 tokens, and the integer dots of a
// k-tile (one 64 × 128 int32 tile per warpgroup) arrive by four wgmma instructions.
//
// Shape of the work. A block is 2 warpgroups (256 threads) computing 128 tokens × 128 weight rows; warpgroup
// w owns tokens 64w .. 64w + 63. K is walked in k-tiles of 128 (one activation group = one Q1_0 scale group):
//   stages (kStages, cp.async):  x int8 128 × 128 (core-matrix order, ops/cuda/wgmma.cuh), codes 128 × 16 bytes
//   expanded (two buffers):      codes → 0/2 bytes 128 × 128, core-matrix order
//   scales (two buffers):        d_w of the 128 rows, scale_x and the bias of the 128 tokens
// Per k-tile i the block expands k-tile i + 1 and issues its wgmmas while k-tile i's are in flight, then
// converts k-tile i's integer dots into the fp32 sums: the tensor cores work while the threads convert.
//
// Numerics: per output and k-tile, y = fmaf(float(2·Σbit·q − Σq), d_w · scale_x, y) in k order — the
// mma.sync tiles' term (the same bias trick for the int → float and the −Σq correction), so y is theirs
// bit for bit (KS = 1: k order).
#include "backend/cuda_buffer.h"
#include "ops/matmul/gemm_wgmma_cuda.h"

#include <cuda_fp16.h>

#include <algorithm>

#include "ops/cuda/async_copy.cuh"
#include "ops/cuda/cuda_launch.h"
#include "ops/matmul/gemm_args.h"
#include "ops/matmul/gemm_terms.cuh"
#include "ops/cuda/wgmma.cuh"

namespace deltabit::cuda::detail {

namespace {

constexpr int kBM = 128, kBN = 128, kKTile = 128;  // kKTile = kActivationGroup = the Q1_0 scale group
constexpr int kThreads = 256, kStages = 4;
constexpr int kXTileBytes = kBM * kKTile, kCodeTileBytes = kBN * 16, kExpandedBytes = kBN * kKTile;
constexpr int kStageBytes = kXTileBytes + kCodeTileBytes;
// The core-matrix layout's strides (ops/cuda/wgmma.cuh): next 16 bytes of K, next 8 rows.
[[maybe_unused]] constexpr uint32_t kLeadingBytes = 128, kStrideBytes = 1024;
static_assert(kKTile == kActivationGroup, "a k-tile is one activation group");

struct TileScales {  // one k-tile's, in shared memory
    float w[kBN];
    float x[kBM];
    int bias[kBM];
};

constexpr size_t kSmemBytes = size_t(kStages) * kStageBytes + 2 * size_t(kExpandedBytes) + 2 * sizeof(TileScales);

__global__ void __launch_bounds__(kThreads, 1) gemm_q1_0_wgmma_kernel(GemmArgs a) {
#if defined(DELTABIT_WGMMA_COMPILED)
    extern __shared__ __align__(128) uint8_t smem[];
    uint8_t* stages = smem;
    uint8_t* expanded = smem + size_t(kStages) * kStageBytes;
    TileScales* scales = reinterpret_cast<TileScales*>(expanded + 2 * kExpandedBytes);

    const int tid = int(threadIdx.x), warpgroup = tid / 128, wg_thread = tid % 128;
    const int lane = tid & 31, g = lane >> 2, q = lane & 3;
    const int row0 = warpgroup * 64 + (wg_thread / 32) * 16 + g;  // this thread's token rows: row0, row0 + 8
    const int64_t x_row_bytes = int64_t(a.k_tiles) * kKTile;

    for (int64_t tile = blockIdx.x; tile < a.tiles; tile += gridDim.x) {
        __syncthreads();  // both warpgroups are done with the previous tile's buffers (wgmmas waited, scales read)
        const int64_t m0 = (tile % a.m_tiles) * kBM;
        const int64_t n0 = (tile / a.m_tiles) * kBN;

        // k-tile kt's x and codes into stage kt % kStages; one commit group per call, empty past the end.
        auto load_stage = [&](int kt) {
            if (kt < a.k_tiles) {
                uint8_t* xs = stages + (kt % kStages) * kStageBytes;
                // c → (row, chunk) with the row's low 3 bits fastest: 8 lanes fill one core matrix's 128 bytes.
#pragma unroll
                for (int i = 0; i < kBM * 8 / kThreads; ++i) {
                    const int c = tid + i * kThreads;
                    const int row = (c & 7) + 8 * (c >> 6), chunk = (c >> 3) & 7;
                    const bool ok = m0 + row < a.m;
                    const int8_t* src = a.xq + (ok ? (m0 + row) * x_row_bytes + int64_t(kt) * kKTile + chunk * 16 : 0);
                    cp_async16(xs + core_matrix_offset(row, chunk), src, !ok);
                }
                if (tid < kBN) {
                    const int64_t byte = int64_t(kt) * 16;
                    const bool ok = n0 + tid < a.n && byte < a.code_row_bytes;
                    const uint8_t* src = a.codes + (ok ? (n0 + tid) * a.code_row_bytes + byte : 0);
                    cp_async16(xs + kXTileBytes + tid * 16, src, !ok);
                }
            }
            cp_async_commit_group();
        };
        // k-tile kt's scales, read into registers a k-tile ahead of their store: thread t < 128 d_w of
        // weight row t, thread 128 + t the scale and bias of token t.
        struct ScaleRegs {
            float v;
            int bias;
        };
        auto read_scales = [&](int kt) -> ScaleRegs {
            ScaleRegs s{0.0f, kMagicBits};
            if (kt >= a.k_tiles) return s;
            if (tid < kBN) {
                if (n0 + tid < a.n) s.v = __half2float(__ushort_as_half(__ldg(a.scales + (n0 + tid) * a.scales_per_row + kt)));
            } else if (m0 + (tid - kBN) < a.m) {
                const ActivationGroupMeta meta = a.x_meta[(m0 + (tid - kBN)) * a.k_tiles + kt];
                s.v = meta.scale;
                s.bias = kMagicBits - meta.sum;
            }
            return s;
        };
        auto store_scales = [&](int kt, const ScaleRegs& s) {
            TileScales& t = scales[kt & 1];
            if (tid < kBN) {
                t.w[tid] = s.v;
            } else {
                t.x[tid - kBN] = s.v;
                t.bias[tid - kBN] = s.bias;
            }
        };
        // Codes of k-tile kt → 0/2 bytes in expanded[kt & 1]: weights 4j .. 4j + 3 of a 32-weight word are the
        // bits of the bytes of (word >> j) & 0x01010101 (the GEMV layout), so 16 weights are four shifts and
        // masks. Bytes of 2 make the wgmma's dot 2·Σbit·q at once (≤ 2 · 127 · 128: exact), one instruction
        // less per output in the conversion.
        auto expand = [&](int kt) {
            const uint8_t* codes = stages + (kt % kStages) * kStageBytes + kXTileBytes;
            uint8_t* out = expanded + (kt & 1) * kExpandedBytes;
#pragma unroll
            for (int i = 0; i < kBN * 8 / kThreads; ++i) {
                const int c = tid + i * kThreads;
                const int row = (c & 7) + 8 * (c >> 6), chunk = (c >> 3) & 7;
                const uint32_t word = *reinterpret_cast<const uint32_t*>(codes + row * 16 + (chunk >> 1) * 4);
                const int j0 = 4 * (chunk & 1);
                const uint4 bytes =
                    make_uint4(q1_twos(word, j0), q1_twos(word, j0 + 1), q1_twos(word, j0 + 2), q1_twos(word, j0 + 3));
                *reinterpret_cast<uint4*>(out + core_matrix_offset(row, chunk)) = bytes;
            }
        };
        // The four k32 wgmmas of k-tile kt into d (fresh); none when kt is past the end (`run`), but the same
        // instruction stream.
        auto issue = [&](int kt, int (&d)[64]) {
            const bool run = kt < a.k_tiles;
            const uint8_t* xs = stages + (kt % kStages) * kStageBytes + warpgroup * 64 * kKTile;
            const uint8_t* bs = expanded + (kt & 1) * kExpandedBytes;
#pragma unroll
            for (int i = 0; i < 64; ++i) wgmma_fence_operand(d[i]);
            wgmma_fence();
#pragma unroll
            for (int s = 0; s < kKTile / 32; ++s)
                wgmma_m64n128k32_s8(d, wgmma_descriptor(xs + s * 2 * 128, kLeadingBytes, kStrideBytes),
                                    wgmma_descriptor(bs + s * 2 * 128, kLeadingBytes, kStrideBytes), s > 0, run);
            wgmma_commit();
        };

        float acc[64];
#pragma unroll
        for (int i = 0; i < 64; ++i) acc[i] = 0.0f;
        // k-tile kt's dots (complete) into acc: the mma.sync tiles' term, element by element.
        auto convert = [&](int kt, int (&d)[64]) {
            const TileScales& t = scales[kt & 1];
            const float x_scale[2] = {t.x[row0], t.x[row0 + 8]};
            const int bias[2] = {t.bias[row0], t.bias[row0 + 8]};
#pragma unroll
            for (int j = 0; j < 16; ++j) {
                const float2 w = *reinterpret_cast<const float2*>(&t.w[8 * j + 2 * q]);
#pragma unroll
                for (int e = 0; e < 4; ++e) {
                    const float w_scale = (e & 1) ? w.y : w.x;
                    const float v = exact_float(d[4 * j + e] + bias[e >> 1]);  // d = 2·Σbit·q
                    acc[4 * j + e] = fmaf(v, w_scale * x_scale[e >> 1], acc[4 * j + e]);
                }
            }
        };

        // Step kt: k-tile kt + 1 prepared and its wgmmas issued while kt's run, then kt's dots converted.
        // Step −1 only prepares and issues k-tile 0. The wgmmas of one step write the dots the next step
        // converts, the two arrays alternating with the parity of kt; steps always come in pairs and always
        // issue (predicated off past the last k-tile) and wait, so ptxas sees one path on which no wgmma's
        // registers are touched while it runs (else it serialises every wgmma).
#pragma unroll
        for (int s = 0; s < kStages - 2; ++s) load_stage(s);  // k-tiles 0 .. kStages − 3; step kt loads kt + kStages − 1
        ScaleRegs next_scales = read_scales(0);
        int dots_even[64], dots_odd[64];
        auto step = [&](int kt, int (&current)[64], int (&next)[64]) {
            if (kt + 1 < a.k_tiles) {
                cp_async_wait_group<kStages - 3>();  // k-tile kt + 1 has landed (this thread's copies)
                // Everyone's copies of kt + 1 are visible, and every warpgroup has finished k-tile kt − 1's
                // wgmmas (waited below), so its stage, expanded buffer and scales may be refilled.
                __syncthreads();
                load_stage(kt + kStages - 1);
                expand(kt + 1);
                store_scales(kt + 1, next_scales);
                next_scales = read_scales(kt + 2);
                fence_proxy_async_shared();
                __syncthreads();
            }
            issue(kt + 1, next);
            wgmma_wait<1>();  // k-tile kt's wgmmas are done
            if (kt < 0 || kt >= a.k_tiles) return;
#pragma unroll
            for (int i = 0; i < 64; ++i) wgmma_fence_operand(current[i]);
            convert(kt, current);
        };
        for (int kt = -1; kt < a.k_tiles; kt += 2) {
            step(kt, dots_odd, dots_even);
            step(kt + 1, dots_even, dots_odd);
        }
        wgmma_wait<0>();
        cp_async_wait_group<0>();  // (only empty groups remain; keeps the count right for the next tile)

        const int64_t col0 = n0 + 2 * q;
#pragma unroll
        for (int h = 0; h < 2; ++h) {
            const int64_t row = m0 + row0 + 8 * h;
            if (row >= a.m) continue;
            float* y_row = a.y + row * a.n;
#pragma unroll
            for (int j = 0; j < 16; ++j)
#pragma unroll
                for (int e = 0; e < 2; ++e) {
                    const int64_t col = col0 + 8 * j + e;
                    if (col < a.n) y_row[col] = acc[4 * j + 2 * h + e];
                }
        }
    }
#endif
}

}  // namespace

bool wgmma_gemm_available() {
#if defined(DELTABIT_CUDA_SM90A)
    static const bool available = [] {
        const int major = device_attribute(cudaDevAttrComputeCapabilityMajor, "compute capability");
        const int minor = device_attribute(cudaDevAttrComputeCapabilityMinor, "compute capability");
        if (major != 9 || minor != 0) return false;
        cuda_check(cudaFuncSetAttribute(gemm_q1_0_wgmma_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                        int(kSmemBytes)),
                   "wgmma gemm shared memory");
        return true;
    }();
    return available;
#else
    return false;
#endif
}

WgmmaGemmLaunch gemm_q1_0_wgmma(const QuantizedActivationRows& x, const GemvWeightView& w, float* y,
                                cudaStream_t stream, int64_t max_blocks) {
    const GemmArgs a = gemm_args(x, w, y, kBM, kBN);
    const int sms = device_attribute(cudaDevAttrMultiProcessorCount, "SM count");
    // One block per SM (its 107 KB of shared memory and ~200 registers a thread allow one), walking tiles.
    const int64_t blocks = std::min<int64_t>(a.tiles, max_blocks > 0 ? max_blocks : sms);
    gemm_q1_0_wgmma_kernel<<<unsigned(blocks), kThreads, kSmemBytes, stream>>>(a);
    cuda_check_launch("gemm_q1_0_wgmma_kernel");
    return WgmmaGemmLaunch{a.tiles, blocks};
}

}  // namespace deltabit::cuda::detail
