// Q1_0 products for a few tokens at once on int8 tensor cores: the batched decode step's matmuls
// (contract in ops/matmul/gemm_cuda.h, gemm_q1_0_small).
//
// Why another kernel. The prompt GEMMs put tokens in the mma's M (16 or more) and build weight fragments
// for every token tile; at 2–32 tokens (a server's batch of conversations) they cost 4–6 decode GEMVs
// (H200, Bonsai-27B: ~15 ms a step for 8 tokens against ~2.7 ms for one token's GEMVs). Here the weights
// are the M side (16 rows a warp) and the tokens the N side (tiles of 8): each weight fragment is built
// once from the codes and serves every token tile, so the weights stream once per step as in the GEMV.
//
// Fragments (mma.m16n8k32, g = lane / 4, t = lane % 4). A (16 weight rows × 32 k, u8): a[0] row g, k 4t..4t+3;
// a[1] row g+8; a[2] row g, k 16+4t..; a[3] row g+8, k 16+4t... The GEMV layout puts weights 4j..4j+3 of a
// 32-weight word in the bytes of (word >> j) & 0x01010101 (ops/matmul/weight_repack.h), so each register is
// one shift and one AND of the row's word: the bits stay 0/1 and the ±1 dot of a group of 128 comes out as
// 2·Σ bit·q − Σ q, Σ q being the quantiser's per-group sum (as gemm_quant_cuda.cu). B (32 k × 8 tokens,
// s8): b[0] k 4t..4t+3 of token g, b[1] k 16+4t.. — four consecutive activation bytes each.
// C (16 × 8, s32): c[0], c[1] row g, tokens 2t, 2t+1; c[2], c[3] row g+8.
//
// Work. A block takes 16 weight rows; its kWarps warps split the activation groups (warp w: groups w,
// w + kWarps, ...), each loading kUnroll groups' codes ahead before it computes them. Per group a warp
// turns its exact integer dots into one fp32 term each, float(dot) · (d_w · scale_x), added by fmaf — the
// GEMV's terms — and at the end the warps' partial sums are added in warp order through shared memory.
#include "ops/matmul/gemm_cuda.h"

#include <cuda_fp16.h>

#include <string>

#include "backend/cuda_buffer.h"

