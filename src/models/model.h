// A loaded model and its CPU reference forward pass.
//
// The forward pass is one loop for every architecture (config is data): embed; per layer
// x += mixer(norm(x)) with the mixer chosen by config.layers[l] (full attention or gated DeltaNet),
// then x += ffn(norm(x)) with the FFN chosen by config.layer_is_moe[l]; final norm; logits. What
// differs between architectures is only which tensors are bound to the blocks: one bind function
// per architecture (qwen35.cpp for qwen35/qwen35moe/qwen3next, qwen3.cpp), registered in
// architectures.cpp.
//
// forward() consumes the next tokens of a sequence and returns their logits, so a whole prompt in one
// call, one token per call, or a prefill followed by a continuation all give the same logits.
#pragma once

#include "models/blocks.h"
#include "models/model_config.h"
#include "models/sequence_state.h"
#include "models/weights.h"

#include <cstdint>
#include <filesystem>
#include <memory>
#include <span>
#include <string>
#include <vector>

namespace deltabit {

// One layer's weights; M as in models/blocks.h.
template <class M>
struct LayerWeightsOf {
    LayerKind kind = LayerKind::full_attention;
    bool moe = false;
    const float* attn_norm = nullptr;  // before the mixer
    const float* ffn_norm = nullptr;   // before the FFN
    AttentionWeightsOf<M> attention;   // kind == full_attention
    DeltaNetWeightsOf<M> deltanet;     // kind == linear_attention
    FfnWeightsOf<M> ffn;               // !moe
    MoeWeightsOf<M> experts;           // moe
};
using LayerWeights = LayerWeightsOf<WeightView>;

// `from` with every matrix passed through matrix(const WeightView&, const std::string& name) (the GGUF
// tensor's, for messages) and every vector through vector(const float*, int64_t n) (n its length in floats),
// in one fixed order: how a backend takes layer `index` of a bound model, the one list of a layer's tensors
// beside the binding (models/bind.cpp).
template <class M, class MatrixFn, class VectorFn>
LayerWeightsOf<M> map_layer(const LayerWeights& from, const ModelConfig& c, int64_t index, MatrixFn&& matrix,
                            VectorFn&& vector) {
    const std::string blk = "blk." + std::to_string(index) + ".";
    LayerWeightsOf<M> to;
    to.kind = from.kind;
    to.moe = from.moe;
    to.attn_norm = vector(from.attn_norm, c.n_embd);
    to.ffn_norm = vector(from.ffn_norm, c.n_embd);
    if (from.kind == LayerKind::full_attention) {
        const AttentionWeights& a = from.attention;
        to.attention.q = matrix(a.q, blk + "attn_q.weight");
        to.attention.k = matrix(a.k, blk + "attn_k.weight");
        to.attention.v = matrix(a.v, blk + "attn_v.weight");
        to.attention.output = matrix(a.output, blk + "attn_output.weight");
        to.attention.q_norm = vector(a.q_norm, c.head_dim);
        to.attention.k_norm = vector(a.k_norm, c.head_dim);
    } else {
        const DeltaNetWeights& d = from.deltanet;
        to.deltanet.qkv = matrix(d.qkv, blk + "attn_qkv.weight");
        to.deltanet.gate = matrix(d.gate, blk + "attn_gate.weight");
        to.deltanet.beta = matrix(d.beta, blk + "ssm_beta.weight");
        to.deltanet.alpha = matrix(d.alpha, blk + "ssm_alpha.weight");
        to.deltanet.output = matrix(d.output, blk + "ssm_out.weight");
        to.deltanet.conv = vector(d.conv, c.ssm_conv_channels() * c.ssm_conv_kernel);
        to.deltanet.ssm_a = vector(d.ssm_a, c.ssm_n_value_heads);
        to.deltanet.dt_bias = vector(d.dt_bias, c.ssm_n_value_heads);
        to.deltanet.norm = vector(d.norm, c.ssm_value_dim);
    }
    auto map_ffn = [&](const FfnWeights& f, const std::string& suffix) {
        return FfnWeightsOf<M>{matrix(f.gate, blk + "ffn_gate" + suffix), matrix(f.up, blk + "ffn_up" + suffix),
                               matrix(f.down, blk + "ffn_down" + suffix)};
    };
    if (!from.moe) {
        to.ffn = map_ffn(from.ffn, ".weight");
        return to;
    }
    const MoeWeights& e = from.experts;
    to.experts.has_shared = e.has_shared;
    if (e.has_shared) to.experts.shared = map_ffn(e.shared, "_shexp.weight");
    to.experts.router = matrix(e.router, blk + "ffn_gate_inp.weight");
    to.experts.gate = matrix(e.gate, blk + "ffn_gate_exps.weight");
    to.experts.up = matrix(e.up, blk + "ffn_up_exps.weight");
    to.experts.down = matrix(e.down, blk + "ffn_down_exps.weight");
    if (e.has_shared) to.experts.shared_gate = matrix(e.shared_gate, blk + "ffn_gate_inp_shexp.weight");
    return to;
}

struct DiffusionGemmaWeights;  // models/diffusion_gemma.h

struct ModelParts {
    WeightView token_embd;  // [n_vocab][n_embd]
    const float* output_norm = nullptr;
    WeightView output;      // [n_vocab][n_embd]; token_embd when tied
    std::vector<LayerWeights> layers;  // the autoregressive forward's layers (empty for diffusion_gemma)
    // A block-diffusion model's layers and self-conditioning MLP, driven by DiffusionGemma
    // (models/diffusion_gemma.h) rather than forward(); null for the autoregressive architectures.
    std::shared_ptr<const DiffusionGemmaWeights> diffusion;
};

// DELTABIT_CPU_REFERENCE=1: every CPU product runs on the naive reference (ops/reference/matmul_cpu.cpp) instead of the
// fast path — to compare the two, or to rule the fast path out. Read at each call (env_switch's errors).
bool cpu_reference_switch();
// The threads Model::forward uses when not given a pool: hardware_threads(), made on first use.
ThreadPool& shared_cpu_pool();

// Whether the GGUF file or Hugging Face folder at `path` holds a block-diffusion model (models/diffusion_gemma.h),
// from its config alone (no weights are read). False when the config cannot be read, so that the load that
// follows reports the problem in its usual words.
bool is_diffusion_model(const std::filesystem::path& path);

class Model {
public:
    // A GGUF file, or a Hugging Face folder (config.json + safetensors); `progress` (weights.h) hears
    // after each of its tensors.
    static Model load(const std::filesystem::path& path, const LoadProgress& progress = {});
    // Binds the blocks to `weights` by the architecture's names; Error naming a missing or
    // misshapen tensor.
    explicit Model(ModelWeights weights);

