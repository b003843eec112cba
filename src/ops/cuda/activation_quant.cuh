// The int8 activation quantiser of ops/matmul/matmul_cuda.h for one group of 128, held by one warp with four
// consecutive values per lane (lane l: elements 4l .. 4l+3, zeros past the input's end). Every kernel that
// quantises activations this way (quantize_activations, the decode seam add_rms_norm_quantize, the SwiGLU
// GEMV's output) calls this one function, which is what makes their codes equal bit for bit.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "ops/cuda/cuda_math.cuh"
#include "ops/matmul/matmul_cuda.h"

namespace deltabit::cuda {

// Writes the group's 128 codes to group_q (lane l writes bytes 4l .. 4l+3) and returns the group's
// {scale, Σ codes}, the same in every lane. All 32 lanes must call it.
__device__ __forceinline__ ActivationGroupMeta quantize_group_by_warp(const float (&v)[4], int lane, int8_t* group_q) {
    float amax = 0.0f;
#pragma unroll
    for (int i = 0; i < 4; ++i) amax = fmaxf(amax, fabsf(v[i]));
#pragma unroll
    for (int offset = 16; offset > 0; offset /= 2) amax = fmaxf(amax, __shfl_xor_sync(kFullWarpMask, amax, offset));
    const float inv = amax > 0.0f ? 127.0f / amax : 0.0f;
    int qi[4];
    int sum = 0;
#pragma unroll
    for (int i = 0; i < 4; ++i) {
        qi[i] = min(127, max(-127, __float2int_rn(v[i] * inv)));
        sum += qi[i];
    }
#pragma unroll
    for (int offset = 16; offset > 0; offset /= 2) sum += __shfl_xor_sync(kFullWarpMask, sum, offset);
    reinterpret_cast<char4*>(group_q)[lane] = make_char4(char(qi[0]), char(qi[1]), char(qi[2]), char(qi[3]));
    return ActivationGroupMeta{amax / 127.0f, sum};
}

}  // namespace deltabit::cuda
