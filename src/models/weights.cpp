#include "models/weights.h"

#include "core/error.h"
#include "core/half.h"

#include <cstring>

namespace deltabit {

namespace {

std::string shape_string(const std::vector<int64_t>& shape) {
    std::string s = "{";
    for (size_t i = 0; i < shape.size(); ++i) s += (i ? ", " : "") + std::to_string(shape[i]);
    return s + "}";
}

// GGUF writes a [1, H] row as {H} and a vector as {n}: compare shapes with trailing 1s dropped.
std::vector<int64_t> squeezed(std::vector<int64_t> shape) {
    while (shape.size() > 1 && shape.back() == 1) shape.pop_back();
    return shape;
}

}  // namespace

int64_t WeightTensor::n_elements() const {
    int64_t n = 1;
    for (int64_t d : shape) n *= d;
    return n;
}

const WeightTensor* ModelWeights::find(std::string_view name) const {
    const auto it = tensors_.find(name);
    return it == tensors_.end() ? nullptr : &it->second;
}

const WeightTensor& ModelWeights::require(std::string_view name) const {
    const WeightTensor* t = find(name);
    if (!t) fail("{}: missing tensor {}", source_, name);
    return *t;
}

WeightView ModelWeights::matrix(std::string_view name, int64_t rows, int64_t cols) const {
    const WeightTensor& t = require(name);
    const std::vector<int64_t> want = {cols, rows};
    if (squeezed(t.shape) != squeezed(want))
        fail("{}: tensor {}: shape {} but the model config needs {}", source_, t.origin, shape_string(t.shape),
             shape_string(want));
    return {t.data, t.dtype, rows, cols};
}

WeightView ModelWeights::matrix3(std::string_view name, int64_t n, int64_t rows, int64_t cols) const {
    const WeightTensor& t = require(name);
    const std::vector<int64_t> want = {cols, rows, n};
    if (squeezed(t.shape) != squeezed(want))
        fail("{}: tensor {}: shape {} but the model config needs {}", source_, t.origin, shape_string(t.shape),
             shape_string(want));
    return {t.data, t.dtype, rows * n, cols};
}

const float* ModelWeights::floats(std::string_view name, int64_t n) const {
    const WeightTensor& t = require(name);
    if (t.dtype != DType::F32) fail("{}: tensor {}: expected F32, found {}", source_, t.origin, dtype_name(t.dtype));
    if (t.n_elements() != n)
        fail("{}: tensor {}: shape {} has {} values but the model config needs {}", source_, t.origin,
             shape_string(t.shape), t.n_elements(), n);
    return static_cast<const float*>(t.data);
}

void ModelWeights::add(WeightTensor tensor) {
    if (tensor.origin.empty()) tensor.origin = tensor.name;
    std::string name = tensor.name;
    const auto [it, inserted] = tensors_.emplace(name, std::move(tensor));
    if (!inserted) fail("{}: tensor {} appears twice (second from {})", source_, name, it->second.origin);
}

void* ModelWeights::own(uint64_t bytes) {
    owned_.emplace_back((bytes + 7) / 8, uint64_t{0});
    return owned_.back().data();
}

const void* gather_rows(ModelWeights& into, const void* data, uint64_t row_bytes, const std::vector<int64_t>& rows) {
    auto* out = static_cast<uint8_t*>(into.own(row_bytes * rows.size()));
    const auto* src = static_cast<const uint8_t*>(data);
    for (size_t i = 0; i < rows.size(); ++i)
        std::memcpy(out + i * row_bytes, src + uint64_t(rows[i]) * row_bytes, row_bytes);
    return out;
}

void plain_to_f32(DType dtype, const void* data, int64_t n, float* out, std::string_view what) {
    const auto* bytes = static_cast<const uint8_t*>(data);
    for (int64_t i = 0; i < n; ++i) {
        switch (dtype) {
            case DType::F32: std::memcpy(&out[i], bytes + 4 * i, 4); break;
            case DType::F16:
            case DType::BF16: {
                uint16_t h;
                std::memcpy(&h, bytes + 2 * i, 2);
                out[i] = dtype == DType::F16 ? half_to_float(h) : bf16_to_float(h);
                break;
            }
            default: fail("{}: expected a float tensor (F32, F16 or BF16), found {}", what, dtype_name(dtype));
        }
    }
}

}  // namespace deltabit
