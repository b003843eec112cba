// The tokenizer the engine uses: text → ids and ids → bytes, built from a TokenizerSpec.
//
// encode: repair invalid UTF-8 (U+FFFD) → cut out added tokens found in the raw text → normalise each
// remaining segment → cut out added tokens that match normalised text → pre-tokenise → BPE each piece.
// decode: each id has a fixed byte string (token_bytes); a sequence decodes to their concatenation,
// made valid UTF-8 at the end. Streaming decode is Utf8StreamDecoder over token_bytes.
//
// encode and decode are const and safe to call from several threads at once.
#pragma once

#include "text/bpe.h"
#include "text/pretokenize.h"
#include "text/tokenizer_added_tokens.h"
#include "text/tokenizer_spec.h"

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace deltabit::text {

struct EncodeOptions {
    bool add_special = false;   // put the file's prefix/suffix tokens (e.g. BOS) around the ids
    bool parse_special = true;  // match special-token strings in the text (Hugging Face's default);
                                // false for untrusted text. Ordinary added tokens match either way.
};

struct DecodeOptions {
    bool skip_special = false;  // leave special (control) tokens out
};

class Tokenizer {
public:
    explicit Tokenizer(TokenizerSpec spec);

    std::vector<int32_t> encode(std::string_view text, const EncodeOptions& options = {}) const;
    std::string decode(std::span<const int32_t> ids, const DecodeOptions& options = {}) const;

    // The bytes one token contributes to decoded text (may be part of a UTF-8 character).
    std::string_view token_bytes(int32_t id) const;
    // The token's spelling in the file it came from ("Ġhello", "▁the", "<|im_end|>").
    std::string_view token_string(int32_t id) const;
    std::optional<int32_t> token_to_id(std::string_view token_string) const;

    bool is_special(int32_t id) const;
    bool is_valid(int32_t id) const { return id >= 0 && static_cast<size_t>(id) < token_bytes_.size(); }
    size_t vocab_size() const { return token_bytes_.size(); }

    std::optional<int32_t> bos_id() const { return spec_.bos_id; }
    std::optional<int32_t> eos_id() const { return spec_.eos_id; }
    std::optional<int32_t> pad_id() const { return spec_.pad_id; }
    const std::string& source() const { return spec_.source; }
    const BpeModel& model() const { return model_; }

private:
    void encode_normalized_segment(std::string_view text, std::vector<int32_t>& ids) const;
    void encode_raw_segment(std::string_view text, const EncodeOptions& options, std::vector<int32_t>& ids) const;
    // The normalised text: a view of `text` itself when normalising cannot change it, else of `storage`.
    std::string_view normalize(std::string_view text, std::string& storage) const;
    void check_id(int32_t id) const;

    TokenizerSpec spec_;
    BpeModel model_;
    Pretokenizer pretokenizer_;
    AddedTokenMatcher raw_added_;         // normalized=false tokens, matched before normalisation
    AddedTokenMatcher normalized_added_;  // normalized=true tokens, matched after
    std::vector<std::string> token_bytes_;
    std::vector<bool> special_;
    // Views into spec_.token_strings: stable, since moving a vector keeps its buffer and a Tokenizer
    // cannot be copied.
    std::unordered_map<std::string_view, int32_t> id_of_string_;
};

}  // namespace deltabit::text
