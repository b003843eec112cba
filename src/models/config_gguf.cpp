#include "models/config_gguf.h"

#include "core/error.h"
#include "models/config_gguf_diffusion_gemma.h"
#include "models/config_loader.h"

#include <fmt/format.h>

#include <algorithm>
#include <limits>

namespace deltabit {

namespace {

constexpr int64_t kDefaultFullAttentionInterval = 4;  // llama.cpp's default for these architectures
// llama.cpp's converter writes these when the HF config gives no mrope_section (qwen.py:521-534).
const std::vector<int32_t> kDefaultRopeSections = {11, 11, 10, 0};

struct ArchEntry {
    std::string_view name;
    Arch arch;
};
constexpr ArchEntry kArchs[] = {
    {"qwen35", Arch::qwen35},   {"qwen35moe", Arch::qwen35moe},           {"qwen3next", Arch::qwen3next},
    {"qwen3", Arch::qwen3},     {"diffusion_gemma", Arch::diffusion_gemma}};

bool is_hybrid(Arch arch) { return arch != Arch::qwen3; }

// The order value heads have in a GGUF of this architecture (reference §2.3 item 3).
ValueHeadOrder gguf_value_head_order(Arch arch) {
    return arch == Arch::qwen35 || arch == Arch::qwen35moe ? ValueHeadOrder::tiled : ValueHeadOrder::grouped;
}

bool interval_rule_holds(const std::vector<LayerKind>& layers, int64_t interval) {
    for (size_t i = 0; i < layers.size(); ++i) {
        const bool full = (int64_t(i) + 1) % interval == 0;
        if (full != (layers[i] == LayerKind::full_attention)) return false;
    }
    return true;
}

// GGUF stores these counts as u32; a value that does not fit is a bug in the config, not in the file.
uint32_t as_u32(int64_t value, std::string_view key) {
    if (value < 0 || value > int64_t(std::numeric_limits<uint32_t>::max()))
        fail("gguf: writing {}: {} does not fit in u32", key, value);
    return uint32_t(value);
}

// A count llama.cpp may store per layer (an array, 0 for layers without it — hybrid converters do this
// for head_count_kv) or once. The engine has one value: the array's non-zero entries must agree.
int64_t per_layer_or_scalar(const gguf::File& file, const std::string& key, int64_t fallback, bool required,
                            const std::string& source) {
    const gguf::Value* value = file.find(key);
    if (!value) {
        if (required) file.require(key);  // throws "missing key"
        return fallback;
    }
    if (!value->is_array()) return value->as_i64();
    int64_t found = 0;
    for (const int64_t v : value->as_i64_array()) {
        if (v == 0) continue;
        if (found != 0 && v != found)
            fail("{}: {}: per-layer values differ ({} and {}); the engine needs one value", source, key, found, v);
        found = v;
    }
    return found;
}

void read_stop_tokens(const gguf::File& file, ModelConfig& c) {
    c.bos_id = file.has("tokenizer.ggml.bos_token_id") ? int64_t(file.require_u32("tokenizer.ggml.bos_token_id")) : -1;
    for (const char* k : {"tokenizer.ggml.eos_token_id", "tokenizer.ggml.eot_token_id", "tokenizer.ggml.eom_token_id"}) {
        if (!file.has(k)) continue;
        const int64_t id = int64_t(file.require_u32(k));
        if (std::find(c.eos_ids.begin(), c.eos_ids.end(), id) == c.eos_ids.end()) c.eos_ids.push_back(id);
    }
}

void write_stop_tokens(const ModelConfig& c, const std::string& source, gguf::Writer& w) {
    if (c.bos_id >= 0) w.set_u32("tokenizer.ggml.bos_token_id", as_u32(c.bos_id, "tokenizer.ggml.bos_token_id"));
    constexpr const char* kStopKeys[] = {"tokenizer.ggml.eos_token_id", "tokenizer.ggml.eot_token_id",
                                         "tokenizer.ggml.eom_token_id"};
    if (c.eos_ids.size() > std::size(kStopKeys))
        fail("{}: {} stop tokens, but a GGUF names at most 3 (eos, eot, eom)", source, c.eos_ids.size());
    for (size_t i = 0; i < c.eos_ids.size(); ++i) w.set_u32(kStopKeys[i], as_u32(c.eos_ids[i], kStopKeys[i]));
}

}  // namespace

std::string_view supported_gguf_architectures() { return "qwen35, qwen35moe, qwen3next, qwen3, diffusion_gemma"; }

ModelConfig model_config_from_gguf(const gguf::File& file) {
    const std::string source = fmt::format("gguf: {}", file.path());
    ModelConfig c;
    c.arch_name = file.require_string("general.architecture");
    const auto entry = std::find_if(std::begin(kArchs), std::end(kArchs),
                                    [&](const ArchEntry& e) { return e.name == c.arch_name; });
    if (entry == std::end(kArchs))
        fail("{}: general.architecture '{}' is not supported (supported: {})", source, c.arch_name,
             supported_gguf_architectures());
    c.arch = entry->arch;
    if (c.arch == Arch::diffusion_gemma) {
        read_diffusion_gemma_gguf(file, source, c);
        read_stop_tokens(file, c);
        validate_model_config(c, source, gguf_field_names(c.arch_name));
        return c;
    }
    const std::string a = c.arch_name + ".";
    auto key = [&](std::string_view suffix) { return a + std::string(suffix); };

    // Layers: block_count includes the MTP layers that follow the real ones.
    const int64_t block_count = int64_t(file.require_u64(key("block_count")));
    c.n_nextn_layers = int64_t(file.get_u64(key("nextn_predict_layers"), 0));
    const int64_t n_layer = block_count - c.n_nextn_layers;
    if (block_count > 100000 || n_layer <= 0)
        fail("{}: {} ({}) minus {} ({}) leaves no layers", source, key("block_count"), block_count,
             key("nextn_predict_layers"), c.n_nextn_layers);

    c.n_embd = file.require_i64(key("embedding_length"));
    c.n_ff = per_layer_or_scalar(file, key("feed_forward_length"), 0, false, source);
    c.context_length = file.get_i64(key("context_length"), 0);
    c.n_head = per_layer_or_scalar(file, key("attention.head_count"), 0, true, source);
    c.n_head_kv = per_layer_or_scalar(file, key("attention.head_count_kv"), 0, true, source);
    c.head_dim = file.get_i64(key("attention.key_length"), c.n_head > 0 ? c.n_embd / c.n_head : 0);
    const int64_t value_length = file.get_i64(key("attention.value_length"), c.head_dim);
    if (value_length != c.head_dim)
        fail("{}: {} ({}) differs from {} ({}); attention with different key and value head sizes is not supported",
             source, key("attention.value_length"), value_length, key("attention.key_length"), c.head_dim);
    c.rms_eps = file.require_f32(key("attention.layer_norm_rms_epsilon"));
    c.rope_dim = file.get_i64(key("rope.dimension_count"), c.head_dim);
    c.rope_theta = file.get_f32(key("rope.freq_base"), 10000.0f);
    const bool sections_required = c.arch == Arch::qwen35 || c.arch == Arch::qwen35moe;
    if (sections_required || file.has(key("rope.dimension_sections"))) {
        const std::vector<int64_t> sections = file.require_i64_array(key("rope.dimension_sections"));
        if (sections.size() != 4) fail("{}: {}: expected 4 entries, found {}", source, key("rope.dimension_sections"), sections.size());
        for (int64_t s : sections) {
            if (s < 0 || s > std::numeric_limits<int32_t>::max())
                fail("{}: {}: entry {} is out of range", source, key("rope.dimension_sections"), s);
            c.rope_sections.push_back(int32_t(s));
        }
    }
    c.attn_output_gate = is_hybrid(c.arch);
    c.value_head_order = gguf_value_head_order(c.arch);

    c.layers.assign(size_t(n_layer), LayerKind::full_attention);
    if (is_hybrid(c.arch)) {
        c.ssm_conv_kernel = file.require_i64(key("ssm.conv_kernel"));
        c.ssm_key_dim = file.require_i64(key("ssm.state_size"));
        c.ssm_n_key_heads = file.require_i64(key("ssm.group_count"));
        c.ssm_n_value_heads = file.require_i64(key("ssm.time_step_rank"));
        const int64_t inner = file.require_i64(key("ssm.inner_size"));
        if (c.ssm_n_value_heads <= 0 || inner <= 0 || inner % c.ssm_n_value_heads != 0)
            fail("{}: {} ({}) is not a positive multiple of {} ({})", source, key("ssm.inner_size"), inner,
                 key("ssm.time_step_rank"), c.ssm_n_value_heads);
        c.ssm_value_dim = inner / c.ssm_n_value_heads;

        if (const gguf::Value* recurrent = file.find(key("attention.recurrent_layers"))) {
            // llama.cpp sizes this array by block_count; accept exactly n_layer too (no MTP entries).
            if (!recurrent->is_array() || (int64_t(recurrent->size()) != block_count &&
                                           int64_t(recurrent->size()) != n_layer))
                fail("{}: {}: expected an array of {} bools", source, key("attention.recurrent_layers"), block_count);
            for (int64_t i = 0; i < n_layer; ++i)
                c.layers[size_t(i)] = recurrent->at(size_t(i)).as_bool() ? LayerKind::linear_attention
                                                                          : LayerKind::full_attention;
        } else {
            const int64_t interval = file.get_i64(key("full_attention_interval"), kDefaultFullAttentionInterval);
            if (interval <= 0)
                fail("{}: {}: must be positive (found {})", source, key("full_attention_interval"), interval);
            for (int64_t i = 0; i < n_layer; ++i)
                c.layers[size_t(i)] =
                    (i + 1) % interval == 0 ? LayerKind::full_attention : LayerKind::linear_attention;
        }
    }

    c.layer_is_moe.assign(size_t(n_layer), false);
    if (c.arch == Arch::qwen35moe || c.arch == Arch::qwen3next) {
        // Qwen3.5-MoE is sparse everywhere; llama.cpp's qwen3next graph makes every layer sparse too.
        c.n_expert = c.arch == Arch::qwen35moe ? file.require_i64(key("expert_count"))
                                                : file.get_i64(key("expert_count"), 0);
        if (c.n_expert > 0) {
            c.layer_is_moe.assign(size_t(n_layer), true);
            c.n_expert_used = file.require_i64(key("expert_used_count"));
            c.expert_ff = file.require_i64(key("expert_feed_forward_length"));
            c.shared_expert_ff = file.get_i64(key("expert_shared_feed_forward_length"), 0);
            c.norm_topk_prob = file.get_bool(key("expert_weights_norm"), true);
        }
    }

    // Vocabulary size: the explicit key, else the embedding's rows, else the token list.
    const gguf::TensorInfo* embd = file.find_tensor("token_embd.weight");
    if (file.has(key("vocab_size"))) {
        c.n_vocab = file.require_i64(key("vocab_size"));
    } else if (embd && embd->shape.size() == 2) {
        c.n_vocab = embd->shape[1];
    } else if (const gguf::Value* tokens = file.find("tokenizer.ggml.tokens"); tokens && tokens->is_array()) {
        c.n_vocab = int64_t(tokens->size());
    } else {
        fail("{}: cannot tell the vocabulary size: no {}, token_embd.weight or tokenizer.ggml.tokens", source,
             key("vocab_size"));
    }
    if (embd && (embd->shape.size() != 2 || embd->shape[1] != c.n_vocab))
        fail("{}: tensor token_embd.weight: shape does not have {} rows ({} = {})", source, c.n_vocab,
             file.has(key("vocab_size")) ? key("vocab_size") : "vocabulary size", c.n_vocab);
    c.tied_embeddings = file.find_tensor("output.weight") == nullptr;

    read_stop_tokens(file, c);

    validate_model_config(c, source, gguf_field_names(c.arch_name));
    return c;
}

void write_model_config_gguf(const ModelConfig& c, gguf::Writer& w) {
    const auto entry = std::find_if(std::begin(kArchs), std::end(kArchs),
                                    [&](const ArchEntry& e) { return e.arch == c.arch; });
    const std::string arch_name(entry->name);
    const std::string source = fmt::format("gguf: writing {} config", arch_name);
    validate_model_config(c, source, gguf_field_names(arch_name));
    if (c.arch == Arch::diffusion_gemma) {
        write_diffusion_gemma_gguf(c, w);
        write_stop_tokens(c, source, w);
        return;
    }
    const std::string a = arch_name + ".";
    auto key = [&](std::string_view suffix) { return a + std::string(suffix); };
    auto set_u32 = [&](std::string_view suffix, int64_t value) {
        const std::string k = key(suffix);
        w.set_u32(k, as_u32(value, k));
    };

    bool any_linear = false;
    for (LayerKind kind : c.layers) any_linear = any_linear || kind == LayerKind::linear_attention;
    if (any_linear && c.value_head_order != gguf_value_head_order(c.arch))
        fail("{}: value heads are in {} order but {} GGUFs store them {}; reorder the DeltaNet tensors first", source,
             c.value_head_order == ValueHeadOrder::tiled ? "tiled" : "grouped", arch_name,
             gguf_value_head_order(c.arch) == ValueHeadOrder::tiled ? "tiled" : "grouped");
    const bool all_moe = std::all_of(c.layer_is_moe.begin(), c.layer_is_moe.end(), [](bool m) { return m; });
    const bool no_moe = std::none_of(c.layer_is_moe.begin(), c.layer_is_moe.end(), [](bool m) { return m; });
    const bool moe_arch = c.arch == Arch::qwen35moe || c.arch == Arch::qwen3next;
    if (!(no_moe || (all_moe && moe_arch)) || (c.arch == Arch::qwen35moe && !all_moe))
        fail("{}: {} GGUFs cannot express this pattern of MoE and dense layers", source, arch_name);

    w.set_string("general.architecture", arch_name);
    set_u32("vocab_size", c.n_vocab);
    if (c.context_length > 0) set_u32("context_length", c.context_length);
    set_u32("embedding_length", c.n_embd);
    if (c.n_ff > 0) set_u32("feed_forward_length", c.n_ff);
    set_u32("block_count", c.n_layer() + c.n_nextn_layers);
    if (c.n_nextn_layers > 0) set_u32("nextn_predict_layers", c.n_nextn_layers);
    set_u32("attention.head_count", c.n_head);
    set_u32("attention.head_count_kv", c.n_head_kv);
    set_u32("attention.key_length", c.head_dim);
    set_u32("attention.value_length", c.head_dim);
    w.set_f32(key("attention.layer_norm_rms_epsilon"), c.rms_eps);
    set_u32("rope.dimension_count", c.rope_dim);
    w.set_f32(key("rope.freq_base"), c.rope_theta);
    std::vector<int32_t> sections = c.rope_sections;
    if (sections.empty() && (c.arch == Arch::qwen35 || c.arch == Arch::qwen35moe)) sections = kDefaultRopeSections;
    if (!sections.empty()) {
        sections.resize(4, 0);
        w.set_i32_array(key("rope.dimension_sections"), sections);
    }

    if (is_hybrid(c.arch)) {
        set_u32("ssm.conv_kernel", c.ssm_conv_kernel);
        set_u32("ssm.state_size", c.ssm_key_dim);
        set_u32("ssm.group_count", c.ssm_n_key_heads);
        set_u32("ssm.time_step_rank", c.ssm_n_value_heads);
        set_u32("ssm.inner_size", c.ssm_value_dim * c.ssm_n_value_heads);
        // The interval alone when it describes the layers (every published model); otherwise the
        // per-layer array too, sized by block_count as llama.cpp reads it (MTP layers: attention).
        const int64_t first_full = int64_t(std::find(c.layers.begin(), c.layers.end(), LayerKind::full_attention) -
                                           c.layers.begin());
        int64_t interval = kDefaultFullAttentionInterval;
        if (!interval_rule_holds(c.layers, interval) && interval_rule_holds(c.layers, first_full + 1))
            interval = first_full + 1;
        set_u32("full_attention_interval", interval);
        if (!interval_rule_holds(c.layers, interval)) {
            std::vector<gguf::Value> recurrent;
            for (LayerKind kind : c.layers) recurrent.push_back(gguf::Value::boolean(kind == LayerKind::linear_attention));
            for (int64_t i = 0; i < c.n_nextn_layers; ++i) recurrent.push_back(gguf::Value::boolean(false));
            w.set_array(key("attention.recurrent_layers"), gguf::ValueType::BOOL, std::move(recurrent));
        }
    }

    if (moe_arch && all_moe && !c.layer_is_moe.empty()) {
        set_u32("expert_count", c.n_expert);
        set_u32("expert_used_count", c.n_expert_used);
        set_u32("expert_feed_forward_length", c.expert_ff);
        if (c.shared_expert_ff > 0) set_u32("expert_shared_feed_forward_length", c.shared_expert_ff);
        // llama.cpp renormalises for these architectures; only the exception needs saying.
        if (!c.norm_topk_prob) w.set_bool(key("expert_weights_norm"), false);
    }

    write_stop_tokens(c, source, w);
}

}  // namespace deltabit
