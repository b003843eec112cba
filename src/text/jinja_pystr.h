// Python str semantics over UTF-8 strings, for the Jinja interpreter.
//
// Chat templates are written for Python, where a str is a sequence of code points: len("é") is 1,
// "héllo"[1] is "é", and [::-1] reverses characters. These helpers give the same answers on UTF-8
// bytes. Ill-formed UTF-8 is read as U+FFFD per maximal subpart (text/unicode.h), which Python can
// never hold — JSON input is always well-formed, so this only matters for hand-built values.
//
// Case mapping uses utf8proc's simple (one-to-one) mappings; Python applies the full SpecialCasing
// table, so the few characters that grow ("ß".upper() == "SS" in Python) stay unchanged here.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace deltabit::text::jinja::pystr {

std::u32string decode(std::string_view utf8);
std::string encode(std::u32string_view code_points);

// len(s): code points.
size_t length(std::string_view s);

// str.isspace() of one character: the Unicode White_Space characters Python counts, which include
// U+001C..U+001F and U+0085 but not U+FEFF.
bool is_space(char32_t c);

// str.strip/lstrip/rstrip; `chars` = nullopt strips whitespace, otherwise any of the given characters.
std::string strip(std::string_view s, const std::optional<std::string>& chars, bool left, bool right);

// str.split(sep=None, maxsplit=-1) and str.rsplit: sep = nullopt splits on runs of whitespace and
// drops empty parts. An empty sep is a ValueError, as in Python.
std::vector<std::string> split(std::string_view s, const std::optional<std::string>& sep, int64_t maxsplit);
std::vector<std::string> rsplit(std::string_view s, const std::optional<std::string>& sep, int64_t maxsplit);

std::vector<std::string> splitlines(std::string_view s, bool keepends);

// str.replace(old, new, count=-1); an empty `old` inserts `new` around every code point.
std::string replace(std::string_view s, std::string_view old_part, std::string_view new_part, int64_t count);

std::string upper(std::string_view s);
std::string lower(std::string_view s);
std::string title(std::string_view s);       // str.title()
std::string capitalize(std::string_view s);  // str.capitalize(): first titlecased, rest lowercased

// str.find / str.count in code points; -1 when absent.
int64_t find(std::string_view s, std::string_view sub);
int64_t count(std::string_view s, std::string_view sub);

// Python's slice.indices(len) followed by the walk: the positions s[start:stop:step] visits.
// step 0 is a ValueError ("slice step cannot be zero").
std::vector<int64_t> slice_positions(int64_t length, std::optional<int64_t> start, std::optional<int64_t> stop,
                                     std::optional<int64_t> step);

// Python index normalisation: -1 is the last element; nullopt when out of range.
std::optional<size_t> normalize_index(int64_t index, size_t length);

}  // namespace deltabit::text::jinja::pystr
