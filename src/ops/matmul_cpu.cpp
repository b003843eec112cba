#include "ops/matmul.h"

#include "core/quant.h"

namespace deltabit::cpu {

void matmul(const float* x, const WeightView& w, int64_t n_tokens, float* y) {
    for (int64_t t = 0; t < n_tokens; ++t) {
        for (int64_t n = 0; n < w.rows; ++n) {
            y[t * w.rows + n] = dot_row(w.dtype, w.row(n), x + t * w.cols, w.cols);
        }
    }
}

}  // namespace deltabit::cpu
