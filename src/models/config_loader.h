// Hugging Face config.json → ModelConfig, and the consistency checks every loader runs.
//
// Supported model_type values (transformers 5.17; ../shared/reference/qwen35-transformers.md §1):
//   qwen3_next                     → Arch::qwen3next (MoE when num_experts > 0)
//   qwen3_5_text, qwen3_5          → Arch::qwen35    (qwen3_5 is the VLM wrapper: fields in text_config)
//   qwen3_5_moe_text, qwen3_5_moe  → Arch::qwen35moe
//   qwen3                          → Arch::qwen3
//   diffusion_gemma(_text)         → Arch::diffusion_gemma (models/config_diffusion_gemma.h)
// The result describes the Hugging Face layout: value heads in grouped order, norm weights as HF stores
// them. Errors name the file and the field: "config.json: text_config.hidden_size: missing".
#pragma once

#include "models/model_config.h"

#include <nlohmann/json_fwd.hpp>

#include <filesystem>
#include <string>
#include <string_view>

namespace deltabit {

// The model_type values above, comma-separated, for messages and `--help`.
std::string_view supported_hf_model_types();

// `source` names the file in messages (a path or "config.json").
ModelConfig model_config_from_hf_json(const nlohmann::json& config, std::string_view source = "config.json");
// Reads and parses a config.json (or FOLDER/config.json when given a folder).
ModelConfig load_hf_config(const std::filesystem::path& path);

// The names a file format gives ModelConfig's fields, so one set of checks serves both loaders and
// still names the key the user can find in their file.
struct ConfigFieldNames {
    std::string n_vocab, n_embd, n_ff, n_layer, n_head, n_head_kv, head_dim, rope_dim, rms_eps;
    std::string ssm_n_key_heads, ssm_n_value_heads, ssm_key_dim, ssm_value_dim, ssm_conv_kernel;
    std::string n_expert, n_expert_used, expert_ff, shared_expert_ff, layers, eos_ids, bos_id;
};
// prefix: "" or "text_config." (the VLM wrappers).
ConfigFieldNames hf_field_names(std::string_view prefix = "");
// Keys of a GGUF with general.architecture = arch_name ("qwen35.attention.head_count", ...).
ConfigFieldNames gguf_field_names(std::string_view arch_name);

// Positive sizes, divisible head counts (Hq by Hkv, Hv by Hk), an even rope_dim within head_dim,
// per-layer arrays of the right length, FFN/MoE widths for the layers that use them, token ids inside
// the vocabulary. Error "SOURCE: FIELD: ..." on the first problem.
void validate_model_config(const ModelConfig& config, std::string_view source, const ConfigFieldNames& names);

}  // namespace deltabit