    Model(Model&&) = default;
    Model& operator=(Model&&) = default;

    const ModelConfig& config() const { return weights_.config(); }
    const ModelWeights& weights() const { return weights_; }
    SequenceState new_sequence(KvFormat kv = KvFormat::f32) const { return SequenceState(config(), kv); }
    // The tensors bound to the blocks (what a GPU copy of the model uploads: models/model_cuda.h).
    const ModelParts& parts() const { return parts_; }

    // Logits [ids.size()][n_vocab] for the tokens after state.position(); advances the state.
    // Error for a token id outside the vocabulary (the state is then unchanged).
    // Products run with set_matmul_numerics's numerics, on the CPU fast path over shared_cpu_pool()'s threads
    // (ops/cpu_fast/matmul_cpu_fast.h), or on the naive reference when DELTABIT_CPU_REFERENCE=1 (cpu_reference_switch).
    std::vector<float> forward(SequenceState& state, std::span<const int32_t> ids,
                               const ActivationObserver* observer = nullptr) const;
    // The same with the products' numerics and threads given; with all_logits false only the last token's
    // logits are computed and returned ([n_vocab]: a prompt skips T − 1 rows of the LM head).
    struct ForwardOptions {
        MatmulNumerics numerics = MatmulNumerics::f32;
        ThreadPool* pool = nullptr;  // null: the naive reference
        bool all_logits = true;
    };
    std::vector<float> forward(SequenceState& state, std::span<const int32_t> ids, const ActivationObserver* observer,
                               const ForwardOptions& options) const;

    // f32 by default; int8_activations mirrors the CUDA GEMV's rounding (blocks.h), for rung 3.
    void set_matmul_numerics(MatmulNumerics numerics) { numerics_ = numerics; }

private:
    ModelWeights weights_;
    ModelParts parts_;
    MatmulNumerics numerics_ = MatmulNumerics::f32;
};

}  // namespace deltabit
