// The binary tensor-core dot of one unit group, shared by the b1 GEMV kernels (gemv_b1_cuda.cu and
// gemv_b1_staged_cuda.cu) so that both add the same terms in the same order: for the same K slices their y are
// equal bit for bit. The layout and the arithmetic are in gemv_b1_cuda.h. Free of inline PTX of its own (the
// mma is ops/cuda/tensor_core.cuh's), so tools/cuda_emulation can run the kernels that use it.
#pragma once

#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "ops/cuda/tensor_core.cuh"
#include "ops/matmul/matmul_cuda.h"

namespace deltabit::cuda::b1_detail {

constexpr int kUnitsPerGroup = 4;  // one per thread of a lane quad

// Units of a vector's bit planes: K / 128 rounded up to whole unit groups (the padding planes are zero).
inline int64_t padded_units(int64_t cols) {
    const int64_t units = cols / kActivationGroup;
    return (units + kUnitsPerGroup - 1) / kUnitsPerGroup * kUnitsPerGroup;
}
// Bytes of those planes: the zero word, then 8 words (4 words × 2 parities) of 16 bytes per unit.
inline int64_t plane_bytes(int64_t cols) { return (1 + padded_units(cols) * 8) * 16; }

// planes[0] is the zero word; unit u, word j, parity p is planes[1 + (u·4 + j)·2 + p].
__device__ __forceinline__ int64_t plane_index(int64_t unit, int word, int parity) {
    return 1 + (unit * 4 + word) * 2 + parity;
}

__device__ __forceinline__ uint32_t word_of(const uint4& v, int j) {
    return j == 0 ? v.x : j == 1 ? v.y : j == 2 ? v.z : v.w;
}

// Σ_p w_p · popc_p for one row from the four plane-pair accumulators: c[q][half] holds plane 2q + half.
__device__ __forceinline__ int weighted_planes(const int (&c)[4][4], int first) {
    return c[0][first] + 2 * c[0][first + 1] + 4 * c[1][first] + 8 * c[1][first + 1] + 16 * c[2][first] +
           32 * c[2][first + 1] + 64 * c[3][first] - 128 * c[3][first + 1];
}

// One unit of a lane's two rows (g and g + 8 of the warp's tile): the 16 mmas against the planes, the exact
// integer dots 2·Σ_{b=1} q − Σq, and acc += dot · (d · scale) for each row. `bq[j]`: this lane's B word of
// word j (the unit's planes where the lane feeds B, else the zero word: gemv_b1_cuda.h); `meta`: the unit's
// activation group ({0, 0} past the row); `w0`, `w1`, `d0`, `d1`: the rows' codes and fp16 scale bits of the
// unit (zeros past the row). Every lane of the warp calls it (the mmas are warp-wide).
__device__ __forceinline__ void accumulate_unit(const uint4 (&bq)[4], const ActivationGroupMeta& meta, const uint4& w0,
                                                const uint4& w1, uint16_t d0, uint16_t d1, float& acc0, float& acc1) {
    int c[4][4] = {};
#pragma unroll
    for (int j = 0; j < 4; ++j) {
        const uint32_t a0 = word_of(w0, j), a1 = word_of(w1, j);
        mma_b1_and_popc(c[0], a0, a1, bq[j].x);
        mma_b1_and_popc(c[1], a0, a1, bq[j].y);
        mma_b1_and_popc(c[2], a0, a1, bq[j].z);
        mma_b1_and_popc(c[3], a0, a1, bq[j].w);
    }
    const int dot0 = 2 * weighted_planes(c, 0) - meta.sum;
    const int dot1 = 2 * weighted_planes(c, 2) - meta.sum;
    acc0 = fmaf(float(dot0), __half2float(__ushort_as_half(d0)) * meta.scale, acc0);
    acc1 = fmaf(float(dot1), __half2float(__ushort_as_half(d1)) * meta.scale, acc1);
}

}  // namespace deltabit::cuda::b1_detail
