// The timing of the trainer's CUDA micro-benchmarks (bench_train_gemm_cuda, bench_train_delta_rule_cuda,
// bench_train_attention_cuda): the kernels run on the default stream, as the trainer's do, so a round is
// `calls` back-to-back calls between two events on it (no graph). µs per call: `warm_up` calls and a
// device synchronisation first, then the median of 7 rounds, divided by the calls.
// Also the benchmarks' random operands. Include only where CUDA is built (the benchmarks' DELTABIT_HAVE_CUDA block).
#pragma once

#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <vector>

#include "backend/cuda_buffer.h"

namespace deltabit::bench {

template <typename F>
double median_us_per_call(int warm_up, int calls, F&& call) {
    using deltabit::cuda::cuda_check;
    for (int i = 0; i < warm_up; ++i) call();
    cuda_check(cudaDeviceSynchronize(), "warm-up");
    cudaEvent_t start{}, stop{};
    cuda_check(cudaEventCreate(&start), "event");
    cuda_check(cudaEventCreate(&stop), "event");
    std::vector<float> rounds_ms;
    for (int r = 0; r < 7; ++r) {
        cuda_check(cudaEventRecord(start, nullptr), "record");
        for (int i = 0; i < calls; ++i) call();
        cuda_check(cudaEventRecord(stop, nullptr), "record");
        cuda_check(cudaEventSynchronize(stop), "sync");
        float ms = 0.0f;
        cuda_check(cudaEventElapsedTime(&ms, start, stop), "elapsed");
        rounds_ms.push_back(ms);
    }
    cudaEventDestroy(start);
    cudaEventDestroy(stop);
    std::sort(rounds_ms.begin(), rounds_ms.end());
    return 1000.0 * rounds_ms[3] / calls;
}

// n floats uniform in [-1, 1] (xorshift64*) on the device: zeros would run cooler than real operands.
inline deltabit::cuda::DeviceBuffer random_buffer(size_t n, uint64_t seed) {
    std::vector<float> v(n);
    for (float& x : v) {
        seed ^= seed >> 12;
        seed ^= seed << 25;
        seed ^= seed >> 27;
        x = float((seed * 2685821657736338717ull) >> 40) / float(1 << 23) - 1.0f;
    }
    deltabit::cuda::DeviceBuffer b(n * sizeof(float));
    b.upload(v.data(), b.bytes());
    return b;
}

}  // namespace deltabit::bench
