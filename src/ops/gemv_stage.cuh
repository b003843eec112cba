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
