#include "train/hf_parameters.h"

#include "core/error.h"
#include "core/half.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <cstring>

namespace deltabit::train {

std::vector<float> load_hf_parameters(const ParameterLayout& layout, const safetensors::Set& weights) {
    std::vector<float> values(size_t(layout.total()));
    for (const ParameterInfo& p : layout.all()) {
        const safetensors::TensorInfo& t = weights.require(p.name);
        if (t.shape != p.shape)
            fail("train: {}: tensor {} has shape [{}], the model needs [{}]", weights.what(), p.name,
                 fmt::join(t.shape, ", "), fmt::join(p.shape, ", "));
        const DType dtype = t.require_dtype();
        float* out = values.data() + p.offset;
        for (int64_t i = 0; i < p.size; ++i) {
            if (dtype == DType::F32) {
                std::memcpy(out + i, t.data + 4 * i, 4);
            } else if (dtype == DType::BF16 || dtype == DType::F16) {
                uint16_t bits;
                std::memcpy(&bits, t.data + 2 * i, 2);
                out[i] = dtype == DType::BF16 ? bf16_to_float(bits) : half_to_float(bits);
            } else {
                fail("train: {}: tensor {}: dtype {} is not a float type", weights.what(), p.name, t.dtype_name);
            }
        }
    }
    return values;
}

}  // namespace deltabit::train
