// Byte layouts of the quantised weight blocks, exactly as llama.cpp writes them into GGUF files, and
// the few accessors every backend needs to read one weight out of a block. A row of K weights is
// K / block_elems blocks packed back to back with no padding; the scale `d` is an IEEE fp16 stored
// little-endian (read it with half_to_float).
//
// Sources (facts only; see ../shared/reference/llamacpp-formats-and-qwen35.md §1):
//   block structs       ggml/src/ggml-common.h (upstream ggml-org/llama.cpp @ 01243c58 and the PrismML
//                       fork PrismML-Eng/llama.cpp @ 811dce5d / 67c1af28)
//   weight decoding     ggml/src/ggml-quants.c, dequantize_row_{q8_0,q4_0,q1_0,q2_0}
//
// The accessors are plain inline functions so CUDA kernels can share them (marked host+device there).
#pragma once

#include <cstddef>
#include <cstdint>

#include "core/host_device.h"

namespace deltabit {

// Q8_0: 32 weights, w[j] = d · qs[j].
inline constexpr int kQ8_0BlockElems = 32;
struct BlockQ8_0 {
    uint16_t d;                    // fp16 scale
    int8_t qs[kQ8_0BlockElems];
};
static_assert(sizeof(BlockQ8_0) == 34, "Q8_0 block is fp16 d + 32 int8 (ggml-common.h block_q8_0)");

// Q4_0: 32 weights, w[j] = d · (q[j] − 8). The two halves of the block share bytes: element j (j < 16)
// is the low nibble of qs[j], element j + 16 is the high nibble of qs[j] (dequantize_row_q4_0).
inline constexpr int kQ4_0BlockElems = 32;
struct BlockQ4_0 {
    uint16_t d;
    uint8_t qs[kQ4_0BlockElems / 2];
};
static_assert(sizeof(BlockQ4_0) == 18, "Q4_0 block is fp16 d + 16 bytes of nibbles (block_q4_0)");

DELTABIT_HOST_DEVICE inline int q4_0_code(const BlockQ4_0& b, int j) {
    return j < kQ4_0BlockElems / 2 ? (b.qs[j] & 0x0f) : (b.qs[j - kQ4_0BlockElems / 2] >> 4);
}

// Q1_0: 128 weights, one sign bit each, LSB first: weight j is bit (j % 8) of qs[j / 8]; bit 1 → +d,
// bit 0 → −d. There is no zero (dequantize_row_q1_0).
inline constexpr int kQ1_0BlockElems = 128;
struct BlockQ1_0 {
    uint16_t d;
    uint8_t qs[kQ1_0BlockElems / 8];
};
static_assert(sizeof(BlockQ1_0) == 18, "Q1_0 block is fp16 d + 16 sign bytes (block_q1_0)");

DELTABIT_HOST_DEVICE inline int q1_0_sign(const BlockQ1_0& b, int j) {
    return ((b.qs[j / 8] >> (j % 8)) & 1) ? +1 : -1;
}

// Q2_0 (both variants): 2-bit codes, four per byte, lowest bits first: weight j is bits
// 2·(j % 4) .. 2·(j % 4) + 1 of qs[j / 4]; w = d · (code − 1), so 00 → −d, 01 → 0, 10 → +d, 11 → +2d
// (dequantize_row_q2_0, identical in the PrismML fork and upstream; only the group size differs).
// Type ids: the fork's `prism` branch first wrote its group-128 blocks as id 42, the id upstream later
// gave its group-64 Q2_0. Newer fork commits (ggml/include/ggml.h @ 397c0876) follow upstream for 42
// and write group-128 as GGML_TYPE_Q2_0_G128 = 142. So id 42 is told apart by byte size, id 142 is
// always the group-128 block.
inline constexpr int kQ2_0BlockElems = 128;     // PrismML fork: QK2_0 = 128 (later QK2_0_G128)
inline constexpr int kQ2_0G64BlockElems = 64;   // upstream ggml-org/llama.cpp: QK2_0 = 64
struct BlockQ2_0 {
    uint16_t d;
    uint8_t qs[kQ2_0BlockElems / 4];
};
static_assert(sizeof(BlockQ2_0) == 34, "PrismML Q2_0 block is fp16 d + 32 code bytes");
struct BlockQ2_0G64 {
    uint16_t d;
    uint8_t qs[kQ2_0G64BlockElems / 4];
};
static_assert(sizeof(BlockQ2_0G64) == 18, "upstream Q2_0 block is fp16 d + 16 code bytes");

// Level of weight j (−1, 0, +1 or +2) given the block's code bytes.
DELTABIT_HOST_DEVICE inline int q2_0_level(const uint8_t* qs, int j) {
    return int((qs[j / 4] >> (2 * (j % 4))) & 0x03) - 1;
}

}  // namespace deltabit
