// Reading a Hugging Face tokenizer.json (and the tokenizer_config.json beside it, for the BOS/EOS/PAD
// names) into a TokenizerSpec. Supported: BPE models; NFC/NFD/NFKC/NFKD, Replace and Prepend
// normalisers; Split and ByteLevel pre-tokenisers; ByteLevel, Replace, ByteFallback and Fuse decoders;
// ByteLevel and TemplateProcessing post-processors. Anything else is refused with the JSON path of the
// unsupported part, so a new family fails loudly instead of tokenising almost right.
#pragma once

#include "text/tokenizer_spec.h"

#include <nlohmann/json_fwd.hpp>

#include <string>

namespace deltabit::text {

// `config` may be null (no tokenizer_config.json). `source` names the file in messages.
TokenizerSpec spec_from_hf_json(const nlohmann::json& tokenizer, const nlohmann::json* config,
                                const std::string& source);

// Reads PATH (a tokenizer.json) and, if present, tokenizer_config.json in the same folder.
TokenizerSpec load_hf_tokenizer_spec(const std::string& path);

}  // namespace deltabit::text
