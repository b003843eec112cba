// ModelConfig ↔ GGUF metadata, with llama.cpp's keys (../shared/reference/llamacpp-formats-and-qwen35.md
// §2.1) for general.architecture = qwen35, qwen35moe, qwen3next, qwen3; diffusion_gemma's keys (partly
// deltabit's own) are listed in config_gguf_diffusion_gemma.h.
//
// Conventions that differ from config.json:
//   - %s.block_count counts the MTP ("nextn") layers too: n_layer = block_count − nextn_predict_layers.
//   - layer kinds come from %s.attention.recurrent_layers when present, else from
//     %s.full_attention_interval (layer i is full attention iff (i+1) % interval == 0).
//   - value heads are tiled in qwen35/qwen35moe files and grouped in qwen3next files.
//   - tied embeddings are not a key: a file without output.weight is tied.
//   - stop tokens are tokenizer.ggml.eos_token_id, then eot_token_id and eom_token_id when present.
#pragma once

#include "formats/gguf.h"
#include "models/model_config.h"

#include <string_view>

namespace deltabit {

// "qwen35, qwen35moe, qwen3next, qwen3, diffusion_gemma".
std::string_view supported_gguf_architectures();

// Reads and validates the hyperparameters; n_vocab comes from %s.vocab_size, else token_embd.weight,
// else the tokenizer.ggml.tokens list. Errors name the file and the key.
ModelConfig model_config_from_gguf(const gguf::File& file);

// Writes general.architecture and every hyperparameter key model_config_from_gguf reads (not the
// tokenizer vocabulary, not tensors). Refuses what a GGUF cannot express: value heads in the wrong
// order for the architecture, per-layer MoE patterns, more than three stop tokens. Whether the model
// is tied is expressed by the caller adding (or not) output.weight.
void write_model_config_gguf(const ModelConfig& config, gguf::Writer& writer);

}  // namespace deltabit
