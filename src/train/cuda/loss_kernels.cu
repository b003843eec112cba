// The softmax and cross entropy on one chunk of LM-head logits (train/cuda/train_model.cu forms the
// logits for a chunk of positions at a time, so the full [N][V] logits never exist): one block per row,
// the loss summed in double, and the row replaced by its gradient scale·(softmax − onehot).
#include "train/cuda/device_common.cuh"
#include "train/cuda/kernels.h"

namespace deltabit::train::cuda {
namespace {

using deltabit::cuda::cuda_check_launch;

template <bool kGradient>
__global__ void cross_entropy_kernel(float* logits, const int32_t* targets, int64_t V, float scale,
                                     double* loss_sum) {
    __shared__ float reduce[32];
    const int64_t r = blockIdx.x;
    float* row = logits + r * V;
    const int32_t target = targets[r];
    if (target < 0) {
        if (kGradient)
            for (int64_t i = threadIdx.x; i < V; i += blockDim.x) row[i] = 0.0f;
        return;
    }
    float local_max = -INFINITY;
    for (int64_t i = threadIdx.x; i < V; i += blockDim.x) local_max = fmaxf(local_max, row[i]);
    const float row_max = block_max(local_max, reduce);
    float local_sum = 0.0f;
    for (int64_t i = threadIdx.x; i < V; i += blockDim.x) local_sum += expf(row[i] - row_max);
    const float sum = block_sum(local_sum, reduce);
    const float log_sum = logf(sum) + row_max;
    if (threadIdx.x == 0) atomicAdd(loss_sum, double(log_sum) - double(row[target]));
    if (kGradient) {
        __syncthreads();  // row[target] is read above before it is overwritten below
        for (int64_t i = threadIdx.x; i < V; i += blockDim.x)
            row[i] = scale * (expf(row[i] - log_sum) - (i == target ? 1.0f : 0.0f));
    }
}

}  // namespace

void cross_entropy_rows(float* logits, const int32_t* targets, int64_t rows, int64_t V, float scale,
                        double* loss_sum) {
    if (rows == 0) return;
    cross_entropy_kernel<true><<<unsigned(rows), 256>>>(logits, targets, V, scale, loss_sum);
    cuda_check_launch("cross_entropy_kernel");
}

void cross_entropy_loss_rows(const float* logits, const int32_t* targets, int64_t rows, int64_t V,
                             double* loss_sum) {
    if (rows == 0) return;
    cross_entropy_kernel<false><<<unsigned(rows), 256>>>(const_cast<float*>(logits), targets, V, 0.0f, loss_sum);
    cuda_check_launch("cross_entropy_kernel");
}

}  // namespace deltabit::train::cuda
