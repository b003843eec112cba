// Finding added tokens in text: leftmost match first, and at one position the longest, as Hugging
// Face's Aho-Corasick (MatchKind::LeftmostLongest) does. A byte trie: added tokens are few
// (tens to a few thousand) and short, and most text positions are rejected by the first byte.
#pragma once

#include "text/tokenizer_spec.h"

#include <array>
#include <cstdint>
#include <optional>
#include <string_view>
#include <vector>

namespace deltabit::text {

class AddedTokenMatcher {
public:
    void add(const AddedTokenSpec& token);
    bool empty() const { return nodes_.size() <= 1; }

    struct Match {
        size_t begin;  // includes whitespace taken by lstrip
        size_t end;    // includes whitespace taken by rstrip
        int32_t id;
    };
    // The first match at or after `from`; special tokens count only when include_special.
    std::optional<Match> find(std::string_view text, size_t from, bool include_special) const;

private:
    struct Terminal {
        int32_t id = -1;
        bool special = false;
        bool lstrip = false;
        bool rstrip = false;
    };
    struct Node {
        std::vector<std::pair<uint8_t, int32_t>> edges;  // sorted by byte
        Terminal terminal;
    };
    int32_t child(int32_t node, uint8_t byte) const;

    std::vector<Node> nodes_{Node{}};
    std::array<bool, 256> first_byte_{};
};

}  // namespace deltabit::text
