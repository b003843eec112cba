// CUDA add_scale (ops/add_scale.h): element-wise, grid-stride, the add and the product each rounded to fp32
// (__fadd_rn, __fmul_rn: never contracted into an fma), so the output equals the reference's bit for bit.
#include "backend/cuda_buffer.h"
#include "ops/cuda/cuda_launch.h"
#include "ops/elementwise/elementwise_cuda.h"

namespace deltabit::cuda {

namespace {

constexpr int kThreads = 256;

__global__ void add_scale_kernel(const float* x, const float* r, int64_t n, float s, float* y) {
    const int64_t stride = int64_t(gridDim.x) * blockDim.x;
    for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride) {
        const float sum = r != nullptr ? __fadd_rn(x[i], r[i]) : x[i];
        y[i] = __fmul_rn(sum, s);
    }
}

}  // namespace

void add_scale(const float* x, const float* r, int64_t n, float s, float* y, cudaStream_t stream) {
    if (n <= 0) return;
    add_scale_kernel<<<grid_blocks(n, kThreads), kThreads, 0, stream>>>(x, r, n, s, y);
    cuda_check_launch("add_scale");
}

}  // namespace deltabit::cuda
