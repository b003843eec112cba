// CUDA soft_embedding (ops/soft_embedding.h): out[t] = Σ_v p[t][v] · table[v], p = softmax(logits[t]).
//
// A block owns kTokens tokens and kColumns columns of the output (grid-stride over those tiles):
//   1. the softmax statistics of its tokens, each by one warp: the max, then Σ_v e^{logit − max} in double
//      (the reference's numerics: its p are then the same values but for the order of the double sum);
//   2. the vocabulary in chunks of kChunk rows: the block forms p[tok][v] = fp32(e^{logit − max} / denom)
//      in shared memory, as the reference rounds it, then thread i adds Σ_v p·table[v][i] for its column and
//      every token in an fp32 fmaf chain per chunk, each chunk's sum added into a double accumulator.
// So the error per output is at most (kChunk + 2)·u·Σ_v p|table[v][i]| (the chunk's chain, p's rounding
// flipped by the last bit of its double) plus u·|out| (the final rounding). The table is read in its GGUF
// layout (ops/cuda/weight_at.cuh), each weight decoded exactly.
//
// Cost: every block reads its columns of the whole table, T/kTokens times over — a naive first version
// (DiffusionGemma's self-conditioning input, once per denoising step); a GEMM of p against the table on tensor
// cores is the fast path.
#include <cmath>
#include <string>

#include "backend/cuda_buffer.h"
#include "ops/cuda/cuda_launch.h"
#include "ops/cuda/weight_at.cuh"
#include "ops/elementwise/elementwise_cuda.h"

namespace deltabit::cuda {

namespace {

constexpr int kThreads = 256;
constexpr int kTokens = 16;        // tokens per block: 2 per warp in the statistics
constexpr int kColumns = kThreads;  // one column per thread
constexpr int kChunk = 32;         // vocabulary rows per chunk: kTokens · kChunk = 2 · kThreads probabilities

__device__ __forceinline__ double warp_sum_double(double v) {
#pragma unroll
    for (int offset = 16; offset > 0; offset >>= 1) v += __shfl_xor_sync(0xffffffffu, v, offset);
    return v;
}

__device__ __forceinline__ float warp_max(float v) {
#pragma unroll
    for (int offset = 16; offset > 0; offset >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, offset));
    return v;
}

__global__ void __launch_bounds__(kThreads)
    soft_embedding_kernel(const float* logits, const uint8_t* table, DType type, int64_t n_vocab, int64_t dim,
                          size_t row_bytes, int64_t n_tokens, float* out) {
    __shared__ double max_s[kTokens], denom_s[kTokens];
    __shared__ float p_s[kTokens][kChunk];
    const int tid = int(threadIdx.x), lane = tid & 31, warp = tid >> 5;
    const int64_t token_tiles = (n_tokens + kTokens - 1) / kTokens;
    const int64_t column_tiles = (dim + kColumns - 1) / kColumns;

    for (int64_t item = blockIdx.x; item < token_tiles * column_tiles; item += gridDim.x) {
        const int64_t t0 = (item / column_tiles) * kTokens;
        const int64_t column = (item % column_tiles) * kColumns + tid;

        for (int k = 0; k < 2; ++k) {  // statistics: warp w takes tokens 2w and 2w + 1 of the tile
            const int tok = 2 * warp + k;
            const int64_t t = t0 + tok;
            if (t >= n_tokens) continue;
            const float* lt = logits + t * n_vocab;
            float m = -INFINITY;
            for (int64_t v = lane; v < n_vocab; v += 32) m = fmaxf(m, lt[v]);
            m = warp_max(m);
            double sum = 0.0;
            for (int64_t v = lane; v < n_vocab; v += 32) sum += exp(double(lt[v]) - double(m));
            sum = warp_sum_double(sum);
            if (lane == 0) {
                max_s[tok] = double(m);
                denom_s[tok] = sum;
            }
        }

        float part[kTokens];
        double acc[kTokens];
#pragma unroll
        for (int tok = 0; tok < kTokens; ++tok) acc[tok] = 0.0;
        for (int64_t v0 = 0; v0 < n_vocab; v0 += kChunk) {
            __syncthreads();  // the statistics are written; the previous chunk's p are consumed
            for (int e = tid; e < kTokens * kChunk; e += kThreads) {
                const int tok = e / kChunk, j = e % kChunk;
                const int64_t t = t0 + tok, v = v0 + j;
                p_s[tok][j] = t < n_tokens && v < n_vocab
                                  ? float(exp(double(logits[t * n_vocab + v]) - max_s[tok]) / denom_s[tok])
                                  : 0.0f;
            }
            __syncthreads();
            if (column >= dim) continue;
#pragma unroll
            for (int tok = 0; tok < kTokens; ++tok) part[tok] = 0.0f;
            const int rows = int(min(int64_t(kChunk), n_vocab - v0));
            for (int j = 0; j < rows; ++j) {
                const float w = weight_at(type, table + size_t(v0 + j) * row_bytes, column);
#pragma unroll
                for (int tok = 0; tok < kTokens; ++tok) part[tok] = fmaf(p_s[tok][j], w, part[tok]);
            }
#pragma unroll
            for (int tok = 0; tok < kTokens; ++tok) acc[tok] += double(part[tok]);
        }
        if (column < dim) {
#pragma unroll
            for (int tok = 0; tok < kTokens; ++tok)
                if (t0 + tok < n_tokens) out[(t0 + tok) * dim + column] = float(acc[tok]);
        }
        __syncthreads();  // max_s and denom_s are rewritten by the next item
    }
}

}  // namespace

void soft_embedding(const float* logits, const WeightView& table, int64_t n_tokens, float* out, cudaStream_t stream) {
    if (table.dtype == DType::I32 || table.rows <= 0 || !row_fits_blocks(table.dtype, uint64_t(table.cols))) {
        fail_message("soft_embedding (cuda): a " + std::string(dtype_name(table.dtype)) + " table of " +
                     std::to_string(table.rows) + " rows and " + std::to_string(table.cols) +
                     " columns is not a weight table");
    }
    if (n_tokens <= 0 || table.cols <= 0) return;
    const int64_t items = ((n_tokens + kTokens - 1) / kTokens) * ((table.cols + kColumns - 1) / kColumns);
    soft_embedding_kernel<<<grid_blocks(items), kThreads, 0, stream>>>(
        logits, static_cast<const uint8_t*>(table.data), table.dtype, table.rows, table.cols, table.row_bytes(),
        n_tokens, out);
    cuda_check_launch("soft_embedding");
}

}  // namespace deltabit::cuda
