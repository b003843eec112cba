// One weight of a row in its GGUF block layout, decoded on the device with quant_blocks.h's accessors:
// the embedding lookup and the soft embedding (ops/elementwise/) read tables of any weight dtype. Exact:
// every weight is an fp16 or bf16 value or d·level in fp32, as dequantize_row computes it.
#pragma once

#include <cuda_fp16.h>

#include <cmath>
#include <cstdint>

#include "core/dtype.h"
#include "core/quant_blocks.h"

namespace deltabit::cuda {

__device__ __forceinline__ float fp16_bits_to_float(uint16_t bits) { return __half2float(__ushort_as_half(bits)); }

// Weight j of a row stored as `type` starting at `row`.
__device__ __forceinline__ float weight_at(DType type, const uint8_t* row, int64_t j) {
    switch (type) {
        case DType::F32: return reinterpret_cast<const float*>(row)[j];
        case DType::F16: return fp16_bits_to_float(reinterpret_cast<const uint16_t*>(row)[j]);
        case DType::BF16: return __uint_as_float(uint32_t(reinterpret_cast<const uint16_t*>(row)[j]) << 16);
        case DType::Q8_0: {
            const auto& b = reinterpret_cast<const BlockQ8_0*>(row)[j / kQ8_0BlockElems];
            return fp16_bits_to_float(b.d) * float(b.qs[j % kQ8_0BlockElems]);
        }
        case DType::Q4_0: {
            const auto& b = reinterpret_cast<const BlockQ4_0*>(row)[j / kQ4_0BlockElems];
            return fp16_bits_to_float(b.d) * float(q4_0_code(b, int(j % kQ4_0BlockElems)) - 8);
        }
        case DType::Q1_0: {
            const auto& b = reinterpret_cast<const BlockQ1_0*>(row)[j / kQ1_0BlockElems];
            return fp16_bits_to_float(b.d) * float(q1_0_sign(b, int(j % kQ1_0BlockElems)));
        }
        case DType::Q2_0: {
            const auto& b = reinterpret_cast<const BlockQ2_0*>(row)[j / kQ2_0BlockElems];
            return fp16_bits_to_float(b.d) * float(q2_0_level(b.qs, int(j % kQ2_0BlockElems)));
        }
        case DType::Q2_0_G64: {
            const auto& b = reinterpret_cast<const BlockQ2_0G64*>(row)[j / kQ2_0G64BlockElems];
            return fp16_bits_to_float(b.d) * float(q2_0_level(b.qs, int(j % kQ2_0G64BlockElems)));
        }
        case DType::I32: break;
    }
    return NAN;
}

}  // namespace deltabit::cuda
