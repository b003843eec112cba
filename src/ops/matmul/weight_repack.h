// The GEMV layout: how quantised weights are repacked at load for the CUDA decode GEMV
// (ops/matmul/matmul_cuda.h), and the check that the repacked form decodes to exactly the original weights.
//
// Why repack. GGUF blocks interleave a 2-byte fp16 scale with the codes (Q1_0: 18-byte blocks), so a
// row of codes is only 2-byte aligned and a GPU cannot stream it with 16-byte loads. The GEMV layout
// splits every matrix W[N][K] into two planes, each row-major with one row per output:
//
//   codes   N × code_row_bytes, code_row_bytes = K·bits/8 (Q1_0 K/8, Q2_0 K/4, Q4_0 K/2, Q8_0 K);
//           a multiple of 16 for every supported K, so each row starts 16-byte aligned.
//   scales  N × (K / block_elems) fp16 bit patterns, the blocks' d in order.
//
// The total size equals the original's. Inside each 32-bit code word (4 bytes, little-endian) the
// codes of Q1_0 and Q2_0 are permuted so that one shift and one AND yield four consecutive weights,
// one per byte, ready for a 4-way int8 dot product (dp4a) against activations in natural order:
//
//   Q1_0  word covers 32 weights; bit 8·k + j holds weight 4·j + k      (original: bit m holds weight m)
//         so (word >> j) & 0x01010101 has, in byte k, the sign bit of weight 4·j + k.
//   Q2_0  word covers 16 weights; bits 8·k + 2·p .. +1 hold weight 4·p + k  (original: bits 2·m .. +1)
//         so (word >> 2·p) & 0x03030303 has, in byte k, the code of weight 4·p + k.
//   Q4_0, Q8_0  codes unchanged: Q4_0's low nibbles of a word are weights 4·i .. 4·i+3 and its high
//         nibbles weights 16 + 4·i .., Q8_0 bytes are weights in order — both already consecutive.
//
// Q2_0 here means both variants (group 128 and upstream's group 64): the in-word layout is the same.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "core/dtype.h"
#include "core/tensor.h"

namespace deltabit {

// True for the dtypes the GEMV layout (and the CUDA GEMV) handles.
bool gemv_layout_supports(DType t);

// Bytes of one row of codes in the GEMV layout (K·bits/8); K must be a multiple of the block size.
size_t gemv_code_row_bytes(DType t, int64_t k);

// A matrix in the GEMV layout, in host memory (it is uploaded once and then dropped).
struct GemvRepacked {
    DType dtype = DType::Q1_0;
    int64_t rows = 0;
    int64_t cols = 0;
    std::vector<uint8_t> codes;    // rows × gemv_code_row_bytes(dtype, cols)
    std::vector<uint16_t> scales;  // rows × (cols / block_elems), fp16 bits
};

// Repack `w` (original GGUF block layout) into the GEMV layout. Throws deltabit::Error naming `name`
// when the dtype is not supported or cols is not a whole number of blocks.
GemvRepacked repack_for_gemv(const WeightView& w, const char* name);

// Proves the repack: rebuilds the original blocks from `packed` with the inverse permutation and
// compares them byte for byte with `original` (equal bytes decode to equal weights). Throws
// deltabit::Error naming `name`, the row and the block of the first difference.
void verify_gemv_repack(const WeightView& original, const GemvRepacked& packed, const char* name);

// Level of weight j of row r read straight from the GEMV layout, one weight at a time (the form the
// permutation above describes, written independently of the word-level repack): Q1_0 ±1, Q2_0 −1..+2,
// Q4_0 −8..+7, Q8_0 −128..127. The weight's value is level · scale. For tests.
int gemv_layout_level(const GemvRepacked& packed, int64_t r, int64_t j);

}  // namespace deltabit
