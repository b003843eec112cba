// CUDA rms_norm (ops/rms_norm.h); the row skeleton is ops/row_norm.cuh.
#include "ops/cuda/row_norm.cuh"

namespace deltabit::cuda {

namespace {

struct RmsNorm {
    const float* w;
    float dim_f;
    float eps;
    bool one_plus;
    bool no_weight;  // NormWeight::none: w is not read (may be null)
    // 1/sqrtf rather than rsqrtf: both correctly rounded (≤ 1 ulp together) against rsqrtf's 2 ulp.
    __device__ float scale(float sum_sq) const { return 1.0f / sqrtf(sum_sq / dim_f + eps); }
    __device__ float apply(int64_t, int64_t i, float x, float scale) const {
        return no_weight ? x * scale : x * scale * (one_plus ? 1.0f + w[i] : w[i]);
    }
};

}  // namespace

void rms_norm(const float* x, const float* w, int64_t rows, int64_t dim, float eps, NormWeight weight, float* y,
              cudaStream_t stream) {
    const RmsNorm norm{w, float(dim), eps, weight == NormWeight::one_plus, weight == NormWeight::none};
    detail::launch_row_norm(x, y, rows, dim, norm, stream, "rms_norm");
}

}  // namespace deltabit::cuda
