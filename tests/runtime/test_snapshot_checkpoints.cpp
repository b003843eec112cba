// Snapshots carry the session's checkpoints (runtime/snapshot.h, version 2): a loaded session reuses
// exactly what the saved one would, with the same logits to the bit; a stricter policy evicts at load
// as it would have while running; a version 1 file (no checkpoints) still loads, with one checkpoint at
// its position as before; damaged checkpoint entries and chunks are refused and leave the live session
// as it was. (Truncation and a flipped byte in every chunk, checkpoint chunks included, are covered by
// the region-by-region tests in test_snapshot.cpp, whose fixture file holds three checkpoints.)
#include "engine_test_support.h"
#include "runtime/session.h"
#include "runtime/snapshot.h"
#include "snapshot_test_support.h"

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include <functional>
#include <optional>
#include <ostream>
#include <string>
#include <tuple>
#include <vector>

namespace deltabit {
namespace {

#if DELTABIT_HAVE_XXHASH

using namespace test;

// Turn 1 of every case: a 150-token prompt read at interval 64 leaves checkpoints at 64 and 128 (inside
// the prompt) and at 150 (its end); of 20 reply tokens 19 are fed, so the sequence ends at 169, short of
// the next multiple, 192.
constexpr int64_t kInterval = 64;
constexpr int64_t kReplyTokens = 20;

std::vector<int32_t> first_prompt() { return random_tokens(150, 201); }

SessionOptions options_for(KvFormat kv, int max_kept = 4) {
    return {.sequence = {.max_positions = 512, .kv_format = kv},
            .checkpoints = {.interval = kInterval, .max_kept = max_kept}};
}

// Turn 2 prompts, each diverging from what turn 1 left at a different place. `reused` is by hand, from
// plan_reuse's rule (docs/sessions.md): the latest checkpoint at or before min(common prefix, prompt − 1).
struct Divergence {
    const char* name;
    int64_t reused;
    std::function<std::vector<int32_t>(const std::vector<int32_t>& reply)> prompt;
};

void PrintTo(const Divergence& d, std::ostream* os) { *os << d.name; }

std::vector<int32_t> with_edit_at(size_t at) {
    std::vector<int32_t> p = first_prompt();
    p[at] = (p[at] + 1) % 256;
    for (int32_t id : random_tokens(10, 202)) p.push_back(id);
    return p;
}

const Divergence kDivergences[] = {
    // Common prefix 100: the interval checkpoint at 64.
    {"edit_at_100", 64, [](const std::vector<int32_t>&) { return with_edit_at(100); }},
    // The same prompt again: common prefix 150, but one token must be fed, so ≤ 149: the checkpoint at 128.
    {"regenerate", 128, [](const std::vector<int32_t>&) { return first_prompt(); }},
    // The template rewrote the reply after 5 tokens (common prefix ≥ 155, below the held 169): the
    // end-of-prompt checkpoint at 150.
    {"reply_rewritten", 150,
     [](const std::vector<int32_t>& reply) {
         std::vector<int32_t> p = first_prompt();
         p.insert(p.end(), reply.begin(), reply.begin() + 5);
         p.push_back((reply[5] + 1) % 256);
         for (int32_t id : random_tokens(6, 203)) p.push_back(id);
         return p;
     }},
};

void expect_same_calls(const RecordingEngine& a, const RecordingEngine& b) {
    ASSERT_EQ(a.calls.size(), b.calls.size());
    for (size_t i = 0; i < a.calls.size(); ++i) {
        EXPECT_EQ(a.calls[i].start, b.calls[i].start) << "call " << i;
        EXPECT_EQ(a.calls[i].ids, b.calls[i].ids) << "call " << i;
        EXPECT_TRUE(same_bits(a.calls[i].last_logits, b.calls[i].last_logits)) << "call " << i;
    }
    ASSERT_EQ(a.chosen_from.size(), b.chosen_from.size());
    for (size_t i = 0; i < a.chosen_from.size(); ++i)
        ASSERT_TRUE(same_bits(a.chosen_from[i], b.chosen_from[i])) << "token " << i;
}

class SnapshotCheckpointReuse
    : public ::testing::TestWithParam<std::tuple<test::Backend, KvFormat, Divergence>> {};

// The saved session goes on (the unsaved twin of the loaded one); the loaded one, on another engine,
// must do exactly what it does: the same reuse, the same forward calls with the same logits to the bit,
// the same tokens, and afterwards the same snapshot bytes. A version 1 load would have reused 0 in
// every one of these cases.
TEST_P(SnapshotCheckpointReuse, LoadedSessionReusesExactlyAsTheSavedOne) {
    const auto [backend, kv, divergence] = GetParam();
    const std::unique_ptr<Engine> inner_a = make_engine(load_model("qwen3_5_binary"), backend);
    const std::unique_ptr<Engine> inner_b = make_engine(load_model("qwen3_5_binary"), backend);
    if (!inner_a) GTEST_SKIP() << "no CUDA on this machine";
    RecordingEngine engine_a(*inner_a), engine_b(*inner_b);

    Session a(engine_a, options_for(kv));
    const TurnResult t1 = a.run_turn(first_prompt(), sampled_options(kReplyTokens, 11));
    ASSERT_EQ(a.stats().position, 169);
    ASSERT_EQ(a.stats().checkpoints, 3);
    const std::filesystem::path file = temp_file(fmt::format("reuse_{}_{}_{}", backend_label(backend),
                                                             kv_format_name(kv), divergence.name));
    a.save(file);

    Session b(engine_b, options_for(kv));
    b.load(file);
    EXPECT_EQ(b.stats().checkpoints, 3);
    EXPECT_EQ(b.stats().checkpoint_bytes, a.stats().checkpoint_bytes);
    EXPECT_EQ(b.stats().checkpoints_taken, 0);  // installed, not taken
    // Saving the loaded session writes the file it came from: same checkpoints, order and flags.
    const std::filesystem::path again = temp_file("reuse_again");
    b.save(again);
    EXPECT_EQ(read_bytes(again), read_bytes(file));

    const std::vector<int32_t> prompt = divergence.prompt(t1.generation.tokens);
    engine_a.calls.clear();
    engine_a.chosen_from.clear();
    const TurnResult ta = a.run_turn(prompt, sampled_options(40, 12));
    const TurnResult tb = b.run_turn(prompt, sampled_options(40, 12));
    EXPECT_EQ(ta.reuse.reused, divergence.reused);
    EXPECT_EQ(tb.reuse.reused, divergence.reused);
    ASSERT_EQ(ta.generation.tokens.size(), 40u);
    EXPECT_EQ(ta.generation.tokens, tb.generation.tokens);
    expect_same_calls(engine_a, engine_b);
    EXPECT_EQ(a.stats().checkpoints, b.stats().checkpoints);

    const std::filesystem::path after_a = temp_file("reuse_after_a"), after_b = temp_file("reuse_after_b");
    a.save(after_a);
    b.save(after_b);
    EXPECT_EQ(read_bytes(after_a), read_bytes(after_b));
}

INSTANTIATE_TEST_SUITE_P(Divergences, SnapshotCheckpointReuse,
                         ::testing::Combine(::testing::ValuesIn(kAllBackends), ::testing::ValuesIn(kAllKvFormats),
                                            ::testing::ValuesIn(kDivergences)),
                         [](const auto& info) {
                             return backend_label(std::get<0>(info.param)) + "_" +
                                    std::string(kv_format_name(std::get<1>(info.param))) + "_" +
                                    std::get<2>(info.param).name;
                         });

// A file's checkpoints are installed under the receiving session's policy: over its max_kept, the oldest
// interval checkpoints go first and the end-of-prompt ones last, as if it had run the turns itself.
TEST(SnapshotCheckpointPolicy, AStricterPolicyEvictsAtLoadAsItWould) {
    const std::unique_ptr<Engine> engine = make_cpu_engine(load_model("qwen3_5_binary"));
    Session saved(*engine, options_for(KvFormat::f32));
    const TurnResult t1 = saved.run_turn(first_prompt(), greedy_options(kReplyTokens));
    const std::filesystem::path file = temp_file("policy");
    saved.save(file);

    struct Case {
        int max_kept;
        int64_t kept;
        const Divergence& divergence;
        int64_t reused;
    };
    const Divergence& edit = kDivergences[0];
    const Divergence& regenerate = kDivergences[1];
    const Divergence& reply = kDivergences[2];
    const Case cases[] = {
        {4, 3, edit, 64},         // all three: 64, 128, 150
        {2, 2, edit, 0},          // 64 (the oldest interval one) went: 128, 150
        {2, 2, regenerate, 128},  //
        {1, 1, regenerate, 0},    // 128 went too: only the end of the prompt, 150
        {1, 1, reply, 150},       //
        {0, 0, reply, 0},         // none
    };
    for (const Case& c : cases) {
        Session loaded(*engine, options_for(KvFormat::f32, c.max_kept));
        loaded.load(file);
        EXPECT_EQ(loaded.stats().checkpoints, c.kept) << "max_kept " << c.max_kept;
        const TurnResult t = loaded.run_turn(c.divergence.prompt(t1.generation.tokens), greedy_options(4));
        EXPECT_EQ(t.reuse.reused, c.reused) << "max_kept " << c.max_kept << ", " << c.divergence.name;
    }
}

// The file of `layout` as version 1 wrote it: no "checkpoints" in the header, no checkpoint chunks.
std::string as_version_1(Layout l, size_t state_chunks) {
    l.version = 1;
    nlohmann::ordered_json h = nlohmann::ordered_json::parse(l.header);
    h.erase("checkpoints");
    h["chunks"] = state_chunks;
    l.header = h.dump();
    l.chunks.resize(state_chunks);
    return build(l);
}

// Version 1 files hold a complete, exact state: they load, with one checkpoint at the loaded position
// (what every load gave before version 2), continue exactly, and are saved back in the current version.
TEST(SnapshotCheckpointVersions, AVersion1FileLoadsWithOneCheckpointAtItsPosition) {
    const std::unique_ptr<Engine> engine = make_cpu_engine(load_model("qwen3_5_binary"));
    RecordingEngine engine_a(*engine), engine_b(*engine);
    Session a(engine_a, options_for(KvFormat::f32));
    const TurnResult t1 = a.run_turn(first_prompt(), greedy_options(kReplyTokens));
    const std::filesystem::path v2 = temp_file("v2"), v1 = temp_file("v1");
    a.save(v2);
    const Layout layout = parse(read_bytes(v2));
    ASSERT_EQ(layout.chunks.size(), 6u + 3 * 4);
    write_bytes(v1, as_version_1(layout, 6));

    Session b(engine_b, options_for(KvFormat::f32));
    b.load(v1);
    EXPECT_TRUE(same_ledger(b.ledger(), a.ledger()));
    EXPECT_EQ(b.stats().checkpoints, 1);
    // Its one checkpoint is at 169, and it is an end of prompt.
    const std::filesystem::path resaved = temp_file("v1_resaved");
    b.save(resaved);
    const Layout back = parse(read_bytes(resaved));
    EXPECT_EQ(back.version, kSnapshotVersion);
    EXPECT_EQ(nlohmann::json::parse(back.header).at("checkpoints"),
              nlohmann::json::parse(R"([{"position": 169, "end_of_prompt": true}])"));

    // A turn that extends the conversation reuses all 169 tokens in both, and gives the same bits.
    std::vector<int32_t> next(a.ledger().tokens().begin(), a.ledger().tokens().end());
    next.push_back(t1.generation.tokens.back());
    for (int32_t id : random_tokens(12, 204)) next.push_back(id);
    engine_a.calls.clear();
    engine_a.chosen_from.clear();
    engine_b.calls.clear();
    engine_b.chosen_from.clear();
    const TurnResult ta = a.run_turn(next, greedy_options(30));
    const TurnResult tb = b.run_turn(next, greedy_options(30));
    EXPECT_EQ(ta.reuse.reused, 169);
    EXPECT_EQ(tb.reuse.reused, 169);
    EXPECT_EQ(ta.generation.tokens, tb.generation.tokens);
    expect_same_calls(engine_a, engine_b);

    // What a version 1 load cannot give: an edit inside turn 1 reuses nothing (v2: 64).
    Session c(*engine, options_for(KvFormat::f32));
    c.load(v1);
    EXPECT_EQ(c.run_turn(with_edit_at(100), greedy_options(2)).reuse.reused, 0);
    Session d(*engine, options_for(KvFormat::f32));
    d.load(v2);
    EXPECT_EQ(d.run_turn(with_edit_at(100), greedy_options(2)).reuse.reused, 64);
}

// ---- refusals (the fixture's file: 45 tokens, checkpoints at 16, 32 and 40; 6 + 12 chunks) ----

class SnapshotCheckpointRefusals : public SnapshotRefusals {
protected:
    // The good file with its header's "checkpoints" replaced, or removed (nullopt); checksums recomputed.
    std::string with_checkpoints(const std::optional<nlohmann::ordered_json>& checkpoints) const {
        Layout l = layout_;
        nlohmann::ordered_json h = nlohmann::ordered_json::parse(l.header);
        if (checkpoints) h["checkpoints"] = *checkpoints;
        else h.erase("checkpoints");
        l.header = h.dump();
        return build(l);
    }
    std::string message_start() const { return "snapshot " + damaged_name() + ": "; }
};

TEST_F(SnapshotCheckpointRefusals, HeaderEntries) {
    const std::string p = message_start();
    const auto j = [](const char* text) { return nlohmann::ordered_json::parse(text); };
    expect_refused(with_checkpoints(std::nullopt), p + "header (byte 24) has no \"checkpoints\"");
    expect_refused(with_checkpoints(j("5")), p + "header (byte 24): \"checkpoints\" is 5, not a list");
    expect_refused(with_checkpoints(j(R"([{"position": 16, "end_of_prompt": false}, {"position": 32}, {}])")),
                   p + "header (byte 24): checkpoint 1 is {\"position\":32}, not {\"position\": tokens, "
                       "\"end_of_prompt\": true or false}");
    expect_refused(with_checkpoints(j(R"([{"position": 16, "end_of_prompt": 0}])")),
                   p + "header (byte 24): checkpoint 0 is {\"position\":16,\"end_of_prompt\":0}, not {\"position\": "
                       "tokens, \"end_of_prompt\": true or false}");
    // "turn_start" is optional (absent: false), but when present a boolean.
    expect_refused(with_checkpoints(j(R"([{"position": 16, "end_of_prompt": false, "turn_start": 1}])")),
                   p + "header (byte 24): checkpoint 0 has \"turn_start\": 1, not true or false");
    // Past the state's 45 tokens, or before its start.
    expect_refused(with_checkpoints(j(R"([{"position": 16, "end_of_prompt": false},
                                          {"position": 32, "end_of_prompt": false},
                                          {"position": 46, "end_of_prompt": true}])")),
                   p + "header (byte 24): checkpoint 2 is at position 46, outside the state's 0 .. 45");
    expect_refused(with_checkpoints(j(R"([{"position": -1, "end_of_prompt": false}])")),
                   p + "header (byte 24): checkpoint 0 is at position -1, outside the state's 0 .. 45");
    expect_refused(with_checkpoints(j(R"([{"position": 16, "end_of_prompt": false},
                                          {"position": 16, "end_of_prompt": false},
                                          {"position": 40, "end_of_prompt": true}])")),
                   p + "header (byte 24): checkpoint 1 is at position 16, like an earlier one");
    nlohmann::ordered_json many = nlohmann::ordered_json::array();
    for (int i = 0; i < 1025; ++i) many.push_back({{"position", 0}, {"end_of_prompt", false}});
    expect_refused(with_checkpoints(many),
                   p + "header (byte 24) lists 1025 checkpoints, more than the 1024 a snapshot may hold: the file is "
                       "damaged");
}

TEST_F(SnapshotCheckpointRefusals, ChunksThatDoNotMatchTheListedCheckpoints) {
    const std::string p = message_start();
    const size_t n = layout_.chunks.size();
    ASSERT_EQ(n, 18u);
    const std::string of_n = " of " + std::to_string(n);

    // Checkpoint 1 (position 32): its blk.0.gdn.conv 4 bytes short.
    Layout l = layout_;
    Layout::Chunk& conv = l.chunks[6 + 4];
    ASSERT_EQ(conv.name, "checkpoint.1.blk.0.gdn.conv");
    conv.data.resize(conv.data.size() - 4);
    expect_refused(build(l), p + "chunk 10" + of_n + " 'checkpoint.1.blk.0.gdn.conv' (byte " + std::to_string(conv.at) +
                                 ") holds 7676 bytes, but this model's checkpoint at position 32 needs 7680");

    // A chunk of a checkpoint the header does not list.
    l = layout_;
    l.chunks[6].name = "checkpoint.3.blk.0.gdn.conv";
    expect_refused(build(l), p + "chunk 6" + of_n + " (byte " + std::to_string(l.chunks[6].at) +
                                 ") is 'checkpoint.3.blk.0.gdn.conv', which is not part of this model's f32 state nor "
                                 "of the checkpoints the header lists");
    // A state chunk's name under a checkpoint's prefix that the layout does not give checkpoints.
    l = layout_;
    l.chunks[6].name = "checkpoint.0.blk.2.attn.k";
    expect_refused(build(l), p + "chunk 6" + of_n + " (byte " + std::to_string(l.chunks[6].at) +
                                 ") is 'checkpoint.0.blk.2.attn.k', which is not part of this model's f32 state nor "
                                 "of the checkpoints the header lists");

    // Checkpoint 2's last chunk gone, the header's count lowered to match: one is missing.
    l = layout_;
    l.chunks.pop_back();
    nlohmann::ordered_json h = nlohmann::ordered_json::parse(l.header);
    h["chunks"] = n - 1;
    l.header = h.dump();
    expect_refused(build(l), p + "the header (byte 24) announces 17 chunks, but a f32 state of this model at position "
                                 "45 with 3 checkpoints has 18");

    // Checkpoint 2 dropped from the header but its chunks left in the file.
    l = layout_;
    h = nlohmann::ordered_json::parse(l.header);
    h["checkpoints"].erase(2);
    l.header = h.dump();
    expect_refused(build(l), p + "the header (byte 24) announces 18 chunks, but a f32 state of this model at position "
                                 "45 with 2 checkpoints has 14");
    // ... and with the count lowered too: the 14 announced are read, and checkpoint 2's 4 are left over.
    h["chunks"] = 14;
    l.header = h.dump();
    const std::string shorter = build(l);
    const uint64_t left_at = parse(shorter).chunks[14].at;
    expect_refused(shorter, p + std::to_string(shorter.size() - left_at) +
                                " unexpected bytes after the last chunk (from byte " + std::to_string(left_at) + ")");
}

// A version 1 header knows no checkpoints: its checkpoint chunks are not part of its state.
TEST_F(SnapshotCheckpointRefusals, Version1FilesWithCheckpointChunks) {
    Layout l = layout_;
    l.version = 1;
    expect_refused(build(l), message_start() +
                                 "the header (byte 24) announces 18 chunks, but a f32 state of this model at position "
                                 "45 has 6");
    // Its "checkpoints" field is ignored (version 1 did not define it), so with the state's chunks alone
    // the file loads, with one checkpoint at 45.
    l.chunks.resize(6);
    nlohmann::ordered_json h = nlohmann::ordered_json::parse(l.header);
    h["chunks"] = 6;
    l.header = h.dump();
    const std::filesystem::path v1 = temp_file("v1_with_field");
    write_bytes(v1, build(l));
    Session reader(*engine_, options_);
    reader.load(v1);
    EXPECT_EQ(reader.stats().position, 45);
    EXPECT_EQ(reader.stats().checkpoints, 1);
}

// qwen3 with an f32 cache returns to any position by a KV cut: its sessions keep no checkpoints, and a
// file listing some is refused.
TEST(SnapshotCheckpointModels, AModelThatNeedsNoCheckpointsRefusesThem) {
    const std::unique_ptr<Engine> engine = make_cpu_engine(load_model("qwen3_binary"));
    const SessionOptions options = options_for(KvFormat::f32);
    Session writer(*engine, options);
    writer.run_turn(random_tokens(100, 205), greedy_options(4));
    EXPECT_EQ(writer.stats().checkpoints, 0);
    const std::filesystem::path file = temp_file("qwen3_none");
    writer.save(file);
    Layout l = parse(read_bytes(file));
    nlohmann::ordered_json h = nlohmann::ordered_json::parse(l.header);
    EXPECT_EQ(h.at("checkpoints"), nlohmann::ordered_json::array());
    h["checkpoints"] = nlohmann::ordered_json::parse(R"([{"position": 64, "end_of_prompt": false}])");
    l.header = h.dump();
    const std::filesystem::path damaged = temp_file("qwen3_listed");
    write_bytes(damaged, build(l));

    Session live(*engine, options);
    live.run_turn(random_tokens(20, 206), greedy_options(3));
    const std::filesystem::path before = temp_file("qwen3_live_before"), after = temp_file("qwen3_live_after");
    live.save(before);
    EXPECT_EQ(message_of([&] { live.load(damaged); }),
              "snapshot " + damaged.string() +
                  ": the header (byte 24) lists checkpoints, but a f32 state of this model needs none (cutting its KV "
                  "cache back is exact): the file is damaged");
    live.save(after);
    EXPECT_EQ(read_bytes(after), read_bytes(before));
}

#endif

}  // namespace
}  // namespace deltabit
