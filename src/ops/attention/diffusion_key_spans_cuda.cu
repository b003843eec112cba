// CUDA diffusion_key_spans (contract: ops/attention/attention_cuda.h; rule: ops/attention_spans.h): one
// thread per query, the reference's two lines, grid-stride.
#include "backend/cuda_buffer.h"
#include "ops/attention/attention_cuda.h"
#include "ops/cuda/cuda_launch.h"

namespace deltabit::cuda {

namespace {

constexpr int kThreads = 256;

__global__ void diffusion_key_spans_kernel(int64_t n_queries, int64_t n_cached, bool causal, int64_t window,
                                           int64_t* key_begin, int64_t* key_end) {
    const int64_t stride = int64_t(gridDim.x) * blockDim.x;
    for (int64_t t = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; t < n_queries; t += stride) {
        int64_t begin = 0, end = n_cached + n_queries;  // the decoder: every key, no mask
        if (causal) {
            end = n_cached + t + 1;  // itself and everything before it...
            if (window > 0) begin = end - window > 0 ? end - window : 0;  // ...within W
        }
        key_begin[t] = begin;
        key_end[t] = end;
    }
}

}  // namespace

void diffusion_key_spans(int64_t n_queries, int64_t n_cached, bool causal, int64_t window, int64_t* key_begin,
                         int64_t* key_end, cudaStream_t stream) {
    if (n_queries <= 0) return;
    diffusion_key_spans_kernel<<<grid_blocks(n_queries, kThreads), kThreads, 0, stream>>>(n_queries, n_cached, causal,
                                                                                          window, key_begin, key_end);
    cuda_check_launch("diffusion_key_spans");
}

}  // namespace deltabit::cuda
