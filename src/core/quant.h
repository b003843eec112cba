// Naive reference conversions between float rows and rows stored in any weight dtype (quantised
// blocks from core/quant_blocks.h, or F32 / F16 / BF16), and the reference dot product of one stored
// row with float activations. These are the oracles every fast kernel is tested against: loops that
// read like the format description, never optimised.
//
// Every entry point takes k, the number of values in the row; k must be a multiple of the dtype's
// block size (dtype_info(t).block_elems), else deltabit::Error is thrown. I32 is not a weight type and
// is refused the same way.
#pragma once

#include <cstdint>

#include "core/dtype.h"

namespace deltabit {

// out[0..k) = the k weights of `row` as floats. Every quantised weight is d·level computed in fp32,
// which is exact for all our types (an 11-bit fp16 mantissa times a level of at most 8 bits).
void dequantize_row(DType t, const void* row, float* out, int64_t k);

// Writes x[0..k) into `row` (dtype_bytes(t, k) bytes) with llama.cpp's reference quantiser for t
// (quantize_row_*_ref in ggml/src/ggml-quants.c), so files we write hold the same bytes llama.cpp
// would write — except Q2_0, whose reference quantiser never uses its +2 level and loses to Q1_0;
// ours picks the least-squared-error scale (quant.cpp), still a valid block for llama.cpp's
// dequantiser. F16 and BF16 round to nearest even.
void quantize_row(DType t, const float* x, void* row, int64_t k);

// The first element of `count` elements of type t at `data` whose value cannot be finite — a NaN or
// infinite float, or any weight of a block whose fp16 scale is NaN or infinite — or -1 when all are.
// One pass over the floats, or over the 2-byte scale of every block.
int64_t first_non_finite(DType t, const void* data, int64_t count);

// The scale Q2_0's quantiser picks for one block of n values (before rounding to fp16; may be
// negative): the one that minimises the block's squared error (quant.cpp says how), for the converter's
// check of every stored scale.
float q2_0_block_scale(const float* x, int n);

// Σ_j w[j]·x[j] for the stored row w, with every product and the running sum in double, summed in
// order j = 0, 1, ..., k−1, then rounded once to float. Equal to dequantize_row followed by the same
// double-precision dot (the tests hold it to exact equality).
float dot_row(DType t, const void* row, const float* x, int64_t k);

}  // namespace deltabit
