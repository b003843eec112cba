// CUDA embedding_lookup (ops/embedding.h): out[t][j] = weight j of table row ids[t], decoded from the
// GGUF block layout (ops/cuda/weight_at.cuh), one thread per output element (grid-stride over
// T·D, so a warp writes consecutive floats and reads one block's bytes). Exact: every weight is an
// fp16 or bf16 value or d·level in fp32, as dequantize_row computes it.
#include <cuda_fp16.h>

#include <cmath>
#include <string>

#include "backend/cuda_buffer.h"
#include "ops/cuda/cuda_launch.h"
#include "ops/cuda/weight_at.cuh"
#include "ops/elementwise/elementwise_cuda.h"

namespace deltabit::cuda {

namespace {

constexpr int kThreads = 256;

__global__ void embedding_kernel(const uint8_t* table, DType type, int64_t n_vocab, int64_t dim, size_t row_bytes,
                                 const int32_t* ids, int64_t n_tokens, float* out) {
    const int64_t n = n_tokens * dim;
    const int64_t stride = int64_t(gridDim.x) * blockDim.x;
    for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride) {
        const int64_t t = i / dim, j = i % dim;
        const int32_t id = ids[t];
        out[i] = id >= 0 && id < n_vocab ? weight_at(type, table + size_t(id) * row_bytes, j) : NAN;
    }
}

}  // namespace

void embedding_lookup(const WeightView& table, const int32_t* ids, int64_t n_tokens, float* out,
                      cudaStream_t stream) {
    if (table.dtype == DType::I32 || !row_fits_blocks(table.dtype, uint64_t(table.cols))) {
        fail_message("embedding_lookup (cuda): a " + std::string(dtype_name(table.dtype)) + " table of " +
                     std::to_string(table.cols) + " columns is not a weight table");
    }
    const int64_t n = n_tokens * table.cols;
    if (n <= 0) return;
    embedding_kernel<<<grid_blocks(n, kThreads), kThreads, 0, stream>>>(
        static_cast<const uint8_t*>(table.data), table.dtype, table.rows, table.cols, table.row_bytes(), ids,
        n_tokens, out);
    cuda_check_launch("embedding_lookup");
}

}  // namespace deltabit::cuda
