// The trainer's matrix products on cuBLAS: fp32 tensors in and out, bf16 multiplies with fp32
// accumulation on the tensor cores (CUBLAS_COMPUTE_32F_FAST_16BF), row-major like the reference:
//   linear_forward:          y[n][out]  (+)= x[n][in] · W[out][in]ᵀ
//   linear_backward_input:   dx[n][in]  (+)= dy[n][out] · W[out][in]   (= for the first product into dx)
//   linear_backward_weight:  dW[out][in] += dy[n][out]ᵀ · x[n][in]
// QAT note: a binarised weight is ±d with d an fp16 value; the bf16 multiply rounds d to 8 significant
// bits (relative error ≤ 2⁻⁸), so the training forward is within that of the exported Q1_0 model.
#pragma once

#include <cstdint>

namespace deltabit::train::cuda {

// bf16: the training path. fp32: full-precision products (CUBLAS_COMPUTE_32F), for tests that check the
// plumbing of the whole step against the double reference without bf16's noise.
enum class GemmMath { bf16, fp32 };
void set_gemm_math(GemmMath math);
GemmMath gemm_math();

// The math for the products of one scope, the previous setting restored after it (Muon's Newton–Schulz
// runs in fp32 whatever the training path uses: train/cuda/muon_update.h).
class ScopedGemmMath {
public:
    explicit ScopedGemmMath(GemmMath math) : saved_(gemm_math()) { set_gemm_math(math); }
    ~ScopedGemmMath() { set_gemm_math(saved_); }
    ScopedGemmMath(const ScopedGemmMath&) = delete;
    ScopedGemmMath& operator=(const ScopedGemmMath&) = delete;

private:
    GemmMath saved_;
};

void linear_forward(const float* x, const float* w, int64_t n, int64_t in, int64_t out, float* y,
                    bool accumulate = false);
void linear_backward_input(const float* dy, const float* w, int64_t n, int64_t in, int64_t out, float* dx,
                           bool accumulate = true);
void linear_backward_weight(const float* dy, const float* x, int64_t n, int64_t in, int64_t out, float* dw);

}  // namespace deltabit::train::cuda
