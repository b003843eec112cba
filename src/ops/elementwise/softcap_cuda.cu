// CUDA softcap (ops/softcap.h): element-wise, grid-stride, in double as the reference, so each output is
// the reference's except where the device's tanh differs from the host's in the last double bit and that
// flips the final rounding to fp32 (≤ 1 ulp). In place allowed.
#include <string>

#include "backend/cuda_buffer.h"
#include "ops/cuda/cuda_launch.h"
#include "ops/elementwise/elementwise_cuda.h"

namespace deltabit::cuda {

namespace {

constexpr int kThreads = 256;

__global__ void softcap_kernel(const float* x, int64_t n, double cap, float* y) {
    const int64_t stride = int64_t(gridDim.x) * blockDim.x;
    for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride)
        y[i] = float(__dmul_rn(cap, tanh(__ddiv_rn(double(x[i]), cap))));
}

}  // namespace

void softcap(const float* x, int64_t n, float cap, float* y, cudaStream_t stream) {
    if (!(cap > 0.0f)) fail_message("softcap (cuda): the cap must be positive, got " + std::to_string(cap));
    if (n <= 0) return;
    softcap_kernel<<<grid_blocks(n, kThreads), kThreads, 0, stream>>>(x, n, double(cap), y);
    cuda_check_launch("softcap");
}

}  // namespace deltabit::cuda
