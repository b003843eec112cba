// Hugging Face safetensors → the engine's GGUF-named tensors (weights.h). Only this file knows HF
// tensor names; the table below is the whole mapping.
#include "formats/safetensors.h"
#include "models/fused_layouts.h"
#include "models/weights.h"

#include "core/error.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <functional>
#include <map>
#include <utility>

namespace deltabit {

namespace {

enum class Convert : uint8_t {
    matrix,         // in place (or copied when the file leaves it misaligned)
    norm,           // 1-D → F32; +1 for the hybrids' zero-centred 1+w norms, as is for qwen3's plain ones
    plain_vector,   // 1-D → F32 as is (ssm_norm is plain w even in the hybrids; dt_bias)
    neg_exp,        // A_log → ssm_a = −exp(A_log)
    conv,           // conv1d.weight [C, 1, K] → F32 {K, C}
    split_qkvz,     // Qwen3-Next in_proj_qkvz → attn_qkv + attn_gate
    split_ba,       // Qwen3-Next in_proj_ba → ssm_beta + ssm_alpha
    split_gate_up,  // experts.gate_up_proj [E, 2I, H] → ffn_gate_exps + ffn_up_exps
};

struct NameRule {
    std::string_view hf;     // after "model.layers.N." for layer tensors
    std::string_view gguf;   // after "blk.N."; for splits the first output's name
    Convert convert;
    std::string_view gguf2 = {};       // second output of a split
    std::string_view gguf_qwen3 = {};  // where qwen3's llama.cpp name differs
};

constexpr NameRule kGlobalRules[] = {
    {"model.embed_tokens.weight", "token_embd.weight", Convert::matrix},
    {"model.norm.weight", "output_norm.weight", Convert::norm},
    {"lm_head.weight", "output.weight", Convert::matrix},
    // diffusion_gemma's self-conditioning MLP (model.decoder.self_conditioning.*, renamed below)
    {"model.self_conditioning.pre_norm.weight", "sc_pre_norm.weight", Convert::norm},
    {"model.self_conditioning.gate_proj.weight", "sc_gate.weight", Convert::matrix},
    {"model.self_conditioning.up_proj.weight", "sc_up.weight", Convert::matrix},
    {"model.self_conditioning.down_proj.weight", "sc_down.weight", Convert::matrix},
};

constexpr NameRule kLayerRules[] = {
    {"input_layernorm.weight", "attn_norm.weight", Convert::norm},
    {"post_attention_layernorm.weight", "post_attention_norm.weight", Convert::norm, {}, "ffn_norm.weight"},
    // full attention
    {"self_attn.q_proj.weight", "attn_q.weight", Convert::matrix},
    {"self_attn.k_proj.weight", "attn_k.weight", Convert::matrix},
    {"self_attn.v_proj.weight", "attn_v.weight", Convert::matrix},
    {"self_attn.o_proj.weight", "attn_output.weight", Convert::matrix},
    {"self_attn.q_norm.weight", "attn_q_norm.weight", Convert::norm},
    {"self_attn.k_norm.weight", "attn_k_norm.weight", Convert::norm},
    // gated DeltaNet
    {"linear_attn.in_proj_qkv.weight", "attn_qkv.weight", Convert::matrix},
    {"linear_attn.in_proj_z.weight", "attn_gate.weight", Convert::matrix},
    {"linear_attn.in_proj_b.weight", "ssm_beta.weight", Convert::matrix},
    {"linear_attn.in_proj_a.weight", "ssm_alpha.weight", Convert::matrix},
    {"linear_attn.in_proj_qkvz.weight", "attn_qkv.weight", Convert::split_qkvz, "attn_gate.weight"},
    {"linear_attn.in_proj_ba.weight", "ssm_beta.weight", Convert::split_ba, "ssm_alpha.weight"},
    {"linear_attn.conv1d.weight", "ssm_conv1d.weight", Convert::conv},
    {"linear_attn.dt_bias", "ssm_dt.bias", Convert::plain_vector},
    {"linear_attn.A_log", "ssm_a", Convert::neg_exp},
    {"linear_attn.norm.weight", "ssm_norm.weight", Convert::plain_vector},
    {"linear_attn.out_proj.weight", "ssm_out.weight", Convert::matrix},
    // dense SwiGLU
    {"mlp.gate_proj.weight", "ffn_gate.weight", Convert::matrix},
    {"mlp.up_proj.weight", "ffn_up.weight", Convert::matrix},
    {"mlp.down_proj.weight", "ffn_down.weight", Convert::matrix},
    // mixture of experts
    {"mlp.gate.weight", "ffn_gate_inp.weight", Convert::matrix},
    {"mlp.experts.gate_up_proj", "ffn_gate_exps.weight", Convert::split_gate_up, "ffn_up_exps.weight"},
    {"mlp.experts.down_proj", "ffn_down_exps.weight", Convert::matrix},
    {"mlp.shared_expert.gate_proj.weight", "ffn_gate_shexp.weight", Convert::matrix},
    {"mlp.shared_expert.up_proj.weight", "ffn_up_shexp.weight", Convert::matrix},
    {"mlp.shared_expert.down_proj.weight", "ffn_down_shexp.weight", Convert::matrix},
    {"mlp.shared_expert_gate.weight", "ffn_gate_inp_shexp.weight", Convert::matrix},
    // diffusion_gemma: a dense MLP (mlp.*, ffn_norm before it) beside the MoE, each with its own norms,
    // and the layer's output scale for the decoder and (renamed below) for the encoder
    {"pre_feedforward_layernorm.weight", "ffn_norm.weight", Convert::norm},
    {"post_feedforward_layernorm_1.weight", "post_ffw_norm_1.weight", Convert::norm},
    {"pre_feedforward_layernorm_2.weight", "pre_ffw_norm_2.weight", Convert::norm},
    {"post_feedforward_layernorm_2.weight", "post_ffw_norm_2.weight", Convert::norm},
    {"post_feedforward_layernorm.weight", "post_ffw_norm.weight", Convert::norm},
    {"router.proj.weight", "ffn_gate_inp.weight", Convert::matrix},
    {"router.scale", "ffn_gate_inp.scale", Convert::plain_vector},
    {"router.per_expert_scale", "ffn_down_exps.scale", Convert::plain_vector},
    {"experts.gate_up_proj", "ffn_gate_exps.weight", Convert::split_gate_up, "ffn_up_exps.weight"},
    {"experts.down_proj", "ffn_down_exps.weight", Convert::matrix},
    {"layer_scalar", "layer_output_scale.weight", Convert::plain_vector},
    {"encoder.layer_scalar", "enc_layer_output_scale.weight", Convert::plain_vector},
};

// Weights the text model never reads: multi-token prediction and the vision tower of the VLM wrappers.
constexpr std::string_view kIgnoredPrefixes[] = {"mtp.", "model.mtp.", "model.visual.", "visual."};

bool starts_with(std::string_view s, std::string_view prefix) { return s.substr(0, prefix.size()) == prefix; }

// Zero-centred "1 + w" norm weights: the Qwen3.5 / Qwen3-Next hybrids. Qwen3 and DiffusionGemma multiply
// by w itself.
bool hf_norms_are_one_plus(Arch arch) {
    return arch == Arch::qwen35 || arch == Arch::qwen35moe || arch == Arch::qwen3next;
}

// DiffusionGemma keeps its text weights under model.decoder (reference §1.4): they become the names the
// rules above know. The encoder shares them (tied) except its per-layer layer_scalar, renamed
// model.layers.N.encoder.layer_scalar; the vision tower is not used. Returns "" for a tensor to skip.
std::string diffusion_gemma_name(const std::string& name, const std::function<void(std::string_view)>& refuse) {
    constexpr std::string_view decoder = "model.decoder.", encoder_layers = "model.encoder.language_model.layers.";
    if (starts_with(name, "model.encoder.vision_tower.") || starts_with(name, "model.encoder.embed_vision."))
        return "";
    if (starts_with(name, decoder)) return "model." + name.substr(decoder.size());
    if (starts_with(name, encoder_layers)) {
        const std::string rest = name.substr(encoder_layers.size());
        const size_t dot = rest.find('.');
        if (dot != std::string::npos && rest.substr(dot + 1) == "layer_scalar")
            return "model.layers." + rest.substr(0, dot) + ".encoder.layer_scalar";
    }
    if (starts_with(name, "model.encoder."))
        refuse("the encoder shares the decoder's text weights (only its layer_scalar is its own); a separate "
               "copy is not supported");
    return name;
}

class HfConverter {
public:
    // `handled(bytes)` is told of each file tensor once it is converted, skipped or (per-expert ones)
    // stacked into its layer's expert tensor.
    HfConverter(ModelWeights& out, const ModelConfig& config, std::function<void(uint64_t bytes)> handled)
        : out_(out), c_(config), handled_(std::move(handled)) {}

