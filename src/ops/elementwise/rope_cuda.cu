// CUDA rope_neox (ops/rope.h): one block per token (grid-stride over tokens). The block first builds
// the token's cos/sin table for the rope_dim/2 frequencies in shared memory, then its threads rotate
// the (head, pair) elements. The angle is formed in fp32 exactly as the reference forms it, and cos,
// sin and the rotation are evaluated in double (products and difference rounded separately, no FMA
// contraction), so the outputs equal the reference's except where the device's cos/sin differ from
// the host's in the last double bit and that flips the final rounding to fp32 (≤ 1 ulp).
#include "backend/cuda_buffer.h"
#include "core/error.h"
#include "ops/cuda/cuda_launch.h"
#include "ops/cuda/cuda_math.cuh"
#include "ops/elementwise/elementwise_cuda.h"

#include <string>

namespace deltabit::cuda {

namespace {

constexpr int kThreads = 256;
constexpr int64_t kMaxRopeDim = 4096;  // the table (rope_dim/2 × 2 doubles) must fit in 32 KB of shared memory

__global__ void rope_neox_kernel(float* x, const int32_t* positions, int64_t n_tokens, int64_t n_head,
                                 int64_t head_dim, int64_t rope_dim, float theta) {
    extern __shared__ double table[];  // [half] cos, then [half] sin
    const int64_t half = rope_dim / 2;
    double* cos_t = table;
    double* sin_t = table + half;
    for (int64_t t = blockIdx.x; t < n_tokens; t += gridDim.x) {
        for (int64_t j = threadIdx.x; j < half; j += blockDim.x) {
            rope_cos_sin(j, rope_dim, theta, positions[t], cos_t[j], sin_t[j]);  // ops/cuda/cuda_math.cuh
        }
        __syncthreads();
        float* xt = x + t * n_head * head_dim;
        for (int64_t p = threadIdx.x; p < n_head * half; p += blockDim.x) {
            const int64_t h = p / half, j = p % half;
            float* head = xt + h * head_dim;
            const double x0 = head[j], x1 = head[j + half];
            const double c = cos_t[j], s = sin_t[j];
            head[j] = float(__dsub_rn(__dmul_rn(x0, c), __dmul_rn(x1, s)));
            head[j + half] = float(__dadd_rn(__dmul_rn(x1, c), __dmul_rn(x0, s)));
        }
        __syncthreads();  // the table is rebuilt for the next token
    }
}

}  // namespace

void rope_neox(float* x, const int32_t* positions, int64_t n_tokens, int64_t n_head, int64_t head_dim,
               int64_t rope_dim, float theta, cudaStream_t stream) {
    if (rope_dim % 2 != 0 || rope_dim > head_dim || rope_dim > kMaxRopeDim) {
        fail_message("rope_neox (cuda): rope_dim " + std::to_string(rope_dim) + " must be even and at most head_dim " +
                     std::to_string(head_dim) + " and " + std::to_string(kMaxRopeDim));
    }
    if (n_tokens <= 0 || n_head <= 0 || rope_dim == 0) return;
    const size_t smem = size_t(rope_dim) * sizeof(double);
    rope_neox_kernel<<<grid_blocks(n_tokens), kThreads, smem, stream>>>(x, positions, n_tokens, n_head, head_dim,
                                                                      rope_dim, theta);
    cuda_check_launch("rope_neox");
}

}  // namespace deltabit::cuda
