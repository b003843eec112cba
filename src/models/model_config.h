// The one internal description of a model's geometry. Loaders fill it from GGUF metadata or from a
// Hugging Face config.json; the rest of the engine reads only this. Tensor naming and storage
// conventions inside the engine are llama.cpp's GGUF ones (../shared/reference/
// llamacpp-formats-and-qwen35.md §2): 1+w norm weights stored added (except ssm_norm), ssm_a =
// −exp(A_log), and the value-head order recorded in value_head_order.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace deltabit {

enum class Arch { qwen35, qwen35moe, qwen3next, qwen3, diffusion_gemma };

// sliding_attention: attention over a window of recent tokens (diffusion_gemma; its geometry is in
// ModelConfig::layer_attention).
enum class LayerKind { full_attention, linear_attention, sliding_attention };

// The attention geometry of one layer, for architectures whose attention layers differ from each other
// (diffusion_gemma: full layers have their own head_dim, KV heads and RoPE, and no v_proj).
struct LayerAttention {
    int64_t n_head_kv = 0;
    int64_t head_dim = 0;
    // RoPE pairs (j, j + head_dim/2) rotate for j < rope_pairs, at pos·rope_theta^(−2j/head_dim)
    // (ops/rope_proportional.h); head_dim/2 is ordinary full RoPE.
    int64_t rope_pairs = 0;
    float rope_theta = 10000.0f;
    // Sliding layers: in causal use a query sees itself and the window − 1 tokens before it, and the
    // cache keeps the last window − 1 tokens. 0: the whole history (full layers).
    int64_t window = 0;
    bool value_is_key = false;  // V is the raw K projection (before k_norm and RoPE); no v_proj

    bool operator==(const LayerAttention&) const = default;
};

// How DeltaNet value heads map to key heads. qwen35/qwen35moe GGUFs store them tiled (value head h
// uses key head h % H_k); Hugging Face and qwen3next GGUFs group them (key head h / (H_v/H_k)).
enum class ValueHeadOrder { grouped, tiled };

struct ModelConfig {
    Arch arch = Arch::qwen35;
    std::string arch_name;  // GGUF general.architecture: "qwen35", "qwen35moe", "qwen3next", "qwen3", "diffusion_gemma"

    int64_t n_vocab = 0;
    int64_t n_embd = 0;          // hidden size D
    int64_t n_ff = 0;            // dense FFN width (0 when every layer is MoE)
    int64_t context_length = 0;  // trained context (metadata; the engine may accept more)
    float rms_eps = 1e-6f;
    bool tied_embeddings = false;  // no output.weight: logits use token_embd

    // Full attention (qwen3: every layer; hybrids: layers listed as full_attention).
    int64_t n_head = 0;
    int64_t n_head_kv = 0;
    int64_t head_dim = 0;
    int64_t rope_dim = 0;       // rotated dims per head (hybrids: head_dim/4; qwen3: head_dim)
    float rope_theta = 10000.0f;
    // M-RoPE sections (qwen35/qwen35moe GGUF rope.dimension_sections, HF rope_parameters.mrope_section
    // padded to 4). Only image/video positions use them; text positions are equal in every section,
    // so text-only inference ignores them, but llama.cpp requires the key for qwen35 files.
    std::vector<int32_t> rope_sections;
    bool attn_output_gate = false;  // hybrids: q_proj is 2× wide, per-head [q | gate], sigmoid gate

    // Gated DeltaNet (linear attention) layers.
    int64_t ssm_n_key_heads = 0;    // H_k   (GGUF ssm.group_count)
    int64_t ssm_n_value_heads = 0;  // H_v   (GGUF ssm.time_step_rank)
    int64_t ssm_key_dim = 0;        // d_k   (GGUF ssm.state_size)
    int64_t ssm_value_dim = 0;      // d_v   (GGUF ssm.inner_size / H_v)
    int64_t ssm_conv_kernel = 0;    // 4
    ValueHeadOrder value_head_order = ValueHeadOrder::grouped;

    // Mixture of experts (qwen35moe, qwen3next with experts).
    int64_t n_expert = 0;
    int64_t n_expert_used = 0;
    int64_t expert_ff = 0;          // per-expert FFN width
    int64_t shared_expert_ff = 0;   // 0 = no shared expert
    bool norm_topk_prob = true;

    std::vector<LayerKind> layers;  // one per layer; size = number of layers (MTP layers excluded)
    // Multi-token-prediction layers stored after the last layer (GGUF nextn_predict_layers, counted in
    // block_count as blk.{n_layer}..; HF mtp_num_hidden_layers, weights mtp.*). The forward pass never
    // runs them; a converter that drops their weights must set this to 0.
    int64_t n_nextn_layers = 0;
    std::vector<bool> layer_is_moe; // one per layer (diffusion_gemma: all, each beside a dense MLP of n_ff)

    // Per-layer attention geometry (diffusion_gemma); empty for the others, whose attention layers all
    // use n_head_kv, head_dim, rope_dim and rope_theta above. When set, those fields hold the sliding
    // layers' values.
    std::vector<LayerAttention> layer_attention;

    // Block diffusion (diffusion_gemma; ../shared/reference/diffusion-gemma.md). 0 for autoregressive models.
    int64_t canvas_length = 0;        // tokens denoised together (one block)
    float final_logit_softcap = 0.0f; // logits = cap·tanh(logits/cap); 0: none
    int64_t pad_id = -1;
    // Image placeholder token: the encoder reads it as pad_id (text-only: no image features to put there).
    int64_t image_token_id = -1;

    // Special tokens from the model's own metadata (never borrowed from another model).
    int64_t bos_id = -1;
    std::vector<int64_t> eos_ids;

    int64_t n_layer() const { return int64_t(layers.size()); }
    int64_t ssm_conv_channels() const {  // conv covers [q | k | v]
        return 2 * ssm_n_key_heads * ssm_key_dim + ssm_n_value_heads * ssm_value_dim;
    }
    // Key head used by DeltaNet value head h.
    int64_t key_head_of_value_head(int64_t h) const {
        return value_head_order == ValueHeadOrder::tiled ? h % ssm_n_key_heads
                                                         : h / (ssm_n_value_heads / ssm_n_key_heads);
    }
};

}  // namespace deltabit