    void add(const safetensors::TensorInfo& t) {
        if (!convert_or_collect(t)) handled_(t.bytes);
    }

    // Stacks the per-expert matrices collected by add() into ffn_{gate,up,down}_exps.
    void finish() {
        for (const auto& [key, experts] : experts_) {
            stack_experts(key.first, key.second, experts);
            for (const safetensors::TensorInfo* e : experts) handled_(e->bytes);
        }
    }

private:
    // Converts `t` (or skips it) and returns false, or keeps it for finish() and returns true.
    bool convert_or_collect(const safetensors::TensorInfo& t) {
        std::string_view name = t.name;
        for (std::string_view ignored : kIgnoredPrefixes)
            if (starts_with(name, ignored)) return false;
        // Qwen3.5 VLM checkpoints keep the text model under model.language_model.
        std::string normalized(name);
        if (starts_with(name, "model.language_model.")) normalized = "model." + std::string(name.substr(21));
        if (c_.arch == Arch::diffusion_gemma) {
            normalized = diffusion_gemma_name(normalized, [&](std::string_view why) { unknown(t, why); });
            if (normalized.empty()) return false;
        }
        name = normalized;

        if (starts_with(name, "model.layers.")) {
            const std::string_view rest = name.substr(13);
            const size_t dot = rest.find('.');
            int64_t layer = 0;
            const bool digits = dot != std::string_view::npos && dot > 0 && dot <= 6 &&
                                rest.substr(0, dot).find_first_not_of("0123456789") == std::string_view::npos;
            if (!digits) unknown(t, "cannot read the layer index");
            for (char ch : rest.substr(0, dot)) layer = layer * 10 + (ch - '0');
            if (layer >= c_.n_layer()) unknown(t, fmt::format("layer {} but the config has {} layers", layer, c_.n_layer()));
            const std::string_view suffix = rest.substr(dot + 1);
            if (collect_expert(t, layer, suffix)) return true;
            for (const NameRule& rule : kLayerRules)
                if (rule.hf == suffix) {
                    convert(t, rule, fmt::format("blk.{}.", layer));
                    return false;
                }
            unknown(t, "not a tensor of any supported model");
        }
        for (const NameRule& rule : kGlobalRules)
            if (rule.hf == name) {
                convert(t, rule, "");
                return false;
            }
        unknown(t, "not a tensor of any supported model");
    }

