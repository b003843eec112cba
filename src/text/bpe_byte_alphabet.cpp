#include "text/bpe_byte_alphabet.h"

#include "text/unicode.h"

namespace deltabit::text {
namespace {

constexpr bool maps_to_itself(uint32_t b) {
    return (b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
}

struct Alphabet {
    std::array<char32_t, 256> forward{};
    // Every alphabet code point is below U+0144 (0x100 + 68 remapped bytes); -1 = not in alphabet.
    std::array<int16_t, 0x144> backward{};

    Alphabet() {
        backward.fill(-1);
        char32_t next_remapped = 0x100;
        for (uint32_t b = 0; b < 256; ++b) {
            forward[b] = maps_to_itself(b) ? b : next_remapped++;
            backward[forward[b]] = static_cast<int16_t>(b);
        }
    }
};

const Alphabet& alphabet() {
    static const Alphabet table;
    return table;
}

}  // namespace

char32_t byte_to_alphabet(uint8_t b) { return alphabet().forward[b]; }

std::optional<uint8_t> alphabet_to_byte(char32_t cp) {
    if (cp >= alphabet().backward.size()) return std::nullopt;
    const int16_t b = alphabet().backward[cp];
    if (b < 0) return std::nullopt;
    return static_cast<uint8_t>(b);
}

std::string byte_level_to_bytes(std::string_view s) {
    std::string out;
    out.reserve(s.size());
    size_t pos = 0;
    while (pos < s.size()) {
        const DecodedCodePoint d = utf8_decode(s, pos);
        const auto byte = d.valid ? alphabet_to_byte(d.code_point) : std::nullopt;
        if (byte) out.push_back(static_cast<char>(*byte));
        else out.append(s.substr(pos, d.length));
        pos += d.length;
    }
    return out;
}

std::string bytes_to_byte_level(std::string_view bytes) {
    std::string out;
    out.reserve(bytes.size() * 2);
    for (char c : bytes) utf8_append(out, byte_to_alphabet(static_cast<uint8_t>(c)));
    return out;
}

}  // namespace deltabit::text
