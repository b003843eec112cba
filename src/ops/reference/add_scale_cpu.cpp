#include "ops/add_scale.h"

namespace deltabit::cpu {

void add_scale(const float* x, const float* r, int64_t n, float s, float* y) {
    for (int64_t i = 0; i < n; ++i) {
        const float sum = r != nullptr ? x[i] + r[i] : x[i];  // rounded to fp32 before the product
        y[i] = sum * s;
    }
}

}  // namespace deltabit::cpu
