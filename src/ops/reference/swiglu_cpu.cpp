#include "ops/swiglu.h"

#include "ops/activations.h"

namespace deltabit::cpu {

void swiglu(const float* gate, const float* up, int64_t n, float* out) {
    for (int64_t i = 0; i < n; ++i) out[i] = float(silu(double(gate[i])) * double(up[i]));
}

}  // namespace deltabit::cpu
