// Qwen3 (dense): every layer is plain GQA attention with QK-norm and full RoPE (no output gate:
// config.attn_output_gate is false), followed by a SwiGLU FFN. llama.cpp names the pre-FFN norm
// ffn_norm here (post_attention_norm in the hybrids).
#include "models/architectures.h"

#include "core/error.h"

#include <fmt/format.h>

namespace deltabit {

ModelParts bind_qwen3(const ModelWeights& w) {
    const ModelConfig& c = w.config();
    ModelParts parts;
    bind_globals(w, parts);
    for (int64_t l = 0; l < c.n_layer(); ++l) {
        const std::string blk = fmt::format("blk.{}.", l);
        if (c.layers[size_t(l)] != LayerKind::full_attention || c.layer_is_moe[size_t(l)])
            fail("{}: qwen3 layer {} must be full attention with a dense FFN", w.source(), l);
        LayerWeights layer;
        layer.attn_norm = w.floats(blk + "attn_norm.weight", c.n_embd);
        layer.ffn_norm = w.floats(blk + "ffn_norm.weight", c.n_embd);
        layer.attention = bind_attention(w, blk);
        layer.ffn = bind_ffn(w, blk);
        parts.layers.push_back(layer);
    }
    return parts;
}

}  // namespace deltabit
