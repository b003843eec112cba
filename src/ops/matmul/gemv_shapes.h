// The launch shapes the decode GEMV kernels are compiled for, and the one dispatcher that turns a run-time
// (dtype, lanes per row, rows per thread) into a compile-time instantiation (ops/matmul/matmul_cuda.cu's GEMV kernel).
// Plain C++ (no CUDA), so the mapping is unit-tested on any machine (tests/unit/test_gemv_shapes.cpp).
#pragma once

#include "core/dtype.h"

namespace deltabit::cuda {

// One compiled shape, as a type: what pick_gemv_shape hands its `make`.
template <DType T, int KT, int R>
struct GemvShape {
    static constexpr DType type = T;
    static constexpr int lanes = KT;  // lanes per row
    static constexpr int rows = R;    // rows per thread
};

namespace gemv_shapes_detail {

template <bool kSwiglu, DType T, int KT, typename Result, typename Make>
Result pick_rows(int rows_per_thread, const Make& make, Result none) {
    if (rows_per_thread == 2) return make(GemvShape<T, KT, 2>{});
    if constexpr (!kSwiglu) {
        if (rows_per_thread == 4) return make(GemvShape<T, KT, 4>{});
    }
    return none;
}

template <bool kSwiglu, DType T, typename Result, typename Make>
Result pick_lanes(int lanes_per_row, int rows_per_thread, const Make& make, Result none) {
    switch (lanes_per_row) {
        case 8: return pick_rows<kSwiglu, T, 8>(rows_per_thread, make, none);
        case 16: return pick_rows<kSwiglu, T, 16>(rows_per_thread, make, none);
        case 32: return pick_rows<kSwiglu, T, 32>(rows_per_thread, make, none);
        default: return none;
    }
}

}  // namespace gemv_shapes_detail

// make(GemvShape<T, KT, R>{}) for the shape asked for, where a kernel exists: every GEMV dtype
// (Q1_0, Q2_0, Q2_0_G64, Q4_0, Q8_0), KT = lanes per row 8, 16 or 32, R = rows per thread 2 or 4 (a SwiGLU
// pair: 2 only, the gate row and the up row); `none` for any other shape.
template <bool kSwiglu, typename Result, typename Make>
Result pick_gemv_shape(DType t, int lanes_per_row, int rows_per_thread, const Make& make, Result none) {
    using namespace gemv_shapes_detail;
    switch (t) {
        case DType::Q1_0: return pick_lanes<kSwiglu, DType::Q1_0>(lanes_per_row, rows_per_thread, make, none);
        case DType::Q2_0: return pick_lanes<kSwiglu, DType::Q2_0>(lanes_per_row, rows_per_thread, make, none);
        case DType::Q2_0_G64: return pick_lanes<kSwiglu, DType::Q2_0_G64>(lanes_per_row, rows_per_thread, make, none);
        case DType::Q4_0: return pick_lanes<kSwiglu, DType::Q4_0>(lanes_per_row, rows_per_thread, make, none);
        case DType::Q8_0: return pick_lanes<kSwiglu, DType::Q8_0>(lanes_per_row, rows_per_thread, make, none);
        default: return none;
    }
}

}  // namespace deltabit::cuda
