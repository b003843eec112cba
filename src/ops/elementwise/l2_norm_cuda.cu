// CUDA l2_norm (ops/l2_norm.h); the row skeleton is ops/row_norm.cuh.
#include "ops/cuda/row_norm.cuh"

namespace deltabit::cuda {

namespace {

struct L2Norm {
    float eps;
    __device__ float scale(float sum_sq) const { return 1.0f / sqrtf(sum_sq + eps); }
    __device__ float apply(int64_t, int64_t, float x, float scale) const { return x * scale; }
};

}  // namespace

void l2_norm(const float* x, int64_t rows, int64_t dim, float eps, float* y, cudaStream_t stream) {
    detail::launch_row_norm(x, y, rows, dim, L2Norm{eps}, stream, "l2_norm");
}

}  // namespace deltabit::cuda
