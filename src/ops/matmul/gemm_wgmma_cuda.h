// The Q1_0 prefill GEMM on Hopper's warpgroup tensor cores (wgmma, sm_90a): the tile
// GemmTile::wgmma_m128_n128 of gemm_quantized (ops/matmul/gemm_cuda.h), reached only through it. Same contract
// and the same fp32 terms, added in the same k order, as the mma.sync tiles of gemm_quant_cuda.cu: its y is
// theirs bit for bit.
#pragma once

#include <cuda_runtime.h>

#include <array>
#include <cstdint>
#include <string>

#include "ops/matmul/gemm_cuda.h"

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
// `y_row_stride` > 0: y is w's column block of a wider output, a token's row `y_row_stride` floats apart
// (0: w.rows) — how the automatic choice runs a matrix's last weight rows with another tile.
WgmmaGemmLaunch gemm_q1_0_wgmma_ws(const QuantizedActivationRows& x, const GemvWeightView& w, float* y,
                                   cudaStream_t stream, int64_t max_blocks, int pipeline = -1,
                                   int tokens_per_tile = 128, int64_t y_row_stride = 0);
// A Q1_0 matrix on the warp-specialised 128-token tile, one block per SM walking its tiles, takes
// ceil(tiles / SMs) rounds, and the last is often mostly idle (Bonsai-27B ffn_down at 512 tokens: 160 tiles
// on 132 SMs, a second round for 28). The automatic choice (gemm_quantized) cuts such a matrix after the
// weight rows that fill whole rounds and runs the rest as a second launch of a narrower tile, whose more,
// cheaper tiles fill that last round better. Each output is still computed by one block in the same k order,
// so y is the one-launch y bit for bit. This picks the cut and the narrow tile from measured tile costs;
// head_rows is a multiple of 128 and may be 0 (the whole matrix on the narrow tile).
struct WsTailPlan {
    int64_t head_rows = 0;  // rows on the 128-token tile
    int tail_tokens = 0;    // tokens a tile of the narrow tile for the other rows; 0: no cut, one launch
};
WsTailPlan ws_tail_plan(int64_t tokens, int64_t rows, int sms);

// gemm_q1_0_half's automatic choice (gemm_half_cuda.cu), from measured costs of a round of each tile: `tile`
// for the whole matrix (head_rows 0), or head_tile on the first head_rows weight rows — the rows that fill
// whole rounds of it — and `tile` on the rest.
// `splits` > 1 (one launch only): each tile's k-tiles shared by that many blocks of a cluster.
struct HalfGemmPlan {
    GemmTile head_tile = GemmTile::automatic;
    int64_t head_rows = 0;
    GemmTile tile = GemmTile::automatic;
    int splits = 1;
};
inline constexpr int kHalfGemmMaxSplits = 8;
// How many clusters of s blocks of the f16 GEMM run at once, at index s (of[1]: the SMs).
struct HalfGemmClusters {
    std::array<int, kHalfGemmMaxSplits + 1> of{};
};
HalfGemmClusters half_gemm_clusters_for(int sms);  // sms / s each: a device whose GPCs never strand an SM
HalfGemmClusters half_gemm_device_clusters();      // this device's, as the automatic choice uses them
HalfGemmPlan half_gemm_plan(int64_t tokens, int64_t rows, int64_t k_tiles, const HalfGemmClusters& clusters);

int ws_pipeline_count();
std::string ws_pipeline_name(int pipeline);
constexpr int kDefaultWsPipeline = 2;  // 8 stages, copies arrive (gemm_wgmma_ws_cuda.cu kPipelines)

}  // namespace deltabit::cuda::detail
