// The optimizer and QAT on the device: the gradient's squared norm (for clipping), AdamW over the flat
// parameter array in train/optimizer.cpp's arithmetic, and the 1-bit QAT forward weights in
// train/qat.cpp's arithmetic (explicitly rounded operations, so nvcc cannot fuse them into an FMA that
// the CPU does not do: the binarised weights match the CPU's bit for bit).
#include "train/cuda/device_common.cuh"
#include "train/cuda/kernels.h"

#include <cuda_fp16.h>

namespace deltabit::train::cuda {
namespace {

using deltabit::cuda::cuda_check_launch;

constexpr int64_t kGroup = 128;  // train/qat.h kQatGroup: one Q1_0 block

__global__ void sum_of_squares_kernel(const float* g, int64_t n, double* sum_sq) {
    __shared__ float reduce[32];
    float local = 0.0f;
    for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x)
        local += g[i] * g[i];
    const float total = block_sum(local, reduce);
    if (threadIdx.x == 0) atomicAdd(sum_sq, double(total));
}

__global__ void adamw_kernel(float* params, const float* grads, float* m, float* v, const uint8_t* decay, int64_t n,
                             float grad_scale, float beta1, float beta2, double correction1, double correction2,
                             double lr, double eps, double weight_decay) {
    for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x) {
        const float g = grad_scale == 1.0f ? grads[i] : __fmul_rn(grads[i], grad_scale);
        const float mi = __fadd_rn(__fmul_rn(beta1, m[i]), __fmul_rn(1.0f - beta1, g));
        const float vi = __fadd_rn(__fmul_rn(beta2, v[i]), __fmul_rn(__fmul_rn(1.0f - beta2, g), g));
        m[i] = mi;
        v[i] = vi;
        const double m_hat = double(mi) / correction1, v_hat = double(vi) / correction2;
        double update = m_hat / (sqrt(v_hat) + eps);
        if (decay[i]) update += weight_decay * double(params[i]);
        params[i] = float(double(params[i]) - lr * update);
    }
}

// One thread per group of 128: d = fp16(Σ|w| / 128) with the sum taken in order, as core/quant.cpp.
__global__ void qat_binarise_kernel(const float* w, int64_t groups, float lambda, bool full, float* out) {
    const int64_t group = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
    if (group >= groups) return;
    const float* x = w + group * kGroup;
    float* y = out + group * kGroup;
    float sum_abs = 0.0f;
    for (int64_t j = 0; j < kGroup; ++j) sum_abs = __fadd_rn(sum_abs, fabsf(x[j]));
    const float d = __half2float(__float2half_rn(__fdiv_rn(sum_abs, float(kGroup))));
    for (int64_t j = 0; j < kGroup; ++j) {
        const float binary = x[j] >= 0.0f ? d : -d;
        y[j] = full ? binary : __fadd_rn(x[j], __fmul_rn(lambda, __fsub_rn(binary, x[j])));
    }
}

}  // namespace

void sum_of_squares(const float* g, int64_t n, double* sum_sq) {
    if (n == 0) return;
    sum_of_squares_kernel<<<std::min(blocks_for(n), 1024u), kBlock>>>(g, n, sum_sq);
    cuda_check_launch("sum_of_squares_kernel");
}

void adamw_update(float* params, const float* grads, float* m, float* v, const uint8_t* decay, int64_t n,
                  float grad_scale, float beta1, float beta2, double correction1, double correction2, double lr,
                  double eps, double weight_decay) {
    if (n == 0) return;
    adamw_kernel<<<blocks_for(n), kBlock>>>(params, grads, m, v, decay, n, grad_scale, beta1, beta2, correction1,
                                             correction2, lr, eps, weight_decay);
    cuda_check_launch("adamw_kernel");
}

void qat_binarise(const float* w, int64_t rows, int64_t row_len, float lambda, bool full, float* out) {
    if (row_len % kGroup != 0) fail_message("train cuda: qat_binarise: a row of " + std::to_string(row_len) +
                                            " values is not whole groups of 128");
    const int64_t groups = rows * row_len / kGroup;
    if (groups == 0) return;
    qat_binarise_kernel<<<blocks_for(groups, 128), 128>>>(w, groups, lambda, full, out);
    cuda_check_launch("qat_binarise_kernel");
}

}  // namespace deltabit::train::cuda
