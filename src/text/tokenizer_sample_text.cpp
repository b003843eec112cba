#include "text/tokenizer_sample_text.h"

#include <iterator>
#include <string_view>

namespace deltabit::text {
namespace {

constexpr std::string_view kWords[] = {
    "the", "of", "and", "to", "in", "a", "is", "that", "for", "it", "as", "was", "with", "be", "by",
    "on", "not", "he", "this", "are", "or", "his", "from", "at", "which", "but", "have", "an", "had",
    "they", "you", "were", "their", "one", "all", "we", "can", "her", "has", "there", "been", "if",
    "more", "when", "will", "would", "who", "so", "no", "time", "people", "year", "way", "day", "man",
    "thing", "woman", "life", "child", "world", "school", "state", "family", "student", "group",
    "country", "problem", "hand", "part", "place", "case", "week", "company", "system", "program",
    "question", "work", "government", "number", "night", "point", "home", "water", "room", "mother",
    "area", "money", "story", "fact", "month", "lot", "right", "study", "book", "eye", "job", "word",
    "business", "issue", "side", "kind", "head", "house", "service", "friend", "father", "power",
    "hour", "game", "line", "end", "member", "law", "car", "city", "community", "name", "president",
    "team", "minute", "idea", "kid", "body", "information", "back", "parent", "face", "others",
    "level", "office", "door", "health", "person", "art", "war", "history", "party", "result",
    "change", "morning", "reason", "research", "girl", "guy", "moment", "air", "teacher", "force",
    "education", "quickly", "however", "although", "understand", "remember", "important", "different",
    "small", "large", "national", "young", "early", "political", "possible", "public",
};
constexpr std::string_view kContractions[] = {"don't", "it's", "we're", "I'll",
                                                           "they've", "she'd", "can't", "I'm"};

// SplitMix-style generator written out here so the bytes do not depend on a standard library's
// distribution implementation.
struct Rng {
    uint64_t state;
    uint32_t next() {
        state += 0x9E3779B97F4A7C15ull;
        uint64_t z = state;
        z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
        z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
        return static_cast<uint32_t>((z ^ (z >> 31)) >> 32);
    }
    uint32_t below(uint32_t n) { return next() % n; }
};

}  // namespace

std::string sample_english_text(size_t bytes, uint32_t seed) {
    Rng rng{seed * 0x100000001B3ull + 1};
    std::string out;
    out.reserve(bytes + 256);
    size_t sentences_in_paragraph = 0;
    while (out.size() < bytes) {
        const uint32_t words = 6 + rng.below(18);
        for (uint32_t w = 0; w < words; ++w) {
            std::string word;
            const uint32_t roll = rng.below(100);
            if (roll < 3) word = kContractions[rng.below(std::size(kContractions))];
            else if (roll < 5) word = std::to_string(rng.below(10000));
            else if (roll < 6) word = std::to_string(1900 + rng.below(126)) + "-0" + std::to_string(1 + rng.below(9)) + "-" + std::to_string(10 + rng.below(18));
            else word = kWords[rng.below(std::size(kWords))];
            if (w == 0 && word[0] >= 'a' && word[0] <= 'z') word[0] = static_cast<char>(word[0] - 'a' + 'A');
            if (w > 0) out.push_back(' ');
            if (rng.below(60) == 0) word = "\"" + word + "\"";
            out += word;
            if (w + 1 < words && rng.below(12) == 0) out.push_back(',');
        }
        const uint32_t end = rng.below(20);
        out.push_back(end == 0 ? '?' : end == 1 ? '!' : '.');
        if (++sentences_in_paragraph >= 3 + rng.below(5)) {
            out += "\n\n";
            sentences_in_paragraph = 0;
        } else {
            out.push_back(' ');
        }
    }
    out.resize(bytes);
    return out;
}

}  // namespace deltabit::text
