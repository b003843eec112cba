#include "train/export.h"

#include "core/error.h"
#include "formats/safetensors.h"

#include <nlohmann/json.hpp>

#include <fstream>

namespace deltabit::train {

namespace {

nlohmann::json hf_config(const ModelConfig& c) {
    const bool hybrid = c.arch == Arch::qwen35;
    nlohmann::json j;
    j["model_type"] = hybrid ? "qwen3_5_text" : "qwen3";
    j["vocab_size"] = c.n_vocab;
    j["hidden_size"] = c.n_embd;
    j["intermediate_size"] = c.n_ff;
    j["num_hidden_layers"] = c.n_layer();
    j["num_attention_heads"] = c.n_head;
    j["num_key_value_heads"] = c.n_head_kv;
    j["head_dim"] = c.head_dim;
    j["hidden_act"] = "silu";
    j["rms_norm_eps"] = c.rms_eps;
    j["tie_word_embeddings"] = c.tied_embeddings;
    j["max_position_embeddings"] = c.context_length > 0 ? c.context_length : 4096;
    j["attention_bias"] = false;
    if (c.bos_id >= 0) j["bos_token_id"] = c.bos_id;
    if (!c.eos_ids.empty()) j["eos_token_id"] = c.eos_ids.front();
    if (hybrid) {
        j["rope_parameters"] = {{"rope_type", "default"},
                                {"rope_theta", c.rope_theta},
                                {"partial_rotary_factor", double(c.rope_dim) / double(c.head_dim)}};
        j["linear_num_key_heads"] = c.ssm_n_key_heads;
        j["linear_num_value_heads"] = c.ssm_n_value_heads;
        j["linear_key_head_dim"] = c.ssm_key_dim;
        j["linear_value_head_dim"] = c.ssm_value_dim;
        j["linear_conv_kernel_dim"] = c.ssm_conv_kernel;
        nlohmann::json types = nlohmann::json::array();
        for (LayerKind k : c.layers) types.push_back(k == LayerKind::full_attention ? "full_attention" : "linear_attention");
        j["layer_types"] = types;
    } else {
        j["rope_theta"] = c.rope_theta;
    }
    return j;
}

}  // namespace

void write_hf_folder(const ParameterLayout& layout, std::span<const float> weights, const std::filesystem::path& dir) {
    if (int64_t(weights.size()) != layout.total())
        fail("train: export: {} weights for a model of {} parameters", weights.size(), layout.total());
    std::filesystem::create_directories(dir);
    {
        std::ofstream out(dir / "config.json");
        out << hf_config(layout.config()).dump(2) << "\n";
        if (!out) fail("train: export: {}: write failed", (dir / "config.json").string());
    }
    std::vector<safetensors::TensorToWrite> tensors;
    for (const ParameterInfo& p : layout.all())
        tensors.push_back({p.name, "F32", p.shape,
                           std::span(reinterpret_cast<const uint8_t*>(weights.data() + p.offset), size_t(p.size) * 4)});
    safetensors::write(dir / "model.safetensors", tensors, {{"format", "pt"}});
}

ConvertReport export_gguf(const ParameterLayout& layout, std::span<const float> weights,
                          const std::filesystem::path& out, DType type, const std::string& name) {
    const std::filesystem::path hf_dir = out.string() + ".hf";
    std::filesystem::remove_all(hf_dir);
    write_hf_folder(layout, weights, hf_dir);
    ConvertOptions options;
    options.type = type;
    options.name = name;
    ConvertReport report;
    try {
        report = convert_hf_folder(hf_dir, out, options);
    } catch (...) {
        std::filesystem::remove_all(hf_dir);
        throw;
    }
    std::filesystem::remove_all(hf_dir);
    return report;
}

}  // namespace deltabit::train
