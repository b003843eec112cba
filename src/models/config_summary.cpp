#include "models/config_summary.h"

#include <fmt/format.h>
#include <algorithm>
#include <fmt/ranges.h>

namespace deltabit {

std::string_view arch_label(Arch arch) {
    switch (arch) {
        case Arch::qwen35: return "qwen35";
        case Arch::qwen35moe: return "qwen35moe";
        case Arch::qwen3next: return "qwen3next";
        case Arch::qwen3: return "qwen3";
        case Arch::diffusion_gemma: return "diffusion_gemma";
    }
    return "unknown";
}

std::string_view layer_kind_label(LayerKind kind) {
    switch (kind) {
        case LayerKind::full_attention: return "full_attention";
        case LayerKind::linear_attention: return "linear_attention";
        case LayerKind::sliding_attention: return "sliding_attention";
    }
    return "unknown";
}

namespace {

// 2 → "2nd", 3 → "3rd", 4 → "4th", 11 → "11th", 21 → "21st".
std::string ordinal(int64_t n) {
    const int64_t last_two = n % 100, last = n % 10;
    const char* suffix = (last_two >= 11 && last_two <= 13) ? "th" : last == 1 ? "st" : last == 2 ? "nd" : last == 3 ? "rd" : "th";
    return fmt::format("{}{}", n, suffix);
}

// "48 linear_attention, 16 full_attention; full every 4th" — or the positions of the full layers when
// they follow no interval.
std::string describe_layers(const ModelConfig& c) {
    std::vector<int64_t> full;
    for (size_t i = 0; i < c.layers.size(); ++i)
        if (c.layers[i] == LayerKind::full_attention) full.push_back(int64_t(i));
    const int64_t n_linear = c.n_layer() - int64_t(full.size());
    if (n_linear == 0) return fmt::format("{} (all full_attention)", c.n_layer());
    // The other layers are all linear (the hybrids) or all sliding (diffusion_gemma).
    bool sliding = false;
    for (LayerKind k : c.layers) sliding = sliding || k == LayerKind::sliding_attention;
    std::string text = fmt::format("{} ({} {}, {} full_attention", c.n_layer(), n_linear,
                                   sliding ? "sliding_attention" : "linear_attention", full.size());
    bool periodic = !full.empty();
    const int64_t interval = full.empty() ? 0 : full[0] + 1;
    for (size_t i = 0; periodic && i < c.layers.size(); ++i)
        periodic = ((int64_t(i) + 1) % interval == 0) == (c.layers[i] == LayerKind::full_attention);
    if (periodic) return text + fmt::format("; full every {})", interval == 1 ? "layer" : ordinal(interval));
    if (full.empty()) return text + ")";
    return text + fmt::format("; full at {})", fmt::join(full, ","));
}

}  // namespace

std::vector<std::pair<std::string, std::string>> model_config_summary(const ModelConfig& c) {
    std::vector<std::pair<std::string, std::string>> out;
    auto add = [&](std::string key, std::string value) { out.emplace_back(std::move(key), std::move(value)); };
    add("architecture", std::string(arch_label(c.arch)));
    add("layers", describe_layers(c));
    if (c.n_nextn_layers > 0) add("mtp layers", fmt::format("{} (not run)", c.n_nextn_layers));
    add("hidden", fmt::format("{}", c.n_embd));
    add("vocab", fmt::format("{}", c.n_vocab));
    if (c.n_ff > 0) add("ffn", fmt::format("{}", c.n_ff));
    add("attention", fmt::format("{} heads, {} kv heads, head dim {}{}", c.n_head, c.n_head_kv, c.head_dim,
                                 c.attn_output_gate ? ", sigmoid output gate" : ""));
    add("rope", fmt::format("{} of {} dims, theta {:g}", c.rope_dim, c.head_dim, c.rope_theta));
    if (c.ssm_n_key_heads > 0)
        add("gated deltanet", fmt::format("{} key heads × {}, {} value heads × {}, conv {}, value heads {}",
                                          c.ssm_n_key_heads, c.ssm_key_dim, c.ssm_n_value_heads, c.ssm_value_dim,
                                          c.ssm_conv_kernel,
                                          c.value_head_order == ValueHeadOrder::tiled ? "tiled" : "grouped"));
    if (c.n_expert > 0) {
        int64_t n_moe = 0;
        for (bool m : c.layer_is_moe) n_moe += m;
        add("moe", fmt::format("{} experts, top {}, expert ffn {}, shared expert ffn {}, {} of {} layers{}", c.n_expert,
                               c.n_expert_used, c.expert_ff, c.shared_expert_ff, n_moe, c.n_layer(),
                               c.norm_topk_prob ? "" : ", top-k weights not renormalised"));
    }
    if (c.canvas_length > 0) {
        // Block diffusion: the attention rows above are the sliding layers'; the full layers differ.
        int64_t full = -1, window = 0;
        for (size_t i = 0; i < c.layer_attention.size(); ++i) {
            if (c.layers[i] == LayerKind::full_attention && full < 0) full = int64_t(i);
            window = std::max(window, c.layer_attention[i].window);
        }
        if (full >= 0) {
            const LayerAttention& a = c.layer_attention[size_t(full)];
            add("full layers", fmt::format("{} kv heads, head dim {}, rope {} of {} pairs, theta {:g}, values = keys",
                                           a.n_head_kv, a.head_dim, a.rope_pairs, a.head_dim / 2, a.rope_theta));
        }
        add("block diffusion", fmt::format("canvas {}, sliding window {}, logit softcap {:g}", c.canvas_length, window,
                                           c.final_logit_softcap));
    }
    add("rms eps", fmt::format("{:g}", c.rms_eps));
    if (c.context_length > 0) add("context", fmt::format("{}", c.context_length));
    add("embeddings", c.tied_embeddings ? "tied (logits use token_embd)" : "separate output");
    add("bos", c.bos_id >= 0 ? fmt::format("{}", c.bos_id) : "none");
    add("eos", c.eos_ids.empty() ? "none" : fmt::format("{}", fmt::join(c.eos_ids, ", ")));
    return out;
}

nlohmann::json model_config_to_json(const ModelConfig& c) {
    nlohmann::json j;
    j["arch"] = arch_label(c.arch);
    j["arch_name"] = c.arch_name;
    j["n_vocab"] = c.n_vocab;
    j["n_embd"] = c.n_embd;
    j["n_ff"] = c.n_ff;
    j["n_layer"] = c.n_layer();
    j["n_nextn_layers"] = c.n_nextn_layers;
    j["context_length"] = c.context_length;
    j["rms_eps"] = c.rms_eps;
    j["tied_embeddings"] = c.tied_embeddings;
    j["n_head"] = c.n_head;
    j["n_head_kv"] = c.n_head_kv;
    j["head_dim"] = c.head_dim;
    j["rope_dim"] = c.rope_dim;
    j["rope_theta"] = c.rope_theta;
    j["rope_sections"] = c.rope_sections;
    j["attn_output_gate"] = c.attn_output_gate;
    j["ssm_n_key_heads"] = c.ssm_n_key_heads;
    j["ssm_n_value_heads"] = c.ssm_n_value_heads;
    j["ssm_key_dim"] = c.ssm_key_dim;
    j["ssm_value_dim"] = c.ssm_value_dim;
    j["ssm_conv_kernel"] = c.ssm_conv_kernel;
    j["value_head_order"] = c.value_head_order == ValueHeadOrder::tiled ? "tiled" : "grouped";
    j["n_expert"] = c.n_expert;
    j["n_expert_used"] = c.n_expert_used;
    j["expert_ff"] = c.expert_ff;
    j["shared_expert_ff"] = c.shared_expert_ff;
    j["norm_topk_prob"] = c.norm_topk_prob;
    nlohmann::json layers = nlohmann::json::array();
    for (LayerKind kind : c.layers) layers.push_back(layer_kind_label(kind));
    j["layers"] = std::move(layers);
    j["layer_is_moe"] = c.layer_is_moe;
    j["bos_id"] = c.bos_id;
    j["eos_ids"] = c.eos_ids;
    if (!c.layer_attention.empty()) {
        nlohmann::json per_layer = nlohmann::json::array();
        for (const LayerAttention& a : c.layer_attention)
            per_layer.push_back({{"n_head_kv", a.n_head_kv}, {"head_dim", a.head_dim}, {"rope_pairs", a.rope_pairs},
                                 {"rope_theta", a.rope_theta}, {"window", a.window}, {"value_is_key", a.value_is_key}});
        j["layer_attention"] = std::move(per_layer);
    }
    if (c.canvas_length > 0) {
        j["canvas_length"] = c.canvas_length;
        j["final_logit_softcap"] = c.final_logit_softcap;
        j["pad_id"] = c.pad_id;
        j["image_token_id"] = c.image_token_id;
    }
    return j;
}

}  // namespace deltabit
