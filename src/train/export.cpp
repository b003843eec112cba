#include "train/export.h"

#include "core/error.h"
#include "formats/safetensors.h"
#include "train/train_config.h"

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

// tokenizer.json of a bytelm model (text/byte_tokenizer.h's ids) in Hugging Face's byte-level BPE form
// with no merges: ids 0..255 are the bytes, each spelled in the byte-level alphabet (printable Latin-1
// bytes stand for themselves, the other 68 take the code points from U+0100 up, in byte order); 256..258
// are <|pad|>, <|bos|> and <|eos|>. The converter embeds it in the GGUF, so chat and run take text.
nlohmann::json bytelm_tokenizer() {
    nlohmann::json vocab = nlohmann::json::object();
    int next_unprintable = 0x100;
    for (int b = 0; b < 256; ++b) {
        const bool printable = (b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
        const int code = printable ? b : next_unprintable++;  // < 0x800: one or two UTF-8 bytes
        const std::string utf8 = code < 0x80 ? std::string(1, char(code))
                                             : std::string{char(0xC0 | (code >> 6)), char(0x80 | (code & 0x3F))};
        vocab[utf8] = b;
    }
    nlohmann::json added = nlohmann::json::array();
    for (const auto& [id, content] : {std::pair{256, "<|pad|>"}, {257, "<|bos|>"}, {258, "<|eos|>"}})
        added.push_back({{"id", id}, {"content", content}, {"special", true}, {"single_word", false},
                         {"lstrip", false}, {"rstrip", false}, {"normalized", false}});
    return {{"model", {{"type", "BPE"}, {"vocab", vocab}, {"merges", nlohmann::json::array()}}},
            {"pre_tokenizer", {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"trim_offsets", false},
                               {"use_regex", false}}},
            {"decoder", {{"type", "ByteLevel"}}},
            {"added_tokens", added}};
}

void write_json(const std::filesystem::path& file, const nlohmann::json& j) {
    std::ofstream out(file);
    out << j.dump(2) << "\n";
    if (!out) fail("train: export: {}: write failed", file.string());
}

}  // namespace

void write_hf_folder(const ParameterLayout& layout, std::span<const float> weights, const std::filesystem::path& dir) {
    if (int64_t(weights.size()) != layout.total())
        fail("train: export: {} weights for a model of {} parameters", weights.size(), layout.total());
    std::filesystem::create_directories(dir);
    write_json(dir / "config.json", hf_config(layout.config()));
    if (layout.config().n_vocab == kBytelmVocab) write_json(dir / "tokenizer.json", bytelm_tokenizer());
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