    void stack_experts(int64_t layer, int kind, const std::vector<const safetensors::TensorInfo*>& experts) {
        const safetensors::TensorInfo* first = *std::find_if(experts.begin(), experts.end(), [](auto* p) { return p; });
        for (size_t e = 0; e < experts.size(); ++e) {
            if (!experts[e])
                fail("{}: layer {}: expert {} has no {} (the model has {} experts)", first->file, layer, e,
                     kExpertParts[kind], c_.n_expert);
            if (experts[e]->dtype_name != first->dtype_name || experts[e]->shape != first->shape)
                fail("{}: tensor {}: dtype or shape differs from {}", experts[e]->file, experts[e]->name, first->name);
        }
        if (first->shape.size() != 2) fail("{}: expected a matrix", origin(*first));
        const DType dtype = first->require_dtype();
        auto* data = static_cast<uint8_t*>(out_.own(first->bytes * experts.size()));
        for (size_t e = 0; e < experts.size(); ++e) std::memcpy(data + e * first->bytes, experts[e]->data, first->bytes);
        static constexpr std::string_view kStacked[] = {"ffn_gate_exps.weight", "ffn_up_exps.weight",
                                                        "ffn_down_exps.weight"};
        out_.add({fmt::format("blk.{}.{}", layer, kStacked[kind]), dtype,
                  {first->shape[1], first->shape[0], int64_t(experts.size())}, data,
                  first->bytes * experts.size(), origin(*first) + " (and the other experts)"});
    }

