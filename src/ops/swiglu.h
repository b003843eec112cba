// SwiGLU combine: out[i] = silu(gate[i]) · up[i], silu(x) = x · sigmoid(x). The FFN is
// down · swiglu(gate · x, up · x), built from matmul and this op.
//   gate, up, out  [n]  (out may equal gate or up)
#pragma once

#include <cstdint>

namespace deltabit::cpu {

void swiglu(const float* gate, const float* up, int64_t n, float* out);

}  // namespace deltabit::cpu
