// Reading a geometry's tensor list (bench/synthetic_model.h geometry_tensors) in tests: by name, and counted.
#pragma once

#include "bench/synthetic_model.h"

#include <cstdint>
#include <functional>
#include <map>
#include <numeric>
#include <string>
#include <vector>

namespace deltabit::test {

inline std::map<std::string, TensorSpec> by_name(const std::vector<TensorSpec>& specs) {
    std::map<std::string, TensorSpec> out;
    for (const TensorSpec& s : specs) out.emplace(s.name, s);
    return out;
}

inline double elements(const TensorSpec& s) {
    return double(std::accumulate(s.shape.begin(), s.shape.end(), int64_t(1), std::multiplies<>()));
}

}  // namespace deltabit::test
