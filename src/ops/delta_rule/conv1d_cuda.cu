// CUDA conv1d_causal_silu (ops/conv1d.h). Two launches on the stream:
//   1. every out[t][c] (grid-stride over T·C, channels fastest so a warp reads consecutive channels),
//      reading window rows from the old state or from x;
//   2. the state roll, one thread per channel, which may only run after every output has read the old
//      state (hence a second launch rather than a fused tail).
// The K-term sum is fp32 fmaf in tap order (the reference sums in double).
// conv1d_split_l2 is the gated DeltaNet prompt's conv, split into q, k and v and L2 norm of q and k in
// one launch (then the same state roll): the conv's 3 copies and 2 norm launches a layer were host-bound
// gaps on the GPU (the host launching ~17 µs a call against ~3 µs of work each). The model's prompt path
// takes it; conv1d_causal_silu stays for shapes it does not serve.
#include <string>

#include "backend/cuda_buffer.h"
#include "ops/cuda/async_copy.cuh"
#include "ops/cuda/cuda_launch.h"
#include "ops/cuda/cuda_math.cuh"
#include "ops/elementwise/elementwise_cuda.h"
#include "ops/delta_rule/delta_rule_cuda.h"

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

// The gated DeltaNet's prompt input (conv1d_split_l2): one block per (slab, unit), a unit being one head of q
// or k (key_dim channels, L2-normalised) or up to kSplitUnitChannels channels of v. The block copies the
// unit's window rows for the slab into shared memory (every copy in flight at once), then each warp takes
// tokens in turn: lane l owns the unit's channels l, l + 32, ... with their taps in registers, so the sum of
// squares is l2_norm's warp-per-row sum term for term (each lane's channels in order, then warp_sum). (One
// warp walking its slab with the window in registers, one load after another, took 70 µs a Bonsai-27B layer.)
constexpr int64_t kSlabTokens = 16;      // tokens a block: the K − 1 inputs before them are copied twice
constexpr int kSplitLaneChannels = 8;  // key_dim ≤ 256
constexpr int64_t kSplitUnitChannels = 32 * kSplitLaneChannels;
constexpr int kSplitWarps = 8;
constexpr int kSplitThreads = 32 * kSplitWarps;

struct SplitArgs {
    const float* x;
    const float* w;
    const float* state;
    float* q;
    float* k;
    float* v;
    int64_t n_tokens, n_key_heads, key_dim, value_dim, channels, n_slabs;
    float eps;
};

template <int K>
__global__ void __launch_bounds__(kSplitThreads) conv1d_split_l2_kernel(SplitArgs a) {
    constexpr int64_t history = K - 1;
    __shared__ float window[kSlabTokens + K - 1][kSplitUnitChannels];
    const int lane = int(threadIdx.x) & 31, warp = int(threadIdx.x) >> 5;
    const int64_t key_units = 2 * a.n_key_heads;
    const int64_t units = key_units + (a.value_dim + kSplitUnitChannels - 1) / kSplitUnitChannels;
    for (int64_t item = blockIdx.x; item < units * a.n_slabs; item += gridDim.x) {
        const int64_t u = item % units, t_begin = (item / units) * kSlabTokens;
        const int64_t t_end = min(a.n_tokens, t_begin + kSlabTokens);
        const bool normalised = u < key_units;
        int64_t first, row;
        int width;
        float* dst;
        if (normalised) {
            const bool is_k = u >= a.n_key_heads;
            const int64_t head = is_k ? u - a.n_key_heads : u;
            first = (is_k ? a.n_key_heads : 0) * a.key_dim + head * a.key_dim;
            width = int(a.key_dim);
            row = a.n_key_heads * a.key_dim;
            dst = (is_k ? a.k : a.q) + head * a.key_dim;
        } else {
            const int64_t j = (u - key_units) * kSplitUnitChannels;
            first = 2 * a.n_key_heads * a.key_dim + j;
            width = int(min(kSplitUnitChannels, a.value_dim - j));
            row = a.value_dim;
            dst = a.v + j;
        }
        // Window rows t_begin .. t_end + K − 2 of concat(state, x).
        const int rows = int(t_end - t_begin) + K - 1;
        for (int e = int(threadIdx.x); e < rows * width; e += kSplitThreads) {
            const int r = e / width, c = e % width;
            cp_async4(&window[r][c], window_row(a.state, a.x, t_begin + r, history, a.channels) + first + c);
        }
        cp_async_commit_group();
        float taps[kSplitLaneChannels][K];
#pragma unroll
        for (int m = 0; m < kSplitLaneChannels; ++m) {
            const int c = lane + 32 * m;
#pragma unroll
            for (int j = 0; j < K; ++j) taps[m][j] = c < width ? a.w[(first + c) * K + j] : 0.0f;
        }
        cp_async_wait_group<0>();
        __syncthreads();
        for (int64_t t = t_begin + warp; t < t_end; t += kSplitWarps) {
            const int r0 = int(t - t_begin);
            float y[kSplitLaneChannels];
            float sum_sq = 0.0f;
#pragma unroll
            for (int m = 0; m < kSplitLaneChannels; ++m) {
                const int c = lane + 32 * m;
                if (c >= width) continue;
                float sum = 0.0f;
#pragma unroll
                for (int j = 0; j < K; ++j) sum = fmaf(taps[m][j], window[r0 + j][c], sum);
                y[m] = silu_f(sum);
                sum_sq = fmaf(y[m], y[m], sum_sq);
            }
            // l2_norm's scale (ops/elementwise/l2_norm_cuda.cu) from l2_norm's sum; `normalised` is the block's.
            const float scale = normalised ? 1.0f / sqrtf(warp_sum(sum_sq) + a.eps) : 1.0f;
#pragma unroll
            for (int m = 0; m < kSplitLaneChannels; ++m) {
                const int c = lane + 32 * m;
                if (c < width) dst[t * row + c] = normalised ? y[m] * scale : y[m];
            }
        }
        __syncthreads();  // the window is refilled by the next item
    }
}

