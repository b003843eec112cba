// CUDA rope_neox (ops/rope.h) and rope_proportional (ops/rope_proportional.h), both cpu::rope_rotate_pairs'
// rotation: one block per token (grid-stride over tokens). The block first builds the token's cos/sin
// table for the n_pairs non-zero frequencies in shared memory, then its threads rotate the (head, pair)
// elements (dims j and j + half). The angle is formed in fp32 exactly as the reference forms it, and cos,
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
constexpr int64_t kMaxRopeDim = 4096;  // the table (n_pairs × 2 doubles) must fit in 32 KB of shared memory

// Dims (j, j + half) for j < n_pairs rotate by angle_j = pos · theta^(−2j / exponent_dim).
__global__ void rope_pairs_kernel(float* x, const int32_t* positions, int64_t n_tokens, int64_t n_head,
                                  int64_t head_dim, int64_t half, int64_t n_pairs, int64_t exponent_dim, float theta) {
    extern __shared__ double table[];  // [n_pairs] cos, then [n_pairs] sin
    double* cos_t = table;
    double* sin_t = table + n_pairs;
    for (int64_t t = blockIdx.x; t < n_tokens; t += gridDim.x) {
        for (int64_t j = threadIdx.x; j < n_pairs; j += blockDim.x) {
            rope_cos_sin(j, exponent_dim, theta, positions[t], cos_t[j], sin_t[j]);  // ops/cuda/cuda_math.cuh
        }
        __syncthreads();
        float* xt = x + t * n_head * head_dim;
        for (int64_t p = threadIdx.x; p < n_head * n_pairs; p += blockDim.x) {
            const int64_t h = p / n_pairs, j = p % n_pairs;
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
    rope_pairs_kernel<<<grid_blocks(n_tokens), kThreads, smem, stream>>>(x, positions, n_tokens, n_head, head_dim,
                                                                       rope_dim / 2, rope_dim / 2, rope_dim, theta);
    cuda_check_launch("rope_neox");
}

void rope_proportional(float* x, const int32_t* positions, int64_t n_tokens, int64_t n_head, int64_t head_dim,
                       int64_t n_pairs, float theta, cudaStream_t stream) {
    if (head_dim % 2 != 0 || n_pairs < 0 || n_pairs > head_dim / 2 || 2 * n_pairs > kMaxRopeDim) {
        fail_message("rope_proportional (cuda): head_dim " + std::to_string(head_dim) + " must be even, and n_pairs " +
                     std::to_string(n_pairs) + " at most head_dim / 2 and " + std::to_string(kMaxRopeDim / 2));
    }
    if (n_tokens <= 0 || n_head <= 0 || n_pairs == 0) return;
    const size_t smem = size_t(2 * n_pairs) * sizeof(double);
    rope_pairs_kernel<<<grid_blocks(n_tokens), kThreads, smem, stream>>>(x, positions, n_tokens, n_head, head_dim,
                                                                       head_dim / 2, n_pairs, head_dim, theta);
    cuda_check_launch("rope_proportional");
}

}  // namespace deltabit::cuda
