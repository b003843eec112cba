// Qwen3.5 / Qwen3.6 (qwen35), Qwen3.5-MoE (qwen35moe) and Qwen3-Next (qwen3next): gated DeltaNet
// layers and gated full-attention layers as config.layers says, each followed by a dense SwiGLU or
// a sparse MoE as config.layer_is_moe says. The three differ only in data the loaders resolve: value
// head order (config.value_head_order) and qwen3next's fused projections (split at load).
#include "models/architectures.h"

#include <fmt/format.h>

namespace deltabit {

ModelParts bind_qwen35(const ModelWeights& w) {
    const ModelConfig& c = w.config();
    ModelParts parts;
    bind_globals(w, parts);
    for (int64_t l = 0; l < c.n_layer(); ++l) {
        const std::string blk = fmt::format("blk.{}.", l);
        LayerWeights layer;
        layer.kind = c.layers[size_t(l)];
        layer.moe = c.layer_is_moe[size_t(l)];
        layer.attn_norm = w.floats(blk + "attn_norm.weight", c.n_embd);
        layer.ffn_norm = w.floats(blk + "post_attention_norm.weight", c.n_embd);
        if (layer.kind == LayerKind::full_attention)
            layer.attention = bind_attention(w, blk);
        else
            layer.deltanet = bind_deltanet(w, blk);
        if (layer.moe)
            layer.experts = bind_moe(w, blk);
        else
            layer.ffn = bind_ffn(w, blk);
        parts.layers.push_back(layer);
    }
    return parts;
}

}  // namespace deltabit
