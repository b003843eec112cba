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
// Cost: every block reads its columns of the whole table, T/kTokens times over — the path for quantised
// tables and few tokens. soft_embedding_gemm is the fast path for BF16 and F32 tables: the probabilities
// written out (the same formula), then their product with the table on the tensor cores
// (ops/matmul/dense_gemm_cuda.h).
#include <cmath>
#include <string>

#include "backend/cuda_buffer.h"
#include "ops/cuda/cuda_launch.h"
#include "ops/cuda/weight_at.cuh"
#include "ops/elementwise/elementwise_cuda.h"
#include "ops/matmul/dense_gemm_cuda.h"

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

// p[t][v] = fp32(e^{logit − max} / Σ e^{logit − max}), the statistics in double: one block a token, as the
// reference rounds it (the same formula as soft_embedding_kernel's chunks).
constexpr int kProbabilityThreads = 256;

__global__ void __launch_bounds__(kProbabilityThreads)
    probabilities_kernel(const float* logits, int64_t n_vocab, int64_t n_tokens, float* p) {
    __shared__ float max_s[kProbabilityThreads / 32];
    __shared__ double sum_s[kProbabilityThreads / 32];
    const int tid = int(threadIdx.x), lane = tid & 31, warp = tid >> 5;
    constexpr int kWarps = kProbabilityThreads / 32;
    for (int64_t t = blockIdx.x; t < n_tokens; t += gridDim.x) {
        const float* lt = logits + t * n_vocab;
        float m = -INFINITY;
        for (int64_t v = tid; v < n_vocab; v += kProbabilityThreads) m = fmaxf(m, lt[v]);
        m = warp_max(m);
        if (lane == 0) max_s[warp] = m;
        __syncthreads();
        m = max_s[0];
        for (int w = 1; w < kWarps; ++w) m = fmaxf(m, max_s[w]);
        double sum = 0.0;
        for (int64_t v = tid; v < n_vocab; v += kProbabilityThreads) sum += exp(double(lt[v]) - double(m));
        sum = warp_sum_double(sum);
        if (lane == 0) sum_s[warp] = sum;
        __syncthreads();
        double denom = 0.0;
        for (int w = 0; w < kWarps; ++w) denom += sum_s[w];
        for (int64_t v = tid; v < n_vocab; v += kProbabilityThreads)
            p[t * n_vocab + v] = float(exp(double(lt[v]) - double(m)) / denom);
        __syncthreads();  // max_s and sum_s are rewritten by the next token
    }
}

void check_table(const WeightView& table) {
    if (table.dtype == DType::I32 || table.rows <= 0 || !row_fits_blocks(table.dtype, uint64_t(table.cols))) {
        fail_message("soft_embedding (cuda): a " + std::string(dtype_name(table.dtype)) + " table of " +
                     std::to_string(table.rows) + " rows and " + std::to_string(table.cols) +
                     " columns is not a weight table");
    }
}

// The probabilities come first in the scratch, the product's own scratch after them (256-byte aligned).
size_t probabilities_bytes(int64_t n_tokens, int64_t n_vocab) {
    return (size_t(n_tokens) * size_t(n_vocab) * sizeof(float) + 255) / 256 * 256;
}

}  // namespace

size_t soft_embedding_gemm_scratch_bytes(const WeightView& table, int64_t n_tokens) {
    return probabilities_bytes(n_tokens, table.rows) + plain_gemm_scratch_bytes(table.dtype, n_tokens, table.rows);
}

void soft_embedding_gemm(const float* logits, const WeightView& table, int64_t n_tokens, float* out, void* scratch,
                         cudaStream_t stream) {
    check_table(table);
    if (!plain_gemm_applies(table.dtype, n_tokens))
        fail_message("soft_embedding_gemm (cuda): takes BF16 or F32 tables from " + std::to_string(kPlainGemmMinTokens) +
                     " tokens, got " + std::string(dtype_name(table.dtype)) + " at " + std::to_string(n_tokens));
    if (table.cols <= 0) return;
    auto* p = static_cast<float*>(scratch);
    probabilities_kernel<<<grid_blocks(n_tokens), kProbabilityThreads, 0, stream>>>(logits, table.rows, n_tokens, p);
    cuda_check_launch("soft_embedding probabilities");
    matmul_plain_gemm_by_rows(p, table, n_tokens, out, static_cast<char*>(scratch) + probabilities_bytes(n_tokens, table.rows),
                              stream);
}

void soft_embedding(const float* logits, const WeightView& table, int64_t n_tokens, float* out, cudaStream_t stream) {
    check_table(table);
    if (n_tokens <= 0 || table.cols <= 0) return;
    const int64_t items = ((n_tokens + kTokens - 1) / kTokens) * ((table.cols + kColumns - 1) / kColumns);
    soft_embedding_kernel<<<grid_blocks(items), kThreads, 0, stream>>>(
        logits, static_cast<const uint8_t*>(table.data), table.dtype, table.rows, table.cols, table.row_bytes(),
        n_tokens, out);
    cuda_check_launch("soft_embedding");
}

}  // namespace deltabit::cuda
