// Asynchronous global → shared copies (cp.async, sm_80+): a thread issues 16-byte copies that land in
// shared memory while it goes on computing; commit_group closes a batch, wait_group<N> blocks until at
// most N of the thread's batches are still in flight. Each thread waits only for its own copies, so a
// block reads a tile after its wait AND a __syncthreads().
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

namespace deltabit::cuda {

// 16 bytes from `global` to `shared` (both 16-byte aligned); with `fill_zero` nothing is read and the 16
// bytes are zeroed — `global` must still be a valid address.
__device__ __forceinline__ void cp_async16(void* shared, const void* global, bool fill_zero = false) {
    const unsigned dst = unsigned(__cvta_generic_to_shared(shared));
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(global), "r"(fill_zero ? 0 : 16)
                 : "memory");
}

// 8 bytes, both 8-byte aligned, through L1 (cp.async.cg takes 16 only); `fill_zero` as cp_async16's.
__device__ __forceinline__ void cp_async8(void* shared, const void* global, bool fill_zero = false) {
    const unsigned dst = unsigned(__cvta_generic_to_shared(shared));
    asm volatile("cp.async.ca.shared.global [%0], [%1], 8, %2;\n" ::"r"(dst), "l"(global), "r"(fill_zero ? 0 : 8)
                 : "memory");
}

// 4 bytes, both 4-byte aligned, through L1; `fill_zero` as cp_async16's.
__device__ __forceinline__ void cp_async4(void* shared, const void* global, bool fill_zero = false) {
    const unsigned dst = unsigned(__cvta_generic_to_shared(shared));
    asm volatile("cp.async.ca.shared.global [%0], [%1], 4, %2;\n" ::"r"(dst), "l"(global), "r"(fill_zero ? 0 : 4)
                 : "memory");
}

__device__ __forceinline__ void cp_async_commit_group() { asm volatile("cp.async.commit_group;\n" ::: "memory"); }

template <int N>
__device__ __forceinline__ void cp_async_wait_group() {
    asm volatile("cp.async.wait_group %0;\n" ::"n"(N) : "memory");
}

// The mbarrier in shared memory gets one arrival from this thread once all its earlier cp.asyncs have landed
// (.noinc: the arrival is one of those the barrier was initialised to expect). The thread does not wait.
__device__ __forceinline__ void cp_async_mbarrier_arrive(uint64_t* barrier) {
    const unsigned address = unsigned(__cvta_generic_to_shared(barrier));
    asm volatile("cp.async.mbarrier.arrive.noinc.shared::cta.b64 [%0];\n" ::"r"(address) : "memory");
}

}  // namespace deltabit::cuda
