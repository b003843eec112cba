#include "ops/scale_columns.h"

namespace deltabit::cpu {

void scale_columns(const float* x, const float* w, int64_t rows, int64_t dim, double c, float* y) {
    for (int64_t r = 0; r < rows; ++r)
        for (int64_t i = 0; i < dim; ++i) y[r * dim + i] = float(double(x[r * dim + i]) * double(w[i]) * c);
}

}  // namespace deltabit::cpu
