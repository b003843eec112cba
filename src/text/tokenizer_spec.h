// A tokenizer as data. Loaders (Hugging Face tokenizer.json, GGUF metadata, the byte tokenizer) fill
// one of these; Tokenizer compiles it. Nothing past this struct knows which file a tokenizer came from.
#pragma once

#include "text/bpe.h"
#include "text/pretokenize.h"
#include "text/unicode.h"

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace deltabit::text {

// A token matched in the text before any splitting ("<|im_start|>", "<think>").
struct AddedTokenSpec {
    int32_t id = 0;
    std::string content;
    bool special = false;     // control token: skippable on decode, not matched when parse_special=false
    bool normalized = false;  // matched in normalised text rather than in the raw input
    bool lstrip = false;      // also swallows whitespace on its left
    bool rstrip = false;      // ... and on its right
};

struct NormalizerStep {
    enum class Kind { Unicode, Replace, Prepend };
    Kind kind = Kind::Unicode;
    NormalForm form = NormalForm::NFC;  // Unicode
    std::string pattern;                // Replace: literal text to find
    std::string content;                // Replace: replacement; Prepend: prefix
};

// How a token's vocabulary string becomes bytes on decode.
struct DecoderSpec {
    bool byte_level = false;     // GPT-2 alphabet → bytes
    bool byte_fallback = false;  // "<0xXX>" → that byte
    std::vector<std::pair<std::string, std::string>> replacements;  // e.g. "▁" → " ", in order
};

struct TokenizerSpec {
    std::string source;  // file it came from, for messages

    BpeModelSpec model;
    std::vector<std::string> token_strings;  // by id: the spelling in the file (shown by --pieces)
    std::vector<AddedTokenSpec> added_tokens;

    std::vector<NormalizerStep> normalizer;
    std::vector<SplitRule> split_rules;
    bool prefix_space = false;  // ByteLevel add_prefix_space: " " before each segment not starting with one

    DecoderSpec decoder;

    // What add_special puts around a sequence (TemplateProcessing's single template).
    std::vector<int32_t> prefix_ids;
    std::vector<int32_t> suffix_ids;

    std::optional<int32_t> bos_id;
    std::optional<int32_t> eos_id;
    std::optional<int32_t> pad_id;

    // Byte tokenizers take any bytes; everything else repairs invalid UTF-8 first.
    bool accepts_raw_bytes = false;
};

}  // namespace deltabit::text
