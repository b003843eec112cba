// Hopper's bulk copies (cp.async.bulk, sm_90): one thread asks the SM's copy engine (TMA) for a contiguous
// run of bytes from global into shared memory, and a transaction barrier (mbarrier) in shared memory counts
// the bytes as they land. The issuing thread announces the bytes (arrive_expect_tx), the copies complete
// them, and any thread waits for the barrier's phase with its parity. No registers hold the data on the way,
// so a block can have its whole share of a matrix in flight before it has anything to compute.
//
// Rules: source and destination 16-byte aligned, sizes a multiple of 16; a barrier's phase collects at most
// 2^20 − 1 bytes; shared memory the generic proxy (ordinary loads) has read is handed back to the async proxy
// with fence_proxy_async_shared() before a bulk copy overwrites it.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

namespace deltabit::cuda {

__device__ __forceinline__ uint32_t shared_address(const void* p) { return uint32_t(__cvta_generic_to_shared(p)); }

#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900

__device__ __forceinline__ void mbarrier_init(uint64_t* barrier, uint32_t arrivals) {
    asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" ::"r"(shared_address(barrier)), "r"(arrivals) : "memory");
}

// Makes initialised barriers visible to the copy engine; a __syncthreads() after it, to the other threads.
__device__ __forceinline__ void fence_mbarrier_init() { asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory"); }

// One arrival that also announces `bytes` more to come from bulk copies in this phase.
__device__ __forceinline__ void mbarrier_arrive_expect_tx(uint64_t* barrier, uint32_t bytes) {
    asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(shared_address(barrier)), "r"(bytes)
                 : "memory");
}

// One arrival (release: this thread's earlier memory accesses are ordered before the phase completes).
__device__ __forceinline__ void mbarrier_arrive(uint64_t* barrier) {
    asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];" ::"r"(shared_address(barrier)) : "memory");
}

// Blocks until the barrier's phase of this parity has completed (its bytes landed and are visible). Cluster:
// acquire at cluster scope, for phases completed by arrivals from other blocks of a cluster (ops/cuda/cluster.cuh).
template <bool Cluster = false>
__device__ __forceinline__ void mbarrier_wait_parity(uint64_t* barrier, uint32_t parity) {
    const uint32_t address = shared_address(barrier);
    uint32_t done = 0;
    do {
        if constexpr (Cluster)
            asm volatile(
                "{\n\t.reg .pred p;\n\t"
                "mbarrier.try_wait.parity.acquire.cluster.shared::cta.b64 p, [%1], %2;\n\t"
                "selp.u32 %0, 1, 0, p;\n\t}"
                : "=r"(done)
                : "r"(address), "r"(parity)
                : "memory");
        else
            asm volatile(
                "{\n\t.reg .pred p;\n\t"
                "mbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\n\t"
                "selp.u32 %0, 1, 0, p;\n\t}"
                : "=r"(done)
                : "r"(address), "r"(parity)
                : "memory");
    } while (done == 0);
}

// An L2 policy for data read exactly once (weights): evicted first, so it does not push out what is reused.
__device__ __forceinline__ uint64_t l2_evict_first_policy() {
    uint64_t policy;
    asm volatile("createpolicy.fractional.L2::evict_first.b64 %0, 1.0;" : "=l"(policy));
    return policy;
}

__device__ __forceinline__ void bulk_copy_to_shared(void* shared, const void* global, uint32_t bytes, uint64_t* barrier,
                                                    uint64_t l2_policy) {
    asm volatile(
        "cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes.L2::cache_hint [%0], [%1], %2, [%3], %4;" ::"r"(
            shared_address(shared)),
        "l"(global), "r"(bytes), "r"(shared_address(barrier)), "l"(l2_policy)
        : "memory");
}

// One box of a 2-D tensor map (ops/cuda/tensor_map_cuda.h) at element (col, row) into `shared` (128-byte aligned;
// 1024 with the 128-byte swizzle), its bytes counted on `barrier` as a bulk copy's are. `map` is the address
// of a __grid_constant__ kernel parameter (or of a map in global memory).
__device__ __forceinline__ void tensor_copy_2d_to_shared(void* shared, const void* map, int col, int row,
                                                         uint64_t* barrier) {
    asm volatile(
        "cp.async.bulk.tensor.2d.shared::cluster.global.tile.mbarrier::complete_tx::bytes [%0], [%1, {%2, %3}], [%4];" ::
            "r"(shared_address(shared)),
        "l"(map), "r"(col), "r"(row), "r"(shared_address(barrier))
        : "memory");
}

// Orders this thread's (and, after a barrier, its block's) earlier shared-memory accesses through the generic
// proxy (ordinary loads and stores, cp.async) before later ones through the async proxy (bulk copies, wgmma).
__device__ __forceinline__ void fence_proxy_async_shared() { asm volatile("fence.proxy.async.shared::cta;" ::: "memory"); }

#endif  // __CUDA_ARCH__ >= 900

}  // namespace deltabit::cuda
