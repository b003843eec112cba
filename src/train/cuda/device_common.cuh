// Device helpers shared by the training kernels: block reductions, the activations in fp32 with the
// reference's formulas, launch sizing, and a grow-only scratch buffer for kernels that need one.
#pragma once

#include "backend/cuda_buffer.h"

#include <cuda_runtime.h>

#include <cstdint>

namespace deltabit::train::cuda {

inline constexpr int kBlock = 256;

inline unsigned blocks_for(int64_t n, int per_block = kBlock) {
    const int64_t b = (n + per_block - 1) / per_block;
    return unsigned(b < 1 ? 1 : (b > 65535 * 16 ? 65535 * 16 : b));  // grid-stride loops cover the rest
}

__device__ inline float sigmoidf_(float x) { return 1.0f / (1.0f + expf(-x)); }
__device__ inline float siluf_(float x) { return x * sigmoidf_(x); }
__device__ inline float silu_derivativef_(float x) {
    const float s = sigmoidf_(x);
    return s * (1.0f + x * (1.0f - s));
}
// torch's softplus with threshold 20 (the identity above it), as reference_ops.cpp.
__device__ inline float softplusf_(float x) { return x > 20.0f ? x : log1pf(expf(x)); }
__device__ inline float softplus_derivativef_(float x) { return x > 20.0f ? 1.0f : sigmoidf_(x); }

__device__ inline float warp_sum(float v) {
    for (int offset = 16; offset > 0; offset >>= 1) v += __shfl_xor_sync(0xffffffffu, v, offset);
    return v;
}
__device__ inline float warp_max(float v) {
    for (int offset = 16; offset > 0; offset >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, offset));
    return v;
}

// Sum over the whole block (blockDim.x a multiple of 32, at most 1024); every thread gets the result.
// `shared` holds 32 floats; the call begins and ends with a barrier so it can be used back to back.
__device__ inline float block_sum(float v, float* shared) {
    __syncthreads();
    v = warp_sum(v);
    const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, warps = (blockDim.x + 31) / 32;
    if (lane == 0) shared[warp] = v;
    __syncthreads();
    float total = 0.0f;
    for (int w = 0; w < warps; ++w) total += shared[w];
    __syncthreads();
    return total;
}
__device__ inline float block_max(float v, float* shared) {
    __syncthreads();
    v = warp_max(v);
    const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, warps = (blockDim.x + 31) / 32;
    if (lane == 0) shared[warp] = v;
    __syncthreads();
    float m = -INFINITY;
    for (int w = 0; w < warps; ++w) m = fmaxf(m, shared[w]);
    __syncthreads();
    return m;
}

// Deterministic column sums (weight gradients: a sum over tens of thousands of rows into a few hundred
// values). Float atomics would make the sum's order, hence its bits, depend on scheduling; instead each
// block of a first kernel sums a slab of rows into partials[slab][width] in a fixed order, and this
// second launch adds out[c] += Σ_s partials[s][c] in a fixed order (slab_sums_kernels.cu).
void add_slab_sums(const float* partials, int64_t slabs, int64_t width, float* out);
// Slabs for `rows` rows: at least `min_rows` rows each, at most kMaxSlabs. For the norms, 256 slabs
// times the column blocks (≥ 4 at width 128) give ≥ 1,024 blocks, several per SM, while the partials
// the second stage reads (256 × width floats) stay far below the rows summed.
inline constexpr int64_t kMaxSlabs = 256;
inline int64_t slab_count(int64_t rows, int64_t min_rows) {
    const int64_t by_rows = (rows + min_rows - 1) / min_rows;
    return by_rows < 1 ? 1 : (by_rows > kMaxSlabs ? kMaxSlabs : by_rows);
}

// A device buffer that only grows: scratch for a kernel family, reused call after call (one stream).
struct Scratch {
    deltabit::cuda::DeviceBuffer buffer;
    float* floats(int64_t n) {
        const size_t bytes = size_t(n) * sizeof(float);
        if (buffer.bytes() < bytes) buffer = deltabit::cuda::DeviceBuffer(bytes);
        return buffer.get<float>();
    }
};

}  // namespace deltabit::train::cuda
