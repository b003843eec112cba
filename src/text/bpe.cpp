#include "text/bpe.h"

#include "core/error.h"
#include "text/unicode.h"

#include <fmt/format.h>

#include <algorithm>

namespace deltabit::text {
namespace {

uint64_t pair_key(int32_t left, int32_t right) {
    return (static_cast<uint64_t>(static_cast<uint32_t>(left)) << 32) | static_cast<uint32_t>(right);
}

// One candidate merge in the queue. Entries go stale when a neighbour merges first; they are checked
// against the current symbols when popped instead of being removed from the heap.
struct Candidate {
    int32_t rank;
    int32_t pos;        // left symbol
    int32_t left_id;    // ids the pair had when queued
    int32_t right_id;
    bool operator>(const Candidate& o) const { return rank != o.rank ? rank > o.rank : pos > o.pos; }
};

struct Symbol {
    int32_t id;
    int32_t prev;  // -1: none
    int32_t next;  // -1: none
};

}  // namespace

BpeModel::BpeModel(BpeModelSpec spec)
    : units_(spec.units),
      byte_fallback_(spec.byte_fallback),
      unk_id_(spec.unk_id),
      fuse_unk_(spec.fuse_unk),
      ignore_merges_(spec.ignore_merges) {
    ids_.reserve(spec.keys.size());
    for (size_t id = 0; id < spec.keys.size(); ++id) {
        if (spec.keys[id].empty()) continue;
        // Duplicate keys happen in real files (two spellings that decode to the same bytes); the lowest
        // id wins, like a JSON object read in order would keep the first.
        ids_.emplace(spec.keys[id], static_cast<int32_t>(id));
    }
    for (int b = 0; b < 256; ++b) {
        std::optional<int32_t> id;
        if (units_ == BpeUnits::Bytes) id = find(std::string(1, static_cast<char>(b)));
        else id = find(fmt::format("<0x{:02X}>", b));
        byte_ids_[b] = id.value_or(-1);
    }
    if (!spec.merge_ranks.empty() && spec.merge_ranks.size() != spec.merges.size()) {
        fail("bpe: {} merge ranks for {} merges", spec.merge_ranks.size(), spec.merges.size());
    }
    merges_.reserve(spec.merges.size());
    for (size_t index = 0; index < spec.merges.size(); ++index) {
        const auto& [left, right] = spec.merges[index];
        const auto rank = spec.merge_ranks.empty() ? static_cast<int32_t>(index) : spec.merge_ranks[index];
        const auto l = find(left), r = find(right), m = find(left + right);
        if (!l || !r || !m) {
            fail("bpe: merge {} ({:?} + {:?}) names a token that is not in the vocabulary", index, left, right);
        }
        // A repeated pair keeps its first definition.
        merges_.emplace(pair_key(*l, *r), Merge{rank, *m});
    }
}

std::optional<int32_t> BpeModel::find(std::string_view key) const {
    const auto it = ids_.find(key);
    if (it == ids_.end()) return std::nullopt;
    return it->second;
}

const BpeModel::Merge* BpeModel::find_merge(int32_t left, int32_t right) const {
    const auto it = merges_.find(pair_key(left, right));
    return it == merges_.end() ? nullptr : &it->second;
}

uint64_t BpeModel::cache_hits() const {
    std::lock_guard lock(cache_->mutex);
    return cache_->hits;
}

void BpeModel::encode(std::string_view piece, std::vector<int32_t>& out) const {
    if (piece.size() > kCacheMaxPieceBytes) {
        encode_uncached(piece, out);
        return;
    }
    {
        std::lock_guard lock(cache_->mutex);
        const auto it = cache_->entries.find(piece);
        if (it != cache_->entries.end()) {
            ++cache_->hits;
            out.insert(out.end(), it->second.begin(), it->second.end());
            return;
        }
    }
    const size_t first = out.size();
    encode_uncached(piece, out);
    std::lock_guard lock(cache_->mutex);
    if (cache_->entries.size() >= kCacheMaxEntries) cache_->entries.clear();
    cache_->entries.emplace(std::string(piece), std::vector<int32_t>(out.begin() + static_cast<std::ptrdiff_t>(first), out.end()));
}

void BpeModel::initial_units(std::string_view piece, std::vector<int32_t>& ids) const {
    const int32_t unk = unk_id_.value_or(-1);
    auto push_unknown = [&] {
        if (unk < 0) return;  // no way to spell it: dropped, as Hugging Face does without an unk token
        if (fuse_unk_ && !ids.empty() && ids.back() == unk) return;
        ids.push_back(unk);
    };
    if (units_ == BpeUnits::Bytes) {
        for (char c : piece) {
            const int32_t id = byte_ids_[static_cast<uint8_t>(c)];
            if (id >= 0) ids.push_back(id);
            else push_unknown();
        }
        return;
    }
    size_t pos = 0;
    while (pos < piece.size()) {
        const DecodedCodePoint d = utf8_decode(piece, pos);
        const std::string_view ch = piece.substr(pos, d.length);
        pos += d.length;
        if (const auto id = find(ch)) {
            ids.push_back(*id);
            continue;
        }
        bool all_bytes = byte_fallback_;
        for (char c : ch) all_bytes = all_bytes && byte_ids_[static_cast<uint8_t>(c)] >= 0;
        if (all_bytes) {
            for (char c : ch) ids.push_back(byte_ids_[static_cast<uint8_t>(c)]);
            continue;
        }
        push_unknown();
    }
}

void BpeModel::encode_uncached(std::string_view piece, std::vector<int32_t>& out) const {
    if (ignore_merges_) {
        if (const auto id = find(piece)) {
            out.push_back(*id);
            return;
        }
    }
    thread_local std::vector<int32_t> unit_ids;
    thread_local std::vector<Symbol> symbols;
    thread_local std::vector<Candidate> heap;
    unit_ids.clear();
    initial_units(piece, unit_ids);
    if (unit_ids.size() <= 1) {
        out.insert(out.end(), unit_ids.begin(), unit_ids.end());
        return;
    }

    const auto n = static_cast<int32_t>(unit_ids.size());
    symbols.resize(unit_ids.size());
    for (int32_t i = 0; i < n; ++i) symbols[i] = {unit_ids[i], i - 1, i + 1 < n ? i + 1 : -1};

    // A binary min-heap on a reused vector (std::priority_queue cannot lend its storage back).
    heap.clear();
    const auto later = [](const Candidate& a, const Candidate& b) { return a > b; };
    auto consider = [&](int32_t pos) {
        const int32_t next = symbols[pos].next;
        if (next < 0) return;
        if (const Merge* m = find_merge(symbols[pos].id, symbols[next].id)) {
            heap.push_back({m->rank, pos, symbols[pos].id, symbols[next].id});
            std::push_heap(heap.begin(), heap.end(), later);
        }
    };
    for (int32_t i = 0; i + 1 < n; ++i) consider(i);

    while (!heap.empty()) {
        std::pop_heap(heap.begin(), heap.end(), later);
        const Candidate top = heap.back();
        heap.pop_back();
        Symbol& left = symbols[top.pos];
        if (left.id != top.left_id || left.next < 0) continue;  // merged away or changed since queued
        Symbol& right = symbols[left.next];
        if (right.id != top.right_id) continue;
        left.id = find_merge(left.id, right.id)->result;
        left.next = right.next;
        if (right.next >= 0) symbols[right.next].prev = top.pos;
        right.id = -1;  // dead: every queued entry that names it fails the id check above
        if (left.prev >= 0) consider(left.prev);
        consider(top.pos);
    }
    for (int32_t i = 0; i >= 0; i = symbols[i].next) out.push_back(symbols[i].id);
}

}  // namespace deltabit::text
