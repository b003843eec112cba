// Byte-pair encoding of one pre-tokenised piece: start from units (bytes, or UTF-8 characters), then
// repeatedly merge the adjacent pair with the lowest merge rank, leftmost first among equals, until no
// adjacent pair has a merge. Same result as Hugging Face's BPE model (dropout off).
//
// Vocabulary keys: in Bytes mode (byte-level vocabularies such as Qwen's and Llama-3's) every key is
// the token's raw bytes — the loader has already undone the GPT-2 alphabet — so encoding never builds
// "Ġ" strings. In Chars mode (SentencePiece-style vocabularies such as Gemma's) keys are the vocab
// strings themselves and a character missing from the vocabulary falls back to <0xXX> byte tokens.
#pragma once

#include <cstdint>
#include <cstring>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

namespace deltabit::text {

enum class BpeUnits { Bytes, Chars };

struct BpeModelSpec {
    BpeUnits units = BpeUnits::Bytes;
    std::vector<std::string> keys;  // by token id; an empty key is a hole (id used only by added tokens)
    std::vector<std::pair<std::string, std::string>> merges;  // as keys, best first
    // Rank of each merge; empty means its index. Equal ranks are allowed (SentencePiece scores tie)
    // and resolve to the leftmost pair.
    std::vector<int32_t> merge_ranks;
    bool byte_fallback = false;     // Chars mode: unknown characters become <0xXX> tokens
    std::optional<int32_t> unk_id;  // used when nothing else can spell a unit
    bool fuse_unk = false;          // consecutive unknown units become one unk
    bool ignore_merges = false;     // a piece that is itself a vocabulary entry is taken whole
};

class BpeModel {
public:
    explicit BpeModel(BpeModelSpec spec);

    // Appends the ids of one piece (non-empty, valid UTF-8 in Chars mode) to `out`.
    void encode(std::string_view piece, std::vector<int32_t>& out) const;

    std::optional<int32_t> find(std::string_view key) const;
    BpeUnits units() const { return units_; }

    // How many pieces were answered from the cache; the bench and a test read it to prove the cache
    // is used (STYLE 16).
    uint64_t cache_hits() const;

private:
    // Pieces are short (English averages ~5 bytes): a word-at-a-time multiply-mix hash costs a
    // fraction of std::hash's murmur loop, which the encode profile showed at ~7% of the time.
    struct StringHash {
        using is_transparent = void;
        size_t operator()(std::string_view s) const noexcept {
            uint64_t h = 0x9E3779B97F4A7C15ull ^ s.size();
            size_t i = 0;
            for (; i + 8 <= s.size(); i += 8) {
                uint64_t w;
                std::memcpy(&w, s.data() + i, 8);
                h = (h ^ w) * 0xBF58476D1CE4E5B9ull;
                h ^= h >> 29;
            }
            uint64_t tail = 0;
            std::memcpy(&tail, s.data() + i, s.size() - i);
            h = (h ^ tail) * 0x94D049BB133111EBull;
            return static_cast<size_t>(h ^ (h >> 32));
        }
    };
    struct Merge {
        int32_t rank;
        int32_t result;
    };

    void encode_uncached(std::string_view piece, std::vector<int32_t>& out) const;
    void initial_units(std::string_view piece, std::vector<int32_t>& ids) const;
    const Merge* find_merge(int32_t left, int32_t right) const;

    BpeUnits units_;
    bool byte_fallback_;
    std::optional<int32_t> unk_id_;
    bool fuse_unk_;
    bool ignore_merges_;
    std::unordered_map<std::string, int32_t, StringHash, std::equal_to<>> ids_;
    std::unordered_map<uint64_t, Merge> merges_;  // key: left id << 32 | right id
    int32_t byte_ids_[256];                       // Bytes: id of each single byte; Chars: of <0xXX>

    // Pieces repeat (words): most of English is answered from here. Bounded, cleared when full.
    // Behind a pointer so the model stays movable (a mutex is not).
    static constexpr size_t kCacheMaxEntries = 1 << 16;
    static constexpr size_t kCacheMaxPieceBytes = 64;
    struct PieceCache {
        std::mutex mutex;
        std::unordered_map<std::string, std::vector<int32_t>, StringHash, std::equal_to<>> entries;
        uint64_t hits = 0;
    };
    std::unique_ptr<PieceCache> cache_ = std::make_unique<PieceCache>();
};

}  // namespace deltabit::text
