// CUDA gdn_gates (ops/gdn_gates.h): element-wise over [T][n_value_heads], grid-stride.
#include "backend/cuda_buffer.h"
#include "ops/cuda/cuda_launch.h"
#include "ops/cuda/cuda_math.cuh"
#include "ops/elementwise/elementwise_cuda.h"

namespace deltabit::cuda {

namespace {

constexpr int kThreads = 256;

__global__ void gdn_gates_kernel(const float* b, const float* a, const float* ssm_a, const float* dt_bias,
                                 int64_t n, int64_t n_value_heads, float* beta, float* g) {
    const int64_t stride = int64_t(gridDim.x) * blockDim.x;
    for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride) {
        const int64_t h = i % n_value_heads;
        beta[i] = sigmoid_f(b[i]);
        g[i] = ssm_a[h] * softplus_f(a[i] + dt_bias[h]);  // the fp32 add, as transformers and the reference
    }
}

}  // namespace

void gdn_gates(const float* b, const float* a, const float* ssm_a, const float* dt_bias, int64_t n_tokens,
               int64_t n_value_heads, float* beta, float* g, cudaStream_t stream) {
    const int64_t n = n_tokens * n_value_heads;
    if (n <= 0) return;
    gdn_gates_kernel<<<grid_blocks(n, kThreads), kThreads, 0, stream>>>(b, a, ssm_a, dt_bias, n, n_value_heads,
                                                                          beta, g);
    cuda_check_launch("gdn_gates");
}

}  // namespace deltabit::cuda
