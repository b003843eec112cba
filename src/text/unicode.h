// UTF-8 and Unicode helpers for the text pipeline: decoding one code point, repairing invalid input,
// and Unicode normalisation through utf8proc.
//
// Invalid UTF-8 has one defined meaning everywhere in deltabit: each maximal subpart of an ill-formed
// sequence becomes one U+FFFD (Unicode §3.9 "substitution of maximal subparts", the WHATWG encoding
// standard's decoder). Node's Buffer.toString('utf8') does the same, which is why the tokenizer
// references can be fed raw bytes and still agree with us.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace deltabit::text {

inline constexpr char32_t kReplacementChar = 0xFFFD;
inline constexpr std::string_view kReplacementUtf8 = "\xEF\xBF\xBD";

// Result of decoding at one position. `length` is the number of bytes consumed (>= 1 unless the
// input is empty). For an ill-formed sequence `valid` is false, `code_point` is U+FFFD and `length`
// covers the maximal subpart, so decoding in a loop never stalls and never skips a valid start byte.
struct DecodedCodePoint {
    char32_t code_point = 0;
    uint32_t length = 0;
    bool valid = false;
};

DecodedCodePoint utf8_decode(std::string_view bytes, size_t pos);

// How many bytes [pos, end) form a *prefix* of a well-formed sequence that more bytes could complete
// (0 when bytes[pos..] is complete, ill-formed, or empty). Used by the streaming decoder.
size_t utf8_incomplete_tail(std::string_view bytes);

bool utf8_is_valid(std::string_view bytes);

// Replaces every maximal ill-formed subpart with U+FFFD; valid input comes back unchanged.
std::string utf8_repair(std::string_view bytes);

void utf8_append(std::string& out, char32_t code_point);

enum class NormalForm { NFC, NFD, NFKC, NFKD };

// Normalises valid UTF-8 (callers repair first). Pure-ASCII input is returned as is without a call
// into utf8proc: every normal form leaves ASCII unchanged, and most text in a prompt is ASCII.
std::string unicode_normalize(std::string_view valid_utf8, NormalForm form);

}  // namespace deltabit::text
