// The quantised weights' int8 fragments for the mma.sync m16n8k32 tensor-core products, shared by the prompt
// GEMM (gemm_quant_cuda.cu: weights as the B side) and the grouped MoE experts (ops/moe/moe_experts_cuda.cu:
// weights as the A side — the same four k per register either way). Codes are the GEMV layout's
// (ops/matmul/weight_repack.h), read from shared or global memory alike; every level is an exact int8, so an
// m16n8k32 dot of one scale group is the GEMV's exact integer dot.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "core/dtype.h"

namespace deltabit::cuda::detail {

// Weight codes per row per 128-k tile, weights per fp16 scale, and one row's two fragment registers of k32 step
// `ks` of a tile for this lane (quad = lane % 4 picks k = 4·quad .. 4·quad+3 into b0 and 16 + 4·quad .. into
// b1), as signed int8 levels.
template <DType T>
struct Codec;

template <>
struct Codec<DType::Q1_0> {
    static constexpr int kTileBytes = 16, kScaleGroup = 128;
    // 0/1 per byte → ±1: ~(b · 0xFE) maps 1 → 0x01 and 0 → 0xFF (no carries: each byte of b is 0 or 1).
    __device__ static __forceinline__ uint32_t signs(uint32_t bits) { return ~(bits * 0xFEu); }
    __device__ static __forceinline__ void fragment(const uint8_t* row, int ks, int quad, uint32_t& b0, uint32_t& b1) {
        const uint32_t word = *reinterpret_cast<const uint32_t*>(row + 4 * ks) >> quad;
        b0 = signs(word & 0x01010101u);         // weights 4·quad + j
        b1 = signs((word >> 4) & 0x01010101u);  // weights 16 + 4·quad + j
    }
};

// Q2_0 (both group sizes): a word holds 16 weights, bits 8k + 2p of weight 4p + k; level = code − 1.
__device__ __forceinline__ uint32_t q2_levels(uint32_t codes) {
    // Per byte c ∈ 0..3: (c | 0x80) − 1 never borrows across bytes; XOR 0x80 leaves c − 1 in two's complement.
    return ((codes | 0x80808080u) - 0x01010101u) ^ 0x80808080u;
}
template <>
struct Codec<DType::Q2_0> {
    static constexpr int kTileBytes = 32, kScaleGroup = 128;
    __device__ static __forceinline__ void fragment(const uint8_t* row, int ks, int quad, uint32_t& b0, uint32_t& b1) {
        const uint2 words = *reinterpret_cast<const uint2*>(row + 8 * ks);
        b0 = q2_levels((words.x >> (2 * quad)) & 0x03030303u);
        b1 = q2_levels((words.y >> (2 * quad)) & 0x03030303u);
    }
};
template <>
struct Codec<DType::Q2_0_G64> : Codec<DType::Q2_0> {
    static constexpr int kScaleGroup = 64;
};

// Q4_0: 16 bytes per 32 weights, word i's low nibbles weights 4i.., high nibbles 16 + 4i..; level = c − 8.
__device__ __forceinline__ uint32_t q4_levels(uint32_t nibbles) {
    // c ≥ 8: c ^ 8 = c − 8. c < 8: c ^ 8 = c + 8, and OR 0xF0 subtracts 16 (bit 3 is set).
    const uint32_t flipped = nibbles ^ 0x08080808u;
    const uint32_t negative = (~nibbles & 0x08080808u) * 0x1Eu;  // 0x08 → 0xF0 per byte, no carries
    return flipped | negative;
}
template <>
struct Codec<DType::Q4_0> {
    static constexpr int kTileBytes = 64, kScaleGroup = 32;
    __device__ static __forceinline__ void fragment(const uint8_t* row, int ks, int quad, uint32_t& b0, uint32_t& b1) {
        const uint32_t word = *reinterpret_cast<const uint32_t*>(row + 16 * ks + 4 * quad);
        b0 = q4_levels(word & 0x0f0f0f0fu);
        b1 = q4_levels((word >> 4) & 0x0f0f0f0fu);
    }
};

template <>
struct Codec<DType::Q8_0> {
    static constexpr int kTileBytes = 128, kScaleGroup = 32;
    __device__ static __forceinline__ void fragment(const uint8_t* row, int ks, int quad, uint32_t& b0, uint32_t& b1) {
        b0 = *reinterpret_cast<const uint32_t*>(row + 32 * ks + 4 * quad);
        b1 = *reinterpret_cast<const uint32_t*>(row + 32 * ks + 16 + 4 * quad);
    }
};

}  // namespace deltabit::cuda::detail
