#include "models/config_gguf_diffusion_gemma.h"

#include "core/error.h"

#include <fmt/format.h>

#include <limits>
#include <optional>

namespace deltabit {

namespace {

uint32_t as_u32(int64_t value, const std::string& key) {
    if (value < 0 || value > int64_t(std::numeric_limits<uint32_t>::max()))
        fail("gguf: writing {}: {} does not fit in u32", key, value);
    return uint32_t(value);
}

// The geometry every layer of one kind shares in a file (the keys hold one value per kind).
struct KindGeometry {
    int64_t head_dim = 0, rope_pairs = 0, window = 0;
    float rope_theta = 0.0f;
};

// The one geometry of the layers of `kind`, or nothing when there are none; Error when they differ.
std::optional<KindGeometry> shared_geometry(const ModelConfig& c, LayerKind kind, const std::string& source) {
    std::optional<KindGeometry> out;
    for (size_t i = 0; i < c.layers.size(); ++i) {
        if (c.layers[i] != kind) continue;
        const LayerAttention& a = c.layer_attention[i];
        const bool full = kind == LayerKind::full_attention;
        if (a.value_is_key != full)
            fail("{}: layer {}: {} layers {} their keys as values; the GGUF keys cannot say otherwise", source, i,
                 full ? "full" : "sliding", full ? "use" : "do not use");
        const KindGeometry g{a.head_dim, a.rope_pairs, a.window, a.rope_theta};
        if (!out) {
            out = g;
        } else if (g.head_dim != out->head_dim || g.rope_pairs != out->rope_pairs || g.window != out->window ||
                   g.rope_theta != out->rope_theta) {
            fail("{}: layer {} differs from the other {} layers in head_dim, RoPE or window; a GGUF holds one value "
                 "per layer kind",
                 source, i, full ? "full" : "sliding");
        }
    }
    return out;
}

}  // namespace

void read_diffusion_gemma_gguf(const gguf::File& file, const std::string& source, ModelConfig& c) {
    const std::string a = c.arch_name + ".";
    auto key = [&](std::string_view suffix) { return a + std::string(suffix); };
    auto positive = [&](std::string_view suffix) {
        const int64_t v = file.require_i64(key(suffix));
        if (v <= 0) fail("{}: {}: must be positive (found {})", source, key(suffix), v);
        return v;
    };

    const int64_t n_layer = positive("block_count");
    if (n_layer > 100000) fail("{}: {}: {} layers is more than 100000", source, key("block_count"), n_layer);
    c.n_vocab = positive("vocab_size");
    c.context_length = file.require_i64(key("context_length"));
    c.n_embd = positive("embedding_length");
    c.n_ff = positive("feed_forward_length");
    c.n_head = positive("attention.head_count");
    c.rms_eps = file.require_f32(key("attention.layer_norm_rms_epsilon"));
    c.tied_embeddings = true;
    if (file.find_tensor("output.weight"))
        fail("{}: tensor output.weight: diffusion_gemma ties its LM head to token_embd.weight", source);
    if (const gguf::TensorInfo* embd = file.find_tensor("token_embd.weight");
        embd && (embd->shape.size() != 2 || embd->shape[1] != c.n_vocab))
        fail("{}: tensor token_embd.weight: shape does not have {} rows ({})", source, c.n_vocab, key("vocab_size"));

    // Layer kinds and per-layer KV heads: arrays of exactly block_count entries.
    const gguf::Value& pattern = file.require(key("attention.sliding_window_pattern"));
    if (!pattern.is_array() || pattern.element_type() != gguf::ValueType::BOOL || int64_t(pattern.size()) != n_layer)
        fail("{}: {}: expected an array of {} bools", source, key("attention.sliding_window_pattern"), n_layer);
    const std::vector<int64_t> kv = file.require_i64_array(key("attention.head_count_kv"));
    if (int64_t(kv.size()) != n_layer)
        fail("{}: {}: expected {} entries (one per layer), found {}", source, key("attention.head_count_kv"), n_layer,
             kv.size());

    const int64_t full_head_dim = positive("attention.key_length");
    c.head_dim = positive("attention.key_length_swa");
    c.rope_dim = c.head_dim;
    const float full_theta = file.require_f32(key("rope.freq_base"));
    c.rope_theta = file.require_f32(key("rope.freq_base_swa"));
    const int64_t full_rotated = file.require_i64(key("rope.dimension_count"));
    const int64_t sliding_rotated = file.require_i64(key("rope.dimension_count_swa"));
    const int64_t window = positive("attention.sliding_window");
    for (const auto& [suffix, theta] : {std::pair{"rope.freq_base", full_theta}, {"rope.freq_base_swa", c.rope_theta}})
        if (!(theta > 0.0f)) fail("{}: {}: must be positive (found {})", source, key(suffix), theta);
    for (const auto& [suffix, rotated, head_dim] :
         {std::tuple{"rope.dimension_count", full_rotated, full_head_dim},
          std::tuple{"rope.dimension_count_swa", sliding_rotated, c.head_dim}})
        if (rotated < 0 || rotated % 2 != 0 || rotated > head_dim)
            fail("{}: {}: {} rotated dimensions must be even and at most the head dim {}", source, key(suffix), rotated,
                 head_dim);

    c.layers.resize(size_t(n_layer));
    c.layer_attention.resize(size_t(n_layer));
    std::optional<int64_t> sliding_kv;
    for (size_t i = 0; i < size_t(n_layer); ++i) {
        const bool sliding = pattern.at(i).as_bool();
        c.layers[i] = sliding ? LayerKind::sliding_attention : LayerKind::full_attention;
        LayerAttention& l = c.layer_attention[i];
        l.n_head_kv = kv[i];
        if (l.n_head_kv <= 0 || c.n_head % l.n_head_kv != 0)
            fail("{}: {}[{}]: {} KV heads do not divide the {} query heads", source, key("attention.head_count_kv"), i,
                 l.n_head_kv, c.n_head);
        l.head_dim = sliding ? c.head_dim : full_head_dim;
        l.rope_pairs = (sliding ? sliding_rotated : full_rotated) / 2;
        l.rope_theta = sliding ? c.rope_theta : full_theta;
        l.window = sliding ? window : 0;
        l.value_is_key = !sliding;
        if (sliding && !sliding_kv) sliding_kv = l.n_head_kv;
    }
    // The top-level KV head count is the sliding layers' (the Hugging Face reader's num_key_value_heads).
    c.n_head_kv = sliding_kv.value_or(kv[0]);

    c.n_expert = positive("expert_count");
    c.n_expert_used = positive("expert_used_count");
    c.expert_ff = positive("expert_feed_forward_length");
    c.norm_topk_prob = true;
    c.layer_is_moe.assign(size_t(n_layer), true);

    c.final_logit_softcap = file.require_f32(key("final_logit_softcapping"));
    if (!(c.final_logit_softcap >= 0.0f))
        fail("{}: {}: must not be negative (found {})", source, key("final_logit_softcapping"), c.final_logit_softcap);
    c.canvas_length = positive("canvas_length");
    c.image_token_id = file.require_i64(key("image_token_id"));
    c.pad_id = int64_t(file.require_u32("tokenizer.ggml.padding_token_id"));
    if (c.pad_id >= c.n_vocab)
        fail("{}: tokenizer.ggml.padding_token_id: {} is outside the vocabulary (size {})", source, c.pad_id, c.n_vocab);
}

void write_diffusion_gemma_gguf(const ModelConfig& c, gguf::Writer& w) {
    const std::string source = fmt::format("gguf: writing {} config", c.arch_name);
    const std::string a = "diffusion_gemma.";
    auto set_u32 = [&](std::string_view suffix, int64_t value) {
        const std::string k = a + std::string(suffix);
        w.set_u32(k, as_u32(value, k));
    };
    if (c.layer_attention.size() != c.layers.size())
        fail("{}: {} layer geometries for {} layers", source, c.layer_attention.size(), c.layers.size());
    if (!c.tied_embeddings) fail("{}: untied embeddings cannot be written", source);
    if (!c.norm_topk_prob) fail("{}: top-k weights that are not renormalised cannot be written", source);
    for (bool moe : c.layer_is_moe)
        if (!moe) fail("{}: every layer must have its routed experts", source);
    if (c.rope_dim != c.head_dim)
        fail("{}: rope_dim {} differs from head_dim {}; the file cannot say so", source, c.rope_dim, c.head_dim);

    const std::optional<KindGeometry> full = shared_geometry(c, LayerKind::full_attention, source);
    const std::optional<KindGeometry> sliding = shared_geometry(c, LayerKind::sliding_attention, source);
    if (sliding && (sliding->head_dim != c.head_dim || sliding->rope_theta != c.rope_theta))
        fail("{}: the sliding layers' head_dim or θ differ from the model's ({}, {})", source, c.head_dim, c.rope_theta);
    std::vector<gguf::Value> pattern;
    std::vector<gguf::Value> kv;
    for (size_t i = 0; i < c.layers.size(); ++i) {
        if (c.layers[i] == LayerKind::linear_attention) fail("{}: layer {} is linear attention", source, i);
        pattern.push_back(gguf::Value::boolean(c.layers[i] == LayerKind::sliding_attention));
        kv.push_back(gguf::Value::u32(as_u32(c.layer_attention[i].n_head_kv, a + "attention.head_count_kv")));
    }
    const int64_t first_sliding_kv = [&] {
        for (size_t i = 0; i < c.layers.size(); ++i)
            if (c.layers[i] == LayerKind::sliding_attention) return c.layer_attention[i].n_head_kv;
        return c.layer_attention.empty() ? c.n_head_kv : c.layer_attention[0].n_head_kv;
    }();
    if (first_sliding_kv != c.n_head_kv)
        fail("{}: the model's {} KV heads are not the sliding layers' (or, without any, layer 0's) {}", source,
             c.n_head_kv, first_sliding_kv);

    w.set_string("general.architecture", "diffusion_gemma");
    set_u32("vocab_size", c.n_vocab);
    set_u32("context_length", c.context_length);
    set_u32("embedding_length", c.n_embd);
    set_u32("feed_forward_length", c.n_ff);
    set_u32("block_count", c.n_layer());
    set_u32("attention.head_count", c.n_head);
    w.set_array(a + "attention.head_count_kv", gguf::ValueType::UINT32, std::move(kv));
    w.set_array(a + "attention.sliding_window_pattern", gguf::ValueType::BOOL, std::move(pattern));
    w.set_f32(a + "attention.layer_norm_rms_epsilon", c.rms_eps);
    // A kind without layers still gets its keys (every key is required): the model-level values, or
    // those of the other kind.
    const KindGeometry full_g = full.value_or(KindGeometry{c.head_dim, c.head_dim / 2, 0, c.rope_theta});
    const KindGeometry sliding_g = sliding.value_or(KindGeometry{c.head_dim, c.head_dim / 2, 1, c.rope_theta});
    set_u32("attention.key_length", full_g.head_dim);
    set_u32("attention.key_length_swa", sliding_g.head_dim);
    set_u32("attention.sliding_window", sliding_g.window);
    w.set_f32(a + "rope.freq_base", full_g.rope_theta);
    w.set_f32(a + "rope.freq_base_swa", sliding_g.rope_theta);
    set_u32("rope.dimension_count", 2 * full_g.rope_pairs);
    set_u32("rope.dimension_count_swa", 2 * sliding_g.rope_pairs);
    set_u32("expert_count", c.n_expert);
    set_u32("expert_used_count", c.n_expert_used);
    set_u32("expert_feed_forward_length", c.expert_ff);
    w.set_f32(a + "final_logit_softcapping", c.final_logit_softcap);
    set_u32("canvas_length", c.canvas_length);
    set_u32("image_token_id", c.image_token_id);
    w.set_u32("tokenizer.ggml.padding_token_id", as_u32(c.pad_id, "tokenizer.ggml.padding_token_id"));
}

}  // namespace deltabit
