#include "text/tokenizer_added_tokens.h"

#include "core/error.h"

#include <algorithm>

namespace deltabit::text {
namespace {

// Unicode White_Space, as Rust's char::is_whitespace (what lstrip/rstrip use).
bool is_white_space(char32_t c) {
    return (c >= 0x09 && c <= 0x0D) || c == 0x20 || c == 0x85 || c == 0xA0 || c == 0x1680 ||
           (c >= 0x2000 && c <= 0x200A) || c == 0x2028 || c == 0x2029 || c == 0x202F || c == 0x205F ||
           c == 0x3000;
}

size_t strip_left(std::string_view text, size_t floor, size_t begin) {
    while (begin > floor) {
        size_t start = begin - 1;
        while (start > floor && (static_cast<uint8_t>(text[start]) & 0xC0) == 0x80) --start;
        const DecodedCodePoint d = utf8_decode(text, start);
        if (!d.valid || start + d.length != begin || !is_white_space(d.code_point)) break;
        begin = start;
    }
    return begin;
}

size_t strip_right(std::string_view text, size_t end) {
    while (end < text.size()) {
        const DecodedCodePoint d = utf8_decode(text, end);
        if (!d.valid || !is_white_space(d.code_point)) break;
        end += d.length;
    }
    return end;
}

}  // namespace

void AddedTokenMatcher::add(const AddedTokenSpec& token) {
    if (token.content.empty()) fail("tokenizer: added token {} has empty content", token.id);
    int32_t node = 0;
    for (char c : token.content) {
        const auto b = static_cast<uint8_t>(c);
        int32_t next = child(node, b);
        if (next < 0) {
            next = static_cast<int32_t>(nodes_.size());
            nodes_.emplace_back();
            auto& edges = nodes_[node].edges;
            edges.insert(std::lower_bound(edges.begin(), edges.end(), std::pair<uint8_t, int32_t>{b, 0}),
                         {b, next});
        }
        node = next;
    }
    // The same content twice: the first definition wins.
    if (nodes_[node].terminal.id < 0) {
        nodes_[node].terminal = {token.id, token.special, token.lstrip, token.rstrip};
    }
    first_byte_[static_cast<uint8_t>(token.content[0])] = true;
}

int32_t AddedTokenMatcher::child(int32_t node, uint8_t byte) const {
    const auto& edges = nodes_[node].edges;
    const auto it = std::lower_bound(edges.begin(), edges.end(), std::pair<uint8_t, int32_t>{byte, 0});
    return it != edges.end() && it->first == byte ? it->second : -1;
}

std::optional<AddedTokenMatcher::Match> AddedTokenMatcher::find(std::string_view text, size_t from,
                                                               bool include_special) const {
    for (size_t pos = from; pos < text.size(); ++pos) {
        if (!first_byte_[static_cast<uint8_t>(text[pos])]) continue;
        int32_t node = 0;
        const Terminal* best = nullptr;
        size_t best_end = 0;
        for (size_t i = pos; i < text.size(); ++i) {
            node = child(node, static_cast<uint8_t>(text[i]));
            if (node < 0) break;
            const Terminal& t = nodes_[node].terminal;
            if (t.id >= 0 && (include_special || !t.special)) {
                best = &t;
                best_end = i + 1;
            }
        }
        if (!best) continue;
        Match m{pos, best_end, best->id};
        if (best->lstrip) m.begin = strip_left(text, from, m.begin);
        if (best->rstrip) m.end = strip_right(text, m.end);
        return m;
    }
    return std::nullopt;
}

}  // namespace deltabit::text
