#include "ops/matmul/dense_cuda.h"

#include <cuda_fp16.h>

#include <string>

#include "backend/cuda_buffer.h"
#include "ops/cuda/cuda_launch.h"

namespace deltabit::cuda {

namespace {

constexpr int kWarpsPerBlock = 8;

__device__ __forceinline__ float plain_weight(const void* row, DType type, int64_t k) {
    switch (type) {
        case DType::F16: return __half2float(__ushort_as_half(static_cast<const uint16_t*>(row)[k]));
        case DType::BF16: return __uint_as_float(uint32_t(static_cast<const uint16_t*>(row)[k]) << 16);
        default: return static_cast<const float*>(row)[k];
    }
}

// Work item i = t·N + n, one per warp, grid-stride (ops/cuda/cuda_launch.h).
__global__ void matmul_plain_kernel(const float* x, const uint8_t* w, DType type, int64_t n_tokens, int64_t rows,
                                    int64_t cols, size_t row_bytes, float* y) {
    const int lane = int(threadIdx.x % 32);
    const int64_t warps = int64_t(gridDim.x) * kWarpsPerBlock;
    const int64_t items = n_tokens * rows;
    for (int64_t i = int64_t(blockIdx.x) * kWarpsPerBlock + threadIdx.x / 32; i < items; i += warps) {
        const int64_t t = i / rows, n = i % rows;
        const float* xt = x + t * cols;
        const void* row = w + size_t(n) * row_bytes;
        float sum = 0.0f;
        for (int64_t k = lane; k < cols; k += 32) sum += xt[k] * plain_weight(row, type, k);
        for (int offset = 16; offset > 0; offset /= 2) sum += __shfl_xor_sync(0xffffffffu, sum, offset);
        if (lane == 0) y[i] = sum;
    }
}

__global__ void axpy_kernel(float a, const float* x, float* y, int64_t n) {
    const int64_t stride = int64_t(gridDim.x) * blockDim.x;
    for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride) y[i] += a * x[i];
}

}  // namespace

void matmul_plain(const float* x, const WeightView& w, int64_t n_tokens, float* y, cudaStream_t stream) {
    if (w.dtype != DType::F32 && w.dtype != DType::F16 && w.dtype != DType::BF16)
        fail_message(std::string("cuda matmul_plain: weights must be F32, F16 or BF16, got ") +
                     std::string(dtype_name(w.dtype)));
    const unsigned blocks = grid_blocks(n_tokens * w.rows, kWarpsPerBlock);
    if (blocks == 0) return;
    matmul_plain_kernel<<<blocks, kWarpsPerBlock * 32, 0, stream>>>(x, static_cast<const uint8_t*>(w.data), w.dtype,
                                                                    n_tokens, w.rows, w.cols, w.row_bytes(), y);
    cuda_check_launch("matmul_plain_kernel");
}

void axpy(float a, const float* x, float* y, int64_t n, cudaStream_t stream) {
    constexpr int kThreads = 256;
    const unsigned blocks = grid_blocks(n, kThreads);
    if (blocks == 0) return;
    axpy_kernel<<<blocks, kThreads, 0, stream>>>(a, x, y, n);
    cuda_check_launch("axpy_kernel");
}

}  // namespace deltabit::cuda
