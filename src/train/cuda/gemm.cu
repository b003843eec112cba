// cuBLAS in column-major terms: a row-major A[r][c] is the column-major Aᵀ (c × r, leading dimension c).
//   y = x·Wᵀ      → yᵀ(out×n)  = W(out×in)·xᵀ(in×n):   W is stored as Wᵀ (in×out): op T; x as xᵀ: op N.
//   dx = dy·W     → dxᵀ(in×n)  = Wᵀ(in×out)·dyᵀ(out×n): both stored as needed: op N, op N.
//   dW = dyᵀ·x    → dWᵀ(in×out) = xᵀ(in×n)·dy(n×out):   x as xᵀ: op N; dy stored as dyᵀ: op T.
#include "train/cuda/gemm.h"

#include "backend/cuda_buffer.h"

#include <cublas_v2.h>

#include <string>

namespace deltabit::train::cuda {
namespace {

GemmMath g_math = GemmMath::bf16;

void cublas_check(cublasStatus_t status, const char* what) {
    if (status != CUBLAS_STATUS_SUCCESS)
        fail_message(std::string("cublas: ") + what + ": " + cublasGetStatusString(status));
}

cublasHandle_t handle() {
    static cublasHandle_t h = [] {
        cublasHandle_t created = nullptr;
        cublas_check(cublasCreate(&created), "cublasCreate");
        return created;
    }();
    return h;
}

void gemm(cublasOperation_t op_a, cublasOperation_t op_b, int64_t m, int64_t n, int64_t k, const float* a,
          int64_t lda, const float* b, int64_t ldb, float beta, float* c, int64_t ldc, const char* what) {
    if (m == 0 || n == 0) return;
    if (m > 2147483647 || n > 2147483647 || k > 2147483647)
        fail_message(std::string("cublas: ") + what + ": a dimension exceeds 2^31");
    const float alpha = 1.0f;
    cublas_check(cublasGemmEx(handle(), op_a, op_b, int(m), int(n), int(k), &alpha, a, CUDA_R_32F, int(lda), b,
                              CUDA_R_32F, int(ldb), &beta, c, CUDA_R_32F, int(ldc),
                              g_math == GemmMath::bf16 ? CUBLAS_COMPUTE_32F_FAST_16BF : CUBLAS_COMPUTE_32F,
                              CUBLAS_GEMM_DEFAULT),
                 what);
}

}  // namespace

void set_gemm_math(GemmMath math) { g_math = math; }
GemmMath gemm_math() { return g_math; }

void linear_forward(const float* x, const float* w, int64_t n, int64_t in, int64_t out, float* y, bool accumulate) {
    gemm(CUBLAS_OP_T, CUBLAS_OP_N, out, n, in, w, in, x, in, accumulate ? 1.0f : 0.0f, y, out, "linear_forward");
}

void linear_backward_input(const float* dy, const float* w, int64_t n, int64_t in, int64_t out, float* dx,
                           bool accumulate) {
    gemm(CUBLAS_OP_N, CUBLAS_OP_N, in, n, out, w, in, dy, out, accumulate ? 1.0f : 0.0f, dx, in,
         "linear_backward_input");
}

void linear_backward_weight(const float* dy, const float* x, int64_t n, int64_t in, int64_t out, float* dw) {
    gemm(CUBLAS_OP_N, CUBLAS_OP_T, in, out, n, x, in, dy, out, 1.0f, dw, in, "linear_backward_weight");
}

}  // namespace deltabit::train::cuda
