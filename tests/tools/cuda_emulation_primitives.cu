// The emulation's own thread model against answers worked out by hand (test_cuda_emulation.py): 3-D grids
// and blocks, a block size that leaves a short last warp, the shuffles with and without width, ballot,
// atomics on shared and global memory, and static __shared__ declarations of several names. Host code and
// kernels in one file, as a kernel file with its driver would be after transform.py. Exit status 0: all
// agree; otherwise each disagreement is printed.
#include <cuda_runtime.h>

#include <cstdio>
#include <vector>

namespace {

// Every thread writes its global linear index where the grid's layout puts it.
__global__ void index_kernel(int* out) {
    const int block = int(blockIdx.x + gridDim.x * (blockIdx.y + gridDim.y * blockIdx.z));
    const int thread = int(threadIdx.x + blockDim.x * (threadIdx.y + blockDim.y * threadIdx.z));
    const int threads = int(blockDim.x * blockDim.y * blockDim.z);
    out[block * threads + thread] = block * 1000 + thread;
}

// 40 threads: warp 0 full, warp 1 of 8 lanes. Per thread 6 results.
__global__ void warp_kernel(int* out, unsigned* counter) {
    __shared__ int block_count, per_warp[2];
    const int lane = int(threadIdx.x) % 32, warp = int(threadIdx.x) / 32;
    if (threadIdx.x == 0) block_count = 0;
    if (lane == 0) per_warp[warp] = 0;
    __syncthreads();
    atomicAdd(&block_count, 1);
    atomicAdd(&per_warp[warp], lane);
    atomicAdd(counter, 1u);
    int* mine = out + 6 * threadIdx.x;
    mine[0] = __shfl_xor_sync(0xffffffffu, 100 + lane, 1);
    mine[1] = __shfl_down_sync(0xffffffffu, 100 + lane, 3, 8);
    mine[2] = __shfl_up_sync(0xffffffffu, 100 + lane, 2);
    mine[3] = __shfl_sync(0xffffffffu, 100 + lane, 5, 16);
    mine[4] = int(__ballot_sync(0xffffffffu, lane % 3 == 0));
    __syncthreads();
    mine[5] = block_count * 10000 + per_warp[warp];
}

int failures = 0;
void expect(bool ok, const char* what, int i, long got, long want) {
    if (!ok && failures++ < 10) std::printf("%s[%d]: got %ld, want %ld\n", what, i, got, want);
}

}  // namespace

int main() {
    const dim3 grid(3, 2, 2), block(8, 4, 2);
    std::vector<int> index(12 * 64, -1);
    index_kernel<<<grid, block>>>(index.data());
    for (int i = 0; i < int(index.size()); ++i)
        expect(index[i] == i / 64 * 1000 + i % 64, "index", i, index[i], i / 64 * 1000 + i % 64);

    std::vector<int> out(6 * 40, -1);
    unsigned counter = 0;
    warp_kernel<<<2, 40, 0, nullptr>>>(out.data(), &counter);
    expect(counter == 80, "global atomicAdd", 0, counter, 80);
    for (int t = 0; t < 40; ++t) {
        const int lane = t % 32, size = t < 32 ? 32 : 8;  // lanes in this thread's warp
        const int* r = out.data() + 6 * t;
        const int xor_src = (lane ^ 1) < size ? lane ^ 1 : lane;
        const int down_src = lane % 8 + 3 < 8 && lane + 3 < size ? lane + 3 : lane;
        const int up_src = lane >= 2 ? lane - 2 : lane;
        const int idx_src = lane - lane % 16 + 5 < size ? lane - lane % 16 + 5 : lane;
        unsigned ballot = 0;
        for (int l = 0; l < size; ++l) ballot |= unsigned(l % 3 == 0) << l;
        const int lane_sum = size * (size - 1) / 2;
        expect(r[0] == 100 + xor_src, "shfl_xor", t, r[0], 100 + xor_src);
        expect(r[1] == 100 + down_src, "shfl_down width 8", t, r[1], 100 + down_src);
        expect(r[2] == 100 + up_src, "shfl_up", t, r[2], 100 + up_src);
        expect(r[3] == 100 + idx_src, "shfl width 16", t, r[3], 100 + idx_src);
        expect(unsigned(r[4]) == ballot, "ballot", t, r[4], long(ballot));
        expect(r[5] == 40 * 10000 + lane_sum, "shared atomicAdd", t, r[5], 40 * 10000 + lane_sum);
    }
    std::printf("%s\n", failures == 0 ? "primitives agree" : "primitives DISAGREE");
    return failures == 0 ? 0 : 1;
}
