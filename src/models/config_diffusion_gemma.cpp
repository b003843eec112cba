#include "models/config_diffusion_gemma.h"

#include "models/config_fields.h"
#include "models/config_loader.h"

#include <cmath>
#include <map>

namespace deltabit {

namespace {

using nlohmann::json;

// DiffusionGemmaTextConfig's defaults (reference §1.1), used where a hand-written file leaves a field out;
// a config.json that transformers wrote carries every one of them.
constexpr int64_t kDefaultVocab = 262144;
constexpr int64_t kDefaultHidden = 2304;
constexpr int64_t kDefaultIntermediate = 9216;
constexpr int64_t kDefaultLayers = 30;
constexpr int64_t kDefaultHeads = 8;
constexpr int64_t kDefaultKvHeads = 4;
constexpr int64_t kDefaultHeadDim = 256;
constexpr int64_t kDefaultGlobalHeadDim = 512;
constexpr int64_t kDefaultContext = 131072;
constexpr double kDefaultRmsEps = 1e-6;
constexpr int64_t kDefaultSlidingWindow = 512;
constexpr int64_t kDefaultFullAttentionEvery = 6;
constexpr double kDefaultSoftcap = 30.0;
constexpr int64_t kDefaultCanvas = 256;
constexpr int64_t kDefaultPad = 0, kDefaultEos = 1, kDefaultBos = 2, kDefaultImageToken = 258880;
constexpr double kDefaultSlidingTheta = 1e4, kDefaultFullTheta = 1e6, kDefaultFullPartialFactor = 0.25;

std::vector<LayerKind> read_layer_types(const ConfigFields& f, int64_t n_layer) {
    std::vector<LayerKind> kinds(static_cast<size_t>(n_layer));
    if (const std::vector<std::string> types = f.get_string_list("layer_types", n_layer, "num_hidden_layers");
        !types.empty()) {
        for (size_t i = 0; i < types.size(); ++i) {
            const std::string key = fmt::format("layer_types[{}]", i);
            const std::string& kind = types[i];
            if (kind == "full_attention")
                kinds[i] = LayerKind::full_attention;
            else if (kind == "sliding_attention")
                kinds[i] = LayerKind::sliding_attention;
            else
                f.bad(key, fmt::format("unknown layer type '{}' (expected full_attention or sliding_attention)", kind));
        }
    } else {
        for (int64_t i = 0; i < n_layer; ++i)
            kinds[size_t(i)] = (i + 1) % kDefaultFullAttentionEvery == 0 ? LayerKind::full_attention
                                                                          : LayerKind::sliding_attention;
    }
    kinds.back() = LayerKind::full_attention;  // transformers forces it, with a warning
    return kinds;
}

struct LayerOverride {
    int64_t head_dim = -1;    // -1: not overridden
    int64_t n_head_kv = -1;
};

LayerOverride read_override(const ConfigFields& parent, const std::string& key, const json& value) {
    const std::string where = "per_layer_config." + key;
    if (!value.is_object()) parent.bad(where, fmt::format("expected an object, found {}", value.type_name()));
    const ConfigFields o(value, parent.source(), parent.name(where) + ".");
    LayerOverride out;
    for (const auto& [field, v] : value.items()) {
        if (field == "head_dim")
            out.head_dim = o.require_int("head_dim");
        else if (field == "num_key_value_heads")
            out.n_head_kv = o.require_int("num_key_value_heads");
        else
            o.bad(field, "overriding this field per layer is not supported (only head_dim and num_key_value_heads)");
    }
    return out;
}

// Per-layer head_dim and KV heads (reference §1.1 "Per-layer overrides").
void read_layer_geometry(const ConfigFields& f, ModelConfig& c) {
    const size_t n = c.layers.size();
    c.layer_attention.assign(n, LayerAttention{c.n_head_kv, c.head_dim});
    const json* per_layer = f.find("per_layer_config");
    if (!per_layer) {
        const int64_t global_head_dim = f.get_int("global_head_dim", kDefaultGlobalHeadDim);
        const int64_t global_kv = f.get_int("num_global_key_value_heads", c.n_head_kv);
        for (size_t i = 0; i < n; ++i)
            if (c.layers[i] == LayerKind::full_attention) c.layer_attention[i] = {global_kv, global_head_dim};
        return;
    }
    if (!per_layer->is_object())
        f.bad("per_layer_config", fmt::format("expected an object, found {}", per_layer->type_name()));
    // Layer-type keys ("full_attention") apply to every layer of that type; index keys ("7", "07") to one
    // layer and win over the type's.
    std::map<size_t, LayerOverride> by_layer;
    std::map<LayerKind, LayerOverride> by_type;
    for (const auto& [key, value] : per_layer->items()) {
        if (key == "full_attention" || key == "sliding_attention") {
            by_type[key == "full_attention" ? LayerKind::full_attention : LayerKind::sliding_attention] =
                read_override(f, key, value);
            continue;
        }
        if (key.empty() || key.size() > 9 || key.find_first_not_of("0123456789") != std::string::npos)
            f.bad("per_layer_config." + key, "expected a layer index or a layer type as the key");
        const size_t layer = size_t(std::stoll(key));
        if (layer >= n) f.bad("per_layer_config." + key, fmt::format("no such layer (the model has {})", n));
        if (by_layer.count(layer)) f.bad("per_layer_config." + key, fmt::format("layer {} is given twice", layer));
        by_layer[layer] = read_override(f, key, value);
    }
    auto apply = [](LayerAttention& a, const LayerOverride& o) {
        if (o.head_dim >= 0) a.head_dim = o.head_dim;
        if (o.n_head_kv >= 0) a.n_head_kv = o.n_head_kv;
    };
    for (size_t i = 0; i < n; ++i) {
        if (const auto it = by_type.find(c.layers[i]); it != by_type.end()) apply(c.layer_attention[i], it->second);
        if (const auto it = by_layer.find(i); it != by_layer.end()) apply(c.layer_attention[i], it->second);
    }
}

// RoPE per layer type (reference §2.2).
void read_rope(const ConfigFields& f, ModelConfig& c) {
    const json* params = f.find("rope_parameters");
    if (params && !params->is_object())
        f.bad("rope_parameters", fmt::format("expected an object, found {}", params->type_name()));
    struct TypeRope {
        std::string type;
        double theta = 0, factor = 1.0;
    };
    auto read_type = [&](const char* layer_type, TypeRope fallback) {
        const json* p = params ? ConfigFields(*params, f.source(), "").find(layer_type) : nullptr;
        if (!p) return fallback;
        const std::string key = std::string("rope_parameters.") + layer_type;
        if (!p->is_object()) f.bad(key, fmt::format("expected an object, found {}", p->type_name()));
        const ConfigFields r(*p, f.source(), f.name(key) + ".");
        TypeRope out;
        out.type = r.get_string("rope_type", r.get_string("type", "default"));
        out.theta = r.get_number("rope_theta", fallback.theta);
        out.factor = r.get_number("partial_rotary_factor", 1.0);
        if (!(out.theta > 0.0)) r.bad("rope_theta", fmt::format("must be positive (found {})", out.theta));
        if (!(out.factor > 0.0 && out.factor <= 1.0))
            r.bad("partial_rotary_factor", fmt::format("must be in (0, 1] (found {})", out.factor));
        if (out.type == "default" && out.factor != 1.0)
            r.bad("partial_rotary_factor", "partial rotation with rope_type 'default' is not supported");
        if (out.type != "default" && out.type != "proportional")
            r.bad("rope_type", fmt::format("'{}' is not supported (default or proportional)", out.type));
        return out;
    };
    const TypeRope sliding = read_type("sliding_attention", {"default", kDefaultSlidingTheta, 1.0});
    const TypeRope full = read_type("full_attention", {"proportional", kDefaultFullTheta, kDefaultFullPartialFactor});
    for (size_t i = 0; i < c.layers.size(); ++i) {
        LayerAttention& a = c.layer_attention[i];
        const TypeRope& r = c.layers[i] == LayerKind::full_attention ? full : sliding;
        a.rope_theta = float(r.theta);
        // transformers: int(partial_rotary_factor * head_dim // 2) frequencies, the rest zero; default
        // RoPE rotates every pair.
        a.rope_pairs = r.type == "proportional" ? int64_t(std::floor(r.factor * double(a.head_dim) / 2.0)) : a.head_dim / 2;
    }
    c.rope_theta = float(sliding.theta);
}

void validate_layers(const ConfigFields& f, const ModelConfig& c) {
    for (size_t i = 0; i < c.layers.size(); ++i) {
        const LayerAttention& a = c.layer_attention[i];
        const std::string what = fmt::format("layer {} ({})", i,
                                             c.layers[i] == LayerKind::full_attention ? "full" : "sliding");
        if (a.head_dim <= 0 || a.head_dim % 2 != 0)
            fail("{}: {}: head_dim must be positive and even (found {})", f.source(), what, a.head_dim);
        if (a.n_head_kv <= 0 || c.n_head % a.n_head_kv != 0)
            fail("{}: {}: {} KV heads do not divide the {} query heads", f.source(), what, a.n_head_kv, c.n_head);
        if (a.rope_pairs < 0 || a.rope_pairs > a.head_dim / 2)
            fail("{}: {}: {} rotated pairs for head_dim {}", f.source(), what, a.rope_pairs, a.head_dim);
    }
}

}  // namespace

ModelConfig diffusion_gemma_config_from_hf_json(const json& root, std::string_view source) {
    const ConfigFields top(root, source, "");
    const std::string model_type = top.require_string("model_type");
    const bool wrapper = model_type == "diffusion_gemma";
    const json* text = &root;
    if (wrapper) {
        text = top.find("text_config");
        if (!text) fail("{}: missing required field text_config (model_type diffusion_gemma nests the text model)", source);
        if (!text->is_object()) top.bad("text_config", fmt::format("expected an object, found {}", text->type_name()));
        const ConfigFields inner(*text, source, "text_config.");
        const std::string inner_type = inner.get_string("model_type", "diffusion_gemma_text");
        if (inner_type != "diffusion_gemma_text")
            inner.bad("model_type", fmt::format("'{}' is not diffusion_gemma_text", inner_type));
    }
    const std::string prefix = wrapper ? "text_config." : "";
    const ConfigFields f(*text, source, prefix);

    const std::string act = f.get_string("hidden_activation", "gelu_pytorch_tanh");
    if (act != "gelu_pytorch_tanh") f.bad("hidden_activation", fmt::format("'{}' is not supported (gelu_pytorch_tanh)", act));
    if (f.get_bool("attention_bias", false)) f.bad("attention_bias", "attention biases are not supported");
    if (const json* b = f.find("use_bidirectional_attention")) {
        // "vision" only changes image tokens' mask; text-only inference is the same as with none.
        if (!b->is_string() || b->get<std::string>() != "vision")
            f.bad("use_bidirectional_attention",
                  fmt::format("{} is not supported (null or \"vision\"; \"all\" is another attention pattern)", b->dump()));
    }
    // Tying also ties the encoder's text weights to the decoder's (reference §1.2); the file then holds
    // one copy, which is what the loader reads.
    const ConfigFields& tie_source = wrapper && top.find("tie_word_embeddings") ? top : f;
    if (!tie_source.get_bool("tie_word_embeddings", true))
        tie_source.bad("tie_word_embeddings", "untied DiffusionGemma weights are not supported");

    ModelConfig c;
    c.arch = Arch::diffusion_gemma;
    c.arch_name = "diffusion_gemma";
    c.tied_embeddings = true;
    c.n_vocab = f.get_int("vocab_size", kDefaultVocab);
    c.n_embd = f.get_int("hidden_size", kDefaultHidden);
    c.n_ff = f.get_int("intermediate_size", kDefaultIntermediate);
    const int64_t n_layer = f.get_int("num_hidden_layers", kDefaultLayers);
    if (n_layer <= 0 || n_layer > 100000)
        f.bad("num_hidden_layers", fmt::format("must be in 1..100000 (found {})", n_layer));
    c.n_head = f.get_int("num_attention_heads", kDefaultHeads);
    c.n_head_kv = f.get_int("num_key_value_heads", kDefaultKvHeads);
    c.head_dim = f.get_int("head_dim", kDefaultHeadDim);
    c.rope_dim = c.head_dim;
    c.rms_eps = float(f.get_number("rms_norm_eps", kDefaultRmsEps));
    c.context_length = f.get_int("max_position_embeddings", kDefaultContext);
    c.layers = read_layer_types(f, n_layer);
    read_layer_geometry(f, c);
    read_rope(f, c);

    const int64_t window = f.get_int("sliding_window", kDefaultSlidingWindow);
    if (window <= 0) f.bad("sliding_window", fmt::format("must be positive (found {})", window));
    for (size_t i = 0; i < c.layers.size(); ++i) {
        c.layer_attention[i].window = c.layers[i] == LayerKind::sliding_attention ? window : 0;
        c.layer_attention[i].value_is_key = c.layers[i] == LayerKind::full_attention;  // attention_k_eq_v
    }

    c.n_expert = f.require_int("num_experts");
    c.n_expert_used = f.require_int("top_k_experts");
    c.expert_ff = f.require_int("moe_intermediate_size");
    c.norm_topk_prob = true;
    c.layer_is_moe.assign(size_t(n_layer), true);
    if (c.n_ff <= 0) f.bad("intermediate_size", fmt::format("must be positive (found {})", c.n_ff));

    // A class attribute in transformers, so absent from files it writes; present (even null) it wins.
    const auto cap = text->find("final_logit_softcapping");
    if (cap != text->end() && cap->is_null())
        c.final_logit_softcap = 0.0f;
    else
        c.final_logit_softcap = float(f.get_number("final_logit_softcapping", kDefaultSoftcap));
    if (c.final_logit_softcap < 0.0f)
        f.bad("final_logit_softcapping", fmt::format("must not be negative (found {})", c.final_logit_softcap));

    c.canvas_length = top.get_int("canvas_length", kDefaultCanvas);
    if (c.canvas_length <= 0) top.bad("canvas_length", fmt::format("must be positive (found {})", c.canvas_length));

    c.pad_id = f.get_int("pad_token_id", kDefaultPad);
    c.image_token_id = top.get_int("image_token_id", kDefaultImageToken);
    c.bos_id = f.get_int("bos_token_id", kDefaultBos);
    c.eos_ids = f.find("eos_token_id") ? f.get_int_or_list("eos_token_id") : std::vector<int64_t>{kDefaultEos};
    if (c.pad_id < 0 || c.pad_id >= c.n_vocab)
        f.bad("pad_token_id", fmt::format("{} is outside the vocabulary (size {})", c.pad_id, c.n_vocab));

    ConfigFieldNames names = hf_field_names(prefix);
    names.n_expert_used = prefix + "top_k_experts";
    names.rope_dim = prefix + "head_dim";
    validate_model_config(c, source, names);
    validate_layers(f, c);
    return c;
}

}  // namespace deltabit
