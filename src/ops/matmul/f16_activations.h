// How prompt activations are rounded to f16 for the Q1_0 GEMM on f16 tensor cores (ops/matmul/gemm_cuda.h,
// gemm_q1_0_half), shared by that kernel and its CPU reference (cpu::matmul_f16_activations) so that both
// round every value to the same bits.
//
// Each token's row is scaled by a power of two 2^e before rounding, e chosen from the row's max|x| so that
// the max lands in [2^14, 2^15): f16 holds up to 65504, and a row of hidden states can exceed it (or sit
// deep in f16's subnormals) where its scaled copy cannot. The scaling is exact in fp32, so the rounding is
// f16's round-to-nearest-even of x · 2^e, and y = (Σ w · h) · 2^−e exactly undoes it.
#pragma once

#include <cstdint>

#include "core/host_device.h"

namespace deltabit {

// e for a row whose max|x| has these fp32 bits (sign ignored): 14 − floor(log2 max|x|), kept to ±126 so that
// 2^e and 2^−e are normal floats (a row of subnormals gets 126); 0 for an all-zero, infinite or NaN max.
DELTABIT_HOST_DEVICE inline int f16_activation_exponent(uint32_t amax_bits) {
    const uint32_t bits = amax_bits & 0x7fffffffu;
    if (bits == 0 || bits >= 0x7f800000u) return 0;
    const int e = 141 - int(bits >> 23);  // 14 − (biased exponent − 127); subnormals read as 2^−127
    return e > 126 ? 126 : e < -126 ? -126 : e;
}

// 2^e as fp32 bits, |e| ≤ 126.
DELTABIT_HOST_DEVICE inline uint32_t power_of_two_bits(int e) { return uint32_t(127 + e) << 23; }

}  // namespace deltabit
