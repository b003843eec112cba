#include "ops/gated_rms_norm.h"

#include <cmath>

#include "ops/activations.h"

namespace deltabit::cpu {

void gated_rms_norm(const float* x, const float* z, const float* w, int64_t rows, int64_t dim, float eps,
                    float* y) {
    for (int64_t r = 0; r < rows; ++r) {
        const float* xr = x + r * dim;
        double sum_sq = 0.0;
        for (int64_t i = 0; i < dim; ++i) sum_sq += double(xr[i]) * double(xr[i]);
        const double inv_rms = 1.0 / std::sqrt(sum_sq / double(dim) + double(eps));
        for (int64_t i = 0; i < dim; ++i) {
            y[r * dim + i] = float(double(w[i]) * double(xr[i]) * inv_rms * silu(double(z[r * dim + i])));
        }
    }
}

}  // namespace deltabit::cpu
