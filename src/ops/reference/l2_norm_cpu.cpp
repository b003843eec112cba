#include "ops/l2_norm.h"

#include <cmath>

namespace deltabit::cpu {

void l2_norm(const float* x, int64_t rows, int64_t dim, float eps, float* y) {
    for (int64_t r = 0; r < rows; ++r) {
        const float* xr = x + r * dim;
        double sum_sq = 0.0;
        for (int64_t i = 0; i < dim; ++i) sum_sq += double(xr[i]) * double(xr[i]);
        const double inv_norm = 1.0 / std::sqrt(sum_sq + double(eps));
        for (int64_t i = 0; i < dim; ++i) y[r * dim + i] = float(double(xr[i]) * inv_norm);
    }
}

}  // namespace deltabit::cpu
