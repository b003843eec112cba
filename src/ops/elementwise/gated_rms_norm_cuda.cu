// CUDA gated_rms_norm (ops/gated_rms_norm.h); the row skeleton is ops/row_norm.cuh.
#include "ops/cuda/row_norm.cuh"

namespace deltabit::cuda {

namespace {

struct GatedRmsNorm {
    const float* z;
    const float* w;
    int64_t dim;
    float dim_f;
    float eps;
    __device__ float scale(float sum_sq) const { return 1.0f / sqrtf(sum_sq / dim_f + eps); }
    __device__ float apply(int64_t row, int64_t i, float x, float scale) const {
        return w[i] * x * scale * silu_f(z[row * dim + i]);
    }
};

}  // namespace

void gated_rms_norm(const float* x, const float* z, const float* w, int64_t rows, int64_t dim, float eps,
                    float* y, cudaStream_t stream) {
    const GatedRmsNorm norm{z, w, dim, float(dim), eps};
    detail::launch_row_norm(x, y, rows, dim, norm, stream, "gated_rms_norm");
}

}  // namespace deltabit::cuda
