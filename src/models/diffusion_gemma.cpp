// DiffusionGemma: the bind function (registered in architectures.cpp) and the encoder / decoder passes
// (diffusion_gemma.h). Math: ../shared/reference/diffusion-gemma.md §2; tensor names: the GGUF-style
// names models/hf_weights.cpp gives them (docs/diffusion-gemma-tensors.md lists them).
#include "models/diffusion_gemma.h"

#include "core/error.h"
#include "models/architectures.h"
#include "ops/add_scale.h"
#include "ops/attention_spans.h"
#include "ops/embedding.h"
#include "ops/gelu_glu.h"
#include "ops/matmul.h"
#include "ops/moe_router.h"
#include "ops/rms_norm.h"
#include "ops/rope_proportional.h"
#include "ops/scale_columns.h"
#include "ops/soft_embedding.h"
#include "ops/softcap.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>

namespace deltabit {

namespace {

using Buffer = std::vector<float>;

Buffer buffer(int64_t n) { return Buffer(size_t(n)); }

void observe(const ActivationObserver* observer, int64_t layer, std::string_view what, const float* data, int64_t n) {
    if (!observer || !*observer) return;
    (*observer)(layer < 0 ? std::string(what) : fmt::format("blk.{}.{}", layer, what), data, n);
}

// down(gelu_tanh(gate·x) ⊙ up·x), no biases: the dense MLP and the self-conditioning MLP.
void gelu_mlp(const FfnWeights& w, const float* x, int64_t T, float* out) {
    const int64_t width = w.gate.rows;
    Buffer gate = buffer(T * width), up = buffer(T * width);
    cpu::matmul(x, w.gate, T, gate.data());
    cpu::matmul(x, w.up, T, up.data());
    cpu::gelu_glu(gate.data(), up.data(), T * width, gate.data());
    cpu::matmul(gate.data(), w.down, T, out);
}

// E[ids]·√H, the embedding scale rounded to fp32 as transformers' float32 buffer is.
void scaled_embedding(const WeightView& table, const int32_t* ids, int64_t T, float* out) {
    cpu::embedding_lookup(table, ids, T, out);
    cpu::add_scale(out, nullptr, T * table.cols, float(std::sqrt(double(table.cols))), out);
}

}  // namespace

ModelParts bind_diffusion_gemma(const ModelWeights& w) {
    const ModelConfig& c = w.config();
    ModelParts parts;
    bind_globals(w, parts);
    if (parts.output.data != parts.token_embd.data)
        fail("{}: diffusion_gemma ties its LM head to the embeddings; the file has a separate output.weight", w.source());
    const int64_t D = c.n_embd, E = c.n_expert;
    auto weights = std::make_shared<DiffusionGemmaWeights>();
    weights->sc_pre_norm = w.floats("sc_pre_norm.weight", D);
    weights->sc_mlp = {w.matrix("sc_gate.weight", c.n_ff, D), w.matrix("sc_up.weight", c.n_ff, D),
                       w.matrix("sc_down.weight", D, c.n_ff)};
    for (int64_t l = 0; l < c.n_layer(); ++l) {
        const std::string blk = fmt::format("blk.{}.", l);
        const LayerAttention& g = c.layer_attention[size_t(l)];
        const int64_t q_rows = c.n_head * g.head_dim, kv_rows = g.n_head_kv * g.head_dim;
        DiffusionGemmaLayer L;
        L.kind = c.layers[size_t(l)];
        L.attn_norm = w.floats(blk + "attn_norm.weight", D);
        L.q = w.matrix(blk + "attn_q.weight", q_rows, D);
        L.k = w.matrix(blk + "attn_k.weight", kv_rows, D);
        if (g.value_is_key) {
            if (w.find(blk + "attn_v.weight"))
                fail("{}: {}attn_v.weight: layer {} is a full-attention layer, whose values are its keys", w.source(),
                     blk, l);
        } else {
            L.v = w.matrix(blk + "attn_v.weight", kv_rows, D);
        }
        L.output = w.matrix(blk + "attn_output.weight", D, q_rows);
        L.q_norm = w.floats(blk + "attn_q_norm.weight", g.head_dim);
        L.k_norm = w.floats(blk + "attn_k_norm.weight", g.head_dim);
        L.post_attention_norm = w.floats(blk + "post_attention_norm.weight", D);
        L.ffn_norm = w.floats(blk + "ffn_norm.weight", D);
        L.mlp = bind_ffn(w, blk);
        L.post_ffw_norm_1 = w.floats(blk + "post_ffw_norm_1.weight", D);
        L.router = w.matrix(blk + "ffn_gate_inp.weight", E, D);
        L.router_scale = w.floats(blk + "ffn_gate_inp.scale", D);
        L.expert_scale = w.floats(blk + "ffn_down_exps.scale", E);
        L.expert_gate = w.matrix3(blk + "ffn_gate_exps.weight", E, c.expert_ff, D);
        L.expert_up = w.matrix3(blk + "ffn_up_exps.weight", E, c.expert_ff, D);
        L.expert_down = w.matrix3(blk + "ffn_down_exps.weight", E, D, c.expert_ff);
        L.pre_ffw_norm_2 = w.floats(blk + "pre_ffw_norm_2.weight", D);
        L.post_ffw_norm_2 = w.floats(blk + "post_ffw_norm_2.weight", D);
        L.post_ffw_norm = w.floats(blk + "post_ffw_norm.weight", D);
        L.decoder_scale = *w.floats(blk + "layer_output_scale.weight", 1);
        L.encoder_scale = *w.floats(blk + "enc_layer_output_scale.weight", 1);
        weights->layers.push_back(L);
    }
    parts.diffusion = std::move(weights);
    return parts;
}

namespace {

const DiffusionGemmaWeights& diffusion_weights_of(const Model& model) {
    if (!model.parts().diffusion)
        fail("{}: {} is not a block-diffusion model", model.weights().source(), model.config().arch_name);
    return *model.parts().diffusion;
}

}  // namespace

DiffusionGemma::DiffusionGemma(const Model& model) : model_(model), w_(diffusion_weights_of(model)) {}

DiffusionCache DiffusionGemma::new_cache() const {
    DiffusionCache cache;
    cache.layers.resize(size_t(config().n_layer()));
    return cache;
}

DiffusionGemma::NewKv DiffusionGemma::layer_forward(int64_t l, float* x, int64_t T, int64_t position,
                                                    const DiffusionCache::Layer& cached, bool causal,
                                                    const ActivationObserver* observer) const {
    const ModelConfig& c = config();
    const DiffusionGemmaLayer& L = w_.layers[size_t(l)];
    const LayerAttention& g = c.layer_attention[size_t(l)];
    const int64_t D = c.n_embd, H = c.n_head, H_kv = g.n_head_kv, dh = g.head_dim;
    const float eps = c.rms_eps;

    // ---- attention (reference §2.3) ----
    Buffer h = buffer(T * D);
    cpu::rms_norm(x, L.attn_norm, T, D, eps, cpu::NormWeight::plain, h.data());
    Buffer q = buffer(T * H * dh), k = buffer(T * H_kv * dh), v = buffer(T * H_kv * dh);
    cpu::matmul(h.data(), L.q, T, q.data());
    cpu::matmul(h.data(), L.k, T, k.data());
    if (g.value_is_key)
        v = k;  // the raw projection, before k_norm and RoPE
    else
        cpu::matmul(h.data(), L.v, T, v.data());
    cpu::rms_norm(q.data(), L.q_norm, T * H, dh, eps, cpu::NormWeight::plain, q.data());
    cpu::rms_norm(k.data(), L.k_norm, T * H_kv, dh, eps, cpu::NormWeight::plain, k.data());
    cpu::rms_norm(v.data(), nullptr, T * H_kv, dh, eps, cpu::NormWeight::none, v.data());
    std::vector<int32_t> positions(static_cast<size_t>(T));
    for (int64_t t = 0; t < T; ++t) positions[size_t(t)] = int32_t(position + t);
    cpu::rope_proportional(q.data(), positions.data(), T, H, dh, g.rope_pairs, g.rope_theta);
    cpu::rope_proportional(k.data(), positions.data(), T, H_kv, dh, g.rope_pairs, g.rope_theta);
    observe(observer, l, "attn.q", q.data(), T * H * dh);
    observe(observer, l, "attn.k", k.data(), T * H_kv * dh);
    observe(observer, l, "attn.v", v.data(), T * H_kv * dh);

    // Keys: this layer's cache, then the new tokens.
    const int64_t S0 = cached.rows, S = S0 + T, row = H_kv * dh;
    Buffer keys = buffer(S * row), values = buffer(S * row);
    std::copy(cached.k.begin(), cached.k.end(), keys.begin());
    std::copy(cached.v.begin(), cached.v.end(), values.begin());
    std::copy(k.begin(), k.end(), keys.begin() + S0 * row);
    std::copy(v.begin(), v.end(), values.begin() + S0 * row);
    // The encoder: causal within the window; the decoder: the whole span, the cache (for sliding layers
    // already only the last W − 1 tokens) and every canvas token, with no mask.
    std::vector<int64_t> begin(static_cast<size_t>(T)), end(static_cast<size_t>(T));
    cpu::diffusion_key_spans(T, S0, causal, g.window, begin.data(), end.data());
    Buffer attended = buffer(T * H * dh);
    cpu::attention_spans(q.data(), keys.data(), values.data(), {T, S, H, H_kv, dh}, 1.0, begin.data(), end.data(),
                         attended.data());
    Buffer a = buffer(T * D);
    cpu::matmul(attended.data(), L.output, T, a.data());
    cpu::rms_norm(a.data(), L.post_attention_norm, T, D, eps, cpu::NormWeight::plain, a.data());
    for (int64_t i = 0; i < T * D; ++i) x[i] += a[size_t(i)];
    observe(observer, l, "attn.out", x, T * D);

    // ---- dense MLP beside the MoE (reference §2.4–2.5) ----
    Buffer dense = buffer(T * D);
    cpu::rms_norm(x, L.ffn_norm, T, D, eps, cpu::NormWeight::plain, h.data());
    gelu_mlp(L.mlp, h.data(), T, dense.data());
    cpu::rms_norm(dense.data(), L.post_ffw_norm_1, T, D, eps, cpu::NormWeight::plain, dense.data());

    // The router reads the residual stream itself: scale-free norm, its learned scale, 1/√H.
    const int64_t E = c.n_expert, top_k = c.n_expert_used, F = c.expert_ff;
    Buffer z = buffer(T * D), router_logits = buffer(T * E);
    cpu::rms_norm(x, nullptr, T, D, eps, cpu::NormWeight::none, z.data());
    cpu::scale_columns(z.data(), L.router_scale, T, D, 1.0 / std::sqrt(double(D)), z.data());
    cpu::matmul(z.data(), L.router, T, router_logits.data());
    std::vector<int32_t> ids(size_t(T * top_k));
    Buffer weights = buffer(T * top_k);
    cpu::moe_router(router_logits.data(), T, E, top_k, true, ids.data(), weights.data());

    Buffer moe = buffer(T * D);
    cpu::rms_norm(x, L.pre_ffw_norm_2, T, D, eps, cpu::NormWeight::plain, h.data());
    Buffer gate = buffer(F), up = buffer(F), down = buffer(D);
    for (int64_t t = 0; t < T; ++t) {
        const float* ht = h.data() + t * D;
        for (int64_t j = 0; j < top_k; ++j) {
            const int64_t e = ids[size_t(t * top_k + j)];
            cpu::matmul(ht, L.expert_gate.slice_rows(e * F, F), 1, gate.data());
            cpu::matmul(ht, L.expert_up.slice_rows(e * F, F), 1, up.data());
            cpu::gelu_glu(gate.data(), up.data(), F, gate.data());
            cpu::matmul(gate.data(), L.expert_down.slice_rows(e * D, D), 1, down.data());
            // Renormalised top-k weight, then the chosen expert's own scale.
            const double p = double(weights[size_t(t * top_k + j)]) * double(L.expert_scale[e]);
            for (int64_t i = 0; i < D; ++i) moe[size_t(t * D + i)] += float(p * double(down[size_t(i)]));
        }
    }
    cpu::rms_norm(moe.data(), L.post_ffw_norm_2, T, D, eps, cpu::NormWeight::plain, moe.data());
    for (int64_t i = 0; i < T * D; ++i) dense[size_t(i)] += moe[size_t(i)];
    cpu::rms_norm(dense.data(), L.post_ffw_norm, T, D, eps, cpu::NormWeight::plain, dense.data());

    // layer_scalar scales the whole stream, residual included.
    const float scale = causal ? L.encoder_scale : L.decoder_scale;
    cpu::add_scale(x, dense.data(), T * D, scale, x);
    observe(observer, l, "out", x, T * D);
    return {std::move(k), std::move(v)};
}

void DiffusionGemma::encode(DiffusionCache& cache, std::span<const int32_t> ids, const ActivationObserver* observer) const {
    const ModelConfig& c = config();
    const int64_t T = int64_t(ids.size()), D = c.n_embd;
    if (int64_t(cache.layers.size()) != c.n_layer())
        fail("encode: the cache has {} layers but the model has {}", cache.layers.size(), c.n_layer());
    if (T == 0) return;
    // transformers replaces image placeholders by pad before the lookup (reference §2.6); with no vision
    // tower here, that is all an image token does.
    std::vector<int32_t> text_ids(ids.begin(), ids.end());
    for (int32_t& id : text_ids)
        if (id == c.image_token_id) id = int32_t(c.pad_id);
    Buffer x = buffer(T * D);
    scaled_embedding(model_.parts().token_embd, text_ids.data(), T, x.data());  // throws on a bad id, cache untouched

    std::vector<NewKv> added;
    for (int64_t l = 0; l < c.n_layer(); ++l)
        added.push_back(layer_forward(l, x.data(), T, cache.length, cache.layers[size_t(l)], true, observer));
    // Only now, with nothing left to fail, does the cache change.
    for (int64_t l = 0; l < c.n_layer(); ++l) {
        DiffusionCache::Layer& layer = cache.layers[size_t(l)];
        const LayerAttention& g = c.layer_attention[size_t(l)];
        const int64_t row = g.n_head_kv * g.head_dim;
        layer.k.insert(layer.k.end(), added[size_t(l)].k.begin(), added[size_t(l)].k.end());
        layer.v.insert(layer.v.end(), added[size_t(l)].v.begin(), added[size_t(l)].v.end());
        layer.rows += T;
        if (g.window > 0 && layer.rows > g.window - 1) {  // keep the last W − 1
            const int64_t drop = layer.rows - (g.window - 1);
            layer.k.erase(layer.k.begin(), layer.k.begin() + drop * row);
            layer.v.erase(layer.v.begin(), layer.v.begin() + drop * row);
            layer.rows -= drop;
            layer.first_position += drop;
        }
    }
    cache.length += T;
}

std::vector<float> DiffusionGemma::denoise(const DiffusionCache& cache, std::span<const int32_t> canvas,
                                           std::span<const float> self_conditioning,
                                           const ActivationObserver* observer) const {
    const ModelConfig& c = config();
    const int64_t L = int64_t(canvas.size()), D = c.n_embd, V = c.n_vocab;
    if (int64_t(cache.layers.size()) != c.n_layer())
        fail("denoise: the cache has {} layers but the model has {}", cache.layers.size(), c.n_layer());
    if (L == 0) return {};
    if (!self_conditioning.empty() && int64_t(self_conditioning.size()) != L * V)
        fail("denoise: self-conditioning logits hold {} values; a canvas of {} needs {} × {} = {}",
             self_conditioning.size(), L, L, V, L * V);
    const WeightView& embd = model_.parts().token_embd;
    Buffer x = buffer(L * D);
    scaled_embedding(embd, canvas.data(), L, x.data());

    // Self-conditioning (reference §2.7): the expected embedding under the previous step's distribution
    // through the SC MLP, added before a scale-free norm. Without logits the branch is exactly zero
    // (RMSNorm(0) = 0 and no biases), so skipping it is exact.
    if (!self_conditioning.empty()) {
        Buffer soft = buffer(L * D), sig = buffer(L * D);
        cpu::soft_embedding(self_conditioning.data(), embd, L, soft.data());
        cpu::add_scale(soft.data(), nullptr, L * D, float(std::sqrt(double(D))), soft.data());
        cpu::rms_norm(soft.data(), w_.sc_pre_norm, L, D, c.rms_eps, cpu::NormWeight::plain, soft.data());
        gelu_mlp(w_.sc_mlp, soft.data(), L, sig.data());
        observe(observer, -1, "self_conditioning", sig.data(), L * D);
        for (int64_t i = 0; i < L * D; ++i) x[size_t(i)] += sig[size_t(i)];
    }
    cpu::rms_norm(x.data(), nullptr, L, D, c.rms_eps, cpu::NormWeight::none, x.data());
    observe(observer, -1, "canvas_in", x.data(), L * D);

    for (int64_t l = 0; l < c.n_layer(); ++l)
        layer_forward(l, x.data(), L, cache.length, cache.layers[size_t(l)], false, observer);

    Buffer h = buffer(L * D);
    cpu::rms_norm(x.data(), model_.parts().output_norm, L, D, c.rms_eps, cpu::NormWeight::plain, h.data());
    std::vector<float> logits(size_t(L * V));
    cpu::matmul(h.data(), model_.parts().output, L, logits.data());
    if (c.final_logit_softcap > 0.0f) cpu::softcap(logits.data(), L * V, c.final_logit_softcap, logits.data());
    return logits;
}

}  // namespace deltabit
