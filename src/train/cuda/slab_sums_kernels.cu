// The second stage of the trainer's deterministic column sums (device_common.cuh: add_slab_sums).
#include "train/cuda/device_common.cuh"

namespace deltabit::train::cuda {
namespace {

constexpr int kColumns = 32, kLanes = 32;

// Block (32 columns, 32 lanes): lane y sums slabs y, y + 32, … of its column, then lane 0 adds the 32
// lane sums in order: the same additions in the same order on every run.
__global__ void add_slab_sums_kernel(const float* partials, int64_t slabs, int64_t width, float* out) {
    __shared__ float lane_sums[kLanes][kColumns + 1];
    const int64_t column = int64_t(blockIdx.x) * kColumns + threadIdx.x;
    float sum = 0.0f;
    if (column < width)
        for (int64_t s = threadIdx.y; s < slabs; s += kLanes) sum += partials[s * width + column];
    lane_sums[threadIdx.y][threadIdx.x] = sum;
    __syncthreads();
    if (threadIdx.y != 0 || column >= width) return;
    float total = 0.0f;
    for (int k = 0; k < kLanes; ++k) total += lane_sums[k][threadIdx.x];
    out[column] += total;
}

}  // namespace

void add_slab_sums(const float* partials, int64_t slabs, int64_t width, float* out) {
    if (slabs <= 0 || width <= 0) return;
    add_slab_sums_kernel<<<unsigned((width + kColumns - 1) / kColumns), dim3(kColumns, kLanes)>>>(partials, slabs,
                                                                                                  width, out);
    deltabit::cuda::cuda_check_launch("add_slab_sums_kernel");
}

}  // namespace deltabit::train::cuda
