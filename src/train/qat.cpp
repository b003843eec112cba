#include "train/qat.h"

#include "core/dtype.h"
#include "core/quant.h"

#include <algorithm>
#include <vector>

namespace deltabit::train {

bool is_binarised(const ParameterInfo& p) {
    return (p.role == ParameterRole::matrix || p.role == ParameterRole::embedding) && p.shape.size() == 2 &&
           p.shape.back() % kQatGroup == 0;
}

double binarisation_weight(int64_t step, int64_t total) {
    return std::min(2.0 * double(step) / double(total), 1.0);
}

void qat_effective_weights(const ParameterLayout& layout, std::span<const float> params, double lambda,
                           std::span<float> out) {
    std::copy(params.begin(), params.end(), out.begin());
    if (lambda == 0.0) return;
    std::vector<uint8_t> packed;
    std::vector<float> binary;
    const float l = float(lambda);
    for (const ParameterInfo& p : layout.all()) {
        if (!is_binarised(p)) continue;
        const int64_t row = p.shape.back(), rows = p.size / row;
        packed.resize(dtype_bytes(DType::Q1_0, uint64_t(row)));
        binary.resize(size_t(row));
        for (int64_t r = 0; r < rows; ++r) {
            const float* w = params.data() + p.offset + r * row;
            float* o = out.data() + p.offset + r * row;
            quantize_row(DType::Q1_0, w, packed.data(), row);
            dequantize_row(DType::Q1_0, packed.data(), binary.data(), row);
            for (int64_t i = 0; i < row; ++i) o[i] = lambda == 1.0 ? binary[size_t(i)] : w[i] + l * (binary[size_t(i)] - w[i]);
        }
    }
}

}  // namespace deltabit::train