namespace deltabit::cuda {

namespace {

constexpr int kRows = 16;    // weight rows of a block (one m16 tile)
constexpr int kWarps = 8;    // warps of a block, splitting K
constexpr int kThreads = 32 * kWarps;
constexpr int kUnroll = 4;   // groups whose codes a warp loads before computing them
constexpr int kGroupBytes = kActivationGroup / 8;  // Q1_0 codes of one group of 128 weights
constexpr int kMaxTiles = int(kSmallGemmMaxTokens / 8);

struct SmallGemmArgs {
    const uint8_t* codes;    // N rows of code_row_bytes
    const uint16_t* scales;  // N rows of `groups` fp16 bits
    const int8_t* q;         // T rows of groups·128 int8
    const ActivationGroupMeta* meta;  // T rows of `groups`
    float* y;                // [T][N]
    int64_t n, groups, code_row_bytes, tokens;
};

__device__ __forceinline__ void mma_u8_s8(int (&d)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
    asm volatile(
        "mma.sync.aligned.m16n8k32.row.col.s32.u8.s8.s32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
        "{%0, %1, %2, %3};\n"
        : "+r"(d[0]), "+r"(d[1]), "+r"(d[2]), "+r"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

template <int kTiles>
__global__ void __launch_bounds__(kThreads) gemm_q1_0_small_kernel(SmallGemmArgs a) {
    __shared__ float partial[kWarps][kTiles * 8][kRows];
    const int lane = int(threadIdx.x) & 31, warp = int(threadIdx.x) >> 5, g = lane >> 2, t = lane & 3;
    const int64_t row0 = int64_t(blockIdx.x) * kRows, G = a.groups, T = a.tokens;
    // Rows past N read the last row (their sums are never written).
    const int64_t r_lo = min(row0 + g, a.n - 1), r_hi = min(row0 + g + 8, a.n - 1);
    const uint8_t* codes_lo = a.codes + r_lo * a.code_row_bytes;
    const uint8_t* codes_hi = a.codes + r_hi * a.code_row_bytes;
    const uint16_t* scales_lo = a.scales + r_lo * G;
    const uint16_t* scales_hi = a.scales + r_hi * G;
    // This lane's B token of each tile (column g), clamped like the rows; its bytes are zeroed past T.
    const int8_t* x_row[kTiles];
#pragma unroll
    for (int i = 0; i < kTiles; ++i) x_row[i] = a.q + min(int64_t(8 * i + g), T - 1) * G * kActivationGroup;

    float acc[kTiles][4];
#pragma unroll
    for (int i = 0; i < kTiles; ++i) acc[i][0] = acc[i][1] = acc[i][2] = acc[i][3] = 0.0f;

    for (int64_t first = warp; first < G; first += int64_t(kWarps) * kUnroll) {
        uint4 lo[kUnroll], hi[kUnroll];
        float d_lo[kUnroll], d_hi[kUnroll];
#pragma unroll
        for (int u = 0; u < kUnroll; ++u) {
            const int64_t grp = first + int64_t(u) * kWarps;
            if (grp < G) {
                lo[u] = __ldg(reinterpret_cast<const uint4*>(codes_lo + grp * kGroupBytes));
                hi[u] = __ldg(reinterpret_cast<const uint4*>(codes_hi + grp * kGroupBytes));
                d_lo[u] = __half2float(__ushort_as_half(__ldg(scales_lo + grp)));
                d_hi[u] = __half2float(__ushort_as_half(__ldg(scales_hi + grp)));
            }
        }
#pragma unroll
        for (int u = 0; u < kUnroll; ++u) {
            const int64_t grp = first + int64_t(u) * kWarps;
            if (grp >= G) break;
            const uint32_t words_lo[4] = {lo[u].x, lo[u].y, lo[u].z, lo[u].w};
            const uint32_t words_hi[4] = {hi[u].x, hi[u].y, hi[u].z, hi[u].w};
            uint32_t frag[4][4];
#pragma unroll
            for (int ks = 0; ks < 4; ++ks) {
                const uint32_t wl = words_lo[ks] >> t, wh = words_hi[ks] >> t;
                frag[ks][0] = wl & 0x01010101u;
                frag[ks][1] = wh & 0x01010101u;
                frag[ks][2] = (wl >> 4) & 0x01010101u;
                frag[ks][3] = (wh >> 4) & 0x01010101u;
            }
#pragma unroll
            for (int i = 0; i < kTiles; ++i) {
                const bool live = 8 * i + g < T;
                const int8_t* x = x_row[i] + grp * kActivationGroup + 4 * t;
                int dot[4] = {0, 0, 0, 0};
#pragma unroll
                for (int ks = 0; ks < 4; ++ks) {
                    const uint32_t b0 = live ? __ldg(reinterpret_cast<const uint32_t*>(x + 32 * ks)) : 0u;
                    const uint32_t b1 = live ? __ldg(reinterpret_cast<const uint32_t*>(x + 32 * ks + 16)) : 0u;
                    mma_u8_s8(dot, frag[ks], b0, b1);
                }
#pragma unroll
                for (int j = 0; j < 2; ++j) {
                    const int64_t tok = 8 * i + 2 * t + j;
                    if (tok < T) {
                        const ActivationGroupMeta m = a.meta[tok * G + grp];
                        acc[i][j] = fmaf(float(2 * dot[j] - m.sum), d_lo[u] * m.scale, acc[i][j]);
                        acc[i][2 + j] = fmaf(float(2 * dot[2 + j] - m.sum), d_hi[u] * m.scale, acc[i][2 + j]);
                    }
                }
            }
        }
    }
#pragma unroll
    for (int i = 0; i < kTiles; ++i)
#pragma unroll
        for (int j = 0; j < 2; ++j) {
            partial[warp][8 * i + 2 * t + j][g] = acc[i][j];
            partial[warp][8 * i + 2 * t + j][g + 8] = acc[i][2 + j];
        }
    __syncthreads();
    for (int e = int(threadIdx.x); e < kTiles * 8 * kRows; e += kThreads) {
        const int tok = e / kRows, r = e % kRows;
        if (tok >= T || row0 + r >= a.n) continue;
        float sum = partial[0][tok][r];
#pragma unroll
        for (int w = 1; w < kWarps; ++w) sum += partial[w][tok][r];
        a.y[int64_t(tok) * a.n + row0 + r] = sum;
    }
}

}  // namespace

void gemm_q1_0_small(const QuantizedActivationRows& x, const GemvWeightView& w, float* y, cudaStream_t stream) {
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
    const dim3 grid(unsigned((w.rows + kRows - 1) / kRows)), block(kThreads);
    switch ((x.rows + 7) / 8) {
        case 1: gemm_q1_0_small_kernel<1><<<grid, block, 0, stream>>>(args); break;
        case 2: gemm_q1_0_small_kernel<2><<<grid, block, 0, stream>>>(args); break;
        case 3: gemm_q1_0_small_kernel<3><<<grid, block, 0, stream>>>(args); break;
        default: gemm_q1_0_small_kernel<kMaxTiles><<<grid, block, 0, stream>>>(args); break;
    }
    cuda_check_launch("gemm_q1_0_small");
}

}  // namespace deltabit::cuda
