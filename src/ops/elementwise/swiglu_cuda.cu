// CUDA swiglu (ops/swiglu.h): element-wise, grid-stride. out may alias gate or up (each element is
// read before it is written, by the same thread).
#include "backend/cuda_buffer.h"
#include "ops/cuda/cuda_launch.h"
#include "ops/cuda/cuda_math.cuh"
#include "ops/elementwise/elementwise_cuda.h"

namespace deltabit::cuda {

namespace {

constexpr int kThreads = 256;

__global__ void swiglu_kernel(const float* gate, const float* up, int64_t n, float* out) {
    const int64_t stride = int64_t(gridDim.x) * blockDim.x;
    for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride) {
        out[i] = silu_f(gate[i]) * up[i];
    }
}

}  // namespace

void swiglu(const float* gate, const float* up, int64_t n, float* out, cudaStream_t stream) {
    if (n <= 0) return;
    swiglu_kernel<<<grid_blocks(n, kThreads), kThreads, 0, stream>>>(gate, up, n, out);
    cuda_check_launch("swiglu");
}

}  // namespace deltabit::cuda
