// The grouped MoE experts' products on tensor cores (ops/moe/moe_experts_mma.h; contract and numerics:
// ops/moe/moe_experts_cuda.h).
//
// Why. At a DiffusionGemma canvas (256 tokens, top-8 of 128 experts) an expert sees ~16 (token, slot) pairs,
// at its encoder's 1,024 tokens ~64: a grouped GEMM per expert. The CUDA-core kernels of moe_experts_cuda.cu
// run it as dp4a or fp32 FMAs per pair; here the expert's weight rows are the mma's M side (an m16 tile a
// warp) and its pairs the N side (kNTiles tiles of 8 a pass), so each weight fragment is built once from the
// codes and serves 8·kNTiles pairs, as in gemm_q1_0_small (ops/matmul/gemm_small_cuda.cu).
//
// Fragments (g = lane / 4, t = lane % 4; PTX "matrix fragments for mma.m16n8k32 / m16n8k16"):
//   A  rows g and g + 8 of the warp's 16 weight rows: a[0] row g, a[1] row g + 8, each at k 4t..4t+3 (int8) or
//      2t..2t+1 (bf16); a[2], a[3] the same at k + 16 (int8) or k + 8 (bf16).
//   B  pair g of the n8 tile: b[0] at those k, b[1] at k + 16 (int8) or k + 8 (bf16).
//   C  c[0], c[1]: row g, pairs 2t, 2t + 1; c[2], c[3]: row g + 8.
// Rows past the expert's last are clamped (computed, not stored); pairs past the expert's last are clamped
// to it (computed, not stored).
//
// Quantised weights. ops/matmul/gemm_codec.cuh gives a row's int8 levels of a k32 step for each GEMV-layout
// dtype (the prompt GEMM's fragments). Per weight-scale group (Codec::kScaleGroup: 128, 64 or 32 k) the mma
// steps of the group accumulate one exact int32 dot into a fresh accumulator, which becomes one term
// float(dot) · (d_w · scale_x), added by fmaf in k order — the prompt GEMM's term, which is the GEMV's (for
// Q2_0 and Q8_0, whose GEMV units are half a scale group, the sum of two units' dots in one term).
//
// BF16 weights. The activations are split in three bf16 parts in registers, hi = bf16(x), mid = bf16(x − hi),
// lo = bf16(x − hi − mid), x = hi + mid + lo + r with |r| ≤ 2⁻²⁴·|x| (ops/matmul/dense_gemm_cuda.h): every
// product of a weight and a part is exact in fp32. Per k16 step three mma (lo, mid, hi: the smallest first)
// accumulate into a fresh fp32 accumulator, added to the running sum in k order. The tensor cores add an mma's
// 16 products and C as one block aligned to the largest and truncated (ops/cuda/tensor_core.cuh), so a step's
// error is bounded by its own largest product, not by the running sum; the bound is derived in
// tests/cuda/test_moe_experts_cuda.cpp.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <string>

#include "ops/cuda/cuda_launch.h"
#include "ops/cuda/tensor_core.cuh"
#include "ops/matmul/gemm_codec.cuh"
#include "ops/matmul/gemm_terms.cuh"
#include "ops/moe/moe_experts_mma.h"

