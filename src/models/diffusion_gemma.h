// DiffusionGemma (block diffusion), on the CPU reference ops: exactly what transformers 5.17 computes
// (../shared/reference/diffusion-gemma.md §2). One stack of weights runs two ways:
//   encode()  causal, over the prompt or a committed block, appending each layer's K/V to the cache;
//   denoise() bidirectional, over a canvas, reading [cache ++ canvas] K/V and writing nothing.
// Sliding layers' caches keep the last window − 1 tokens, as transformers' DynamicSlidingWindowLayer
// does after each call, so a canvas sees exactly those plus itself.
//
// This is not the autoregressive layer loop of models/blocks.h (STYLE habit 18): every block differs —
// scale-1 attention with a scale-free value norm and V = K on full layers, a dense GELU MLP beside a
// routed MoE with four extra norms, a per-layer output scale, per-layer head geometry — so the layer
// is written once here, for both passes.
#pragma once

#include "core/tensor.h"
#include "models/blocks.h"
#include "models/model.h"

#include <cstdint>
#include <span>
#include <vector>

namespace deltabit {

struct DiffusionGemmaLayer {
    LayerKind kind = LayerKind::sliding_attention;
    const float* attn_norm = nullptr;            // input_layernorm
    WeightView q, k, v, output;                  // v unbound (data null) on full layers: V = K
    const float* q_norm = nullptr;               // [head_dim]
    const float* k_norm = nullptr;
    const float* post_attention_norm = nullptr;
    const float* ffn_norm = nullptr;             // before the dense MLP (pre_feedforward_layernorm)
    FfnWeights mlp;                              // dense GELU MLP, width n_ff
    const float* post_ffw_norm_1 = nullptr;      // after the dense MLP
    WeightView router;                           // [n_expert][n_embd]
    const float* router_scale = nullptr;         // [n_embd]
    const float* expert_scale = nullptr;         // [n_expert], per_expert_scale
    WeightView expert_gate, expert_up, expert_down;  // stacked as in MoeWeights
    const float* pre_ffw_norm_2 = nullptr;       // before the experts
    const float* post_ffw_norm_2 = nullptr;      // after the experts
    const float* post_ffw_norm = nullptr;        // on the sum of both branches
    float decoder_scale = 1.0f;                  // layer_scalar (the decoder's buffer)
    float encoder_scale = 1.0f;                  // the encoder's own layer_scalar buffer
};

struct DiffusionGemmaWeights {
    std::vector<DiffusionGemmaLayer> layers;
    const float* sc_pre_norm = nullptr;  // self-conditioning MLP: pre-norm, then a GELU MLP of width n_ff
    FfnWeights sc_mlp;
};

// The encoder's KV cache of one sequence.
struct DiffusionCache {
    struct Layer {
        std::vector<float> k, v;  // [rows][n_kv_head][head_dim], oldest first
        int64_t rows = 0;
        int64_t first_position = 0;  // position of row 0 (sliding layers drop the oldest rows)
    };
    std::vector<Layer> layers;
    int64_t length = 0;  // tokens encoded so far; the next token's position
};

class DiffusionGemma {
public:
    // Error unless `model` is a diffusion_gemma model. Borrows it.
    explicit DiffusionGemma(const Model& model);

    const ModelConfig& config() const { return model_.config(); }
    DiffusionCache new_cache() const;

    // Encodes `ids` at positions cache.length .. (+ ids.size()) and appends them to the cache. Error for a
    // token outside the vocabulary, with the cache unchanged.
    void encode(DiffusionCache& cache, std::span<const int32_t> ids, const ActivationObserver* observer = nullptr) const;

    // The decoder's softcapped logits [canvas.size()][n_vocab] for a canvas at positions cache.length ..,
    // given the previous step's (temperature-scaled) logits [canvas.size()][n_vocab] as self-conditioning,
    // or none (empty: the first step of a block, where that branch is exactly zero). Error for a token
    // outside the vocabulary or self-conditioning logits of the wrong size.
    std::vector<float> denoise(const DiffusionCache& cache, std::span<const int32_t> canvas,
                               std::span<const float> self_conditioning = {},
                               const ActivationObserver* observer = nullptr) const;

private:
    struct NewKv {
        std::vector<float> k, v;
    };
    // One layer over x[T][n_embd], in place; attends this layer's cache ++ the T new tokens (causally
    // within the window when `causal`) and returns the new tokens' K/V.
    NewKv layer_forward(int64_t l, float* x, int64_t T, int64_t position, const DiffusionCache::Layer& cached,
                        bool causal, const ActivationObserver* observer) const;

    const Model& model_;
    const DiffusionGemmaWeights& w_;
};

}  // namespace deltabit
