// A Hugging Face model folder: config.json (→ ModelConfig), the safetensors weights (single file or
// sharded with model.safetensors.index.json) and, when present, tokenizer.json. Everything is
// validated when the folder is opened; the weights stay memory-mapped for the HfFolder's lifetime.
//
// The ModelConfig describes the folder as Hugging Face lays it out (value heads grouped, 1+w norm
// weights as stored); the weight-name map and the converter turn it into the engine's conventions.
#pragma once

#include "formats/safetensors.h"
#include "models/model_config.h"

#include <nlohmann/json.hpp>

#include <filesystem>
#include <string>
#include <vector>

namespace deltabit {

struct HfFolder {
    std::filesystem::path path;
    nlohmann::json raw_config;          // config.json as read, for fields the engine does not model
    ModelConfig config;
    safetensors::Set weights;
    std::filesystem::path tokenizer;    // tokenizer.json, or empty when the folder has none
};

// True when `path` is a folder with a config.json (how `-m` tells a folder from a GGUF).
bool is_hf_folder(const std::filesystem::path& path);

// Error naming the folder and what is missing or malformed.
HfFolder open_hf_folder(const std::filesystem::path& path);

// For `deltabit info`: the config summary, then (when list_tensors) one line per tensor
// "name  dtype  [shape]  bytes", then totals.
std::string describe_hf_folder(const HfFolder& folder, bool list_tensors = true);
// The same as JSON: {"path", "config": model_config_to_json, "tensors": [{name, dtype, shape, bytes,
// file}], "total_bytes", "files": [...], "tokenizer"}.
nlohmann::json hf_folder_to_json(const HfFolder& folder);

}  // namespace deltabit
