// Tensor maps for the copy engine's tiled copies (cp.async.bulk.tensor, Hopper's TMA): a 128-byte
// description of a matrix in global memory that lets one thread ask for a whole box of it — rows gathered,
// out-of-range elements filled with zeros, and optionally laid out in shared memory in the 128-byte swizzle
// pattern the warpgroup tensor cores read without bank conflicts. Made on the host per launch (a few
// hundred nanoseconds) and passed to the kernel as a __grid_constant__ parameter.
#pragma once

#include <cuda.h>  // CUtensorMap; only the types: the encoder is the driver's, looked up at run time

#include <cstdint>

namespace deltabit::cuda {

enum class TensorMapSwizzle { none, bytes128 };

// A map over a row-major matrix of `rows` × `cols` elements of `element_bytes` (1 or 2 bytes), rows
// `row_stride_bytes` apart, read in boxes of box_rows × box_cols elements: a copy at (col, row) brings
// box_rows rows of box_cols elements each, row after row into shared memory (with bytes128, each row is
// 128 bytes and its 16-byte chunks are permuted by the row's index modulo 8). Throws deltabit::Error naming
// the violated rule: base 16-byte aligned, row stride a multiple of 16 bytes, box_cols · element_bytes a
// multiple of 16 (exactly 128 with bytes128), box sides ≤ 256.
CUtensorMap tensor_map_2d(const void* base, int element_bytes, uint64_t cols, uint64_t rows,
                          uint64_t row_stride_bytes, uint32_t box_cols, uint32_t box_rows, TensorMapSwizzle swizzle);

}  // namespace deltabit::cuda
