// CUDA scale_columns (ops/scale_columns.h): element-wise, grid-stride, the reference's two double products
// in its order (__dmul_rn: never contracted), rounded to fp32 once: exact.
#include "backend/cuda_buffer.h"
#include "ops/cuda/cuda_launch.h"
#include "ops/elementwise/elementwise_cuda.h"

namespace deltabit::cuda {

namespace {

constexpr int kThreads = 256;

__global__ void scale_columns_kernel(const float* x, const float* w, int64_t n, int64_t dim, double c, float* y) {
    const int64_t stride = int64_t(gridDim.x) * blockDim.x;
    for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride)
        y[i] = float(__dmul_rn(__dmul_rn(double(x[i]), double(w[i % dim])), c));
}

}  // namespace

void scale_columns(const float* x, const float* w, int64_t rows, int64_t dim, double c, float* y,
                   cudaStream_t stream) {
    const int64_t n = rows * dim;
    if (n <= 0) return;
    scale_columns_kernel<<<grid_blocks(n, kThreads), kThreads, 0, stream>>>(x, w, n, dim, c, y);
    cuda_check_launch("scale_columns");
}

}  // namespace deltabit::cuda
