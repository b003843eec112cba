// CUDA conv1d_causal_silu (ops/conv1d.h). Two launches on the stream:
//   1. every out[t][c] (grid-stride over T·C, channels fastest so a warp reads consecutive channels),
//      reading window rows from the old state or from x;
//   2. the state roll, one thread per channel, which may only run after every output has read the old
//      state (hence a second launch rather than a fused tail).
// The K-term sum is fp32 fmaf in tap order (the reference sums in double).
#include "backend/cuda_buffer.h"
#include "ops/cuda_launch.h"
#include "ops/cuda_math.cuh"
#include "ops/ops_cuda.h"

namespace deltabit::cuda {

namespace {

constexpr int kThreads = 256;

// Row `row` of window = concat(state, x) along time.
__device__ __forceinline__ const float* window_row(const float* state, const float* x, int64_t row, int64_t history,
                                                   int64_t channels) {
    return row < history ? state + row * channels : x + (row - history) * channels;
}

__global__ void conv1d_out_kernel(const float* x, const float* w, const float* state, int64_t n_tokens,
                                  int64_t channels, int64_t kernel, float* out) {
    const int64_t history = kernel - 1;
    const int64_t n = n_tokens * channels;
    const int64_t stride = int64_t(gridDim.x) * blockDim.x;
    for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride) {
        const int64_t t = i / channels, c = i % channels;
        float sum = 0.0f;
        for (int64_t j = 0; j < kernel; ++j) {
            sum = fmaf(w[c * kernel + j], window_row(state, x, t + j, history, channels)[c], sum);
        }
        out[i] = silu_f(sum);
    }
}

// New state row r = window row T + r. Rows are rewritten in increasing r, and row T + r > r is read
// before anything overwrites it, so the roll is safe in place.
__global__ void conv1d_state_kernel(const float* x, float* state, int64_t n_tokens, int64_t channels,
                                    int64_t history) {
    const int64_t stride = int64_t(gridDim.x) * blockDim.x;
    for (int64_t c = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; c < channels; c += stride) {
        for (int64_t r = 0; r < history; ++r) {
            state[r * channels + c] = window_row(state, x, n_tokens + r, history, channels)[c];
        }
    }
}

}  // namespace

void conv1d_causal_silu(const float* x, const float* w, float* state, int64_t n_tokens, int64_t channels,
                        int64_t kernel, float* out, cudaStream_t stream) {
    if (n_tokens <= 0 || channels <= 0) return;
    conv1d_out_kernel<<<grid_blocks(n_tokens * channels, kThreads), kThreads, 0, stream>>>(x, w, state, n_tokens,
                                                                                             channels, kernel, out);
    cuda_check_launch("conv1d_causal_silu outputs");
    if (kernel <= 1) return;  // no history to keep
    conv1d_state_kernel<<<grid_blocks(channels, kThreads), kThreads, 0, stream>>>(x, state, n_tokens, channels,
                                                                                    kernel - 1);
    cuda_check_launch("conv1d_causal_silu state");
}

}  // namespace deltabit::cuda
