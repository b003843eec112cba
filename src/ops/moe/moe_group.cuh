// Device pieces the grouped MoE expert kernels share (ops/moe/moe_experts_cuda.cu: the sort, the CUDA-core
// products and the combine; ops/moe/moe_experts_mma_cuda.cu: the tensor-core products): the grid's items, the
// expert an item belongs to, and the GLU the gate+up products end in.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "ops/cuda/cuda_math.cuh"
#include "ops/moe/moe_experts_cuda.h"

namespace deltabit::cuda::moe_detail {

// What the expert GEMM kernels share: the routing, the grid's items and where the outputs go. Items are
// (slot, tile) slot-major: slot s is the s-th expert with pairs, tile a run of output rows.
struct GroupArgs {
    const int32_t* counts;
    const int32_t* offsets;
    const int32_t* order;
    int64_t n_expert, top_k;
    int64_t slots, tiles;
    int64_t rows;      // output rows of one expert (F for gate/up, D for down)
    float* y;          // row p of the outputs at y + p·rows
    GluActivation act;
};

// The slot-th expert (ascending index) with at least one pair, or −1; the same in every thread. Called by every
// thread of the block.
__device__ inline int find_expert(const int32_t* counts, int64_t n_expert, int64_t slot) {
    __shared__ int s_expert;
    if (threadIdx.x < 32) {
        const int lane = int(threadIdx.x);
        int64_t seen = 0;
        bool found = false;
        for (int64_t base = 0; base < n_expert && !found; base += 32) {
            const int64_t e = base + lane;
            const bool has = e < n_expert && counts[e] > 0;
            const unsigned m = __ballot_sync(kFullWarpMask, has);
            const int n = __popc(m);
            if (seen + n > slot) {
                if (has && seen + __popc(m & ((1u << lane) - 1u)) == slot) s_expert = int(e);
                found = true;
            }
            seen += n;
        }
        if (lane == 0 && !found) s_expert = -1;
    }
    __syncthreads();
    const int e = s_expert;
    __syncthreads();  // s_expert is rewritten by the next call
    return e;
}

__device__ __forceinline__ float gelu_tanh_f(float x) {
    constexpr float kSqrt2OverPi = 0.7978845608028654f;
    return 0.5f * x * (1.0f + tanhf(kSqrt2OverPi * (x + 0.044715f * x * x * x)));
}
__device__ __forceinline__ float glu(float g, float u, GluActivation act) {
    return (act == GluActivation::silu ? silu_f(g) : gelu_tanh_f(g)) * u;
}

}  // namespace deltabit::cuda::moe_detail