namespace deltabit::cuda::moe_detail {

namespace {

using detail::Codec;
using detail::exact_float;
using detail::kMagicBits;

constexpr int kNTiles = 2;  // n8 tiles of pairs a warp's pass: 16 pairs share each weight fragment

// This lane's pairs of a pass: pair g of each n8 tile (the B side) and pairs 2t, 2t + 1 (the C side), clamped to
// the expert's last pair; input rows by token (gate+up) or by position (down).
struct PassPairs {
    int64_t b_in[kNTiles];     // input row of pair g
    int64_t c_in[kNTiles][2];  // input rows of pairs 2t, 2t + 1
};
template <bool kGlu>
__device__ __forceinline__ PassPairs pass_pairs(const GroupArgs& g, int64_t base, int64_t end, int gi, int t) {
    PassPairs p;
    const auto input = [&](int64_t pair) {
        const int64_t clamped = min(pair, end - 1);
        return kGlu ? int64_t(g.order[clamped]) / g.top_k : clamped;
    };
#pragma unroll
    for (int j = 0; j < kNTiles; ++j) {
        p.b_in[j] = input(base + 8 * j + gi);
        p.c_in[j][0] = input(base + 8 * j + 2 * t);
        p.c_in[j][1] = input(base + 8 * j + 2 * t + 1);
    }
    return p;
}

// The pass's outputs: row g and g + 8 of the warp's tile, pairs 2t and 2t + 1 of each n8 tile (c[2h + c]).
template <bool kGlu, int kMats>
__device__ __forceinline__ void store_pass(const GroupArgs& g, const float (&acc)[kMats][kNTiles][4], int64_t base,
                                           int64_t end, int64_t row0, int gi, int t) {
#pragma unroll
    for (int j = 0; j < kNTiles; ++j)
#pragma unroll
        for (int c = 0; c < 2; ++c) {
            const int64_t p = base + 8 * j + 2 * t + c;
            if (p >= end) continue;
#pragma unroll
            for (int h = 0; h < 2; ++h) {
                const int64_t row = row0 + gi + 8 * h;
                if (row >= g.rows) continue;
                const float v0 = acc[0][j][2 * h + c];
                g.y[p * g.rows + row] = kGlu ? glu(v0, acc[kMats - 1][j][2 * h + c], g.act) : v0;
            }
        }
}

template <DType T, bool kGlu>
__global__ void __launch_bounds__(32 * kMmaWarps) expert_mma_quantized_kernel(GroupArgs g, QuantMma m) {
    using C = Codec<T>;
    constexpr int kMats = kGlu ? 2 : 1;
    constexpr int kStepsPerScale = C::kScaleGroup / 32;
    static_assert(kStepsPerScale >= 1 && 4 % kStepsPerScale == 0, "scale groups inside one 128-k tile");
    const int lane = int(threadIdx.x) & 31, warp = int(threadIdx.x) >> 5, gi = lane >> 2, t = lane & 3;
    const int64_t items = g.slots * g.tiles;
    for (int64_t item = blockIdx.x; item < items; item += gridDim.x) {
        const int e = find_expert(g.counts, g.n_expert, item / g.tiles);
        if (e < 0) break;  // slot-major items: every later item's slot is empty too
        const int64_t row0 = (item % g.tiles) * kMmaTileRows + warp * 16;
        if (row0 >= g.rows) continue;  // no barrier below
        const uint8_t* codes[kMats][2];
        const uint16_t* scales[kMats][2];
#pragma unroll
        for (int h = 0; h < 2; ++h) {
            const int64_t row = int64_t(e) * g.rows + min(row0 + gi + 8 * h, g.rows - 1);
#pragma unroll
            for (int k = 0; k < kMats; ++k) {
                codes[k][h] = m.codes[k] + row * m.code_row_bytes;
                scales[k][h] = m.scales[k] + row * m.scales_per_row;
            }
        }
        const int64_t first = g.offsets[e], end = first + g.counts[e];
        for (int64_t base = first; base < end; base += 8 * kNTiles) {
            const PassPairs pp = pass_pairs<kGlu>(g, base, end, gi, t);
            float acc[kMats][kNTiles][4] = {};
            int dot[kMats][kNTiles][4];
            for (int64_t kt = 0; 4 * kt < m.k_steps; ++kt) {  // 128-k tiles: one activation group each
                float x_scale[kNTiles][2];
#pragma unroll
                for (int j = 0; j < kNTiles; ++j)
#pragma unroll
                    for (int c = 0; c < 2; ++c) x_scale[j][c] = m.x_meta[pp.c_in[j][c] * m.x_groups + kt].scale;
#pragma unroll
                for (int ks = 0; ks < 4; ++ks) {
                    const int64_t step = 4 * kt + ks;
                    if (step >= m.k_steps) break;  // K past the last 32: only in the last tile
                    if (ks % kStepsPerScale == 0) {
#pragma unroll
                        for (int k = 0; k < kMats; ++k)
#pragma unroll
                            for (int j = 0; j < kNTiles; ++j)
#pragma unroll
                                for (int i = 0; i < 4; ++i) dot[k][j][i] = 0;
                    }
                    uint32_t b[kNTiles][2];
#pragma unroll
                    for (int j = 0; j < kNTiles; ++j) {
                        const int8_t* x = m.xq + pp.b_in[j] * m.x_groups * kActivationGroup + 32 * step + 4 * t;
                        b[j][0] = *reinterpret_cast<const uint32_t*>(x);
                        b[j][1] = *reinterpret_cast<const uint32_t*>(x + 16);
                    }
#pragma unroll
                    for (int k = 0; k < kMats; ++k) {
                        uint32_t a[4];
                        C::fragment(codes[k][0] + kt * C::kTileBytes, ks, t, a[0], a[2]);
                        C::fragment(codes[k][1] + kt * C::kTileBytes, ks, t, a[1], a[3]);
#pragma unroll
                        for (int j = 0; j < kNTiles; ++j) mma_s8_s32(dot[k][j], a, b[j][0], b[j][1]);
                    }
                    if (ks % kStepsPerScale == kStepsPerScale - 1 || step == m.k_steps - 1) {
                        const int64_t group = step / kStepsPerScale;  // the weight-scale group just completed
#pragma unroll
                        for (int k = 0; k < kMats; ++k) {
                            const float d[2] = {__half2float(__ushort_as_half(scales[k][0][group])),
                                                __half2float(__ushort_as_half(scales[k][1][group]))};
#pragma unroll
                            for (int j = 0; j < kNTiles; ++j)
#pragma unroll
                                for (int i = 0; i < 4; ++i)  // the GEMV's term: float(dot) · (d_w · scale_x)
                                    acc[k][j][i] = fmaf(exact_float(dot[k][j][i] + kMagicBits),
                                                        d[i >> 1] * x_scale[j][i & 1], acc[k][j][i]);
                        }
                    }
                }
            }
            store_pass<kGlu, kMats>(g, acc, base, end, row0, gi, t);
        }
    }
}

// Weights k and k + 1 of a bf16 row as one fragment register (k in the low half); zeros past K.
__device__ __forceinline__ uint32_t bf16_pair(const uint16_t* row, int64_t k, int64_t K) {
    if ((K & 1) == 0 && k + 1 < K) return *reinterpret_cast<const uint32_t*>(row + k);  // 4-byte aligned: K, k even
    const uint32_t lo = k < K ? row[k] : 0u, hi = k + 1 < K ? row[k + 1] : 0u;
    return lo | (hi << 16);
}

// x's elements k and k + 1 (zeros past K) split in three bf16 parts, each part's pair one register.
struct SplitPair {
    uint32_t hi, mid, lo;
};
__device__ __forceinline__ void split3(float v, uint32_t& h, uint32_t& m, uint32_t& l) {
    const __nv_bfloat16 bh = __float2bfloat16_rn(v);
    const float rest = v - __bfloat162float(bh);  // exact in fp32, as is the next difference
    const __nv_bfloat16 bm = __float2bfloat16_rn(rest);
    const __nv_bfloat16 bl = __float2bfloat16_rn(rest - __bfloat162float(bm));
    h = __bfloat16_as_ushort(bh);
    m = __bfloat16_as_ushort(bm);
    l = __bfloat16_as_ushort(bl);
}
__device__ __forceinline__ SplitPair split_pair(const float* x, int64_t k, int64_t K) {
    uint32_t h0, m0, l0, h1, m1, l1;
    split3(k < K ? x[k] : 0.0f, h0, m0, l0);
    split3(k + 1 < K ? x[k + 1] : 0.0f, h1, m1, l1);
    return {h0 | (h1 << 16), m0 | (m1 << 16), l0 | (l1 << 16)};
}

template <bool kGlu>
__global__ void __launch_bounds__(32 * kMmaWarps) expert_mma_bf16_kernel(GroupArgs g, Bf16Mma m) {
    constexpr int kMats = kGlu ? 2 : 1;
    const int lane = int(threadIdx.x) & 31, warp = int(threadIdx.x) >> 5, gi = lane >> 2, t = lane & 3;
    const int64_t items = g.slots * g.tiles, K = m.cols, steps = (K + 15) / 16;
    for (int64_t item = blockIdx.x; item < items; item += gridDim.x) {
        const int e = find_expert(g.counts, g.n_expert, item / g.tiles);
        if (e < 0) break;
        const int64_t row0 = (item % g.tiles) * kMmaTileRows + warp * 16;
        if (row0 >= g.rows) continue;
        const uint16_t* rows[kMats][2];
#pragma unroll
        for (int h = 0; h < 2; ++h)
#pragma unroll
            for (int k = 0; k < kMats; ++k)
                rows[k][h] = m.w[k] + (int64_t(e) * g.rows + min(row0 + gi + 8 * h, g.rows - 1)) * K;
        const int64_t first = g.offsets[e], end = first + g.counts[e];
        for (int64_t base = first; base < end; base += 8 * kNTiles) {
            const PassPairs pp = pass_pairs<kGlu>(g, base, end, gi, t);
            float acc[kMats][kNTiles][4] = {};
            for (int64_t s = 0; s < steps; ++s) {
                const int64_t k0 = 16 * s + 2 * t;  // this lane's k: k0, k0 + 1 and k0 + 8, k0 + 9
                SplitPair b[kNTiles][2];
#pragma unroll
                for (int j = 0; j < kNTiles; ++j) {
                    const float* x = m.x + pp.b_in[j] * K;
                    b[j][0] = split_pair(x, k0, K);
                    b[j][1] = split_pair(x, k0 + 8, K);
                }
#pragma unroll
                for (int k = 0; k < kMats; ++k) {
                    const uint32_t a[4] = {bf16_pair(rows[k][0], k0, K), bf16_pair(rows[k][1], k0, K),
                                           bf16_pair(rows[k][0], k0 + 8, K), bf16_pair(rows[k][1], k0 + 8, K)};
#pragma unroll
                    for (int j = 0; j < kNTiles; ++j) {
                        float c[4] = {0.0f, 0.0f, 0.0f, 0.0f};
                        mma_bf16_f32(c, a, b[j][0].lo, b[j][1].lo);
                        mma_bf16_f32(c, a, b[j][0].mid, b[j][1].mid);
                        mma_bf16_f32(c, a, b[j][0].hi, b[j][1].hi);
#pragma unroll
                        for (int i = 0; i < 4; ++i) acc[k][j][i] += c[i];
                    }
                }
            }
            store_pass<kGlu, kMats>(g, acc, base, end, row0, gi, t);
        }
    }
}

template <bool kGlu>
void launch_quantized_typed(const GroupArgs& g, const QuantMma& m, DType t, unsigned blocks, cudaStream_t stream) {
    constexpr unsigned kThreads = 32 * kMmaWarps;
    switch (t) {
        case DType::Q1_0: expert_mma_quantized_kernel<DType::Q1_0, kGlu><<<blocks, kThreads, 0, stream>>>(g, m); break;
        case DType::Q2_0: expert_mma_quantized_kernel<DType::Q2_0, kGlu><<<blocks, kThreads, 0, stream>>>(g, m); break;
        case DType::Q2_0_G64:
            expert_mma_quantized_kernel<DType::Q2_0_G64, kGlu><<<blocks, kThreads, 0, stream>>>(g, m);
            break;
        case DType::Q4_0: expert_mma_quantized_kernel<DType::Q4_0, kGlu><<<blocks, kThreads, 0, stream>>>(g, m); break;
        case DType::Q8_0: expert_mma_quantized_kernel<DType::Q8_0, kGlu><<<blocks, kThreads, 0, stream>>>(g, m); break;
        default: fail_message(std::string("cuda moe_experts: no tensor-core kernel for ") + std::string(dtype_name(t)));
    }
    cuda_check_launch("expert_mma_quantized_kernel");
}

}  // namespace

bool quantized_mma_supports(DType t) {
    return t == DType::Q1_0 || t == DType::Q2_0 || t == DType::Q2_0_G64 || t == DType::Q4_0 || t == DType::Q8_0;
}

void launch_quantized_mma(const GroupArgs& g, const QuantMma& m, DType t, bool glu, unsigned blocks,
                          cudaStream_t stream) {
    if (blocks == 0) return;
    if (glu) launch_quantized_typed<true>(g, m, t, blocks, stream);
    else launch_quantized_typed<false>(g, m, t, blocks, stream);
}

void launch_bf16_mma(const GroupArgs& g, const Bf16Mma& m, bool glu, unsigned blocks, cudaStream_t stream) {
    if (blocks == 0) return;
    if (glu) expert_mma_bf16_kernel<true><<<blocks, 32 * kMmaWarps, 0, stream>>>(g, m);
    else expert_mma_bf16_kernel<false><<<blocks, 32 * kMmaWarps, 0, stream>>>(g, m);
    cuda_check_launch("expert_mma_bf16_kernel");
}

}  // namespace deltabit::cuda::moe_detail
