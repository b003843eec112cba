// Device helpers shared by the CUDA op kernels: warp and block reductions and the scalar activations in
// fp32. Accuracy notes (CUDA C Programming Guide, "Mathematical Functions", without --use_fast_math):
// expf ≤ 2 ulp, log1pf ≤ 1 ulp, rsqrtf ≤ 2 ulp, sqrtf and division correctly rounded. The parity
// tolerances in tests/cuda are derived from these.
#pragma once

#include <cuda_runtime.h>

namespace deltabit::cuda {

constexpr unsigned kFullWarpMask = 0xffffffffu;

__device__ __forceinline__ float warp_sum(float v) {
#pragma unroll
    for (int offset = 16; offset > 0; offset >>= 1) v += __shfl_xor_sync(kFullWarpMask, v, offset);
    return v;
}

// Sum over all threads of the block (blockDim.x a multiple of 32, ≤ 1024); every thread gets the sum.
// `scratch` holds 32 floats of shared memory; the call ends with the block synchronised, so the
// scratch can be reused right after.
__device__ __forceinline__ float block_sum(float v, float* scratch) {
    const int lane = int(threadIdx.x) & 31;
    const int warp = int(threadIdx.x) >> 5;
    const int n_warps = int(blockDim.x) >> 5;
    v = warp_sum(v);
    if (lane == 0) scratch[warp] = v;
    __syncthreads();
    v = lane < n_warps ? scratch[lane] : 0.0f;
    v = warp_sum(v);
    __syncthreads();
    return v;
}

__device__ __forceinline__ float sigmoid_f(float x) { return 1.0f / (1.0f + expf(-x)); }

// x · sigmoid(x); for x → −∞ expf(−x) overflows to inf and the quotient is −0, the correct limit.
__device__ __forceinline__ float silu_f(float x) { return x / (1.0f + expf(-x)); }

// torch softplus (beta 1, threshold 20), as ops/activations.h.
__device__ __forceinline__ float softplus_f(float x) { return x > 20.0f ? x : log1pf(expf(x)); }

// cos and sin of rope dim pair j's angle at `position` (rope_dim dims rotated, base theta): the angle formed
// in fp32 exactly as the CPU reference forms it (ops/rope.h), cos and sin in double. The one formula of
// rope_neox (prompts) and of the decode step's prologue and rope table, so that all three rotate by the same
// bits.
__device__ __forceinline__ void rope_cos_sin(int64_t j, int64_t rope_dim, float theta, int32_t position, double& c,
                                             double& s) {
    const float exponent = float(2 * j) / float(rope_dim);
    const float inv_freq = 1.0f / float(pow(double(theta), double(exponent)));
    const float angle = float(position) * inv_freq;
    sincos(double(angle), &s, &c);
}

}  // namespace deltabit::cuda
