// The smallest CUDA piece: find out whether a usable GPU is present, and a trivial kernel (axpy over
// host arrays) that proves the toolchain, the launch and the copies work. Compiled only with CUDA;
// callers check DELTABIT_HAVE_CUDA and cuda_device_count() and skip cleanly otherwise.
#pragma once

#include <cstddef>
#include <string>

namespace deltabit::cuda {

// Number of CUDA devices the runtime can use; 0 when there is no driver or no GPU (never throws).
int device_count();

// "NVIDIA H200, sm_90, 132 SMs, 139.8 GiB" for device 0; empty when there is none.
std::string device_summary();

// y[i] = a·x[i] + y[i] on the GPU, for host arrays of n floats. Throws deltabit::Error on a CUDA error.
void axpy(float a, const float* x, float* y, size_t n);

}  // namespace deltabit::cuda
