// DELTABIT_HOST_DEVICE marks a plain inline function that CUDA kernels share with the host code (the naive
// references and the kernels then compute the same bits from one definition); empty outside nvcc.
#pragma once

#if defined(__CUDACC__)
#define DELTABIT_HOST_DEVICE __host__ __device__
#else
#define DELTABIT_HOST_DEVICE
#endif
