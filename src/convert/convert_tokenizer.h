// tokenizer.json → the tokenizer.ggml.* metadata llama.cpp's converter writes for byte-level BPE
// models (conversion/base.py: _set_vocab_gpt2 and get_vocab_base), so a converted file carries its
// vocabulary:
//   tokenizer.ggml.model  "gpt2"
//   tokenizer.ggml.pre    the family's pre-tokeniser name (tokenizer_pre_name)
//   tokenizer.ggml.tokens / token_type   one entry per id up to the model's vocab_size: vocabulary
//                         entries NORMAL (1), special added tokens CONTROL (3), other added tokens
//                         USER_DEFINED (4), ids nobody names "[PAD<id>]" UNUSED (5)
//   tokenizer.ggml.merges "left right", best first
//   tokenizer.ggml.padding_token_id, add_bos_token, tokenizer.chat_template from tokenizer_config.json
//   (or chat_template.jinja) beside it, when present.
// BOS/EOS ids come from config.json through write_model_config_gguf. The text engineer's GGUF reader
// (text/tokenizer_gguf.h) reads these keys back.
#pragma once

#include "formats/gguf.h"
#include "models/model_config.h"

#include <filesystem>
#include <string_view>

namespace deltabit {

// llama.cpp's tokenizer.ggml.pre for a family: "qwen35" for qwen35/qwen35moe, "qwen2" for qwen3 and
// qwen3next (whose tokenizers hash to the Qwen2 pre-tokeniser in convert_hf_to_gguf's table).
std::string_view tokenizer_pre_name(Arch arch);

// Error naming the file and the JSON field for a tokenizer that is not byte-level BPE or is malformed.
void write_tokenizer_gguf(const std::filesystem::path& tokenizer_json, const ModelConfig& config, gguf::Writer& writer);

}  // namespace deltabit
