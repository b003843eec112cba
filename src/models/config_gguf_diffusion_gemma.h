// DiffusionGemma's ModelConfig ↔ GGUF metadata (general.architecture = diffusion_gemma). llama.cpp has
// no such architecture; the keys follow its Gemma conventions where one exists and are deltabit's own
// otherwise (docs/convert.md "DiffusionGemma"). With A = "diffusion_gemma.":
//   A.vocab_size, A.context_length, A.embedding_length, A.feed_forward_length (the dense MLP and the
//   self-conditioning MLP), A.block_count, A.attention.head_count, A.attention.layer_norm_rms_epsilon;
//   A.attention.head_count_kv          u32 per layer (llama.cpp reads per-layer arrays here)
//   A.attention.sliding_window_pattern bool per layer, true = sliding (llama.cpp's Gemma 3n/4 key)
//   A.attention.key_length / _swa      head_dim of the full / the sliding layers (llama.cpp's Gemma 4 keys)
//   A.attention.sliding_window         the window W of the sliding layers
//   A.rope.freq_base / _swa            θ of the full / the sliding layers
//   A.rope.dimension_count / _swa      rotated dimensions (2 × rotated pairs) of the full / sliding layers;
//                                      fewer than key_length is transformers' proportional RoPE
//   A.expert_count, A.expert_used_count, A.expert_feed_forward_length
//   A.final_logit_softcapping          f32; 0 = no cap (llama.cpp's Gemma 2 key)
//   A.canvas_length, A.image_token_id  deltabit's own: the block length and the image placeholder token
//   tokenizer.ggml.padding_token_id, bos_token_id, eos_token_id (+ eot, eom)
// Implied by the architecture, as in the Hugging Face reader: full layers' values are their keys, every
// layer has a routed MoE beside its dense MLP with renormalised top-k, embeddings are tied.
#pragma once

#include "formats/gguf.h"
#include "models/model_config.h"

#include <string>

namespace deltabit {

// Every key above is required (one-line error naming the key). `c` holds arch and arch_name.
void read_diffusion_gemma_gguf(const gguf::File& file, const std::string& source, ModelConfig& c);

// Refuses, with a message, a config the keys cannot express exactly: layers of one kind with different
// head_dim, RoPE or window, or no sliding layer while the top-level KV head count differs from layer 0's.
void write_diffusion_gemma_gguf(const ModelConfig& c, gguf::Writer& w);

}  // namespace deltabit
