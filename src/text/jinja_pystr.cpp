#include "text/jinja_pystr.h"

#include "text/jinja_error.h"
#include "text/unicode.h"

#include <utf8proc.h>

#include <algorithm>

namespace deltabit::text::jinja::pystr {

std::u32string decode(std::string_view utf8) {
    std::u32string out;
    out.reserve(utf8.size());
    for (size_t pos = 0; pos < utf8.size();) {
        DecodedCodePoint d = utf8_decode(utf8, pos);
        out.push_back(d.code_point);
        pos += d.length;
    }
    return out;
}

std::string encode(std::u32string_view code_points) {
    std::string out;
    out.reserve(code_points.size());
    for (char32_t c : code_points) utf8_append(out, c);
    return out;
}

size_t length(std::string_view s) {
    size_t n = 0;
    for (size_t pos = 0; pos < s.size(); ++n) pos += utf8_decode(s, pos).length;
    return n;
}

bool is_space(char32_t c) {
    switch (c) {
        case 0x09: case 0x0A: case 0x0B: case 0x0C: case 0x0D:
        case 0x1C: case 0x1D: case 0x1E: case 0x1F: case 0x20:
        case 0x85: case 0xA0: case 0x1680:
        case 0x2028: case 0x2029: case 0x202F: case 0x205F: case 0x3000:
            return true;
        default:
            return c >= 0x2000 && c <= 0x200A;
    }
}

std::string strip(std::string_view s, const std::optional<std::string>& chars, bool left, bool right) {
    std::u32string cps = decode(s);
    std::u32string set = chars ? decode(*chars) : std::u32string();
    auto strippable = [&](char32_t c) { return chars ? set.find(c) != std::u32string::npos : is_space(c); };
    size_t begin = 0, end = cps.size();
    if (left)
        while (begin < end && strippable(cps[begin])) ++begin;
    if (right)
        while (end > begin && strippable(cps[end - 1])) --end;
    return encode(std::u32string_view(cps).substr(begin, end - begin));
}

namespace {

std::vector<std::string> split_whitespace(std::u32string_view cps, int64_t maxsplit, bool from_right) {
    // Runs of whitespace separate words; after maxsplit splits the remainder (with its inner
    // whitespace, without the separating run) is the last word.
    std::vector<std::string> parts;
    if (!from_right) {
        size_t i = 0;
        while (i < cps.size()) {
            while (i < cps.size() && is_space(cps[i])) ++i;
            if (i == cps.size()) break;
            if (maxsplit >= 0 && static_cast<int64_t>(parts.size()) == maxsplit) {
                // CPython keeps the remainder's trailing whitespace (and rsplit its leading one).
                parts.push_back(encode(cps.substr(i)));
                break;
            }
            size_t start = i;
            while (i < cps.size() && !is_space(cps[i])) ++i;
            parts.push_back(encode(cps.substr(start, i - start)));
        }
        return parts;
    }
    size_t i = cps.size();
    while (i > 0) {
        while (i > 0 && is_space(cps[i - 1])) --i;
        if (i == 0) break;
        if (maxsplit >= 0 && static_cast<int64_t>(parts.size()) == maxsplit) {
            parts.push_back(encode(cps.substr(0, i)));
            break;
        }
        size_t end = i;
        while (i > 0 && !is_space(cps[i - 1])) --i;
        parts.push_back(encode(cps.substr(i, end - i)));
    }
    std::reverse(parts.begin(), parts.end());
    return parts;
}

}  // namespace

std::vector<std::string> split(std::string_view s, const std::optional<std::string>& sep, int64_t maxsplit) {
    if (!sep) return split_whitespace(decode(s), maxsplit, false);
    if (sep->empty()) value_error("empty separator");
    // A separator of valid UTF-8 can only match at code point boundaries, so bytes are enough.
    std::vector<std::string> parts;
    size_t start = 0;
    while (maxsplit < 0 || static_cast<int64_t>(parts.size()) < maxsplit) {
        size_t hit = s.find(*sep, start);
        if (hit == std::string_view::npos) break;
        parts.emplace_back(s.substr(start, hit - start));
        start = hit + sep->size();
    }
    parts.emplace_back(s.substr(start));
    return parts;
}

std::vector<std::string> rsplit(std::string_view s, const std::optional<std::string>& sep, int64_t maxsplit) {
    if (!sep) return split_whitespace(decode(s), maxsplit, true);
    if (sep->empty()) value_error("empty separator");
    std::vector<std::string> parts;
    size_t end = s.size();
    while (maxsplit < 0 || static_cast<int64_t>(parts.size()) < maxsplit) {
        if (end < sep->size()) break;
        size_t hit = s.rfind(*sep, end - sep->size());
        if (hit == std::string_view::npos) break;
        parts.emplace_back(s.substr(hit + sep->size(), end - hit - sep->size()));
        end = hit;
    }
    parts.emplace_back(s.substr(0, end));
    std::reverse(parts.begin(), parts.end());
    return parts;
}

std::vector<std::string> splitlines(std::string_view s, bool keepends) {
    // Python's line boundaries: \n \r \r\n \v \f \x1c \x1d \x1e \x85 \u2028 \u2029.
    std::u32string cps = decode(s);
    std::vector<std::string> lines;
    size_t start = 0;
    for (size_t i = 0; i < cps.size(); ++i) {
        char32_t c = cps[i];
        bool boundary = c == '\n' || c == '\r' || c == 0x0B || c == 0x0C || c == 0x1C || c == 0x1D ||
                        c == 0x1E || c == 0x85 || c == 0x2028 || c == 0x2029;
        if (!boundary) continue;
        size_t end = i;
        if (c == '\r' && i + 1 < cps.size() && cps[i + 1] == '\n') ++i;
        lines.push_back(encode(std::u32string_view(cps).substr(start, (keepends ? i + 1 : end) - start)));
        start = i + 1;
    }
    if (start < cps.size()) lines.push_back(encode(std::u32string_view(cps).substr(start)));
    return lines;
}

std::string replace(std::string_view s, std::string_view old_part, std::string_view new_part, int64_t count) {
    std::string out;
    if (old_part.empty()) {
        std::u32string cps = decode(s);
        int64_t done = 0;
        for (size_t i = 0; i <= cps.size(); ++i) {
            if (count < 0 || done < count) {
                out += new_part;
                ++done;
            }
            if (i < cps.size()) utf8_append(out, cps[i]);
        }
        return out;
    }
    size_t start = 0;
    int64_t done = 0;
    while (count < 0 || done < count) {
        size_t hit = s.find(old_part, start);
        if (hit == std::string_view::npos) break;
        out += s.substr(start, hit - start);
        out += new_part;
        start = hit + old_part.size();
        ++done;
    }
    out += s.substr(start);
    return out;
}

namespace {

template <typename Map>
std::string map_code_points(std::string_view s, Map map) {
    std::string out;
    out.reserve(s.size());
    for (size_t pos = 0; pos < s.size();) {
        DecodedCodePoint d = utf8_decode(s, pos);
        utf8_append(out, map(d.code_point));
        pos += d.length;
    }
    return out;
}

char32_t to_upper(char32_t c) { return static_cast<char32_t>(utf8proc_toupper(static_cast<utf8proc_int32_t>(c))); }
char32_t to_lower(char32_t c) { return static_cast<char32_t>(utf8proc_tolower(static_cast<utf8proc_int32_t>(c))); }
char32_t to_title(char32_t c) { return static_cast<char32_t>(utf8proc_totitle(static_cast<utf8proc_int32_t>(c))); }

bool is_cased(char32_t c) {
    utf8proc_category_t cat = utf8proc_category(static_cast<utf8proc_int32_t>(c));
    return cat == UTF8PROC_CATEGORY_LU || cat == UTF8PROC_CATEGORY_LL || cat == UTF8PROC_CATEGORY_LT;
}

}  // namespace

std::string upper(std::string_view s) { return map_code_points(s, to_upper); }
std::string lower(std::string_view s) { return map_code_points(s, to_lower); }

std::string title(std::string_view s) {
    bool previous_cased = false;
    return map_code_points(s, [&](char32_t c) {
        char32_t mapped = c;
        if (is_cased(c)) {
            mapped = previous_cased ? to_lower(c) : to_title(c);
            previous_cased = true;
        } else {
            previous_cased = false;
        }
        return mapped;
    });
}

std::string capitalize(std::string_view s) {
    bool first = true;
    return map_code_points(s, [&](char32_t c) {
        char32_t mapped = first ? to_title(c) : to_lower(c);
        first = false;
        return mapped;
    });
}

int64_t find(std::string_view s, std::string_view sub) {
    size_t hit = s.find(sub);
    if (hit == std::string_view::npos) return -1;
    return static_cast<int64_t>(length(s.substr(0, hit)));
}

int64_t count(std::string_view s, std::string_view sub) {
    if (sub.empty()) return static_cast<int64_t>(length(s)) + 1;
    int64_t n = 0;
    for (size_t pos = s.find(sub); pos != std::string_view::npos; pos = s.find(sub, pos + sub.size())) ++n;
    return n;
}

std::vector<int64_t> slice_positions(int64_t length, std::optional<int64_t> start, std::optional<int64_t> stop,
                                     std::optional<int64_t> step) {
    int64_t st = step.value_or(1);
    if (st == 0) value_error("slice step cannot be zero");
    // CPython's PySlice_AdjustIndices.
    auto adjust = [&](std::optional<int64_t> v, int64_t fallback) {
        if (!v) return fallback;
        int64_t i = *v;
        if (i < 0) {
            i += length;
            if (i < 0) i = st < 0 ? -1 : 0;
        } else if (i >= length) {
            i = st < 0 ? length - 1 : length;
        }
        return i;
    };
    int64_t b = adjust(start, st < 0 ? length - 1 : 0);
    int64_t e = adjust(stop, st < 0 ? -1 : length);
    std::vector<int64_t> positions;
    if (st > 0)
        for (int64_t i = b; i < e; i += st) positions.push_back(i);
    else
        for (int64_t i = b; i > e; i += st) positions.push_back(i);
    return positions;
}

std::optional<size_t> normalize_index(int64_t index, size_t length) {
    int64_t n = static_cast<int64_t>(length);
    if (index < 0) index += n;
    if (index < 0 || index >= n) return std::nullopt;
    return static_cast<size_t>(index);
}

}  // namespace deltabit::text::jinja::pystr
