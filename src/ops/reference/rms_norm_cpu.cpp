#include "ops/rms_norm.h"

#include <cmath>

namespace deltabit::cpu {

void rms_norm(const float* x, const float* w, int64_t rows, int64_t dim, float eps, NormWeight weight, float* y) {
    for (int64_t r = 0; r < rows; ++r) {
        const float* xr = x + r * dim;
        double sum_sq = 0.0;
        for (int64_t i = 0; i < dim; ++i) sum_sq += double(xr[i]) * double(xr[i]);
        const double inv_rms = 1.0 / std::sqrt(sum_sq / double(dim) + double(eps));
        float* yr = y + r * dim;
        for (int64_t i = 0; i < dim; ++i) {
            const double scale = weight == NormWeight::none       ? 1.0
                                : weight == NormWeight::one_plus ? 1.0 + double(w[i])
                                                                 : double(w[i]);
            yr[i] = float(double(xr[i]) * inv_rms * scale);
        }
    }
}

}  // namespace deltabit::cpu
