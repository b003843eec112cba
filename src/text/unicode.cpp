#include "text/unicode.h"

#include "core/error.h"

#include <utf8proc.h>

#include <cstdlib>
#include <memory>

namespace deltabit::text {
namespace {

// Well-formed UTF-8 byte sequences, Unicode Table 3-7: the second byte's range depends on the lead
// byte (this is what excludes overlongs, surrogates and code points past U+10FFFF).
struct LeadInfo {
    uint8_t length;       // 0 = not a lead byte
    uint8_t second_low;
    uint8_t second_high;
};

constexpr LeadInfo lead_info(uint8_t b) {
    if (b < 0x80) return {1, 0, 0};
    if (b < 0xC2) return {0, 0, 0};
    if (b < 0xE0) return {2, 0x80, 0xBF};
    if (b == 0xE0) return {3, 0xA0, 0xBF};
    if (b < 0xED) return {3, 0x80, 0xBF};
    if (b == 0xED) return {3, 0x80, 0x9F};
    if (b < 0xF0) return {3, 0x80, 0xBF};
    if (b == 0xF0) return {4, 0x90, 0xBF};
    if (b < 0xF4) return {4, 0x80, 0xBF};
    if (b == 0xF4) return {4, 0x80, 0x8F};
    return {0, 0, 0};
}

bool is_continuation(uint8_t b) { return (b & 0xC0) == 0x80; }

}  // namespace

DecodedCodePoint utf8_decode(std::string_view bytes, size_t pos) {
    if (pos >= bytes.size()) return {0, 0, false};
    const auto* p = reinterpret_cast<const uint8_t*>(bytes.data()) + pos;
    const size_t avail = bytes.size() - pos;
    const LeadInfo info = lead_info(p[0]);
    if (info.length == 1) return {p[0], 1, true};
    if (info.length == 0) return {kReplacementChar, 1, false};
    // Walk the continuation bytes; the first one that does not fit ends the maximal subpart.
    char32_t cp = p[0] & (info.length == 2 ? 0x1F : info.length == 3 ? 0x0F : 0x07);
    for (uint32_t i = 1; i < info.length; ++i) {
        if (i >= avail) return {kReplacementChar, i, false};
        const uint8_t b = p[i];
        const bool fits = i == 1 ? (b >= info.second_low && b <= info.second_high) : is_continuation(b);
        if (!fits) return {kReplacementChar, i, false};
        cp = (cp << 6) | (b & 0x3F);
    }
    return {cp, info.length, true};
}

size_t utf8_incomplete_tail(std::string_view bytes) {
    // A lead byte can be at most 3 bytes before the end and still be waiting for more.
    const size_t n = bytes.size();
    for (size_t back = 1; back <= 3 && back <= n; ++back) {
        const auto b = static_cast<uint8_t>(bytes[n - back]);
        if (is_continuation(b)) continue;
        const LeadInfo info = lead_info(b);
        if (info.length <= back) return 0;  // ASCII, invalid, or a sequence already complete
        // The bytes seen so far must be a valid prefix, else they are ill-formed now, not incomplete.
        const DecodedCodePoint d = utf8_decode(bytes, n - back);
        return d.length == back ? back : 0;
    }
    return 0;
}

bool utf8_is_valid(std::string_view bytes) {
    size_t pos = 0;
    while (pos < bytes.size()) {
        if (static_cast<uint8_t>(bytes[pos]) < 0x80) { ++pos; continue; }
        const DecodedCodePoint d = utf8_decode(bytes, pos);
        if (!d.valid) return false;
        pos += d.length;
    }
    return true;
}

std::string utf8_repair(std::string_view bytes) {
    if (utf8_is_valid(bytes)) return std::string(bytes);
    std::string out;
    out.reserve(bytes.size() + 8);
    size_t pos = 0;
    while (pos < bytes.size()) {
        const DecodedCodePoint d = utf8_decode(bytes, pos);
        if (d.valid) out.append(bytes.substr(pos, d.length));
        else out.append(kReplacementUtf8);
        pos += d.length;
    }
    return out;
}

void utf8_append(std::string& out, char32_t cp) {
    if (cp < 0x80) {
        out.push_back(static_cast<char>(cp));
    } else if (cp < 0x800) {
        out.push_back(static_cast<char>(0xC0 | (cp >> 6)));
        out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
    } else if (cp < 0x10000) {
        out.push_back(static_cast<char>(0xE0 | (cp >> 12)));
        out.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
        out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
    } else {
        out.push_back(static_cast<char>(0xF0 | (cp >> 18)));
        out.push_back(static_cast<char>(0x80 | ((cp >> 12) & 0x3F)));
        out.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
        out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
    }
}

std::string unicode_normalize(std::string_view text, NormalForm form) {
    bool ascii = true;
    for (char c : text) {
        if (static_cast<uint8_t>(c) >= 0x80) { ascii = false; break; }
    }
    if (ascii) return std::string(text);

    int options = UTF8PROC_STABLE;
    switch (form) {
        case NormalForm::NFC: options |= UTF8PROC_COMPOSE; break;
        case NormalForm::NFD: options |= UTF8PROC_DECOMPOSE; break;
        case NormalForm::NFKC: options |= UTF8PROC_COMPOSE | UTF8PROC_COMPAT; break;
        case NormalForm::NFKD: options |= UTF8PROC_DECOMPOSE | UTF8PROC_COMPAT; break;
    }
    utf8proc_uint8_t* result = nullptr;
    const utf8proc_ssize_t n = utf8proc_map(reinterpret_cast<const utf8proc_uint8_t*>(text.data()),
                                            static_cast<utf8proc_ssize_t>(text.size()), &result,
                                            static_cast<utf8proc_option_t>(options));
    std::unique_ptr<utf8proc_uint8_t, decltype(&std::free)> owned(result, &std::free);
    if (n < 0) fail("unicode: normalisation failed: {}", utf8proc_errmsg(n));
    return std::string(reinterpret_cast<const char*>(result), static_cast<size_t>(n));
}

}  // namespace deltabit::text
