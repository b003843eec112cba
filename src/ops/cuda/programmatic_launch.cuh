// Programmatic dependent launch (Hopper, sm_90): a kernel of the decode step may be launched while the
// kernel before it on the stream is still running, so its launch, its block scheduling and any work
// that does not read the predecessor's results (streaming its weights into registers) overlap that
// predecessor's tail. The rules that keep it exact:
//   - a kernel launched with launch_programmatic calls wait_for_predecessor() before it reads anything
//     the kernel just before it wrote and before it writes anything that kernel (or one still running
//     before it) reads or writes. wait_for_predecessor returns once the previous grid has completed and
//     its writes are visible, and that grid waited for its own predecessor, so the whole chain before
//     it is done too.
//   - allow_dependents() lets the next kernel start launching; called early, the next kernel's blocks
//     take free slots and then wait. Every kernel here calls it only after its own wait, so a kernel
//     that has started knows that all kernels two or more launches before it have completed: before its
//     wait it may read weights, and data those earlier launches wrote (the previous decode step's
//     DeltaNet state, say) — that is how weight and state fetches overlap the kernel before.
// On a GPU below sm_90, or with programmatic launch switched off, both are no-ops and launches are
// ordinary stream-ordered launches.
#pragma once

#include <cuda_runtime.h>

#include <utility>

#include "backend/cuda_buffer.h"

namespace deltabit::cuda {

__device__ __forceinline__ void wait_for_predecessor() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
}

__device__ __forceinline__ void allow_dependents() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
#endif
}

// Whether launch_programmatic sets the attribute (on by default; DELTABIT_PROGRAMMATIC_LAUNCH=0 in the
// environment, or set_programmatic_launch(false), turns it off — for measuring what it gains).
bool programmatic_launch_enabled();
void set_programmatic_launch(bool enabled);

// kernel<<<grid, block, smem, stream>>>(args...) through cudaLaunchKernelEx with the cluster attribute
// when cluster_dims.x != 0 and the programmatic-serialisation attribute when enabled: the one launch the
// two helpers below make. Throws deltabit::Error naming `name` on a launch error.
template <typename... KernelArgs, typename... Args>
void launch_with_attributes(void (*kernel)(KernelArgs...), dim3 grid, dim3 block, dim3 cluster_dims, size_t smem,
                            cudaStream_t stream, const char* name, Args&&... args) {
    cudaLaunchConfig_t config{};
    config.gridDim = grid;
    config.blockDim = block;
    config.dynamicSmemBytes = smem;
    config.stream = stream;
    cudaLaunchAttribute attributes[2];
    unsigned n_attributes = 0;
    if (cluster_dims.x != 0) {
        cudaLaunchAttribute& cluster = attributes[n_attributes++];
        cluster.id = cudaLaunchAttributeClusterDimension;
        cluster.val.clusterDim.x = cluster_dims.x;
        cluster.val.clusterDim.y = cluster_dims.y;
        cluster.val.clusterDim.z = cluster_dims.z;
    }
    if (programmatic_launch_enabled()) {
        cudaLaunchAttribute& programmatic = attributes[n_attributes++];
        programmatic.id = cudaLaunchAttributeProgrammaticStreamSerialization;
        programmatic.val.programmaticStreamSerializationAllowed = 1;
    }
    config.attrs = attributes;
    config.numAttrs = n_attributes;
    cuda_check(cudaLaunchKernelEx(&config, kernel, std::forward<Args>(args)...), name);
}

// kernel<<<grid, block, smem, stream>>>(args...), with the programmatic-serialisation attribute when
// enabled. The kernel must follow the rules above. Throws deltabit::Error naming `name` on a launch error.
template <typename... KernelArgs, typename... Args>
void launch_programmatic(void (*kernel)(KernelArgs...), dim3 grid, dim3 block, size_t smem, cudaStream_t stream,
                         const char* name, Args&&... args) {
    launch_with_attributes(kernel, grid, block, dim3(0, 0, 0), smem, stream, name, std::forward<Args>(args)...);
}

// launch_programmatic for a kernel of thread-block clusters (sm_90): cluster_dims blocks per cluster (x >= 1),
// grid a multiple of it in every dimension, at most 8 blocks per cluster (the portable size; more needs a kernel
// attribute this helper does not set). The cluster attribute is always set, the programmatic one when
// enabled; the kernel follows the rules above, the cluster's blocks all calling them.
template <typename... KernelArgs, typename... Args>
void launch_programmatic_cluster(void (*kernel)(KernelArgs...), dim3 grid, dim3 block, dim3 cluster_dims, size_t smem,
                                 cudaStream_t stream, const char* name, Args&&... args) {
    launch_with_attributes(kernel, grid, block, cluster_dims, smem, stream, name, std::forward<Args>(args)...);
}

}  // namespace deltabit::cuda
