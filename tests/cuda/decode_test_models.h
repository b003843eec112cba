// Models for the decode tests (test_decode_*.cpp, test_memory_flat_cuda.cpp): a fixture as it is, or
// with every matrix whose rows are whole groups of 128 quantised to Q1_0, so the GPU runs the int8
// GEMV path that real 1-bit models take. The Q1_0 copy is NOT the fixture's model any more (rounding
// is not checked, unlike test_model_parity_cuda.cpp's exact binarised copy): these tests compare the
// GPU against itself (graph vs eager, saved vs uninterrupted), never against transformers.
#pragma once

#include <cstring>
#include <string>
#include <vector>

#include "core/quant.h"
#include "models/fixture.h"
#include "models/model.h"
#include "models/weights.h"

namespace deltabit::test {

inline Model load_fixture_model(const std::string& name, bool q1_matrices) {
    const Model hf = Model::load(fixtures_dir() / name);
    if (!q1_matrices) return Model::load(fixtures_dir() / name);
    ModelWeights out(hf.config(), hf.weights().source() + " (matrices as Q1_0)");
    for (const auto& [tensor_name, t] : hf.weights().tensors()) {
        WeightTensor copy = t;
        const int64_t cols = t.shape.empty() ? 0 : t.shape[0];
        const bool matrix = t.shape.size() >= 2 && cols % 128 == 0 && !tensor_name.ends_with("ssm_conv1d.weight");
        if (matrix) {
            const int64_t rows = t.n_elements() / cols;
            std::vector<float> values(static_cast<size_t>(t.n_elements()));
            plain_to_f32(t.dtype, t.data, t.n_elements(), values.data(), tensor_name);
            const uint64_t row_bytes = dtype_bytes(DType::Q1_0, uint64_t(cols));
            auto* bytes = static_cast<uint8_t*>(out.own(row_bytes * uint64_t(rows)));
            for (int64_t r = 0; r < rows; ++r) quantize_row(DType::Q1_0, values.data() + r * cols, bytes + r * row_bytes, cols);
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
