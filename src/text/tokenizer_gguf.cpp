#include "text/tokenizer_gguf.h"

#include "core/error.h"
#include "formats/gguf.h"
#include "text/bpe_byte_alphabet.h"

#include <algorithm>
#include <unordered_map>

namespace deltabit::text {
namespace {

enum TokenType : int64_t { kNormal = 1, kUnknown = 2, kControl = 3, kUserDefined = 4, kUnused = 5, kByte = 6 };

struct PreTokenizerEntry {
    std::string_view name;
    std::string_view pattern;
    bool nfc;  // the Hugging Face file of this family normalises to NFC first
};

// llama.cpp's names for the pre-tokenisers of the families deltabit runs.
constexpr PreTokenizerEntry kPreTokenizers[] = {
    {"default", patterns::kGpt2, false},  {"gpt-2", patterns::kGpt2, false},
    {"gpt2", patterns::kGpt2, false},     {"llama3", patterns::kLlama3, false},
    {"llama-bpe", patterns::kLlama3, false}, {"smaug-bpe", patterns::kLlama3, false},
    {"qwen2", patterns::kQwen2, true},    {"deepseek-r1-qwen", patterns::kQwen2, true},
    {"qwen35", patterns::kQwen35, true},
};

std::optional<int32_t> optional_id(const gguf::File& file, std::string_view key, size_t n_tokens) {
    if (!file.has(key)) return std::nullopt;
    const uint64_t id = file.require_u64(key);
    if (id >= n_tokens) fail("tokenizer: {}: {} = {} is outside the {} tokens", file.path(), key, id, n_tokens);
    return static_cast<int32_t>(id);
}

void read_gpt2(const gguf::File& file, const std::vector<std::string>& tokens,
               const std::vector<int64_t>& types, TokenizerSpec& spec) {
    const std::string pre = file.get_string("tokenizer.ggml.pre", "default");
    const auto entry = std::find_if(std::begin(kPreTokenizers), std::end(kPreTokenizers),
                                    [&](const PreTokenizerEntry& e) { return e.name == pre; });
    if (entry == std::end(kPreTokenizers)) {
        fail("tokenizer: {}: tokenizer.ggml.pre = {:?} is not a pre-tokeniser deltabit knows "
             "(qwen2, qwen35, llama-bpe, gpt-2, ...)", file.path(), pre);
    }
    if (entry->nfc) spec.normalizer.push_back({NormalizerStep::Kind::Unicode, NormalForm::NFC, {}, {}});
    spec.split_rules.push_back({std::string(entry->pattern), true, SplitBehavior::Isolated});
    spec.decoder.byte_level = true;

    BpeModelSpec& bpe = spec.model;
    bpe.units = BpeUnits::Bytes;
    bpe.keys.resize(tokens.size());
    for (size_t id = 0; id < tokens.size(); ++id) {
        if (types[id] != kNormal) continue;
        const std::string bytes = byte_level_to_bytes(tokens[id]);
        if (bytes_to_byte_level(bytes) == tokens[id]) bpe.keys[id] = bytes;
    }
    const std::vector<std::string> merges = file.require_string_array("tokenizer.ggml.merges");
    bpe.merges.reserve(merges.size());
    for (size_t i = 0; i < merges.size(); ++i) {
        const size_t space = merges[i].find(' ');
        if (space == std::string::npos) {
            fail("tokenizer: {}: tokenizer.ggml.merges[{}] {:?} has no space", file.path(), i, merges[i]);
        }
        bpe.merges.emplace_back(byte_level_to_bytes(merges[i].substr(0, space)),
                                byte_level_to_bytes(merges[i].substr(space + 1)));
    }
}

// SentencePiece BPE: the pair to merge next is the one whose concatenation has the highest score.
// Expressed as merges so one BPE engine serves both: every way to cut a token into two tokens is a
// merge, ranked by the token's score (equal scores share a rank; the leftmost pair wins then).
void read_llama(const gguf::File& file, const std::vector<std::string>& tokens,
                const std::vector<int64_t>& types, TokenizerSpec& spec) {
    const std::vector<float> scores = file.require_f32_array("tokenizer.ggml.scores");
    if (scores.size() != tokens.size()) {
        fail("tokenizer: {}: {} scores for {} tokens", file.path(), scores.size(), tokens.size());
    }
    const std::string_view space = "\xE2\x96\x81";  // ▁, SentencePiece's visible space
    spec.normalizer.push_back({NormalizerStep::Kind::Replace, NormalForm::NFC, " ", std::string(space)});
    if (file.get_bool("tokenizer.ggml.add_space_prefix", true)) {
        spec.normalizer.push_back({NormalizerStep::Kind::Prepend, NormalForm::NFC, {}, std::string(space)});
    }
    spec.decoder.replacements.emplace_back(std::string(space), " ");

    BpeModelSpec& bpe = spec.model;
    bpe.units = BpeUnits::Chars;
    bpe.keys.resize(tokens.size());
    std::unordered_map<std::string_view, int32_t> ids;
    for (size_t id = 0; id < tokens.size(); ++id) {
        if (types[id] == kControl || types[id] == kUserDefined || tokens[id].empty()) continue;
        bpe.keys[id] = tokens[id];
        ids.emplace(tokens[id], static_cast<int32_t>(id));
        if (types[id] == kByte) bpe.byte_fallback = spec.decoder.byte_fallback = true;
    }
    std::vector<float> distinct(scores);
    std::sort(distinct.begin(), distinct.end(), std::greater<>());
    distinct.erase(std::unique(distinct.begin(), distinct.end()), distinct.end());
    for (const auto& [text, id] : ids) {
        if (types[id] == kByte) continue;
        for (size_t cut = 1; cut < text.size(); ++cut) {
            if ((static_cast<uint8_t>(text[cut]) & 0xC0) == 0x80) continue;  // inside a character
            if (!ids.count(text.substr(0, cut)) || !ids.count(text.substr(cut))) continue;
            bpe.merges.emplace_back(std::string(text.substr(0, cut)), std::string(text.substr(cut)));
            const auto rank = std::lower_bound(distinct.begin(), distinct.end(), scores[id], std::greater<>()) -
                              distinct.begin();
            bpe.merge_ranks.push_back(static_cast<int32_t>(rank));
        }
    }
    bpe.unk_id = optional_id(file, "tokenizer.ggml.unknown_token_id", tokens.size());
}

}  // namespace

TokenizerSpec spec_from_gguf(const gguf::File& file) {
    TokenizerSpec spec;
    spec.source = file.path();
    const std::string model = file.require_string("tokenizer.ggml.model");
    const std::vector<std::string> tokens = file.require_string_array("tokenizer.ggml.tokens");
    std::vector<int64_t> types(tokens.size(), kNormal);
    if (file.has("tokenizer.ggml.token_type")) {
        types = file.require_i64_array("tokenizer.ggml.token_type");
        if (types.size() != tokens.size()) {
            fail("tokenizer: {}: {} token types for {} tokens", file.path(), types.size(), tokens.size());
        }
    }
    if (model == "gpt2") read_gpt2(file, tokens, types, spec);
    else if (model == "llama") read_llama(file, tokens, types, spec);
    else fail("tokenizer: {}: tokenizer.ggml.model = {:?} is not supported (gpt2, llama)", file.path(), model);

    spec.token_strings = tokens;
    for (size_t id = 0; id < tokens.size(); ++id) {
        if (types[id] != kControl && types[id] != kUserDefined) continue;
        if (tokens[id].empty()) continue;
        AddedTokenSpec added;
        added.id = static_cast<int32_t>(id);
        added.content = tokens[id];
        added.special = types[id] == kControl;
        spec.added_tokens.push_back(std::move(added));
    }
    spec.bos_id = optional_id(file, "tokenizer.ggml.bos_token_id", tokens.size());
    spec.eos_id = optional_id(file, "tokenizer.ggml.eos_token_id", tokens.size());
    spec.pad_id = optional_id(file, "tokenizer.ggml.padding_token_id", tokens.size());
    // llama.cpp's default for add_bos_token is true only for SentencePiece vocabularies.
    if (spec.bos_id && file.get_bool("tokenizer.ggml.add_bos_token", model == "llama")) {
        spec.prefix_ids.push_back(*spec.bos_id);
    }
    if (spec.eos_id && file.get_bool("tokenizer.ggml.add_eos_token", false)) spec.suffix_ids.push_back(*spec.eos_id);
    return spec;
}

}  // namespace deltabit::text
