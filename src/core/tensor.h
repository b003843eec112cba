// A non-owning view of a 2-D weight matrix as the ops read it: W[rows][cols], row-major, one row per
// output (N) and cols contiguous inputs (K) — the GGUF convention where ne0 = K. Rows are stored in
// `dtype` (quantised rows are cols / block_elems blocks back to back), so row r starts
// r · row_bytes() bytes into `data`. A 3-D expert tensor [E][N][K] is the same view with rows = E·N;
// take one expert with slice_rows(e·N, N).
#pragma once

#include <cstddef>
#include <cstdint>

#include "core/dtype.h"

namespace deltabit {

struct WeightView {
    const void* data = nullptr;
    DType dtype = DType::F32;
    int64_t rows = 0;  // outputs, N
    int64_t cols = 0;  // inputs, K (a multiple of the dtype's block size)

    size_t row_bytes() const { return size_t(dtype_bytes(dtype, uint64_t(cols))); }
    const void* row(int64_t r) const { return static_cast<const uint8_t*>(data) + size_t(r) * row_bytes(); }
    WeightView slice_rows(int64_t first, int64_t count) const { return {row(first), dtype, count, cols}; }
};

}  // namespace deltabit
