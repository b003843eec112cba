// The optimizer and QAT on the device: the gradient's squared norm (for clipping), AdamW over the flat
// parameter array in train/optimizer.cpp's arithmetic, Muon's pointwise parts in train/muon.cpp's (its
// products are train/cuda/muon_update.cpp's), and the 1-bit QAT forward weights in train/qat.cpp's
// arithmetic (explicitly rounded operations, so nvcc cannot fuse them into an FMA that the CPU does
// not do: the binarised weights and Muon's momentum match the CPU's bit for bit).
#include "train/cuda/device_common.cuh"
#include "train/cuda/kernels.h"

#include <cuda_fp16.h>

#include <algorithm>

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

__global__ void adamw_kernel(float* params, const float* grads, float* m, float* v, const uint8_t* flags, int64_t n,
                             bool skip_hidden, float grad_scale, float beta1, float beta2, double correction1,
                             double correction2, double lr, double eps, double weight_decay) {
    for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x) {
        if (skip_hidden && flags[i] == kAdamFlagHiddenMatrix) continue;
        const float g = grad_scale == 1.0f ? grads[i] : __fmul_rn(grads[i], grad_scale);
        const float mi = __fadd_rn(__fmul_rn(beta1, m[i]), __fmul_rn(1.0f - beta1, g));
        const float vi = __fadd_rn(__fmul_rn(beta2, v[i]), __fmul_rn(__fmul_rn(1.0f - beta2, g), g));
        m[i] = mi;
        v[i] = vi;
        const double m_hat = double(mi) / correction1, v_hat = double(vi) / correction2;
        double update = m_hat / (sqrt(v_hat) + eps);
        if (flags[i] != kAdamFlagNoDecay) update += weight_decay * double(params[i]);
        params[i] = float(double(params[i]) - lr * update);
    }
}

// Muon's momentum and update direction (train/muon.cpp's fp32 order, one rounding per operation). Thread
// per value of g[rows][cols]; the direction goes to u[rows][cols], or to u[cols][rows] when transposed
// (Newton–Schulz runs on the wide orientation).
__global__ void muon_momentum_kernel(const float* grads, float* momentum, int64_t rows, int64_t cols,
                                     float grad_scale, float mu, bool nesterov, bool transposed, float* u) {
    const int64_t n = rows * cols;
    for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x) {
        const float g = grad_scale == 1.0f ? grads[i] : __fmul_rn(grads[i], grad_scale);
        const float m = __fadd_rn(__fmul_rn(mu, momentum[i]), g);
        momentum[i] = m;
        const float direction = nesterov ? __fadd_rn(g, __fmul_rn(mu, m)) : m;
        const int64_t row = i / cols, col = i % cols;
        u[transposed ? col * rows + row : i] = direction;
    }
}

// x *= 1 / (√sum_sq + eps), the sum read from the device (no host round trip between matrices).
__global__ void scale_by_inverse_norm_kernel(float* x, int64_t n, const double* sum_sq, double eps) {
    const float inverse = float(1.0 / (sqrt(*sum_sq) + eps));
    for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x)
        x[i] = __fmul_rn(x[i], inverse);
}

// gram_sq ← b·gram + c·gram_sq (in place), and next ← a·x: the pointwise parts of one Newton–Schulz step.
__global__ void newton_schulz_pointwise_kernel(const float* gram, float* gram_sq, int64_t n_gram, const float* x,
                                               float* next, int64_t n_x, float a, float b, float c) {
    const int64_t stride = int64_t(gridDim.x) * blockDim.x;
    for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n_gram; i += stride)
        gram_sq[i] = __fadd_rn(__fmul_rn(b, gram[i]), __fmul_rn(c, gram_sq[i]));
    for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n_x; i += stride)
        next[i] = __fmul_rn(a, x[i]);
}

// θ ← θ − lr·(scale·O + wd·θ) in double, as train/muon.cpp; O[i][j] = x[j][i] when transposed.
__global__ void muon_apply_kernel(float* params, const float* x, int64_t rows, int64_t cols, bool transposed,
                                  double lr, double scale, double weight_decay) {
    const int64_t n = rows * cols;
    for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x) {
        const int64_t row = i / cols, col = i % cols;
        const double o = double(x[transposed ? col * rows + row : i]);
        const double update = scale * o + weight_decay * double(params[i]);
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

void adamw_update(float* params, const float* grads, float* m, float* v, const uint8_t* flags, int64_t n,
                  bool skip_hidden, float grad_scale, float beta1, float beta2, double correction1, double correction2,
                  double lr, double eps, double weight_decay) {
    if (n == 0) return;
    adamw_kernel<<<blocks_for(n), kBlock>>>(params, grads, m, v, flags, n, skip_hidden, grad_scale, beta1, beta2,
                                             correction1, correction2, lr, eps, weight_decay);
    cuda_check_launch("adamw_kernel");
}

void muon_momentum(const float* grads, float* momentum, int64_t rows, int64_t cols, float grad_scale, float mu,
                   bool nesterov, bool transposed, float* u) {
    if (rows * cols == 0) return;
    muon_momentum_kernel<<<blocks_for(rows * cols), kBlock>>>(grads, momentum, rows, cols, grad_scale, mu, nesterov,
                                                               transposed, u);
    cuda_check_launch("muon_momentum_kernel");
}

void scale_by_inverse_norm(float* x, int64_t n, const double* sum_sq, double eps) {
    if (n == 0) return;
    scale_by_inverse_norm_kernel<<<blocks_for(n), kBlock>>>(x, n, sum_sq, eps);
    cuda_check_launch("scale_by_inverse_norm_kernel");
}

void newton_schulz_pointwise(const float* gram, float* gram_sq, int64_t n_gram, const float* x, float* next,
                             int64_t n_x, float a, float b, float c) {
    if (n_gram == 0 && n_x == 0) return;
    newton_schulz_pointwise_kernel<<<blocks_for(std::max(n_gram, n_x)), kBlock>>>(gram, gram_sq, n_gram, x, next,
                                                                                   n_x, a, b, c);
    cuda_check_launch("newton_schulz_pointwise_kernel");
}

void muon_apply(float* params, const float* x, int64_t rows, int64_t cols, bool transposed, double lr, double scale,
                double weight_decay) {
    if (rows * cols == 0) return;
    muon_apply_kernel<<<blocks_for(rows * cols), kBlock>>>(params, x, rows, cols, transposed, lr, scale, weight_decay);
    cuda_check_launch("muon_apply_kernel");
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
