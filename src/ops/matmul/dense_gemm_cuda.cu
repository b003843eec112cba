// cuBLAS products with plain-float weights (dense_gemm_cuda.h). In cuBLAS's column-major terms a row-major
// A[r][c] is the column-major Aᵀ (c × r, leading dimension c):
//   y = x·Wᵀ  → yᵀ (N × T) = W (N × K) · xᵀ (K × T): W is stored as Wᵀ (K × N): op T; x as xᵀ: op N.
//   y = x·W   → yᵀ (K × T) = Wᵀ (K × N) · xᵀ (N × T): W stored as Wᵀ: op N; x as xᵀ: op N.
#include "ops/matmul/dense_gemm_cuda.h"

#include <cublas_v2.h>
#include <cuda_bf16.h>

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "backend/cuda_buffer.h"
#include "ops/cuda/cuda_launch.h"

namespace deltabit::cuda {

namespace {

// What NVIDIA's cuBLAS guide asks for Hopper: a 32 MiB workspace per handle (and per stream it runs on).
constexpr size_t kWorkspaceBytes = size_t(32) << 20;

void cublas_check(cublasStatus_t status, const std::string& what) {
    if (status != CUBLAS_STATUS_SUCCESS) fail_message("cublas: " + what + ": " + cublasGetStatusString(status));
}

// One handle per (host thread, device), and a workspace per stream it runs on: two streams sharing one would
// race on it.
struct CublasContext {
    cublasHandle_t handle = nullptr;
    std::map<cudaStream_t, DeviceBuffer> workspaces;
    CublasContext() { cublas_check(cublasCreate(&handle), "cublasCreate"); }
    ~CublasContext() {
        if (handle != nullptr) cublasDestroy(handle);  // no throw from a destructor; at exit nothing can act on it
    }
    CublasContext(const CublasContext&) = delete;
    CublasContext& operator=(const CublasContext&) = delete;
};

// The first product on a stream may come inside a graph capture (a decode step captured before any eager
// run on that stream). cudaMalloc is refused there in the global and thread-local capture modes although it
// enqueues nothing and the buffer outlives the graph, so this one allocation runs in relaxed mode.
DeviceBuffer workspace_for_new_stream(cudaStream_t stream) {
    cudaStreamCaptureStatus capturing = cudaStreamCaptureStatusNone;
    cuda_check(cudaStreamIsCapturing(stream, &capturing), "cudaStreamIsCapturing");
    if (capturing != cudaStreamCaptureStatusActive) return DeviceBuffer(kWorkspaceBytes);
    cudaStreamCaptureMode mode = cudaStreamCaptureModeRelaxed;
    cuda_check(cudaThreadExchangeStreamCaptureMode(&mode), "cudaThreadExchangeStreamCaptureMode");
    struct RestoreMode {
        cudaStreamCaptureMode mode;
        ~RestoreMode() { cudaThreadExchangeStreamCaptureMode(&mode); }
    } restore{mode};
    return DeviceBuffer(kWorkspaceBytes);
}

cublasHandle_t handle_on(cudaStream_t stream) {
    thread_local std::vector<std::unique_ptr<CublasContext>> contexts;
    int device = 0;
    cuda_check(cudaGetDevice(&device), "cudaGetDevice");
    if (contexts.size() <= size_t(device)) contexts.resize(size_t(device) + 1);
    std::unique_ptr<CublasContext>& context = contexts[size_t(device)];
    if (!context) context = std::make_unique<CublasContext>();
    auto workspace = context->workspaces.find(stream);
    if (workspace == context->workspaces.end())
        workspace = context->workspaces.emplace(stream, workspace_for_new_stream(stream)).first;
    cublas_check(cublasSetStream(context->handle, stream), "cublasSetStream");
    // cublasSetStream resets the workspace to cuBLAS's own pool, which it may allocate from during a graph
    // capture: set ours again.
    cublas_check(cublasSetWorkspace(context->handle, workspace->second.get(), workspace->second.bytes()),
                 "cublasSetWorkspace");
    return context->handle;
}

__global__ void split_bf16_kernel(const float* x, int64_t n, __nv_bfloat16* hi, __nv_bfloat16* mid, __nv_bfloat16* lo) {
    const int64_t stride = int64_t(gridDim.x) * blockDim.x;
    for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride) {
        const float v = x[i];
        const __nv_bfloat16 h = __float2bfloat16_rn(v);
        const float rest = v - __bfloat162float(h);  // exact in fp32, as is the next difference
        const __nv_bfloat16 m = __float2bfloat16_rn(rest);
        hi[i] = h;
        mid[i] = m;
        lo[i] = __float2bfloat16_rn(rest - __bfloat162float(m));
    }
}

// Elements of one bf16 part in the scratch: the count rounded up to 256 bytes.
int64_t part_elements(int64_t count) { return (count + 127) / 128 * 128; }

int as_int(int64_t v, const char* what, const WeightView& w, int64_t n_tokens) {
    if (v > 2147483647)
        fail_message(std::string("cuda plain GEMM: ") + what + " " + std::to_string(v) + " exceeds 2^31 − 1 (a " +
                     std::to_string(w.rows) + " × " + std::to_string(w.cols) + " matrix, " + std::to_string(n_tokens) +
                     " tokens)");
    return int(v);
}

void require_applies(const WeightView& w, int64_t n_tokens, const char* who) {
    if (!plain_gemm_applies(w.dtype, n_tokens))
        fail_message(std::string("cuda ") + who + ": takes BF16 or F32 weights from " +
                     std::to_string(kPlainGemmMinTokens) + " tokens, got " + std::string(dtype_name(w.dtype)) +
                     " at " + std::to_string(n_tokens));
}

// C (m × n, ld m, f32) = op_a(W) · xᵀ-part (k × n) on the weights' type, accumulating into C when `accumulate`.
// `x_part` is f32 (F32 weights) or bf16.
void gemm(cudaStream_t stream, cublasOperation_t op_a, int m, int n, int k, const WeightView& w, int lda,
          const void* x_part, int ldb, bool accumulate, float* y, const char* who) {
    const float alpha = 1.0f, beta = accumulate ? 1.0f : 0.0f;
    const bool bf16 = w.dtype == DType::BF16;
    const cudaDataType type = bf16 ? CUDA_R_16BF : CUDA_R_32F;
    cublas_check(cublasGemmEx(handle_on(stream), op_a, CUBLAS_OP_N, m, n, k, &alpha, w.data, type, lda, x_part, type,
                              ldb, &beta, y, CUDA_R_32F, m,
                              bf16 ? CUBLAS_COMPUTE_32F : CUBLAS_COMPUTE_32F_PEDANTIC, CUBLAS_GEMM_DEFAULT),
                 std::string(who) + " (" + std::to_string(m) + " × " + std::to_string(n) + " × " + std::to_string(k) +
                     ", " + std::string(dtype_name(w.dtype)) + ")");
}

// The shared body: x [T][width] against W with op_a; m outputs a token, k = width.
void product(const float* x, const WeightView& w, int64_t n_tokens, int64_t width, int64_t outputs,
             cublasOperation_t op_a, float* y, void* scratch, cudaStream_t stream, const char* who) {
    require_applies(w, n_tokens, who);
    if (outputs == 0 || width == 0) {
        if (outputs > 0) cuda_check(cudaMemsetAsync(y, 0, size_t(n_tokens * outputs) * sizeof(float), stream), who);
        return;
    }
    const int m = as_int(outputs, "outputs", w, n_tokens), n = as_int(n_tokens, "tokens", w, n_tokens);
    const int k = as_int(width, "inner dimension", w, n_tokens), lda = as_int(w.cols, "row length", w, n_tokens);
    if (w.dtype == DType::F32) {
        gemm(stream, op_a, m, n, k, w, lda, x, k, false, y, who);
        return;
    }
    const int64_t count = n_tokens * width;
    auto* hi = static_cast<__nv_bfloat16*>(scratch);
    __nv_bfloat16* mid = hi + part_elements(count);  // 256-byte aligned, as cuBLAS's fastest kernels want
    __nv_bfloat16* lo = mid + part_elements(count);
    constexpr int kThreads = 256;
    split_bf16_kernel<<<grid_blocks(count, kThreads), kThreads, 0, stream>>>(x, count, hi, mid, lo);
    cuda_check_launch("split_bf16_kernel");
    gemm(stream, op_a, m, n, k, w, lda, hi, k, false, y, who);
    gemm(stream, op_a, m, n, k, w, lda, mid, k, true, y, who);
    gemm(stream, op_a, m, n, k, w, lda, lo, k, true, y, who);
}

}  // namespace

bool plain_gemm_applies(DType dtype, int64_t n_tokens) {
    return (dtype == DType::BF16 || dtype == DType::F32) && n_tokens >= kPlainGemmMinTokens;
}

size_t plain_gemm_scratch_bytes(DType dtype, int64_t n_tokens, int64_t width) {
    if (dtype != DType::BF16) return 0;
    return size_t(3) * sizeof(__nv_bfloat16) * size_t(part_elements(n_tokens * width));  // hi, mid and lo
}

void matmul_plain_gemm(const float* x, const WeightView& w, int64_t n_tokens, float* y, void* scratch,
                       cudaStream_t stream) {
    product(x, w, n_tokens, w.cols, w.rows, CUBLAS_OP_T, y, scratch, stream, "matmul_plain_gemm");
}

void matmul_plain_gemm_by_rows(const float* x, const WeightView& w, int64_t n_tokens, float* y, void* scratch,
                               cudaStream_t stream) {
    product(x, w, n_tokens, w.rows, w.cols, CUBLAS_OP_N, y, scratch, stream, "matmul_plain_gemm_by_rows");
}

}  // namespace deltabit::cuda
