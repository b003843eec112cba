// The snapshot file as runtime/snapshot.h describes it, read and rebuilt independently of the writer's
// code, and the fixture of the refusal tests: a good file, and a live session (with an untouched twin)
// that every refused load must leave byte for byte as it was. Shared by test_snapshot.cpp and
// test_snapshot_checkpoints.cpp.
#pragma once

#include "engine_test_support.h"
#include "runtime/session.h"
#include "runtime/snapshot.h"

#include <gtest/gtest.h>

#include <unistd.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <memory>
#include <string>
#include <vector>

#if DELTABIT_HAVE_XXHASH
#define XXH_INLINE_ALL
#include <xxhash.h>

namespace deltabit::test {

inline std::filesystem::path temp_file(const std::string& name) {
    // The process id keeps tests that ctest runs side by side (one process each) off each other's files.
    return std::filesystem::path(::testing::TempDir()) /
           ("deltabit_snapshot_test_" + std::to_string(::getpid()) + "_" + name);
}

inline std::string read_bytes(const std::filesystem::path& file) {
    std::ifstream in(file, std::ios::binary);
    return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

inline void write_bytes(const std::filesystem::path& file, const std::string& bytes) {
    std::ofstream out(file, std::ios::binary | std::ios::trunc);
    out.write(bytes.data(), std::streamsize(bytes.size()));
}

inline uint64_t le(const std::string& b, uint64_t at, int n) {
    uint64_t v = 0;
    for (int i = 0; i < n; ++i) v |= uint64_t(uint8_t(b[at + uint64_t(i)])) << (8 * i);
    return v;
}

inline void put(std::string& out, uint64_t v, int n) {
    for (int i = 0; i < n; ++i) out.push_back(char(v >> (8 * i)));
}

// The file as snapshot.h describes it.
struct Layout {
    uint32_t version = 0;
    uint64_t header_bytes = 0;
    std::string header;
    int64_t position = 0;
    std::string ledger;  // position × 4 ids, then position flags
    struct Chunk {
        uint64_t at = 0, name_at = 0, length_at = 0, checksum_at = 0, data_at = 0, end = 0;
        std::string name, data;
    };
    std::vector<Chunk> chunks;
    uint64_t ledger_checksum_at() const { return 24 + header_bytes; }
    uint64_t ledger_at() const { return 32 + header_bytes; }
};

inline Layout parse(const std::string& b) {
    Layout l;
    l.version = uint32_t(le(b, 8, 4));
    l.header_bytes = le(b, 12, 4);
    l.header = b.substr(24, l.header_bytes);
    l.position = nlohmann::json::parse(l.header).at("position").get<int64_t>();
    l.ledger = b.substr(l.ledger_at(), size_t(l.position) * 5);
    uint64_t at = l.ledger_at() + uint64_t(l.position) * 5;
    while (at < b.size()) {
        Layout::Chunk c;
        c.at = at;
        const uint64_t name_bytes = le(b, at, 4);
        c.name_at = at + 4;
        c.name = b.substr(c.name_at, name_bytes);
        c.length_at = c.name_at + name_bytes;
        const uint64_t data_bytes = le(b, c.length_at, 8);
        c.checksum_at = c.length_at + 8;
        c.data_at = c.checksum_at + 8;
        c.data = b.substr(c.data_at, data_bytes);
        c.end = c.data_at + data_bytes;
        at = c.end;
        l.chunks.push_back(std::move(c));
    }
    return l;
}

inline uint64_t xxh3(const std::string& s) { return XXH3_64bits(s.data(), s.size()); }

// Writes `l` back with every checksum recomputed: what a well-meaning writer of a wrong file produces.
inline std::string build(const Layout& l) {
    std::string out = "DBSNAP";
    out.push_back('\0');
    out.push_back('\1');
    put(out, l.version, 4);
    put(out, l.header.size(), 4);
    put(out, xxh3(l.header), 8);
    out += l.header;
    put(out, xxh3(l.ledger), 8);
    out += l.ledger;
    for (const Layout::Chunk& c : l.chunks) {
        put(out, c.name.size(), 4);
        out += c.name;
        put(out, c.data.size(), 8);
        put(out, xxh3(c.name + c.data), 8);
        out += c.data;
    }
    return out;
}

inline bool same_ledger(const TokenLedger& a, const TokenLedger& b) {
    return std::equal(a.tokens().begin(), a.tokens().end(), b.tokens().begin(), b.tokens().end()) &&
           std::equal(a.generated().begin(), a.generated().end(), b.generated().begin(), b.generated().end());
}

class SnapshotRefusals : public ::testing::Test {
protected:
    void SetUp() override {
        model_ = std::make_unique<Model>(Model::load(fixture_path("qwen3_5_binary")));
        engine_ = make_cpu_engine(*model_);
        Session writer(*engine_, options_);
        writer.run_turn(test::random_tokens(40, 71), test::greedy_options(6));  // 45 tokens held
        good_ = temp_file("good");
        writer.save(good_);
        bytes_ = read_bytes(good_);
        layout_ = parse(bytes_);

        live_ = std::make_unique<Session>(*engine_, options_);
        twin_ = std::make_unique<Session>(*engine_, options_);
        live_->run_turn(live_prompt_, test::greedy_options(4));
        twin_->run_turn(live_prompt_, test::greedy_options(4));
        live_bytes_ = saved(*live_);
    }

    // Whatever a test refused, the live session then continues exactly like its twin.
    void TearDown() override {
        if (live_ && twin_) expect_live_continues_like_twin();
    }
    // One more turn on both (the held conversation plus two tokens): the same tokens, the same state.
    void expect_live_continues_like_twin() {
        std::vector<int32_t> p2(live_->ledger().tokens().begin(), live_->ledger().tokens().end());
        p2.push_back(9);
        p2.push_back(10);
        const TurnResult got = live_->run_turn(p2, test::greedy_options(40));
        const TurnResult want = twin_->run_turn(p2, test::greedy_options(40));
        EXPECT_EQ(got.generation.tokens, want.generation.tokens);
        EXPECT_EQ(saved(*live_), saved(*twin_));
    }

    std::string saved(const Session& s) {
        const std::filesystem::path f = temp_file("live_probe");
        s.save(f);
        return read_bytes(f);
    }

    enum Match { exact, prefix, contains };
    // Loads `bytes` into the live session: the message must be `want` (or start with it, or contain
    // it), and the session must be byte for byte what it was.
    void expect_refused(const std::string& bytes, const std::string& want, Match match = exact) {
        const std::filesystem::path f = temp_file("damaged");
        write_bytes(f, bytes);
        expect_refused_file(f, want, match);
    }
    void expect_refused_file(const std::filesystem::path& f, const std::string& want, Match match) {
        const std::string got = message_of([&] { live_->load(f); });
        if (match == prefix) EXPECT_EQ(got.substr(0, want.size()), want) << got;
        else if (match == contains) EXPECT_NE(got.find(want), std::string::npos) << got;
        else EXPECT_EQ(got, want);
        EXPECT_EQ(saved(*live_), live_bytes_) << "the live session changed after: " << got;
    }
    std::string damaged_name() const { return temp_file("damaged").string(); }

    SessionOptions options_{.sequence = {.max_positions = 1024, .kv_format = KvFormat::f32},
                            .checkpoints = {.interval = 16, .max_kept = 4}};
    std::unique_ptr<Model> model_;
    std::unique_ptr<Engine> engine_;
    std::filesystem::path good_;
    std::string bytes_;
    Layout layout_;
    const std::vector<int32_t> live_prompt_ = test::random_tokens(30, 72);
    std::unique_ptr<Session> live_, twin_;
    std::string live_bytes_;
};

}  // namespace deltabit::test

#endif
