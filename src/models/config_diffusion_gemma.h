// DiffusionGemma's config.json (model_type "diffusion_gemma", the text model nested in text_config, or
// "diffusion_gemma_text" on its own) → ModelConfig, as transformers 5.17's DiffusionGemmaTextConfig
// resolves it (../shared/reference/diffusion-gemma.md §1):
//   - layer_types default: every 6th layer full attention, the rest sliding; the last layer is forced
//     to full attention whatever the file says (transformers warns and does the same);
//   - per-layer overrides from per_layer_config ({"1": {"head_dim": 16, "num_key_value_heads": 1}},
//     keys zero-padded or not); without it, full layers take global_head_dim (default 512) and
//     num_global_key_value_heads (default: num_key_value_heads);
//   - RoPE per layer type from rope_parameters: "default" on sliding layers (θ 1e4), "proportional" on
//     full ones (θ 1e6, partial_rotary_factor 0.25 → int(factor·head_dim // 2) rotated pairs);
//   - final_logit_softcapping 30 when the file leaves it out (transformers never writes it: it is a
//     class attribute, not a field); an explicit null turns the cap off, as it would there;
//   - sliding_window W: a causal query sees itself and W − 1 earlier tokens; the cache keeps W − 1;
//   - canvas_length (top level, default 256) is the block length; image_token_id (top level, default
//     258880) is read as pad by the encoder.
// Refused with a message: use_bidirectional_attention "all" (a different attention pattern, which 5.17
// itself cannot run under eager attention), untied embeddings, attention biases, another activation.
#pragma once

#include "models/model_config.h"

#include <nlohmann/json_fwd.hpp>

#include <string_view>

namespace deltabit {

// `root` is the whole config.json; errors name `source` and the field.
ModelConfig diffusion_gemma_config_from_hf_json(const nlohmann::json& root, std::string_view source);

}  // namespace deltabit
