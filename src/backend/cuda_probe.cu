#include "backend/cuda_probe.h"
#include "core/error.h"

#include <cuda_runtime.h>
#include <cstdio>
#include <string>

#include <algorithm>

namespace deltabit::cuda {

namespace {

void check(cudaError_t status, const char* what) {
    if (status != cudaSuccess) fail_message(std::string("cuda: ") + what + ": " + cudaGetErrorString(status));
}

__global__ void axpy_kernel(float a, const float* x, float* y, size_t n) {
    // Grid-stride loop: any n runs with a grid inside the device limits.
    for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < n; i += size_t(gridDim.x) * blockDim.x) {
        y[i] = a * x[i] + y[i];
    }
}

}  // namespace

int device_count() {
    int count = 0;
    if (cudaGetDeviceCount(&count) != cudaSuccess) {
        cudaGetLastError();  // clear the sticky "no driver" error so later calls see a clean state
        return 0;
    }
    return count;
}

std::string device_summary() {
    if (device_count() == 0) return {};
    cudaDeviceProp prop{};
    if (cudaGetDeviceProperties(&prop, 0) != cudaSuccess) return {};
    char summary[320];
    std::snprintf(summary, sizeof summary, "%s, sm_%d%d, %d SMs, %.1f GiB", prop.name, prop.major, prop.minor,
                  prop.multiProcessorCount, double(prop.totalGlobalMem) / (1024.0 * 1024 * 1024));
    return summary;
}

void axpy(float a, const float* x, float* y, size_t n) {
    if (n == 0) return;
    float* dx = nullptr;
    float* dy = nullptr;
    check(cudaMalloc(&dx, n * sizeof(float)), "cudaMalloc x");
    check(cudaMalloc(&dy, n * sizeof(float)), "cudaMalloc y");
    check(cudaMemcpy(dx, x, n * sizeof(float), cudaMemcpyHostToDevice), "copy x");
    check(cudaMemcpy(dy, y, n * sizeof(float), cudaMemcpyHostToDevice), "copy y");
    const unsigned blocks = unsigned(std::min<size_t>((n + 255) / 256, 65535));
    axpy_kernel<<<blocks, 256>>>(a, dx, dy, n);
    check(cudaGetLastError(), "axpy launch");
    check(cudaMemcpy(y, dy, n * sizeof(float), cudaMemcpyDeviceToHost), "copy y back");
    cudaFree(dx);
    cudaFree(dy);
}

}  // namespace deltabit::cuda
