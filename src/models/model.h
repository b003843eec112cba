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
#include <span>
#include <vector>

namespace deltabit {

struct LayerWeights {
    LayerKind kind = LayerKind::full_attention;
    bool moe = false;
    const float* attn_norm = nullptr;  // before the mixer
    const float* ffn_norm = nullptr;   // before the FFN
    AttentionWeights attention;        // kind == full_attention
    DeltaNetWeights deltanet;          // kind == linear_attention
    FfnWeights ffn;                    // !moe
    MoeWeights experts;                // moe
};

struct ModelParts {
    WeightView token_embd;  // [n_vocab][n_embd]
    const float* output_norm = nullptr;
    WeightView output;      // [n_vocab][n_embd]; token_embd when tied
    std::vector<LayerWeights> layers;
};

// DELTABIT_CPU_REFERENCE=1: every CPU product runs on the naive reference (ops/matmul_cpu.cpp) instead of the
// fast path — to compare the two, or to rule the fast path out. Read at each call (env_switch's errors).
bool cpu_reference_switch();
// The threads Model::forward uses when not given a pool: hardware_threads(), made on first use.
ThreadPool& shared_cpu_pool();

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
    // (ops/matmul_cpu_fast.h), or on the naive reference when DELTABIT_CPU_REFERENCE=1 (cpu_reference_switch).
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
