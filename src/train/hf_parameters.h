// Parameters to and from Hugging Face safetensors (the names of train/parameters.h are transformers'
// own), so a trainer model can start from, and be compared with, a transformers checkpoint.
#pragma once

#include "formats/safetensors.h"
#include "train/parameters.h"

#include <filesystem>
#include <vector>

namespace deltabit::train {

// Every parameter of the layout from the set (F32, F16 or BF16), shape checked; fails naming the
// tensor when one is missing or misshapen.
std::vector<float> load_hf_parameters(const ParameterLayout& layout, const safetensors::Set& weights);

}  // namespace deltabit::train
