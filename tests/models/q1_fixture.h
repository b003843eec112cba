// A fixture's model with its matrices stored as Q1_0: exactly for the binary fixtures (tests/fixtures/README.md:
// their matrices are binarised, so Q1_0 holds them exactly) — what the int8- and f16-rounding references and
// the GPU parity test run —, or rounded for any fixture (the decode tests, which compare the GPU with itself).
#pragma once

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <stdexcept>
#include <string>
#include <vector>

#include "core/dtype.h"
#include "core/quant.h"
#include "models/model.h"
#include "models/weights.h"

namespace deltabit::test {

// The HF model with every matrix whose rows are whole groups of 128 stored as Q1_0. exact: each row checked
// to decode back to exactly the stored values (so the CPU path still computes transformers' model), else
// std::runtime_error; not exact: rounded to Q1_0 as it comes (no longer the fixture's model).
inline Model with_q1_matrices(const Model& hf, bool exact = true) {
    ModelWeights out(hf.config(), hf.weights().source() + " (matrices as Q1_0)");
    for (const auto& [name, t] : hf.weights().tensors()) {
        WeightTensor copy = t;
        const int64_t cols = t.shape.empty() ? 0 : t.shape[0];
        const bool matrix = t.shape.size() >= 2 && cols % 128 == 0 && !name.ends_with("ssm_conv1d.weight");
        if (matrix) {
            const int64_t rows = t.n_elements() / cols;
            std::vector<float> values(static_cast<size_t>(t.n_elements())), back(static_cast<size_t>(cols));
            plain_to_f32(t.dtype, t.data, t.n_elements(), values.data(), name);
            const uint64_t row_bytes = dtype_bytes(DType::Q1_0, uint64_t(cols));
            auto* bytes = static_cast<uint8_t*>(out.own(row_bytes * uint64_t(rows)));
            for (int64_t r = 0; r < rows; ++r) {
                const float* row = values.data() + r * cols;
                quantize_row(DType::Q1_0, row, bytes + r * row_bytes, cols);
                if (!exact) continue;
                dequantize_row(DType::Q1_0, bytes + r * row_bytes, back.data(), cols);
                if (!std::equal(back.begin(), back.end(), row))
                    throw std::runtime_error(name + ": row " + std::to_string(r) + " is not exactly Q1_0");
            }
            copy.dtype = DType::Q1_0;
            copy.data = bytes;
            copy.bytes = row_bytes * uint64_t(rows);
        } else {
            void* bytes = out.own(t.bytes);
            std::memcpy(bytes, t.data, t.bytes);
            copy.data = bytes;
        }
        out.add(std::move(copy));
    }
    return Model(std::move(out));
}

}  // namespace deltabit::test
