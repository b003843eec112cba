// CUDA gelu_glu (ops/gelu_glu.h): element-wise, grid-stride, in double as the reference (ops/activations.h
// gelu_tanh), so each output is the reference's except where the device's tanh differs from the host's in
// the last double bit and that flips the final rounding to fp32 (≤ 1 ulp). out may alias gate or up (each
// element is read before it is written, by the same thread).
#include "backend/cuda_buffer.h"
#include "ops/cuda/cuda_launch.h"
#include "ops/elementwise/elementwise_cuda.h"

namespace deltabit::cuda {

namespace {

constexpr int kThreads = 256;

__global__ void gelu_glu_kernel(const float* gate, const float* up, int64_t n, float* out) {
    const double sqrt_2_over_pi = 0.79788456080286535588;
    const int64_t stride = int64_t(gridDim.x) * blockDim.x;
    for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride) {
        const double x = gate[i];
        // The reference's operation order, each step rounded on its own (no FMA contraction).
        const double cube = __dmul_rn(__dmul_rn(__dmul_rn(0.044715, x), x), x);
        const double inner = __dmul_rn(sqrt_2_over_pi, __dadd_rn(x, cube));
        const double gelu = __dmul_rn(__dmul_rn(0.5, x), __dadd_rn(1.0, tanh(inner)));
        out[i] = float(__dmul_rn(gelu, double(up[i])));
    }
}

}  // namespace

void gelu_glu(const float* gate, const float* up, int64_t n, float* out, cudaStream_t stream) {
    if (n <= 0) return;
    gelu_glu_kernel<<<grid_blocks(n, kThreads), kThreads, 0, stream>>>(gate, up, n, out);
    cuda_check_launch("gelu_glu");
}

}  // namespace deltabit::cuda
