// GPT-2's byte-level alphabet: every byte value gets a printable code point so that vocabulary files
// can be JSON text. Bytes that are printable Latin-1 ('!'..'~', '¡'..'¬', '®'..'ÿ') map to themselves;
// the other 68 map, in byte order, to U+0100, U+0101, ... (so ' ' is 'Ġ' U+0120, '\n' is 'Ċ' U+010A).
// deltabit works on raw bytes internally; this mapping is only used to read and print vocabularies.
#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace deltabit::text {

// The code point that stands for byte b in a byte-level vocabulary.
char32_t byte_to_alphabet(uint8_t b);

// The byte a code point stands for, or nullopt when it is not part of the alphabet.
std::optional<uint8_t> alphabet_to_byte(char32_t code_point);

// A byte-level vocabulary string back to raw bytes. Code points outside the alphabet are kept as
// their UTF-8 (this is also what Hugging Face's ByteLevel decoder does with them).
std::string byte_level_to_bytes(std::string_view vocab_string);

// Raw bytes to the byte-level vocabulary spelling ("Ġhello" for " hello").
std::string bytes_to_byte_level(std::string_view bytes);

}  // namespace deltabit::text
