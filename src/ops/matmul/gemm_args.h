// The launch arguments of the quantised prefill GEMM kernels (gemm_quant_cuda.cu's mma.sync tiles, and the
// warpgroup tiles of gemm_wgmma_cuda.cu and gemm_wgmma_ws_cuda.cu): y = x · Wᵀ (ops/matmul/gemm_cuda.h) cut
// into tiles of bm tokens × bn weight rows, tile i at token block i % m_tiles and weight block i / m_tiles.
#pragma once

#include <cstdint>

#include "core/dtype.h"
#include "ops/matmul/matmul_cuda.h"
#include "ops/matmul/gemm_cuda.h"
#include "ops/matmul/weight_repack.h"

namespace deltabit::cuda::detail {

struct GemmArgs {
    const int8_t* xq;
    const ActivationGroupMeta* x_meta;
    const uint8_t* codes;
    const uint16_t* scales;
    float* y;
    int64_t m, n;  // T, N
    int64_t ldy;   // floats from one token's row of y to the next's: N, unless y is a column block of a wider y
    int64_t code_row_bytes;
    int64_t m_tiles, tiles;
    int k_tiles;  // = activation groups per row
    int scales_per_row;
};

inline GemmArgs gemm_args(const QuantizedActivationRows& x, const GemvWeightView& w, float* y, int64_t bm, int64_t bn) {
    GemmArgs a{};
    a.xq = x.q;
    a.x_meta = x.meta;
    a.codes = w.codes;
    a.scales = w.scales;
    a.y = y;
    a.m = x.rows;
    a.n = w.rows;
    a.ldy = w.rows;
    a.code_row_bytes = int64_t(gemv_code_row_bytes(w.dtype, w.cols));
    a.k_tiles = int(activation_groups(w.cols));
    a.scales_per_row = int(w.cols / dtype_info(w.dtype).block_elems);
    a.m_tiles = (x.rows + bm - 1) / bm;
    a.tiles = a.m_tiles * ((w.rows + bn - 1) / bn);
    return a;
}

}  // namespace deltabit::cuda::detail
