#include "ops/gelu_glu.h"

#include "ops/activations.h"

namespace deltabit::cpu {

void gelu_glu(const float* gate, const float* up, int64_t n, float* out) {
    for (int64_t i = 0; i < n; ++i) out[i] = float(gelu_tanh(double(gate[i])) * double(up[i]));
}

}  // namespace deltabit::cpu
