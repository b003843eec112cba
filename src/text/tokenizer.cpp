#include "text/tokenizer.h"

#include "core/error.h"
#include "text/bpe_byte_alphabet.h"
#include "text/unicode.h"

#include <algorithm>

namespace deltabit::text {
namespace {

void replace_all(std::string& s, std::string_view from, std::string_view to) {
    if (from.empty() || s.find(from) == std::string::npos) return;
    std::string out;
    out.reserve(s.size());
    size_t pos = 0;
    while (true) {
        const size_t at = s.find(from, pos);
        if (at == std::string::npos) break;
        out.append(s, pos, at - pos).append(to);
        pos = at + from.size();
    }
    out.append(s, pos, std::string::npos);
    s = std::move(out);
}

// "<0x0A>" → 0x0A; SentencePiece byte-fallback tokens are spelled with two upper-case hex digits.
std::optional<uint8_t> parse_byte_token(std::string_view s) {
    if (s.size() != 6 || s.substr(0, 3) != "<0x" || s[5] != '>') return std::nullopt;
    auto hex = [](char c) -> int {
        if (c >= '0' && c <= '9') return c - '0';
        if (c >= 'A' && c <= 'F') return c - 'A' + 10;
        return -1;
    };
    const int hi = hex(s[3]), lo = hex(s[4]);
    if (hi < 0 || lo < 0) return std::nullopt;
    return static_cast<uint8_t>(hi * 16 + lo);
}

std::string decode_token_string(const DecoderSpec& decoder, std::string_view s) {
    if (decoder.byte_fallback) {
        if (const auto b = parse_byte_token(s)) return std::string(1, static_cast<char>(*b));
    }
    std::string out(s);
    for (const auto& [from, to] : decoder.replacements) replace_all(out, from, to);
    if (decoder.byte_level) out = byte_level_to_bytes(out);
    return out;
}

}  // namespace

Tokenizer::Tokenizer(TokenizerSpec spec)
    : spec_(std::move(spec)), model_(std::move(spec_.model)), pretokenizer_(spec_.split_rules) {
    size_t size = spec_.token_strings.size();
    for (const auto& t : spec_.added_tokens) {
        if (t.id < 0) fail("tokenizer: {}: added token {:?} has negative id {}", spec_.source, t.content, t.id);
        size = std::max(size, static_cast<size_t>(t.id) + 1);
    }
    spec_.token_strings.resize(size);
    special_.assign(size, false);
    for (const auto& t : spec_.added_tokens) {
        spec_.token_strings[t.id] = t.content;
        special_[t.id] = t.special;
        (t.normalized ? normalized_added_ : raw_added_).add(t);
    }
    token_bytes_.resize(size);
    for (size_t id = 0; id < size; ++id) {
        token_bytes_[id] = decode_token_string(spec_.decoder, spec_.token_strings[id]);
    }
    // Added tokens first: their content may shadow a vocabulary spelling of the same text.
    for (const auto& t : spec_.added_tokens) id_of_string_.emplace(spec_.token_strings[t.id], t.id);
    for (size_t id = 0; id < size; ++id) id_of_string_.emplace(spec_.token_strings[id], static_cast<int32_t>(id));
    for (int32_t id : spec_.prefix_ids) check_id(id);
    for (int32_t id : spec_.suffix_ids) check_id(id);
    for (auto id : {spec_.bos_id, spec_.eos_id, spec_.pad_id}) {
        if (id) check_id(*id);
    }
}

void Tokenizer::check_id(int32_t id) const {
    if (!is_valid(id)) {
        fail("tokenizer: {}: token id {} is outside the vocabulary (size {})", spec_.source, id, vocab_size());
    }
}

std::string_view Tokenizer::normalize(std::string_view text, std::string& storage) const {
    // Most text is ASCII, which no Unicode normal form changes: skip the copy when that is all the
    // normaliser would do (the encode profile showed the copy of a large input at ~6%).
    const bool only_unicode_forms =
        std::all_of(spec_.normalizer.begin(), spec_.normalizer.end(),
                    [](const NormalizerStep& s) { return s.kind == NormalizerStep::Kind::Unicode; });
    if (only_unicode_forms && std::all_of(text.begin(), text.end(), [](char c) { return static_cast<uint8_t>(c) < 0x80; })) {
        return text;
    }
    storage.assign(text);
    for (const NormalizerStep& step : spec_.normalizer) {
        switch (step.kind) {
            case NormalizerStep::Kind::Unicode: storage = unicode_normalize(storage, step.form); break;
            case NormalizerStep::Kind::Replace: replace_all(storage, step.pattern, step.content); break;
            case NormalizerStep::Kind::Prepend:
                if (!storage.empty()) storage.insert(0, step.content);
                break;
        }
    }
    return storage;
}

void Tokenizer::encode_normalized_segment(std::string_view text, std::vector<int32_t>& ids) const {
    if (text.empty()) return;
    std::string with_space;
    if (spec_.prefix_space && text.front() != ' ') {
        with_space.reserve(text.size() + 1);
        with_space.append(" ").append(text);
        text = with_space;
    }
    pretokenizer_.for_each_piece(text, [&](std::string_view piece) { model_.encode(piece, ids); });
}

void Tokenizer::encode_raw_segment(std::string_view text, const EncodeOptions& options,
                                   std::vector<int32_t>& ids) const {
    if (text.empty()) return;
    std::string storage;
    std::string_view rest = normalize(text, storage);
    while (!rest.empty()) {
        const auto match = normalized_added_.empty()
                               ? std::nullopt
                               : normalized_added_.find(rest, 0, options.parse_special);
        if (!match) {
            encode_normalized_segment(rest, ids);
            break;
        }
        encode_normalized_segment(rest.substr(0, match->begin), ids);
        ids.push_back(match->id);
        rest.remove_prefix(match->end);
    }
}

std::vector<int32_t> Tokenizer::encode(std::string_view input, const EncodeOptions& options) const {
    std::string repaired;
    std::string_view text = input;
    if (!spec_.accepts_raw_bytes && !utf8_is_valid(input)) {
        repaired = utf8_repair(input);
        text = repaired;
    }
    std::vector<int32_t> ids;
    ids.reserve(text.size() / 3 + 4);
    if (options.add_special) ids.insert(ids.end(), spec_.prefix_ids.begin(), spec_.prefix_ids.end());
    size_t pos = 0;
    while (pos < text.size()) {
        const auto match = raw_added_.empty() ? std::nullopt : raw_added_.find(text, pos, options.parse_special);
        if (!match) {
            encode_raw_segment(text.substr(pos), options, ids);
            break;
        }
        encode_raw_segment(text.substr(pos, match->begin - pos), options, ids);
        ids.push_back(match->id);
        pos = match->end;
    }
    if (options.add_special) ids.insert(ids.end(), spec_.suffix_ids.begin(), spec_.suffix_ids.end());
    return ids;
}

std::string Tokenizer::decode(std::span<const int32_t> ids, const DecodeOptions& options) const {
    std::string bytes;
    for (int32_t id : ids) {
        check_id(id);
        if (options.skip_special && special_[id]) continue;
        bytes.append(token_bytes_[id]);
    }
    return utf8_repair(bytes);
}

std::string_view Tokenizer::token_bytes(int32_t id) const {
    check_id(id);
    return token_bytes_[id];
}

std::string_view Tokenizer::token_string(int32_t id) const {
    check_id(id);
    return spec_.token_strings[id];
}

std::optional<int32_t> Tokenizer::token_to_id(std::string_view s) const {
    const auto it = id_of_string_.find(s);
    if (it == id_of_string_.end()) return std::nullopt;
    return it->second;
}

bool Tokenizer::is_special(int32_t id) const {
    check_id(id);
    return special_[id];
}

}  // namespace deltabit::text
