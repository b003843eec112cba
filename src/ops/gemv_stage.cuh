// Bringing a run of weight rows into a shared-memory slot with the copy engine (ops/bulk_copy.cuh), for the
// decode GEMVs that stage their weights (ops/gemv_staged_cuda.cu, ops/gemv_chain_cuda.cu). A slot is
//   [codes of the run | the up matrix's codes (a SwiGLU pair) | scales | the up matrix's scales]
// each codes area `codes_area_bytes` long (rows · code_row_bytes of the longest run), each scales area
// `scale_area_bytes`: the run's fp16 scales copied as whole 16-byte words, the run beginning scale_lead bytes
// into the first (so a slot needs one word of slack).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "ops/bulk_copy.cuh"
#include "ops/gemv_device.cuh"

namespace deltabit::cuda::gemv_detail {

struct StageLayout {
    int code_row_bytes;    // bytes of one row of codes
    int scale_row_bytes;   // bytes of one row of fp16 scales
    int codes_area_bytes;  // one matrix's codes in a slot
    int scale_area_bytes;  // one matrix's scales in a slot (whole 16-byte words and one of slack)
};

// The 16-byte word holding a row run's first scale, and how far into it the run begins.
__device__ __forceinline__ const uint8_t* scale_words(const uint16_t* first_scale) {
    return reinterpret_cast<const uint8_t*>(reinterpret_cast<uintptr_t>(first_scale) & ~uintptr_t(15));
}
__device__ __forceinline__ int scale_lead(const uint16_t* first_scale) {
    return int(reinterpret_cast<uintptr_t>(first_scale) & 15);
}

// Where a staged tile's scales sit in its slot: the gate's (or the only matrix's) and, for a SwiGLU pair, the
// up matrix's, given the global address of the tile's first scale of each.
struct StagedScales {
    const uint16_t* gate;
    const uint16_t* up;
};
template <bool kSwiglu>
__device__ __forceinline__ StagedScales staged_scales(const StageLayout& s, const uint8_t* slot,
                                                      const uint16_t* first_scale, const uint16_t* first_up_scale) {
    const uint8_t* scale_area = slot + size_t(kSwiglu ? 2 : 1) * s.codes_area_bytes;
    StagedScales out;
    out.gate = reinterpret_cast<const uint16_t*>(scale_area + scale_lead(first_scale));
    out.up = kSwiglu ? reinterpret_cast<const uint16_t*>(scale_area + s.scale_area_bytes + scale_lead(first_up_scale))
                     : out.gate;
    return out;
}

// One warp item of a staged tile: the rows from `row` on of this lane group (SwiGLU: output `row`, its gate and
// up rows), KT lanes a row, computed from the slot's codes and the scales at gate_scales / up_scales (the
// tile's first row's), stored into y (the tile's first output) — the classic kernel's unit dots, order and
// butterfly, so the same bits for these lanes. Rows past the tile's `tile_rows` are clamped for loading (every
// lane joins the shuffles), never stored.
template <DType T, int KT, int R, bool kSwiglu>
__device__ __forceinline__ void compute_staged_item(const KernelArgs& a, const StageLayout& s, const uint8_t* slot,
                                                    const uint16_t* gate_scales, const uint16_t* up_scales, int row,
                                                    int tile_rows, int k_lane, const uint8_t* x_smem,
                                                    const int2* meta_smem, float* y) {
    using L = Layout<T>;
    const uint4* codes[R];
    const uint16_t* scales[R];
#pragma unroll
    for (int r = 0; r < R; ++r) {
        const int local = kSwiglu ? min(row, tile_rows - 1) : min(row + r, tile_rows - 1);
        const bool up = kSwiglu && r == 1;
        codes[r] = reinterpret_cast<const uint4*>(slot + (up ? s.codes_area_bytes : 0) + size_t(local) * s.code_row_bytes);
        scales[r] = (up ? up_scales : gate_scales) + size_t(local) * a.scales_per_row;
    }
    float acc[R];
#pragma unroll
    for (int r = 0; r < R; ++r) acc[r] = 0.0f;
#pragma unroll 2
    for (int u = k_lane; u < a.units_per_row; u += KT) {
        accumulate_unit<T, R>(
            x_smem, meta_smem, u, [&](int r) -> const uint4& { return codes[r][u]; },
            [&](int r) { return scales[r][u * L::unit / L::group]; }, acc);
    }
    reduce_and_store<KT, R, kSwiglu>(a, acc, k_lane, y, row, tile_rows);
}

#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900

// One thread: the bulk copies of `rows` rows starting at codes / scales (and the same rows of up_codes /
// up_scales when they are given) into `slot`, announced on the slot's barrier `full`.
__device__ __forceinline__ void stage_rows(const StageLayout& s, const uint8_t* codes, const uint16_t* scales,
                                           const uint8_t* up_codes, const uint16_t* up_scales, int rows, uint8_t* slot,
                                           uint64_t* full, uint64_t l2_policy) {
    const bool pair = up_codes != nullptr;
    const uint32_t code_bytes = uint32_t(rows) * uint32_t(s.code_row_bytes);
    auto word_bytes = [&](const uint16_t* first) {
        return (uint32_t(scale_lead(first) + rows * s.scale_row_bytes) + 15) / 16 * 16;
    };
    const uint32_t scale_bytes = word_bytes(scales);
    const uint32_t up_scale_bytes = pair ? word_bytes(up_scales) : 0;
    mbarrier_arrive_expect_tx(full, code_bytes * (pair ? 2 : 1) + scale_bytes + up_scale_bytes);
    uint8_t* scale_area = slot + size_t(pair ? 2 : 1) * s.codes_area_bytes;
    bulk_copy_to_shared(slot, codes, code_bytes, full, l2_policy);
    bulk_copy_to_shared(scale_area, scale_words(scales), scale_bytes, full, l2_policy);
    if (pair) {
        bulk_copy_to_shared(slot + s.codes_area_bytes, up_codes, code_bytes, full, l2_policy);
        bulk_copy_to_shared(scale_area + s.scale_area_bytes, scale_words(up_scales), up_scale_bytes, full, l2_policy);
    }
}

#endif

}  // namespace deltabit::cuda::gemv_detail
