#include "models/diffusion_cost.h"

#include "core/error.h"

#include <algorithm>
#include <cmath>
#include <string_view>

namespace deltabit {

DiffusionCost::DiffusionCost(const ModelWeights& weights) : config_(weights.config()) {
    const ModelConfig& c = config_;
    if (c.arch != Arch::diffusion_gemma)
        fail("{}: {} is not a block-diffusion model", weights.source(), c.arch_name);
    for (const auto& [name, t] : weights.tensors()) {
        const std::string_view n = name;
        const double elements = double(t.n_elements()), bytes = double(t.bytes);
        parameters_ += elements;
        stored_weight_bytes_ += t.bytes;
        if (n == "token_embd.weight") {
            embedding_bytes_ = bytes;
        } else if (n.starts_with("sc_")) {
            sc_bytes_ += bytes;
            if (t.shape.size() >= 2) sc_weights_ += elements;
        } else if (n.starts_with("blk.") && n.ends_with("_exps.weight")) {
            expert_stack_bytes_ += bytes;
            expert_weights_ += elements / double(c.n_expert);
        } else if (n.starts_with("blk.")) {
            layer_other_bytes_ += bytes;
            if (t.shape.size() >= 2) layer_matrix_weights_ += elements;
        } else {
            global_vector_bytes_ += bytes;
        }
    }
}

PassCost DiffusionCost::layers(int64_t n_past, int64_t n_tokens, bool causal) const {
    const ModelConfig& c = config_;
    const double T = double(n_tokens);
    PassCost cost;
    const double chosen = double(c.n_expert_used) / double(c.n_expert);
    cost.flops = 2.0 * T * (layer_matrix_weights_ + chosen * expert_weights_);
    const double touched = 1.0 - std::pow(1.0 - chosen, T);
    cost.weight_bytes = layer_other_bytes_ + touched * expert_stack_bytes_;
    for (size_t l = 0; l < c.layers.size(); ++l) {
        const LayerAttention& g = c.layer_attention[l];
        const double cached = double(g.window > 0 ? std::min<int64_t>(n_past, g.window - 1) : n_past);
        double pairs = 0;
        if (!causal) {
            pairs = T * (cached + T);
        } else if (g.window == 0) {
            pairs = T * cached + T * (T + 1) / 2;  // query t sees cached + t + 1
        } else {
            // Query t sees min(W, cached + t + 1) keys: growing until it reaches the window, then flat.
            const double W = double(g.window);
            const double growing = std::clamp(W - cached, 0.0, T);  // queries with cached + t + 1 ≤ W
            pairs = growing * cached + growing * (growing + 1) / 2 + (T - growing) * W;
        }
        cost.flops += 4.0 * double(c.n_head * g.head_dim) * pairs;
        const double row = 2.0 * double(g.n_head_kv * g.head_dim) * sizeof(float);  // K and V of one token
        cost.kv_bytes += row * (cached + T * (causal ? 1.0 : 2.0));
    }
    return cost;
}

PassCost DiffusionCost::encode(int64_t n_past, int64_t n_tokens) const {
    PassCost cost = layers(n_past, n_tokens, true);
    cost.weight_bytes += global_vector_bytes_ + embedding_bytes_ / double(config_.n_vocab) * double(n_tokens);
    return cost;
}

PassCost DiffusionCost::denoise(int64_t n_past, int64_t canvas, bool self_conditioned) const {
    const ModelConfig& c = config_;
    const double L = double(canvas), table = double(c.n_vocab) * double(c.n_embd);
    PassCost cost = layers(n_past, canvas, false);
    cost.flops += 2.0 * L * table;  // the LM head
    cost.weight_bytes += global_vector_bytes_ + embedding_bytes_ / double(c.n_vocab) * L + embedding_bytes_;
    const double logits = L * double(c.n_vocab) * sizeof(float);
    cost.logit_bytes = 3.0 * logits;  // written, read by the sampler, scaled copy written
    if (self_conditioned) {
        cost.flops += 2.0 * L * (table + sc_weights_);  // soft embedding and the SC MLP
        cost.weight_bytes += embedding_bytes_ + sc_bytes_;
        cost.logit_bytes += logits;  // the previous step's scaled copy
    }
    return cost;
}

}  // namespace deltabit
