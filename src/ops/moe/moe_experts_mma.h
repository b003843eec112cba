// The grouped MoE experts' products on tensor cores (ops/moe/moe_experts_mma_cuda.cu), called by moe_experts
// (ops/moe/moe_experts_cuda.cu) over the same items as its CUDA-core kernels: a block per (non-empty expert,
// tile of kMmaTileRows output rows), found on the device from the sort's counts. Device code only includes this.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "core/dtype.h"
#include "ops/matmul/matmul_cuda.h"
#include "ops/moe/moe_group.cuh"

namespace deltabit::cuda::moe_detail {

inline constexpr int kMmaWarps = 4;                   // a warp per m16 tile of weight rows
inline constexpr int kMmaTileRows = 16 * kMmaWarps;   // output rows of one item

// Quantised experts: matrix [0] (gate or down) and [1] (up; = [0] without the GLU) in the GEMV layout, and the
// int8 input rows (x's for gate+up by token, act's for down by position).
struct QuantMma {
    const uint8_t* codes[2];
    const uint16_t* scales[2];
    int64_t code_row_bytes;
    int64_t scales_per_row;
    int64_t k_steps;  // ⌈K / 32⌉: k32 steps of a row (K is a multiple of 32 for every GEMV-layout dtype)
    const int8_t* xq;
    const ActivationGroupMeta* x_meta;
    int64_t x_groups;
};

// Plain BF16 experts: matrix [0] and [1] as above ([rows][K] bf16 bits), fp32 input rows.
struct Bf16Mma {
    const uint16_t* w[2];
    int64_t cols;   // K
    const float* x;  // input row r at x + r·K
};

// Whether the int8 tensor-core kernel takes weights of type t (the GEMV layout's types).
bool quantized_mma_supports(DType t);

// One launch of `blocks` blocks (g.tiles = ⌈g.rows / kMmaTileRows⌉); glu: gate and up, stored as act(gate, up).
void launch_quantized_mma(const GroupArgs& g, const QuantMma& m, DType t, bool glu, unsigned blocks,
                          cudaStream_t stream);
void launch_bf16_mma(const GroupArgs& g, const Bf16Mma& m, bool glu, unsigned blocks, cudaStream_t stream);

}  // namespace deltabit::cuda::moe_detail