    // Checkpoints written before transformers 5 keep one module per expert:
    // mlp.experts.E.{gate,up,down}_proj.weight. Collected here, stacked by finish().
    static constexpr std::string_view kExpertParts[] = {"gate_proj.weight", "up_proj.weight", "down_proj.weight"};

    bool collect_expert(const safetensors::TensorInfo& t, int64_t layer, std::string_view suffix) {
        constexpr std::string_view prefix = "mlp.experts.";
        if (!starts_with(suffix, prefix)) return false;
        const std::string_view rest = suffix.substr(prefix.size());
        const size_t dot = rest.find('.');
        if (dot == std::string_view::npos || dot == 0 || dot > 6 ||
            rest.substr(0, dot).find_first_not_of("0123456789") != std::string_view::npos)
            return false;
        int64_t expert = 0;
        for (char ch : rest.substr(0, dot)) expert = expert * 10 + (ch - '0');
        const std::string_view part = rest.substr(dot + 1);
        for (int kind = 0; kind < 3; ++kind) {
            if (part != kExpertParts[kind]) continue;
            if (expert >= c_.n_expert) unknown(t, fmt::format("expert {} but the config has {} experts", expert, c_.n_expert));
            auto& slots = experts_[{layer, kind}];
            slots.resize(size_t(c_.n_expert), nullptr);
            slots[size_t(expert)] = &t;
            return true;
        }
        return false;
    }

    [[noreturn]] void unknown(const safetensors::TensorInfo& t, std::string_view why) const {
        fail("{}: tensor {}: {}", t.file, t.name, why);
    }

    std::string origin(const safetensors::TensorInfo& t) const { return t.file + ": " + t.name; }

