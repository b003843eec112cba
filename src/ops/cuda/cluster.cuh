// Thread-block clusters (sm_90): the blocks of a cluster run at the same time on one GPC and can reach each
// other's shared memory. What the f16 GEMM's split k needs of them: arriving on a barrier in another block
// of the cluster, and one barrier over the whole cluster (waiting on one's own barrier with cluster-wide
// ordering is mbarrier_wait_parity<true>, ops/cuda/bulk_copy.cuh).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "ops/cuda/bulk_copy.cuh"  // shared_address, mbarrier_wait_parity

namespace deltabit::cuda {

#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900

// The address of `p` (in this block's shared memory) in the shared memory of the cluster's block `rank`.
__device__ __forceinline__ uint32_t cluster_shared_address(const void* p, uint32_t rank) {
    uint32_t remote;
    asm volatile("mapa.shared::cluster.u32 %0, %1, %2;" : "=r"(remote) : "r"(shared_address(p)), "r"(rank));
    return remote;
}

// One arrival on the barrier at `remote` (from cluster_shared_address), releasing this thread's earlier
// memory accesses — global ones included — to whoever acquires the phase cluster-wide.
__device__ __forceinline__ void mbarrier_arrive_remote(uint32_t remote) {
    asm volatile("mbarrier.arrive.release.cluster.shared::cluster.b64 _, [%0];" ::"r"(remote) : "memory");
}

// Every thread of every block of the cluster (all of them must call it, warp by warp together).
__device__ __forceinline__ void cluster_sync() {
    asm volatile("barrier.cluster.arrive.release.aligned;\n\tbarrier.cluster.wait.acquire.aligned;" ::: "memory");
}

#endif  // __CUDA_ARCH__ >= 900

}  // namespace deltabit::cuda
