// CUDA argmax (ops/elementwise/elementwise_cuda.h): greedy decoding copies back 4 bytes instead of the vocabulary's
// logits. Two launches: blocks reduce strided slices to (value, index) pairs, then one block reduces
// the pairs. The order is total — a non-finite value (NaN, ±inf) beats every finite one and the lower
// index wins between two of them; otherwise a larger value wins and equal values go to the lower index —
// so the result does not depend on how the work was split: over finite values it is the sequential
// argmax_lowest_id, and any non-finite value turns it into the report of the lowest such index
// (core/non_finite_choice.h). The check costs no extra pass: the reduction reads every value anyway.
#include <cmath>
#include <cstdint>
#include <string>

#include "backend/cuda_buffer.h"
#include "core/non_finite_choice.h"
#include "ops/elementwise/elementwise_cuda.h"

namespace deltabit::cuda {

namespace {

constexpr int kThreads = 256;
constexpr int64_t kMaxBlocks = 512;
constexpr int64_t kItemsPerThread = 8;  // before adding another block
constexpr int32_t kNone = INT32_MAX;    // no value seen (a thread past the end)

struct Best {
    float value;
    int32_t index;
};

__device__ __forceinline__ Best better(Best a, Best b) {
    if (b.index == kNone) return a;
    if (a.index == kNone) return b;
    const bool a_bad = !isfinite(a.value), b_bad = !isfinite(b.value);
    if (a_bad || b_bad) return a_bad && (!b_bad || a.index < b.index) ? a : b;
    if (b.value > a.value || (b.value == a.value && b.index < a.index)) return b;
    return a;
}

// Every thread gets the block's best; `scratch` is 32 entries of shared memory.
__device__ Best block_best(Best v, Best* scratch) {
    const int lane = int(threadIdx.x) & 31, warp = int(threadIdx.x) >> 5;
#pragma unroll
    for (int offset = 16; offset > 0; offset >>= 1) {
        Best other{__shfl_xor_sync(0xffffffffu, v.value, offset), __shfl_xor_sync(0xffffffffu, v.index, offset)};
        v = better(v, other);
    }
    if (lane == 0) scratch[warp] = v;
    __syncthreads();
    v = lane < int(blockDim.x >> 5) ? scratch[lane] : Best{-INFINITY, kNone};
#pragma unroll
    for (int offset = 16; offset > 0; offset >>= 1) {
        Best other{__shfl_xor_sync(0xffffffffu, v.value, offset), __shfl_xor_sync(0xffffffffu, v.index, offset)};
        v = better(v, other);
    }
    return v;
}

__global__ void __launch_bounds__(kThreads) argmax_partial_kernel(const float* x, int64_t n, Best* partial) {
    __shared__ Best scratch[32];
    Best best{-INFINITY, kNone};
    for (int64_t i = int64_t(blockIdx.x) * kThreads + threadIdx.x; i < n; i += int64_t(gridDim.x) * kThreads) {
        best = better(best, Best{x[i], int32_t(i)});
    }
    best = block_best(best, scratch);
    if (threadIdx.x == 0) partial[blockIdx.x] = best;
}

__global__ void __launch_bounds__(kThreads) argmax_final_kernel(const Best* partial, int n_partial, int32_t* out) {
    __shared__ Best scratch[32];
    Best best{-INFINITY, kNone};
    for (int i = int(threadIdx.x); i < n_partial; i += kThreads) best = better(best, partial[i]);
    best = block_best(best, scratch);
    // n ≥ 1, so some value was seen: best is the answer or the lowest non-finite index.
    if (threadIdx.x == 0) *out = isfinite(best.value) ? best.index : non_finite_choice(best.index);
}

int64_t partial_blocks(int64_t n) {
    const int64_t per_block = kThreads * kItemsPerThread;
    const int64_t blocks = (n + per_block - 1) / per_block;
    return blocks < 1 ? 1 : blocks > kMaxBlocks ? kMaxBlocks : blocks;
}

}  // namespace

size_t argmax_scratch_bytes(int64_t n) { return size_t(partial_blocks(n)) * sizeof(Best); }

void argmax(const float* x, int64_t n, void* scratch, int32_t* out, cudaStream_t stream) {
    if (n <= 0 || n > int64_t(INT32_MAX) - 1) fail_message("argmax (cuda): " + std::to_string(n) + " values");
    const int64_t blocks = partial_blocks(n);
    auto* partial = static_cast<Best*>(scratch);
    argmax_partial_kernel<<<unsigned(blocks), kThreads, 0, stream>>>(x, n, partial);
    cuda_check_launch("argmax_partial");
    argmax_final_kernel<<<1, kThreads, 0, stream>>>(partial, int(blocks), out);
    cuda_check_launch("argmax_final");
}

}  // namespace deltabit::cuda
