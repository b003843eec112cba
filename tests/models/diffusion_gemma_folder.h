// A random DiffusionGemma written as a Hugging Face folder (config.json + model.safetensors) with the
// tensor names transformers 5.17 saves (../shared/reference/diffusion-gemma.md §1.4), for tests that need
// a model without the transformers fixture: loader, config and self-consistency checks.
#pragma once

#include "formats/safetensors.h"

#include <nlohmann/json.hpp>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <deque>
#include <filesystem>
#include <fstream>
#include <random>
#include <string>
#include <vector>

namespace deltabit::test {

struct TinyDiffusionGemma {
    int64_t vocab = 40, hidden = 16, ff = 24, heads = 2, kv_heads = 2, head_dim = 8;
    int64_t full_head_dim = 16, full_kv_heads = 1;
    int64_t experts = 4, top_k = 2, expert_ff = 8, window = 4, canvas = 5;
    std::vector<std::string> layer_types = {"sliding_attention", "full_attention", "sliding_attention", "full_attention"};
    uint32_t seed = 7;
    // Encoder and decoder layer_scalar buffers are drawn independently unless this is set.
    bool equal_layer_scalars = false;

    nlohmann::json config() const {
        nlohmann::json per_layer = nlohmann::json::object();
        for (size_t i = 0; i < layer_types.size(); ++i)
            if (layer_types[i] == "full_attention")
                per_layer[std::to_string(i)] = {{"head_dim", full_head_dim}, {"num_key_value_heads", full_kv_heads}};
        return {{"model_type", "diffusion_gemma"},
                {"canvas_length", canvas},
                {"image_token_id", vocab - 1},
                {"text_config",
                 {{"model_type", "diffusion_gemma_text"},
                  {"vocab_size", vocab},
                  {"hidden_size", hidden},
                  {"intermediate_size", ff},
                  {"num_hidden_layers", layer_types.size()},
                  {"num_attention_heads", heads},
                  {"num_key_value_heads", kv_heads},
                  {"head_dim", head_dim},
                  {"layer_types", layer_types},
                  {"per_layer_config", per_layer},
                  {"sliding_window", window},
                  {"num_experts", experts},
                  {"top_k_experts", top_k},
                  {"moe_intermediate_size", expert_ff},
                  {"use_bidirectional_attention", "vision"}}}};
    }

    // Writes config.json and model.safetensors (F32) into `dir` (created).
    void write(const std::filesystem::path& dir) const {
        std::filesystem::create_directories(dir);
        std::ofstream(dir / "config.json") << config().dump(1);
        std::mt19937 rng(seed);
        std::deque<std::vector<float>> storage;  // stable addresses for the tensors' spans
        std::vector<safetensors::TensorToWrite> tensors;
        auto add = [&](const std::string& name, std::vector<int64_t> shape, float lo, float hi, bool normal) {
            int64_t n = 1;
            for (int64_t s : shape) n *= s;
            std::vector<float> v(static_cast<size_t>(n));
            std::normal_distribution<float> gauss(0.0f, hi);
            std::uniform_real_distribution<float> flat(lo, hi);
            for (float& x : v) x = normal ? gauss(rng) : flat(rng);
            storage.push_back(std::move(v));
            const auto& data = storage.back();
            tensors.push_back({name, "F32", shape,
                               {reinterpret_cast<const uint8_t*>(data.data()), data.size() * sizeof(float)}});
        };
        auto linear = [&](const std::string& name, int64_t out, int64_t in) {
            add(name, {out, in}, 0, 1.0f / std::sqrt(float(in)), true);
        };
        auto norm = [&](const std::string& name, int64_t n) { add(name, {n}, 0.5f, 1.5f, false); };
        const std::string d = "model.decoder.";
        add(d + "embed_tokens.weight", {vocab, hidden}, 0, 4.0f / std::sqrt(float(hidden)), true);
        norm(d + "norm.weight", hidden);
        norm(d + "self_conditioning.pre_norm.weight", hidden);
        linear(d + "self_conditioning.gate_proj.weight", ff, hidden);
        linear(d + "self_conditioning.up_proj.weight", ff, hidden);
        linear(d + "self_conditioning.down_proj.weight", hidden, ff);
        for (size_t l = 0; l < layer_types.size(); ++l) {
            const bool full = layer_types[l] == "full_attention";
            const int64_t hd = full ? full_head_dim : head_dim, kvh = full ? full_kv_heads : kv_heads;
            const std::string p = d + "layers." + std::to_string(l) + ".";
            for (const char* n : {"input_layernorm", "post_attention_layernorm", "pre_feedforward_layernorm",
                                  "post_feedforward_layernorm", "post_feedforward_layernorm_1",
                                  "post_feedforward_layernorm_2", "pre_feedforward_layernorm_2"})
                norm(p + n + ".weight", hidden);
            linear(p + "self_attn.q_proj.weight", heads * hd, hidden);
            linear(p + "self_attn.k_proj.weight", kvh * hd, hidden);
            if (!full) linear(p + "self_attn.v_proj.weight", kvh * hd, hidden);
            linear(p + "self_attn.o_proj.weight", hidden, heads * hd);
            norm(p + "self_attn.q_norm.weight", hd);
            norm(p + "self_attn.k_norm.weight", hd);
            linear(p + "mlp.gate_proj.weight", ff, hidden);
            linear(p + "mlp.up_proj.weight", ff, hidden);
            linear(p + "mlp.down_proj.weight", hidden, ff);
            add(p + "router.proj.weight", {experts, hidden}, 0, 2.0f, true);
            norm(p + "router.scale", hidden);
            norm(p + "router.per_expert_scale", experts);
            add(p + "experts.gate_up_proj", {experts, 2 * expert_ff, hidden}, 0, 1.0f / std::sqrt(float(hidden)), true);
            add(p + "experts.down_proj", {experts, hidden, expert_ff}, 0, 1.0f / std::sqrt(float(expert_ff)), true);
            norm(p + "layer_scalar", 1);
            if (equal_layer_scalars) {
                std::vector<float> same = storage.back();
                storage.push_back(std::move(same));
                tensors.push_back({"model.encoder.language_model.layers." + std::to_string(l) + ".layer_scalar", "F32",
                                   {1}, {reinterpret_cast<const uint8_t*>(storage.back().data()), 4}});
            } else {
                norm("model.encoder.language_model.layers." + std::to_string(l) + ".layer_scalar", 1);
            }
        }
        // A vision tower the text model must skip.
        add("model.encoder.vision_tower.patch_embedder.weight", {4, 3}, 0, 1.0f, true);
        safetensors::write(dir / "model.safetensors", tensors);
    }
};

}  // namespace deltabit::test
