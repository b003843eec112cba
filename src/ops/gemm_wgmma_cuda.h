// The Q1_0 prefill GEMM on Hopper's warpgroup tensor cores (wgmma, sm_90a): the tile
// GemmTile::wgmma_m128_n128 of gemm_quantized (ops/prefill_cuda.h), reached only through it. Same contract
// and the same fp32 terms, added in the same k order, as the mma.sync tiles of gemm_quant_cuda.cu: its y is
// theirs bit for bit.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <string>

#include "ops/prefill_cuda.h"

namespace deltabit::cuda::detail {

// True when this build holds sm_90a machine code (CMAKE_CUDA_ARCHITECTURES with 90a, the default) and the
// current device runs it (compute capability 9.0).
bool wgmma_gemm_available();

struct WgmmaGemmLaunch {
    int64_t tiles = 0, blocks = 0;
};
// y = x · Wᵀ for Q1_0 weights; the caller has checked the shapes and wgmma_gemm_available().
// max_blocks as gemm_quantized's (0: one block per SM, each walking tiles grid-stride).
WgmmaGemmLaunch gemm_q1_0_wgmma(const QuantizedActivationRows& x, const GemvWeightView& w, float* y,
                                cudaStream_t stream, int64_t max_blocks);

// The same product by the warp-specialised kernel (gemm_wgmma_ws_cuda.cu; GemmTile::wgmma_ws_m128_n128, the
// automatic choice for Q1_0 prompts): a loading warpgroup and two computing ones, the weights the wgmma's
// register operand. Same preconditions and the same y, bit for bit.
// `pipeline` picks the depth of its stage ring and how copies are awaited (ws_pipeline_name; the benchmark
// compares them); -1 is the default. `tokens_per_tile` 128 (GemmTile::wgmma_ws_m128_n128), or 64, 32, 16
// (the narrower tiles for short prompts, each with its own ring; `pipeline` applies to 128 only).
WgmmaGemmLaunch gemm_q1_0_wgmma_ws(const QuantizedActivationRows& x, const GemvWeightView& w, float* y,
                                   cudaStream_t stream, int64_t max_blocks, int pipeline = -1,
                                   int tokens_per_tile = 128);
int ws_pipeline_count();
std::string ws_pipeline_name(int pipeline);
constexpr int kDefaultWsPipeline = 2;  // 8 stages, copies arrive (gemm_wgmma_ws_cuda.cu kPipelines)

}  // namespace deltabit::cuda::detail
