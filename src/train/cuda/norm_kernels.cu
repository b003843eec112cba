// RMS norm (1+w or plain), the DeltaNet gated norm and the delta rule's L2 norm, forward and backward:
// one block per row. A weight's gradient is a sum over rows, done by a second kernel that walks
// columns (each thread one column, a grid of row slices, one atomic per column and slice) instead of
// rows × dim atomics on dim addresses.
#include "train/cuda/device_common.cuh"
#include "train/cuda/kernel_marks.h"
#include "train/cuda/kernels.h"

#include <algorithm>
#include <string>

namespace deltabit::train::cuda {
namespace {

constexpr int kRowBlock = 128;
constexpr int kColumnSlices = 64;

Scratch g_inverse_rms;  // per-row 1/rms from the backward row kernel, read by the weight-gradient kernel

__device__ float row_inverse_rms(const float* x, int64_t dim, float eps, float* shared) {
    float sum = 0.0f;
    for (int64_t i = threadIdx.x; i < dim; i += blockDim.x) sum += x[i] * x[i];
    return rsqrtf(block_sum(sum, shared) / float(dim) + eps);
}

__global__ void rms_norm_forward_kernel(const float* x, const float* w, int64_t dim, float eps, float one,
                                        float* y) {
    __shared__ float shared[32];
    const int64_t r = blockIdx.x;
    const float* xr = x + r * dim;
    const float inv = row_inverse_rms(xr, dim, eps, shared);
    for (int64_t i = threadIdx.x; i < dim; i += blockDim.x) y[r * dim + i] = xr[i] * inv * (one + w[i]);
}

// dx_j += inv·w'_j·dy_j − x_j·inv³·(Σ dy_i w'_i x_i)/dim (reference_ops.cpp's derivation).
__global__ void rms_norm_backward_kernel(const float* x, const float* w, const float* dy, int64_t dim, float eps,
                                         float one, float* dx, float* inverse_rms) {
    __shared__ float shared[32];
    const int64_t r = blockIdx.x;
    const float* xr = x + r * dim;
    const float* dyr = dy + r * dim;
    const float inv = row_inverse_rms(xr, dim, eps, shared);
    float dot = 0.0f;
    for (int64_t i = threadIdx.x; i < dim; i += blockDim.x) dot += dyr[i] * (one + w[i]) * xr[i];
    dot = block_sum(dot, shared);
    if (threadIdx.x == 0) inverse_rms[r] = inv;
    if (dx == nullptr) return;
    const float inv3 = inv * inv * inv / float(dim);
    for (int64_t j = threadIdx.x; j < dim; j += blockDim.x)
        dx[r * dim + j] += inv * (one + w[j]) * dyr[j] - xr[j] * inv3 * dot;
}

// dw[i] += Σ_r dy[r][i]·x[r][i]·inv[r]·(z ? silu(z[r][i]) : 1).
__global__ void norm_weight_gradient_kernel(const float* x, const float* z, const float* dy, const float* inverse_rms,
                                            int64_t rows, int64_t dim, float* dw) {
    __shared__ float partial[8][33];
    const int64_t column = int64_t(blockIdx.x) * 32 + threadIdx.x;
    const int64_t slice = (rows + gridDim.y - 1) / gridDim.y;
    const int64_t begin = int64_t(blockIdx.y) * slice, end = min(rows, begin + slice);
    float sum = 0.0f;
    if (column < dim)
        for (int64_t r = begin + threadIdx.y; r < end; r += 8) {
            const int64_t i = r * dim + column;
            float term = dy[i] * x[i] * inverse_rms[r];
            if (z != nullptr) term *= siluf_(z[i]);
            sum += term;
        }
    partial[threadIdx.y][threadIdx.x] = sum;
    __syncthreads();
    if (threadIdx.y == 0 && column < dim) {
        float total = 0.0f;
        for (int k = 0; k < 8; ++k) total += partial[k][threadIdx.x];
        atomicAdd(dw + column, total);
    }
}

void norm_weight_gradient(const float* x, const float* z, const float* dy, const float* inverse_rms, int64_t rows,
                          int64_t dim, float* dw) {
    const dim3 grid(unsigned((dim + 31) / 32), unsigned(std::min<int64_t>(kColumnSlices, (rows + 7) / 8)));
    norm_weight_gradient_kernel<<<grid, dim3(32, 8)>>>(x, z, dy, inverse_rms, rows, dim, dw);
    deltabit::cuda::cuda_check_launch("norm_weight_gradient_kernel");
    mark_kernel("norm: norm_weight_gradient_kernel");
}

__global__ void gated_rms_norm_forward_kernel(const float* x, const float* z, const float* w, int64_t dim, float eps,
                                              float* y) {
    __shared__ float shared[32];
    const int64_t r = blockIdx.x;
    const float inv = row_inverse_rms(x + r * dim, dim, eps, shared);
    for (int64_t i = threadIdx.x; i < dim; i += blockDim.x) {
        const int64_t k = r * dim + i;
        y[k] = w[i] * x[k] * inv * siluf_(z[k]);
    }
}

__global__ void gated_rms_norm_backward_kernel(const float* x, const float* z, const float* w, const float* dy,
                                               int64_t dim, float eps, float* dx, float* dz, float* inverse_rms) {
    __shared__ float shared[32];
    const int64_t r = blockIdx.x;
    const float* xr = x + r * dim;
    const float inv = row_inverse_rms(xr, dim, eps, shared);
    float dot = 0.0f;
    for (int64_t i = threadIdx.x; i < dim; i += blockDim.x) {
        const int64_t k = r * dim + i;
        dz[k] += dy[k] * w[i] * xr[i] * inv * silu_derivativef_(z[k]);
        dot += dy[k] * w[i] * siluf_(z[k]) * xr[i];
    }
    dot = block_sum(dot, shared);
    if (threadIdx.x == 0) inverse_rms[r] = inv;
    const float inv3 = inv * inv * inv / float(dim);
    for (int64_t j = threadIdx.x; j < dim; j += blockDim.x) {
        const int64_t k = r * dim + j;
        dx[k] += inv * dy[k] * w[j] * siluf_(z[k]) - xr[j] * inv3 * dot;
    }
}

__global__ void l2_norm_forward_kernel(const float* x, int64_t dim, float eps, float scale, float* y) {
    __shared__ float shared[32];
    const int64_t r = blockIdx.x;
    float sum = 0.0f;
    for (int64_t i = threadIdx.x; i < dim; i += blockDim.x) sum += x[r * dim + i] * x[r * dim + i];
    const float inv = rsqrtf(block_sum(sum, shared) + eps);
    for (int64_t i = threadIdx.x; i < dim; i += blockDim.x) y[r * dim + i] = x[r * dim + i] * inv * scale;
}

__global__ void l2_norm_backward_kernel(const float* x, const float* dy, int64_t dim, float eps, float scale,
                                        float* dx) {
    __shared__ float shared[32];
    const int64_t r = blockIdx.x;
    float sum = 0.0f, dot = 0.0f;
    for (int64_t i = threadIdx.x; i < dim; i += blockDim.x) {
        sum += x[r * dim + i] * x[r * dim + i];
        dot += dy[r * dim + i] * x[r * dim + i];
    }
    sum = block_sum(sum, shared);
    dot = block_sum(dot, shared);
    const float inv = rsqrtf(sum + eps);
    for (int64_t j = threadIdx.x; j < dim; j += blockDim.x)
        dx[r * dim + j] += scale * (dy[r * dim + j] * inv - x[r * dim + j] * dot * inv * inv * inv);
}

void check_rows(int64_t rows, const char* what) {
    if (rows > 2147483647)
        fail_message(std::string("train cuda: ") + what + ": " + std::to_string(rows) + " rows exceed one grid");
}

}  // namespace

void rms_norm_forward(const float* x, const float* w, int64_t rows, int64_t dim, float eps, bool one_plus, float* y) {
    if (rows == 0) return;
    check_rows(rows, "rms_norm_forward");
    rms_norm_forward_kernel<<<unsigned(rows), kRowBlock>>>(x, w, dim, eps, one_plus ? 1.0f : 0.0f, y);
    deltabit::cuda::cuda_check_launch("rms_norm_forward_kernel");
}

void rms_norm_backward(const float* x, const float* w, const float* dy, int64_t rows, int64_t dim, float eps,
                       bool one_plus, float* dx, float* dw) {
    if (rows == 0) return;
    check_rows(rows, "rms_norm_backward");
    float* inverse_rms = g_inverse_rms.floats(rows);
    rms_norm_backward_kernel<<<unsigned(rows), kRowBlock>>>(x, w, dy, dim, eps, one_plus ? 1.0f : 0.0f, dx,
                                                            inverse_rms);
    deltabit::cuda::cuda_check_launch("rms_norm_backward_kernel");
    mark_kernel("norm: rms_norm_backward_kernel");
    if (dw != nullptr) norm_weight_gradient(x, nullptr, dy, inverse_rms, rows, dim, dw);
}

void gated_rms_norm_forward(const float* x, const float* z, const float* w, int64_t rows, int64_t dim, float eps,
                            float* y) {
    if (rows == 0) return;
    check_rows(rows, "gated_rms_norm_forward");
    gated_rms_norm_forward_kernel<<<unsigned(rows), kRowBlock>>>(x, z, w, dim, eps, y);
    deltabit::cuda::cuda_check_launch("gated_rms_norm_forward_kernel");
}

void gated_rms_norm_backward(const float* x, const float* z, const float* w, const float* dy, int64_t rows,
                             int64_t dim, float eps, float* dx, float* dz, float* dw) {
    if (rows == 0) return;
    check_rows(rows, "gated_rms_norm_backward");
    float* inverse_rms = g_inverse_rms.floats(rows);
    gated_rms_norm_backward_kernel<<<unsigned(rows), kRowBlock>>>(x, z, w, dy, dim, eps, dx, dz, inverse_rms);
    deltabit::cuda::cuda_check_launch("gated_rms_norm_backward_kernel");
    mark_kernel("norm: gated_rms_norm_backward_kernel");
    norm_weight_gradient(x, z, dy, inverse_rms, rows, dim, dw);
}

void l2_norm_forward(const float* x, int64_t rows, int64_t dim, float eps, float scale, float* y) {
    if (rows == 0) return;
    check_rows(rows, "l2_norm_forward");
    l2_norm_forward_kernel<<<unsigned(rows), kRowBlock>>>(x, dim, eps, scale, y);
    deltabit::cuda::cuda_check_launch("l2_norm_forward_kernel");
}

void l2_norm_backward(const float* x, const float* dy, int64_t rows, int64_t dim, float eps, float scale, float* dx) {
    if (rows == 0) return;
    check_rows(rows, "l2_norm_backward");
    l2_norm_backward_kernel<<<unsigned(rows), kRowBlock>>>(x, dy, dim, eps, scale, dx);
    deltabit::cuda::cuda_check_launch("l2_norm_backward_kernel");
}

}  // namespace deltabit::train::cuda
