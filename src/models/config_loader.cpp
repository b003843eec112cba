#include "models/config_loader.h"

#include "core/error.h"
#include "models/config_diffusion_gemma.h"
#include "models/config_fields.h"

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <cmath>
#include <fstream>
#include <sstream>

namespace deltabit {

namespace {

using nlohmann::json;

constexpr std::string_view kSupportedTypes =
    "qwen3_next, qwen3_5_text, qwen3_5, qwen3_5_moe_text, qwen3_5_moe, qwen3, diffusion_gemma, diffusion_gemma_text";

// transformers' defaults where a real checkpoint may leave a field out (reference §1 "Defaults").
constexpr double kDefaultRopeTheta = 10000.0;
constexpr double kHybridPartialRotary = 0.25;
constexpr int64_t kDefaultFullAttentionInterval = 4;
constexpr double kDefaultRmsEps = 1e-6;
constexpr int64_t kDefaultContextLength = 32768;
constexpr int64_t kDefaultConvKernel = 4;
// llama.cpp's converter writes these sections when a Qwen3.5 config has no mrope_section.
const std::vector<int32_t> kDefaultRopeSections = {11, 11, 10, 0};

using Fields = ConfigFields;

bool is_hybrid(Arch arch) { return arch != Arch::qwen3; }

std::vector<LayerKind> read_layer_kinds(const Fields& f, Arch arch, int64_t n_layer) {
    std::vector<LayerKind> layers(size_t(n_layer), LayerKind::full_attention);
    const std::vector<std::string> types = f.get_string_list("layer_types", n_layer, "num_hidden_layers");
    if (!types.empty()) {
        for (size_t i = 0; i < types.size(); ++i) {
            const std::string key = fmt::format("layer_types[{}]", i);
            const std::string& kind = types[i];
            // transformers remaps the legacy names "mamba" and "attention" the same way.
            if (kind == "full_attention" || kind == "attention") {
                layers[i] = LayerKind::full_attention;
            } else if (is_hybrid(arch) && (kind == "linear_attention" || kind == "mamba")) {
                layers[i] = LayerKind::linear_attention;
            } else if (!is_hybrid(arch) && kind == "sliding_attention") {
                f.bad(key, "sliding-window attention is not supported");
            } else {
                f.bad(key, fmt::format("unknown layer type '{}' (expected {})", kind,
                                       is_hybrid(arch) ? "full_attention or linear_attention" : "full_attention"));
            }
        }
        return layers;
    }
    if (!is_hybrid(arch)) return layers;
    const int64_t interval = f.get_int("full_attention_interval", kDefaultFullAttentionInterval);
    if (interval <= 0) f.bad("full_attention_interval", fmt::format("must be positive (found {})", interval));
    for (int64_t i = 0; i < n_layer; ++i)
        layers[size_t(i)] = (i + 1) % interval == 0 ? LayerKind::full_attention : LayerKind::linear_attention;
    return layers;
}

void read_rope(const Fields& f, Arch arch, ModelConfig& c) {
    // transformers 5 keeps RoPE settings in rope_parameters; rope_scaling is its older alias.
    const std::string rope_key = f.find("rope_parameters") ? "rope_parameters" : "rope_scaling";
    const json* params = f.find(rope_key);
    if (params && !params->is_object()) f.bad(rope_key, fmt::format("expected an object, found {}", params->type_name()));
    const json empty = json::object();
    const Fields rope(params ? *params : empty, f.source(), f.name(rope_key) + ".");

    std::string rope_type = rope.get_string("rope_type", "");
    if (rope_type.empty()) rope_type = rope.get_string("type", "");
    if (!rope_type.empty() && rope_type != "default")
        rope.bad("rope_type", fmt::format("'{}' is not supported (only default RoPE)", rope_type));

    // Priority as in transformers: inside rope_parameters > top level > default.
    const double theta = rope.get_number("rope_theta", f.get_number("rope_theta", kDefaultRopeTheta));
    if (!(theta > 0.0)) rope.bad("rope_theta", fmt::format("must be positive (found {})", theta));
    c.rope_theta = float(theta);

    const double default_factor = is_hybrid(arch) ? kHybridPartialRotary : 1.0;
    const double factor =
        rope.get_number("partial_rotary_factor", f.get_number("partial_rotary_factor", default_factor));
    if (!(factor > 0.0 && factor <= 1.0))
        rope.bad("partial_rotary_factor", fmt::format("must be in (0, 1] (found {})", factor));
    c.rope_dim = int64_t(double(c.head_dim) * factor);  // transformers: int(head_dim * factor)

    if (arch == Arch::qwen35 || arch == Arch::qwen35moe) {
        c.rope_sections = kDefaultRopeSections;
        if (const json* s = rope.find("mrope_section")) {
            if (!s->is_array() || s->size() > 4) rope.bad("mrope_section", "expected an array of at most 4 integers");
            c.rope_sections.assign(4, 0);
            for (size_t i = 0; i < s->size(); ++i) {
                const int64_t v = rope.int_at("mrope_section", *s, i);
                if (v < 0 || v > INT32_MAX) rope.bad("mrope_section", fmt::format("entry {} is out of range", i));
                c.rope_sections[i] = int32_t(v);
            }
        }
    }
}

void read_moe(const Fields& f, Arch arch, ModelConfig& c) {
    const size_t n_layer = c.layers.size();
    c.layer_is_moe.assign(n_layer, false);
    if (arch == Arch::qwen35moe) {
        c.n_expert = f.require_int("num_experts");
        c.layer_is_moe.assign(n_layer, true);
        c.norm_topk_prob = true;  // Qwen3.5-MoE always renormalises the top-k weights (reference §2.5)
    } else if (arch == Arch::qwen3next) {
        c.n_expert = f.require_int("num_experts");
        if (c.n_expert < 0) f.bad("num_experts", fmt::format("must not be negative (found {})", c.n_expert));
        if (c.n_expert == 0) return;  // a dense Qwen3-Next
        c.norm_topk_prob = f.get_bool("norm_topk_prob", true);
        const int64_t step = f.get_int("decoder_sparse_step", 1);
        if (step <= 0) f.bad("decoder_sparse_step", fmt::format("must be positive (found {})", step));
        std::vector<bool> dense_only(n_layer, false);
        if (const json* only = f.find("mlp_only_layers")) {
            if (!only->is_array()) f.bad("mlp_only_layers", "expected an array of layer indices");
            for (size_t i = 0; i < only->size(); ++i) {
                const int64_t layer = f.int_at("mlp_only_layers", *only, i);
                if (layer < 0 || layer >= int64_t(n_layer))
                    f.bad(fmt::format("mlp_only_layers[{}]", i),
                          fmt::format("{} is not a layer index below {}", layer, n_layer));
                dense_only[size_t(layer)] = true;
            }
        }
        for (size_t i = 0; i < n_layer; ++i) c.layer_is_moe[i] = !dense_only[i] && (int64_t(i) + 1) % step == 0;
    } else {
        return;
    }
    c.n_expert_used = f.require_int("num_experts_per_tok");
    c.expert_ff = f.require_int("moe_intermediate_size");
    c.shared_expert_ff = f.require_int("shared_expert_intermediate_size");
}

}  // namespace

std::string_view supported_hf_model_types() { return kSupportedTypes; }

ConfigFieldNames hf_field_names(std::string_view prefix) {
    const std::string p(prefix);
    ConfigFieldNames n;
    n.n_vocab = p + "vocab_size";
    n.n_embd = p + "hidden_size";
    n.n_ff = p + "intermediate_size";
    n.n_layer = p + "num_hidden_layers";
    n.n_head = p + "num_attention_heads";
    n.n_head_kv = p + "num_key_value_heads";
    n.head_dim = p + "head_dim";
    n.rope_dim = p + "rope_parameters.partial_rotary_factor";
    n.rms_eps = p + "rms_norm_eps";
    n.ssm_n_key_heads = p + "linear_num_key_heads";
    n.ssm_n_value_heads = p + "linear_num_value_heads";
    n.ssm_key_dim = p + "linear_key_head_dim";
    n.ssm_value_dim = p + "linear_value_head_dim";
    n.ssm_conv_kernel = p + "linear_conv_kernel_dim";
    n.n_expert = p + "num_experts";
    n.n_expert_used = p + "num_experts_per_tok";
    n.expert_ff = p + "moe_intermediate_size";
    n.shared_expert_ff = p + "shared_expert_intermediate_size";
    n.layers = p + "layer_types";
    n.eos_ids = p + "eos_token_id";
    n.bos_id = p + "bos_token_id";
    return n;
}

ConfigFieldNames gguf_field_names(std::string_view arch_name) {
    const std::string a(arch_name);
    ConfigFieldNames n;
    n.n_vocab = "tokenizer.ggml.tokens / token_embd.weight";
    n.n_embd = a + ".embedding_length";
    n.n_ff = a + ".feed_forward_length";
    n.n_layer = a + ".block_count";
    n.n_head = a + ".attention.head_count";
    n.n_head_kv = a + ".attention.head_count_kv";
    n.head_dim = a + ".attention.key_length";
    n.rope_dim = a + ".rope.dimension_count";
    n.rms_eps = a + ".attention.layer_norm_rms_epsilon";
    n.ssm_n_key_heads = a + ".ssm.group_count";
    n.ssm_n_value_heads = a + ".ssm.time_step_rank";
    n.ssm_key_dim = a + ".ssm.state_size";
    n.ssm_value_dim = a + ".ssm.inner_size";
    n.ssm_conv_kernel = a + ".ssm.conv_kernel";
    n.n_expert = a + ".expert_count";
    n.n_expert_used = a + ".expert_used_count";
    n.expert_ff = a + ".expert_feed_forward_length";
    n.shared_expert_ff = a + ".expert_shared_feed_forward_length";
    n.layers = a + ".attention.recurrent_layers";
    n.eos_ids = "tokenizer.ggml.eos_token_id";
    n.bos_id = "tokenizer.ggml.bos_token_id";
    return n;
}

void validate_model_config(const ModelConfig& c, std::string_view source, const ConfigFieldNames& names) {
    auto positive = [&](int64_t value, const std::string& field) {
        if (value <= 0) fail("{}: {}: must be positive (found {})", source, field, value);
    };
    positive(c.n_vocab, names.n_vocab);
    positive(c.n_embd, names.n_embd);
    positive(c.n_layer(), names.n_layer);
    positive(c.n_head, names.n_head);
    positive(c.n_head_kv, names.n_head_kv);
    positive(c.head_dim, names.head_dim);
    if (c.n_head % c.n_head_kv != 0)
        fail("{}: {} ({}) is not a multiple of {} ({})", source, names.n_head, c.n_head, names.n_head_kv, c.n_head_kv);
    // RoPE rotates pairs of dimensions.
    if (c.rope_dim <= 0 || c.rope_dim > c.head_dim || c.rope_dim % 2 != 0)
        fail("{}: {}: rotary dimension {} must be even and in 2..{} (head dim)", source, names.rope_dim, c.rope_dim,
             c.head_dim);
    if (!(c.rms_eps > 0.0f)) fail("{}: {}: must be positive (found {})", source, names.rms_eps, c.rms_eps);
    if (c.layer_is_moe.size() != c.layers.size())
        fail("{}: {}: {} MoE flags for {} layers", source, names.n_layer, c.layer_is_moe.size(), c.layers.size());

    bool any_linear = false, any_dense = false, any_moe = false;
    for (size_t i = 0; i < c.layers.size(); ++i) {
        any_linear = any_linear || c.layers[i] == LayerKind::linear_attention;
        (c.layer_is_moe[i] ? any_moe : any_dense) = true;
    }
    if (c.arch == Arch::qwen3 && any_linear)
        fail("{}: {}: qwen3 has only full-attention layers", source, names.layers);
    if (any_linear) {
        positive(c.ssm_n_key_heads, names.ssm_n_key_heads);
        positive(c.ssm_n_value_heads, names.ssm_n_value_heads);
        positive(c.ssm_key_dim, names.ssm_key_dim);
        positive(c.ssm_value_dim, names.ssm_value_dim);
        positive(c.ssm_conv_kernel, names.ssm_conv_kernel);
        if (c.ssm_n_value_heads % c.ssm_n_key_heads != 0)
            fail("{}: {} ({}) is not a multiple of {} ({})", source, names.ssm_n_value_heads, c.ssm_n_value_heads,
                 names.ssm_n_key_heads, c.ssm_n_key_heads);
    }
    if (any_dense) positive(c.n_ff, names.n_ff);
    if (any_moe) {
        positive(c.n_expert, names.n_expert);
        positive(c.n_expert_used, names.n_expert_used);
        positive(c.expert_ff, names.expert_ff);
        if (c.n_expert_used > c.n_expert)
            fail("{}: {} ({}) exceeds {} ({})", source, names.n_expert_used, c.n_expert_used, names.n_expert,
                 c.n_expert);
        if (c.shared_expert_ff < 0)
            fail("{}: {}: must not be negative (found {})", source, names.shared_expert_ff, c.shared_expert_ff);
    }
    if (c.n_nextn_layers < 0) fail("{}: MTP layer count must not be negative (found {})", source, c.n_nextn_layers);
    if (c.bos_id < -1 || c.bos_id >= c.n_vocab)
        fail("{}: {}: {} is outside the vocabulary (size {})", source, names.bos_id, c.bos_id, c.n_vocab);
    for (int64_t id : c.eos_ids)
        if (id < 0 || id >= c.n_vocab)
            fail("{}: {}: {} is outside the vocabulary (size {})", source, names.eos_ids, id, c.n_vocab);
}

ModelConfig model_config_from_hf_json(const json& root, std::string_view source) {
    if (!root.is_object()) fail("{}: expected a JSON object, found {}", source, root.type_name());
    const Fields top(root, source, "");
    const std::string model_type = top.require_string("model_type");
    if (model_type == "diffusion_gemma" || model_type == "diffusion_gemma_text")
        return diffusion_gemma_config_from_hf_json(root, source);

    ModelConfig c;
    bool wrapper = false;
    if (model_type == "qwen3_next") {
        c.arch = Arch::qwen3next;
    } else if (model_type == "qwen3_5_text" || model_type == "qwen3_5") {
        c.arch = Arch::qwen35;
        wrapper = model_type == "qwen3_5";
    } else if (model_type == "qwen3_5_moe_text" || model_type == "qwen3_5_moe") {
        c.arch = Arch::qwen35moe;
        wrapper = model_type == "qwen3_5_moe";
    } else if (model_type == "qwen3") {
        c.arch = Arch::qwen3;
    } else {
        fail("{}: model_type '{}' is not supported (supported: {})", source, model_type, kSupportedTypes);
    }
    c.arch_name = c.arch == Arch::qwen35      ? "qwen35"
                  : c.arch == Arch::qwen35moe ? "qwen35moe"
                  : c.arch == Arch::qwen3next ? "qwen3next"
                                              : "qwen3";

    const json* text = &root;
    if (wrapper) {
        const json* inner = top.find("text_config");
        if (!inner) fail("{}: missing required field text_config (model_type {} is a vision-language wrapper)", source,
                         model_type);
        if (!inner->is_object()) top.bad("text_config", fmt::format("expected an object, found {}", inner->type_name()));
        text = inner;
        const Fields inner_fields(*text, source, "text_config.");
        const std::string inner_type = inner_fields.get_string("model_type", model_type + "_text");
        if (inner_type != model_type + "_text")
            inner_fields.bad("model_type", fmt::format("'{}' does not match the wrapper's '{}' (expected '{}_text')",
                                                       inner_type, model_type, model_type));
    }
    const std::string prefix = wrapper ? "text_config." : "";
    const Fields f(*text, source, prefix);

    if (f.get_string("hidden_act", "silu") != "silu")
        f.bad("hidden_act", fmt::format("'{}' is not supported (only silu)", f.get_string("hidden_act", "")));
    if (f.get_bool("attention_bias", false)) f.bad("attention_bias", "attention biases are not supported");
    if (f.get_bool("use_sliding_window", false)) f.bad("use_sliding_window", "sliding-window attention is not supported");

    c.n_vocab = f.require_int("vocab_size");
    c.n_embd = f.require_int("hidden_size");
    const int64_t n_layer = f.require_int("num_hidden_layers");
    if (n_layer <= 0 || n_layer > 100000)
        f.bad("num_hidden_layers", fmt::format("must be in 1..100000 (found {})", n_layer));
    c.n_head = f.require_int("num_attention_heads");
    c.n_head_kv = f.require_int("num_key_value_heads");
    if (is_hybrid(c.arch)) {
        c.head_dim = f.require_int("head_dim");
    } else {
        // Qwen3 checkpoints state head_dim (the 4B has 128 with hidden 2560 and 32 heads); the
        // hidden/heads fallback is the convention for configs that leave it out.
        c.head_dim = f.get_int("head_dim", c.n_head > 0 ? c.n_embd / c.n_head : 0);
    }
    c.rms_eps = float(f.get_number("rms_norm_eps", kDefaultRmsEps));
    c.context_length = f.get_int("max_position_embeddings", kDefaultContextLength);
    c.attn_output_gate = is_hybrid(c.arch);  // always on in transformers; `attn_output_gate` is ignored there too
    c.layers = read_layer_kinds(f, c.arch, n_layer);
    read_rope(f, c.arch, c);

    if (is_hybrid(c.arch)) {
        c.ssm_n_key_heads = f.require_int("linear_num_key_heads");
        c.ssm_n_value_heads = f.require_int("linear_num_value_heads");
        c.ssm_key_dim = f.require_int("linear_key_head_dim");
        c.ssm_value_dim = f.require_int("linear_value_head_dim");
        c.ssm_conv_kernel = f.get_int("linear_conv_kernel_dim", kDefaultConvKernel);
        c.value_head_order = ValueHeadOrder::grouped;  // Hugging Face order (reference §6.6)
        c.n_nextn_layers = f.get_int("mtp_num_hidden_layers", 0);
    }
    read_moe(f, c.arch, c);
    bool any_dense = false;
    for (bool moe : c.layer_is_moe) any_dense = any_dense || !moe;
    c.n_ff = any_dense ? f.require_int("intermediate_size") : 0;

    // The wrapper owns lm_head, so its tie flag wins; token ids live in text_config, else the wrapper.
    const Fields& tie_source = wrapper && top.find("tie_word_embeddings") ? top : f;
    c.tied_embeddings = tie_source.get_bool("tie_word_embeddings", false);
    const Fields& bos_source = wrapper && !f.find("bos_token_id") ? top : f;
    c.bos_id = bos_source.get_int("bos_token_id", -1);
    const Fields& eos_source = wrapper && !f.find("eos_token_id") ? top : f;
    c.eos_ids = eos_source.get_int_or_list("eos_token_id");

    validate_model_config(c, source, hf_field_names(prefix));
    return c;
}

ModelConfig load_hf_config(const std::filesystem::path& path) {
    std::error_code ec;
    const std::filesystem::path file = std::filesystem::is_directory(path, ec) ? path / "config.json" : path;
    const std::string source = file.string();
    std::ifstream in(file, std::ios::binary);
    if (!in) fail("{}: cannot open", source);
    std::stringstream text;
    text << in.rdbuf();
    json root;
    try {
        root = json::parse(text.str());
    } catch (const json::parse_error& e) {
        fail("{}: malformed JSON at byte {}", source, e.byte > 0 ? e.byte - 1 : 0);
    }
    return model_config_from_hf_json(root, source);
}

}  // namespace deltabit
