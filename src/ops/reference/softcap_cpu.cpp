#include "ops/softcap.h"

#include <cmath>

namespace deltabit::cpu {

void softcap(const float* x, int64_t n, float cap, float* y) {
    for (int64_t i = 0; i < n; ++i) y[i] = float(double(cap) * std::tanh(double(x[i]) / double(cap)));
}

}  // namespace deltabit::cpu
