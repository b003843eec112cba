// Snapshot files (runtime/snapshot.h): save → load → continue equals an uninterrupted session over 300
// generated tokens; every kind of damage is refused with its own message and leaves the live session
// exactly as it was. The file layout is re-derived from the format description (not from the writer's
// code: snapshot_test_support.h) and checked by rebuilding a written file byte for byte. The session's
// checkpoints in a snapshot, and version 1 files: test_snapshot_checkpoints.cpp.
#include "engine_test_support.h"
#include "runtime/session.h"
#include "runtime/snapshot.h"
#include "snapshot_test_support.h"

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include <cstdio>
#include <random>
#include <string>
#include <tuple>
#include <vector>

namespace deltabit {
namespace {

#if DELTABIT_HAVE_XXHASH

using namespace test;  // the file layout and the refusal fixture (snapshot_test_support.h)

// ---- round trip ----

class SnapshotRoundTrip : public ::testing::TestWithParam<std::tuple<test::Backend, KvFormat, bool>> {};

TEST_P(SnapshotRoundTrip, SaveLoadContinueEqualsUninterrupted) {
    const auto [backend, kv, sampled] = GetParam();
    // Two loads of the model and two engines: the snapshot crosses engines, as it does between runs.
    const std::unique_ptr<Engine> inner_a = test::make_engine(test::load_model("qwen3_5_binary"), backend);
    const std::unique_ptr<Engine> inner_b = test::make_engine(test::load_model("qwen3_5_binary"), backend);
    if (!inner_a) GTEST_SKIP() << "no CUDA on this machine";
    test::RecordingEngine engine_a(*inner_a), engine_b(*inner_b);
    const SessionOptions options{.sequence = {.max_positions = 1024, .kv_format = kv},
                                 .checkpoints = {.interval = 64, .max_kept = 4}};
    auto turn_options = [&](int64_t n, uint64_t seed) {
        return sampled ? test::sampled_options(n, seed) : test::greedy_options(n);
    };

    Session a(engine_a, options);
    const std::vector<int32_t> p1 = test::random_tokens(40, 61);
    const TurnResult t1 = a.run_turn(p1, turn_options(20, 7));
    const std::filesystem::path file =
        temp_file(fmt::format("roundtrip_{}_{}_{}", test::backend_label(backend), kv_format_name(kv), sampled));
    a.save(file);
    EXPECT_FALSE(std::filesystem::exists(std::filesystem::path(file.string() + ".tmp")));

    Session b(engine_b, options);
    b.load(file);
    EXPECT_TRUE(same_ledger(a.ledger(), b.ledger()));
    EXPECT_EQ(b.stats().position, 59);  // 40 + 20 − 1

    std::vector<int32_t> p2(a.ledger().tokens().begin(), a.ledger().tokens().end());
    p2.push_back(t1.generation.tokens.back());
    for (int32_t id : test::random_tokens(10, 62)) p2.push_back(id);
    engine_a.chosen_from.clear();
    const TurnResult ta = a.run_turn(p2, turn_options(300, 8));
    const TurnResult tb = b.run_turn(p2, turn_options(300, 8));
    ASSERT_EQ(ta.generation.tokens.size(), 300u);
    EXPECT_EQ(ta.generation.tokens, tb.generation.tokens);
    EXPECT_EQ(ta.reuse.reused, 59);
    EXPECT_EQ(tb.reuse.reused, 59);
    ASSERT_EQ(engine_a.chosen_from.size(), engine_b.chosen_from.size());
    for (size_t i = 0; i < engine_a.chosen_from.size(); ++i)
        ASSERT_TRUE(same_bits(engine_a.chosen_from[i], engine_b.chosen_from[i])) << "token " << i;
    EXPECT_TRUE(same_ledger(a.ledger(), b.ledger()));

    // Both now hold 368 tokens; their snapshots are the same bytes.
    const std::filesystem::path file_a = temp_file("after_a"), file_b = temp_file("after_b");
    a.save(file_a);
    b.save(file_b);
    const std::string bytes_a = read_bytes(file_a);
    EXPECT_EQ(bytes_a, read_bytes(file_b));
    std::printf("[measure] snapshot qwen3_5_binary %s %s: %zu bytes at 59 tokens, %zu bytes at %lld tokens\n",
                test::backend_label(backend).c_str(), std::string(kv_format_name(kv)).c_str(), size_t(std::filesystem::file_size(file)), bytes_a.size(),
                static_cast<long long>(a.stats().position));
    // The independent reading of the layout rebuilds the file exactly.
    EXPECT_EQ(build(parse(bytes_a)), bytes_a);
}

INSTANTIATE_TEST_SUITE_P(KvFormats, SnapshotRoundTrip,
                         ::testing::Combine(::testing::ValuesIn(test::kAllBackends),
                                            ::testing::ValuesIn(test::kAllKvFormats), ::testing::Bool()),
                         [](const auto& info) {
                             return test::backend_label(std::get<0>(info.param)) + "_" +
                                    std::string(kv_format_name(std::get<1>(info.param))) +
                                    (std::get<2>(info.param) ? "_sampled" : "_greedy");
                         });

// State images are backend-neutral (models/state_image.h) and the fingerprint is the host model's: a
// snapshot taken on the GPU loads into a CPU session and the other way round, for every KV format.
// (Continuations differ in the last bits — the backends round differently — so only the load is checked,
// and that the state reads back the same.)
TEST(SnapshotAcrossBackends, GpuSnapshotLoadsOnTheCpuAndBack) {
    const std::shared_ptr<const Model> model = test::load_model("qwen3_5_binary");
    const std::unique_ptr<Engine> gpu = test::make_engine(model, test::Backend::cuda);
    if (!gpu) GTEST_SKIP() << "no CUDA on this machine";
    const std::unique_ptr<Engine> cpu = make_cpu_engine(model);
    EXPECT_EQ(gpu->fingerprint(), cpu->fingerprint());
    for (KvFormat kv : test::kAllKvFormats) {
        const SessionOptions options{.sequence = {.max_positions = 512, .kv_format = kv}, .checkpoints = {}};
        Session on_gpu(*gpu, options);
        on_gpu.run_turn(test::random_tokens(200, 91), test::greedy_options(20));
        const std::filesystem::path from_gpu = temp_file("from_gpu"), back = temp_file("back_from_cpu");
        on_gpu.save(from_gpu);
        Session on_cpu(*cpu, options);
        on_cpu.load(from_gpu);
        EXPECT_TRUE(same_ledger(on_cpu.ledger(), on_gpu.ledger())) << kv_format_name(kv);
        on_cpu.save(back);
        EXPECT_EQ(read_bytes(back), read_bytes(from_gpu)) << kv_format_name(kv);
        Session again(*gpu, options);
        again.load(back);
        again.save(back);
        EXPECT_EQ(read_bytes(back), read_bytes(from_gpu)) << kv_format_name(kv);
    }
}

// ---- refusals ----

TEST_F(SnapshotRefusals, TheLayoutIsAsDocumented) {
    EXPECT_EQ(build(layout_), bytes_);
    EXPECT_EQ(layout_.version, 3u);
    EXPECT_EQ(layout_.position, 45);
    // The writer's session (interval 16) read its 40-token prompt in pieces ending at 16 and 32, then
    // ended the prompt at 40; its 5 fed reply tokens reached 45, short of 48. Oldest first.
    const nlohmann::json header = nlohmann::json::parse(layout_.header);
    EXPECT_EQ(header.at("checkpoints"), nlohmann::json::parse(R"([{"position": 16, "end_of_prompt": false},
                                                                 {"position": 32, "end_of_prompt": false},
                                                                 {"position": 40, "end_of_prompt": true}])"));
    // qwen3_5_binary f32: layers lin, lin, full → conv + recurrent, conv + recurrent, k + v; then each
    // checkpoint's conv + recurrent of both DeltaNet layers (an f32 cache needs nothing more).
    ASSERT_EQ(layout_.chunks.size(), 6u + 3 * 4);
    EXPECT_EQ(header.at("chunks"), 18);
    EXPECT_EQ(layout_.chunks[0].name, "blk.0.gdn.conv");
    EXPECT_EQ(layout_.chunks[0].data.size(), 3u * 640 * 4);
    EXPECT_EQ(layout_.chunks[1].data.size(), 4u * 32 * 128 * 4);
    EXPECT_EQ(layout_.chunks[4].name, "blk.2.attn.k");
    EXPECT_EQ(layout_.chunks[4].data.size(), 45u * 2 * 64 * 4);
    const char* names[] = {"blk.0.gdn.conv", "blk.0.gdn.recurrent", "blk.1.gdn.conv", "blk.1.gdn.recurrent"};
    for (size_t i = 0; i < 3; ++i)
        for (size_t k = 0; k < 4; ++k) {
            const Layout::Chunk& c = layout_.chunks[6 + 4 * i + k];
            EXPECT_EQ(c.name, "checkpoint." + std::to_string(i) + "." + names[k]);
            EXPECT_EQ(c.data.size(), k % 2 == 0 ? 3u * 640 * 4 : 4u * 32 * 128 * 4) << c.name;
        }
    // The newest checkpoint (40) and the state differ only by the 5 reply tokens: not the same bytes.
    EXPECT_NE(layout_.chunks[6 + 8 + 1].data, layout_.chunks[1].data);
    EXPECT_EQ(layout_.chunks.back().end, bytes_.size());
}

TEST_F(SnapshotRefusals, MissingFileAnotherModelAnotherKvFormatNoRoom) {
    const std::filesystem::path missing = temp_file("does_not_exist");
    std::filesystem::remove(missing);
    expect_refused_file(missing, "snapshot: " + missing.string() + ": no such file", exact);

    const Model other = Model::load(fixture_path("qwen3_binary"));
    const std::unique_ptr<Engine> other_engine = make_cpu_engine(other);
    Session other_session(*other_engine, options_);
    other_session.run_turn(test::random_tokens(10, 73), test::greedy_options(2));
    const std::filesystem::path other_file = temp_file("other_model");
    other_session.save(other_file);
    const std::string got = message_of([&] { live_->load(other_file); });
    EXPECT_EQ(got.rfind("snapshot " + other_file.string() + ": made with another model (architecture qwen3, layers 4 "
                        "(all full_attention), hidden 128, vocab 256; fingerprint " + other_engine->fingerprint() +
                            ", header at byte 24), but this engine runs architecture qwen35",
                        0),
              0u)
        << got;
    EXPECT_NE(got.find("(fingerprint " + engine_->fingerprint() + ")"), std::string::npos) << got;
    EXPECT_EQ(saved(*live_), live_bytes_);

    Session f16(*engine_, {.sequence = {.max_positions = 1024, .kv_format = KvFormat::f16}, .checkpoints = {}});
    f16.run_turn(test::random_tokens(10, 74), test::greedy_options(2));
    const std::filesystem::path f16_file = temp_file("f16");
    f16.save(f16_file);
    expect_refused_file(f16_file,
                        "snapshot " + f16_file.string() + ": its KV cache is f16 (header at byte 24), but this session "
                                                          "stores f32; open the session with KV format f16 to load it",
                        exact);

    Session small(*engine_, {.sequence = {.max_positions = 30, .kv_format = KvFormat::f32}, .checkpoints = {}});
    EXPECT_EQ(message_of([&] { small.load(good_); }),
              "snapshot " + good_.string() + ": holds 45 tokens (header at byte 24), more than this session's capacity "
                                             "of 30");
    EXPECT_EQ(small.stats().position, 0);
}

TEST_F(SnapshotRefusals, TruncatedAtEveryBoundaryAndAtRandomOffsets) {
    const std::string d = damaged_name();
    const size_t n = layout_.chunks.size();
    auto truncated = [&](std::string what, uint64_t at, uint64_t needs) {
        return "snapshot " + d + ": truncated or damaged: " + what + " at byte " + std::to_string(at) + " needs " +
               std::to_string(needs) + " bytes, but the file ends at byte " + std::to_string(at);
    };
    expect_refused(bytes_.substr(0, 0), truncated("the magic", 0, 8));
    expect_refused(bytes_.substr(0, 8), truncated("the format version", 8, 4));
    expect_refused(bytes_.substr(0, 12), truncated("the header length", 12, 4));
    expect_refused(bytes_.substr(0, 16), truncated("the header checksum", 16, 8));
    expect_refused(bytes_.substr(0, 24), truncated("the header", 24, layout_.header_bytes));
    expect_refused(bytes_.substr(0, layout_.ledger_checksum_at()),
                   truncated("the ledger checksum", layout_.ledger_checksum_at(), 8));
    expect_refused(bytes_.substr(0, layout_.ledger_at()), truncated("the token ledger", layout_.ledger_at(), 45 * 5));
    for (size_t k = 0; k < n; ++k) {
        const Layout::Chunk& c = layout_.chunks[k];
        const std::string what = "chunk " + std::to_string(k) + " of " + std::to_string(n);
        expect_refused(bytes_.substr(0, c.at), truncated(what + " (name length)", c.at, 4));
        expect_refused(bytes_.substr(0, c.name_at), truncated(what + " (name)", c.name_at, c.name.size()));
        expect_refused(bytes_.substr(0, c.length_at), truncated(what + " (data length)", c.length_at, 8));
        expect_refused(bytes_.substr(0, c.checksum_at), truncated(what + " (checksum)", c.checksum_at, 8));
        expect_refused(bytes_.substr(0, c.data_at),
                       truncated(what + " '" + c.name + "' (data)", c.data_at, c.data.size()));
    }
    std::mt19937 rng(99);
    for (int i = 0; i < 40; ++i) {
        const uint64_t at = rng() % bytes_.size();
        write_bytes(temp_file("damaged"), bytes_.substr(0, at));
        const std::string got = message_of([&] { live_->load(temp_file("damaged")); });
        EXPECT_EQ(got.rfind("snapshot " + d + ": truncated or damaged: ", 0), 0u) << got;
        EXPECT_NE(got.find("but the file ends at byte " + std::to_string(at)), std::string::npos) << got;
    }
    EXPECT_EQ(saved(*live_), live_bytes_);
}

TEST_F(SnapshotRefusals, AFlippedByteInEveryRegion) {
    const std::string d = damaged_name();
    const size_t n = layout_.chunks.size();
    auto flipped = [&](uint64_t at, uint8_t mask = 0x01) {
        std::string b = bytes_;
        b[at] = char(uint8_t(b[at]) ^ mask);
        return b;
    };
    const std::string no_magic = "snapshot " + d + ": not a deltabit snapshot (no magic \"DBSNAP\" at byte 0)";
    expect_refused(flipped(0), no_magic);
    expect_refused(flipped(7), no_magic);
    // The version's low byte flipped: 255 − version, which no build has written.
    const std::string unknown_version = std::to_string(kSnapshotVersion ^ 0xff);
    expect_refused(flipped(8, 0xff), "snapshot " + d + ": format version " + unknown_version +
                                         " (byte 8); this build reads versions 1 .. " +
                                         std::to_string(kSnapshotVersion));
    expect_refused(flipped(15, 0x80), "snapshot " + d + ": header length " +
                                          std::to_string(layout_.header_bytes | 0x80000000u) +
                                          " (byte 12) is not in 1 .. 1048576");
    const std::string bad_header = "snapshot " + d + ": header (bytes 24 .. " +
                                   std::to_string(24 + layout_.header_bytes) + ") fails its checksum (stored ";
    expect_refused(flipped(16), bad_header, prefix);
    expect_refused(flipped(24 + layout_.header_bytes / 2), bad_header, prefix);
    expect_refused(flipped(24 + layout_.header_bytes - 1), bad_header, prefix);
    expect_refused(flipped(12), "snapshot " + d + ": header (bytes 24 .. " +
                                    std::to_string(24 + (layout_.header_bytes ^ 1)) + ") fails its checksum (stored ",
                   prefix);
    const std::string bad_ledger = "snapshot " + d + ": token ledger (bytes " + std::to_string(layout_.ledger_at()) +
                                   " .. " + std::to_string(layout_.ledger_at() + 45 * 5) + ") fails its checksum (stored ";
    expect_refused(flipped(layout_.ledger_checksum_at() + 3), bad_ledger, prefix);
    expect_refused(flipped(layout_.ledger_at() + 4), bad_ledger, prefix);            // token 1
    expect_refused(flipped(layout_.ledger_at() + 45 * 4 + 44), bad_ledger, prefix);  // the last flag
    for (size_t k = 0; k < n; ++k) {
        const Layout::Chunk& c = layout_.chunks[k];
        const std::string what = "snapshot " + d + ": chunk " + std::to_string(k) + " of " + std::to_string(n);
        const std::string bad_sum = what + " '" + c.name + "' (bytes " + std::to_string(c.at) + " .. " +
                                    std::to_string(c.end) + ") fails its checksum (stored ";
        expect_refused(flipped(c.checksum_at), bad_sum, prefix);
        expect_refused(flipped(c.data_at), bad_sum, prefix);
        expect_refused(flipped(c.end - 1, 0x80), bad_sum, prefix);
        std::string renamed = c.name;
        renamed[0] = char(renamed[0] ^ 1);
        expect_refused(flipped(c.name_at), what + " '" + renamed + "' (bytes " + std::to_string(c.at) + " .. " +
                                               std::to_string(c.end) + ") fails its checksum (stored ",
                       prefix);
        expect_refused(flipped(c.length_at + 7, 0x80),
                       "snapshot " + d + ": truncated or damaged: chunk " + std::to_string(k) + " of " +
                           std::to_string(n) + " '" + c.name + "' (data) at byte " + std::to_string(c.data_at) +
                           " needs " + std::to_string(c.data.size() | (uint64_t(1) << 63)) +
                           " bytes, but the file ends at byte " + std::to_string(bytes_.size()));
        // A damaged name length throws the framing off: whatever is read next, it names this chunk.
        expect_refused(flipped(c.at), "chunk " + std::to_string(k) + " of " + std::to_string(n), contains);
    }
}

// Files whose checksums are all right but whose content is not this model's state.
TEST_F(SnapshotRefusals, WellFormedButWrongContent) {
    const std::string d = damaged_name();
    const size_t n = layout_.chunks.size();
    const std::string of_n = " of " + std::to_string(n);

    Layout l = layout_;
    l.chunks[0].name = "blk.0.gdn.cXnv";
    expect_refused(build(l), "snapshot " + d + ": chunk 0" + of_n + " (byte " + std::to_string(l.chunks[0].at) +
                                 ") is 'blk.0.gdn.cXnv', which is not part of this model's f32 state nor of the "
                                 "checkpoints the header lists");

    l = layout_;
    l.chunks[1].name = l.chunks[0].name;  // same length as "blk.0.gdn.recurrent"? no: offsets move, recomputed
    {
        const std::string b = build(l);
        const uint64_t at1 = parse(b).chunks[1].at;
        expect_refused(b, "snapshot " + d + ": chunk 1" + of_n + " (byte " + std::to_string(at1) +
                              "): 'blk.0.gdn.conv' appears twice");
    }

    l = layout_;
    l.chunks[0].data.resize(l.chunks[0].data.size() - 4);
    expect_refused(build(l), "snapshot " + d + ": chunk 0" + of_n + " 'blk.0.gdn.conv' (byte " +
                                 std::to_string(l.chunks[0].at) + ") holds " + std::to_string(3 * 640 * 4 - 4) +
                                 " bytes, but this model's state at position 45 needs " + std::to_string(3 * 640 * 4));

    l = layout_;
    nlohmann::ordered_json h = nlohmann::ordered_json::parse(l.header);
    h["chunks"] = n + 1;
    l.header = h.dump();
    l.header_bytes = l.header.size();
    expect_refused(build(l), "snapshot " + d + ": the header (byte 24) announces " + std::to_string(n + 1) +
                                 " chunks, but a f32 state of this model at position 45 with 3 checkpoints has " +
                                 std::to_string(n));

    l = layout_;
    h = nlohmann::ordered_json::parse(l.header);
    h.erase("fingerprint");
    l.header = h.dump();
    expect_refused(build(l), "snapshot " + d + ": header (byte 24) has no \"fingerprint\"");
    l.header = "{not json";
    expect_refused(build(l), "snapshot " + d + ": header (byte 24) is not valid JSON: ", prefix);

    l = layout_;
    const uint64_t ledger_at = 32 + l.header.size();
    l.ledger[3 * 4] = char(300 & 0xff);
    l.ledger[3 * 4 + 1] = char(300 >> 8);
    expect_refused(build(l), "snapshot " + d + ": ledger token 3 (byte " + std::to_string(ledger_at + 12) +
                                 ") is 300, outside this model's vocabulary of 256");
    l = layout_;
    l.ledger[45 * 4 + 1] = 2;
    expect_refused(build(l), "snapshot " + d + ": ledger flag 1 (byte " + std::to_string(ledger_at + 45 * 4 + 1) +
                                 ") is 2, not 0 or 1");

    expect_refused(bytes_ + "x", "snapshot " + d + ": 1 unexpected bytes after the last chunk (from byte " +
                                     std::to_string(bytes_.size()) + ")");
}

// Found while writing fuzz/fuzz_snapshot.cpp (a hand-made input run through it; random mutation seldom
// builds such depth): a deeply nested header value (well-formed JSON, right checksums) overflowed the
// stack — ordered_json copies values recursively when an object's storage grows, and dump() recurses —
// instead of being refused. The writer's header nests two levels; 8 are allowed.
TEST_F(SnapshotRefusals, DeeplyNestedHeaderIsRefusedNotACrash) {
    const std::string d = damaged_name();
    const std::string refused =
        "snapshot " + d + ": header (byte 24) nests deeper than 8 levels: the file is damaged";
    // Deep enough to exhaust any stack, written as text: building it with nlohmann would recurse too.
    const std::string deep = std::string(300000, '[') + std::string(300000, ']');
    const std::string fp = nlohmann::json(engine_->fingerprint()).dump();
    Layout l = layout_;
    // A field the reader names in its message, with fields after it (the object grows around it) ...
    l.header = "{\"fingerprint\":" + fp + ",\"kv_format\":" + deep + ",\"position\":45,\"chunks\":6}";
    expect_refused(build(l), refused);
    // ... and a value inside the model summary, which the reader keeps as text.
    l.header = "{\"fingerprint\":" + fp + ",\"kv_format\":\"f32\",\"position\":45,\"chunks\":6,\"model\":{\"x\":" +
               deep + "}}";
    expect_refused(build(l), refused);

    // The limit counts enclosing levels: a leaf inside the top object, "model" and 6 arrays is at depth
    // 8 and loads; one more array is refused.
    auto with_model_value = [&](int arrays) {
        Layout nested = layout_;
        const size_t model_at = nested.header.find("\"model\":{") + 9;
        nested.header.insert(model_at, "\"x\":" + std::string(size_t(arrays), '[') + "1" +
                                           std::string(size_t(arrays), ']') + ",");
        return build(nested);
    };
    const std::filesystem::path ok = temp_file("nested_ok");
    write_bytes(ok, with_model_value(6));
    Session reader(*engine_, options_);
    reader.load(ok);
    EXPECT_EQ(reader.stats().position, 45);
    expect_refused(with_model_value(7), refused);
}

// parse_snapshot() (the fuzz target's entry) is read_snapshot() over bytes in memory: same result, same
// messages with the given name in place of the file's.
TEST_F(SnapshotRefusals, ParseSnapshotReadsBytesLikeTheFile) {
    const SnapshotExpectation expect{.fingerprint = engine_->fingerprint(), .kv_format = KvFormat::f32,
                                     .config = &model_->config(), .max_positions = 1024};
    auto span_of = [](const std::string& b) { return std::as_bytes(std::span(b.data(), b.size())); };
    const Snapshot from_file = read_snapshot(good_, expect);
    const Snapshot from_bytes = parse_snapshot(span_of(bytes_), expect, "in memory");
    EXPECT_EQ(from_bytes.fingerprint, from_file.fingerprint);
    EXPECT_TRUE(same_ledger(from_bytes.ledger, from_file.ledger));
    // The file's chunks: the state's 6, then 4 for each of the 3 checkpoints, under their own names.
    ASSERT_EQ(from_bytes.state.chunks.size(), 6u);
    ASSERT_EQ(from_bytes.checkpoints.size(), 3u);
    auto chunk_k = [](const Snapshot& s, size_t k) -> const StateChunk& {
        return k < 6 ? s.state.chunks[k] : s.checkpoints[(k - 6) / 4].state->chunks[(k - 6) % 4];
    };
    for (size_t k = 0; k < layout_.chunks.size(); ++k) {
        const StateChunk& got = chunk_k(from_bytes, k);
        const std::string file_name = k < 6 ? got.name : "checkpoint." + std::to_string((k - 6) / 4) + "." + got.name;
        EXPECT_EQ(file_name, layout_.chunks[k].name);
        EXPECT_EQ(std::string(reinterpret_cast<const char*>(got.bytes.data()), got.bytes.size()),
                  layout_.chunks[k].data)
            << layout_.chunks[k].name;
        EXPECT_EQ(got.bytes, chunk_k(from_file, k).bytes) << layout_.chunks[k].name;
    }
    const std::string cut = bytes_.substr(0, layout_.chunks[2].data_at + 1);
    const Layout::Chunk& c = layout_.chunks[2];
    EXPECT_EQ(message_of([&] { parse_snapshot(span_of(cut), expect, "in memory"); }),
              "snapshot in memory: truncated or damaged: chunk 2 of 18 '" + c.name + "' (data) at byte " +
                  std::to_string(c.data_at) + " needs " + std::to_string(c.data.size()) +
                  " bytes, but the file ends at byte " + std::to_string(cut.size()));
}

// After all that, the live session continues exactly as its twin that never saw a bad file.
TEST_F(SnapshotRefusals, LiveSessionContinuesLikeItsTwinAfterRefusals) {
    expect_refused(bytes_.substr(0, bytes_.size() / 2), "snapshot " + damaged_name() + ": truncated or damaged: ",
                   prefix);
    std::string b = bytes_;
    b[b.size() - 1] ^= 1;
    expect_refused(b, "snapshot " + damaged_name() + ": chunk ", prefix);
    expect_live_continues_like_twin();

    // And a good file still loads into it, replacing its conversation (TearDown continues both).
    live_->load(good_);
    twin_->load(good_);
    EXPECT_EQ(live_->stats().position, 45);
}

TEST(SnapshotWrite, ReplacesAtomicallyAndReportsAFolderThatIsNotThere) {
    const Model model = Model::load(fixture_path("qwen3_binary"));
    const std::unique_ptr<Engine> engine = make_cpu_engine(model);
    Session s(*engine, {.sequence = {.max_positions = 64}, .checkpoints = {}});
    s.run_turn(test::random_tokens(5, 81), test::greedy_options(2));
    const std::filesystem::path file = temp_file("replace");
    write_bytes(file, "old contents");
    s.save(file);
    EXPECT_EQ(read_bytes(file).substr(0, 6), "DBSNAP");
    EXPECT_FALSE(std::filesystem::exists(std::filesystem::path(file.string() + ".tmp")));
    const std::filesystem::path nowhere = temp_file("no_such_folder") / "x.dbsnap";
    EXPECT_EQ(message_of([&] { s.save(nowhere); }),
              "snapshot: cannot write " + nowhere.string() + ": folder " + nowhere.parent_path().string() +
                  " does not exist");
}

#else

TEST(Snapshot, UnavailableWithoutXxhash) {
    EXPECT_FALSE(snapshots_available());
}

#endif

}  // namespace
}  // namespace deltabit
