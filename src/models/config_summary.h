// ModelConfig for people: the lines `deltabit info` prints and the object its --json output carries,
// the same for a GGUF and a Hugging Face folder.
#pragma once

#include "models/model_config.h"

#include <nlohmann/json.hpp>

#include <string>
#include <utility>
#include <vector>

namespace deltabit {

std::string_view arch_label(Arch arch);  // "qwen35", ...
std::string_view layer_kind_label(LayerKind kind);  // "full_attention" / "linear_attention"

// ("layers", "64 (48 linear_attention, 16 full_attention; full every 4th)"), ... in a fixed order;
// fields that do not apply to the architecture are left out.
std::vector<std::pair<std::string, std::string>> model_config_summary(const ModelConfig& config);
// Every field, per-layer arrays included.
nlohmann::json model_config_to_json(const ModelConfig& config);

}  // namespace deltabit
