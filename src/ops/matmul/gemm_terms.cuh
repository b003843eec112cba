// Device pieces of the quantised prefill GEMMs' terms, shared by the mma.sync tiles (gemm_quant_cuda.cu) and
// the warpgroup tiles (gemm_wgmma_cuda.cu, gemm_wgmma_ws_cuda.cu) so that their y is the same bit for bit.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

namespace deltabit::cuda::detail {

// float(v) for |v| < 2^22 without the quarter-rate I2F: 1.5·2^23 + v is exact in fp32 (its ulp is 1),
// so its bit pattern is 0x4B400000 + v, and subtracting 1.5·2^23 leaves exactly v. A dot's bias term
// (−Σq, say) folds into the integer add: exact_float(d + kMagicBits − Σq).
constexpr int kMagicBits = 0x4B400000;
constexpr float kMagic = 12582912.0f;
__device__ __forceinline__ float exact_float(int biased) { return __int_as_float(biased) - kMagic; }

// Q1_0 weights 4j .. 4j + 3 of a 32-weight code word as int8 bytes of 0 or 2: bits j, j + 8, j + 16 and
// j + 24 (the GEMV layout, ops/matmul/weight_repack.h). Bytes of 2 make an int8 dot 2·Σbit·q at once.
__device__ __forceinline__ uint32_t q1_twos(uint32_t word, int j) { return ((word >> j) & 0x01010101u) << 1; }

}  // namespace deltabit::cuda::detail