    void convert(const safetensors::TensorInfo& t, const NameRule& rule, const std::string& prefix) {
        const DType dtype = t.require_dtype();
        std::string name = prefix + std::string(c_.arch == Arch::qwen3 && !rule.gguf_qwen3.empty() ? rule.gguf_qwen3
                                                                                                      : rule.gguf);
        std::vector<int64_t> shape(t.shape.rbegin(), t.shape.rend());  // PyTorch → ggml order
        const int64_t n = int64_t(t.n_elements());

        switch (rule.convert) {
            case Convert::matrix: {
                const void* data = t.data;
                // The ops read 2-byte and 4-byte elements directly; safetensors does not promise alignment.
                if (reinterpret_cast<uintptr_t>(data) % dtype_info(dtype).block_bytes != 0) {
                    void* copy = out_.own(t.bytes);
                    std::memcpy(copy, t.data, t.bytes);
                    data = copy;
                }
                out_.add({name, dtype, shape, data, t.bytes, origin(t)});
                return;
            }
            case Convert::norm:
            case Convert::plain_vector:
            case Convert::neg_exp:
            case Convert::conv: {
                auto* values = static_cast<float*>(out_.own(uint64_t(n) * 4));
                plain_to_f32(dtype, t.data, n, values, origin(t));
                const bool one_plus = rule.convert == Convert::norm && hf_norms_are_one_plus(c_.arch);
                for (int64_t i = 0; i < n; ++i) {
                    if (one_plus) values[i] = 1.0f + values[i];
                    if (rule.convert == Convert::neg_exp) values[i] = -std::exp(values[i]);
                }
                if (rule.convert == Convert::conv) {
                    if (t.shape.size() != 3 || t.shape[1] != 1)
                        fail("{}: expected shape [channels, 1, kernel] for a depthwise conv", origin(t));
                    shape = {t.shape[2], t.shape[0]};
                }
                out_.add({name, DType::F32, shape, values, uint64_t(n) * 4, origin(t)});
                return;
            }
            case Convert::split_qkvz:
            case Convert::split_ba:
            case Convert::split_gate_up: split(t, rule, prefix, dtype); return;
        }
    }

    void split(const safetensors::TensorInfo& t, const NameRule& rule, const std::string& prefix, DType dtype) {
        if (t.shape.size() < 2) fail("{}: expected a matrix", origin(t));
        const int64_t cols = t.shape.back();
        const int64_t rows = int64_t(t.n_elements()) / cols;
        RowSplit s;
        int64_t experts = 1;
        if (rule.convert == Convert::split_qkvz) {
            s = qkvz_rows(c_.ssm_n_key_heads, c_.ssm_key_dim, c_.ssm_n_value_heads, c_.ssm_value_dim);
        } else if (rule.convert == Convert::split_ba) {
            s = ba_rows(c_.ssm_n_key_heads, c_.ssm_n_value_heads);
        } else {
            experts = c_.n_expert;
            s = gate_up_rows(c_.n_expert, c_.expert_ff);
        }
        const int64_t want_rows = int64_t(s.first.size() + s.second.size());
        if (rows != want_rows)
            fail("{}: has {} rows but the model config implies {}", origin(t), rows, want_rows);
        const uint64_t row_bytes = uint64_t(cols) * dtype_info(dtype).block_bytes;
        const auto add_part = [&](std::string_view gguf, const std::vector<int64_t>& part) {
            const void* data = gather_rows(out_, t.data, row_bytes, part);
            std::vector<int64_t> shape = {cols, int64_t(part.size()) / experts};
            if (experts > 1 || rule.convert == Convert::split_gate_up) shape.push_back(experts);
            out_.add({prefix + std::string(gguf), dtype, shape, data, row_bytes * part.size(), origin(t)});
        };
        add_part(rule.gguf, s.first);
        add_part(rule.gguf2, s.second);
    }

    ModelWeights& out_;
    const ModelConfig& c_;
    std::function<void(uint64_t bytes)> handled_;
    std::map<std::pair<int64_t, int>, std::vector<const safetensors::TensorInfo*>> experts_;  // (layer, part)
};

}  // namespace

ModelWeights ModelWeights::from_hf(std::shared_ptr<const safetensors::Set> files, ModelConfig config,
                                   const LoadProgress& progress) {
    if (config.value_head_order != ValueHeadOrder::grouped)
        fail("{}: Hugging Face weights keep DeltaNet value heads grouped; the config says otherwise", files->what());
    ModelWeights weights(std::move(config), files->what());
    uint64_t done = 0;
    HfConverter converter(weights, weights.config(), [&](uint64_t bytes) {
        done += bytes;
        if (progress) progress(done, files->total_bytes());
    });
    for (const safetensors::TensorInfo* t : *files) converter.add(*t);
    converter.finish();
    weights.keep_alive(files);
    return weights;
}

}  // namespace deltabit