template <int K>
void launch_split_kernel(const SplitArgs& a, cudaStream_t stream) {
    const int64_t units = 2 * a.n_key_heads + (a.value_dim + kSplitUnitChannels - 1) / kSplitUnitChannels;
    conv1d_split_l2_kernel<K><<<grid_blocks(units * a.n_slabs), kSplitThreads, 0, stream>>>(a);
}

void roll_state(const float* x, float* state, int64_t n_tokens, int64_t channels, int64_t kernel,
                cudaStream_t stream) {
    if (kernel <= 1) return;  // no history to keep
    conv1d_state_kernel<<<grid_blocks(channels, kThreads), kThreads, 0, stream>>>(x, state, n_tokens, channels,
                                                                                    kernel - 1);
    cuda_check_launch("conv1d_causal_silu state");
}

}  // namespace

bool conv1d_split_l2_supported(int64_t key_dim, int64_t kernel) {
    return key_dim > 0 && key_dim <= kSplitUnitChannels && kernel >= 1 && kernel <= 4 &&
           norm_threads_per_row(key_dim) == 32;
}

void conv1d_split_l2(const float* x, const float* w, float* state, int64_t n_tokens, int64_t n_key_heads,
                     int64_t key_dim, int64_t value_dim, int64_t kernel, float eps, float* q, float* k, float* v,
                     cudaStream_t stream) {
    if (!conv1d_split_l2_supported(key_dim, kernel) || n_key_heads < 0 || value_dim < 0)
        fail_message("cuda conv1d_split_l2: key_dim " + std::to_string(key_dim) + " (1 to " +
                     std::to_string(kSplitUnitChannels) + ") and kernel " + std::to_string(kernel) +
                     " (1 to 4) is not a supported shape; run conv1d_causal_silu and l2_norm");
    const int64_t channels = 2 * n_key_heads * key_dim + value_dim;
    if (n_tokens <= 0 || channels <= 0) return;
    const SplitArgs a{x, w, state, q, k, v, n_tokens, n_key_heads, key_dim, value_dim, channels,
                      (n_tokens + kSlabTokens - 1) / kSlabTokens, eps};
    switch (kernel) {
        case 1: launch_split_kernel<1>(a, stream); break;
        case 2: launch_split_kernel<2>(a, stream); break;
        case 3: launch_split_kernel<3>(a, stream); break;
        default: launch_split_kernel<4>(a, stream); break;
    }
    cuda_check_launch("conv1d_split_l2");
    roll_state(x, state, n_tokens, channels, kernel, stream);
}

void conv1d_causal_silu(const float* x, const float* w, float* state, int64_t n_tokens, int64_t channels,
                        int64_t kernel, float* out, cudaStream_t stream) {
    if (n_tokens <= 0 || channels <= 0) return;
    conv1d_out_kernel<<<grid_blocks(n_tokens * channels, kThreads), kThreads, 0, stream>>>(x, w, state, n_tokens,
                                                                                             channels, kernel, out);
    cuda_check_launch("conv1d_causal_silu outputs");
    roll_state(x, state, n_tokens, channels, kernel, stream);
}

}  // namespace deltabit::cuda
