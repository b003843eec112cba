// The row-reduction skeleton shared by rms_norm, l2_norm and gated_rms_norm on CUDA: per row, the sum of
// squares (fp32, each thread adding its strided elements in order, then a butterfly), a scale from
// it, then each element written through the op's own formula. Small rows (per-head norms) take one
// warp each, eight rows per block; large rows (the hidden state) one block each. Rows are walked with
// a grid-stride loop (ops/cuda/cuda_launch.h). y may equal x: every thread reads its own elements for
// the sum before any element of the row is written, and writes only elements it read itself.
//
// A Norm supplies:  float scale(float sum_sq) const             — e.g. 1 / sqrt(sum/dim + eps)
//                   float apply(int64_t row, int64_t i, float x, float scale) const
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "backend/cuda_buffer.h"
#include "ops/cuda/cuda_launch.h"
#include "ops/cuda/cuda_math.cuh"
#include "ops/elementwise/elementwise_cuda.h"

namespace deltabit::cuda::detail {

inline constexpr int kRowsPerWarpBlock = 8;  // warps (= rows) per block on the warp-per-row path

template <typename Norm>
__global__ void __launch_bounds__(32 * kRowsPerWarpBlock)
    norm_warp_per_row_kernel(const float* x, float* y, int64_t rows, int64_t dim, Norm norm) {
    const int lane = int(threadIdx.x) & 31;
    const int64_t warp_in_grid = int64_t(blockIdx.x) * kRowsPerWarpBlock + (threadIdx.x >> 5);
    const int64_t warps_in_grid = int64_t(gridDim.x) * kRowsPerWarpBlock;
    for (int64_t r = warp_in_grid; r < rows; r += warps_in_grid) {
        const float* xr = x + r * dim;
        float sum_sq = 0.0f;
        for (int64_t i = lane; i < dim; i += 32) sum_sq = fmaf(xr[i], xr[i], sum_sq);
        const float scale = norm.scale(warp_sum(sum_sq));
        float* yr = y + r * dim;
        for (int64_t i = lane; i < dim; i += 32) yr[i] = norm.apply(r, i, xr[i], scale);
    }
}

template <typename Norm>
__global__ void __launch_bounds__(kBlockRowThreads)
    norm_block_per_row_kernel(const float* x, float* y, int64_t rows, int64_t dim, Norm norm) {
    __shared__ float scratch[32];
    for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
        const float* xr = x + r * dim;
        float sum_sq = 0.0f;
        for (int64_t i = threadIdx.x; i < dim; i += blockDim.x) sum_sq = fmaf(xr[i], xr[i], sum_sq);
        const float scale = norm.scale(block_sum(sum_sq, scratch));
        float* yr = y + r * dim;
        for (int64_t i = threadIdx.x; i < dim; i += blockDim.x) yr[i] = norm.apply(r, i, xr[i], scale);
    }
}

template <typename Norm>
void launch_row_norm(const float* x, float* y, int64_t rows, int64_t dim, const Norm& norm, cudaStream_t stream,
                     const char* name) {
    if (rows <= 0 || dim <= 0) return;
    if (norm_threads_per_row(dim) == 32) {
        const unsigned blocks = grid_blocks(rows, kRowsPerWarpBlock);
        norm_warp_per_row_kernel<<<blocks, 32 * kRowsPerWarpBlock, 0, stream>>>(x, y, rows, dim, norm);
    } else {
        norm_block_per_row_kernel<<<grid_blocks(rows), kBlockRowThreads, 0, stream>>>(x, y, rows, dim, norm);
    }
    cuda_check_launch(name);
}

}  // namespace deltabit::cuda::detail
