// Sessions (runtime/session.h): prefix reuse that is exact, checkpoints that stay within their budget,
// the context limit, EOS across turns, and the reuse diagnostics — on the qwen3_5 (hybrid) and qwen3
// (attention only) fixtures, for every KV format.
#include "engine_test_support.h"
#include "models/sequence_state.h"
#include "bench/synthetic_model.h"
#include "runtime/session.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <string>
#include <vector>

namespace deltabit {
namespace {

using test::fixture_path;
using test::same_bits;
using test::message_of;

std::vector<int32_t> concat(std::initializer_list<std::span<const int32_t>> parts) {
    std::vector<int32_t> out;
    for (std::span<const int32_t> p : parts) out.insert(out.end(), p.begin(), p.end());
    return out;
}

std::vector<int32_t> ids_of(const TokenLedger& ledger) { return {ledger.tokens().begin(), ledger.tokens().end()}; }

// ---- plan_reuse, by hand ----

TEST(PlanReuse, HandCheckedCases) {
    const std::vector<int32_t> held = {10, 11, 12, 13, 14, 15, 16, 17, 18, 19};  // 10 tokens
    const std::vector<int64_t> checkpoints = {3, 6, 9};

    // The prompt extends the held sequence: everything is kept, no divergence.
    std::vector<int32_t> prompt = concat({held, std::vector<int32_t>{20, 21}});
    ReuseReport r = plan_reuse(held, prompt, checkpoints, false);
    EXPECT_EQ(r.prompt_tokens, 12);
    EXPECT_EQ(r.common_prefix, 10);
    EXPECT_EQ(r.reused, 10);
    EXPECT_EQ(r.recomputed, 2);
    EXPECT_EQ(r.first_divergence, -1);
    EXPECT_TRUE(r.held_around.empty() && r.prompt_around.empty());

    // Divergence at 7: common 7; the latest checkpoint at or before 7 is 6.
    prompt = {10, 11, 12, 13, 14, 15, 16, 99, 98};
    r = plan_reuse(held, prompt, checkpoints, false);
    EXPECT_EQ(r.common_prefix, 7);
    EXPECT_EQ(r.reused, 6);
    EXPECT_EQ(r.recomputed, 3);
    EXPECT_EQ(r.first_divergence, 7);
    EXPECT_EQ(r.held_around, (std::vector<int32_t>{13, 14, 15, 16, 17, 18, 19}));  // [3, 10)
    EXPECT_EQ(r.prompt_around, (std::vector<int32_t>{13, 14, 15, 16, 99, 98}));    // [3, 9)
    // Any position reachable: exactly the common prefix.
    EXPECT_EQ(plan_reuse(held, prompt, checkpoints, true).reused, 7);

    // The same prompt again (a regenerated reply): at least one token must be fed, so the bound is
    // 9 − 1 = 8... with a 9-token prompt equal to held[0, 9): common 9, bound 8, checkpoint 6.
    prompt = {10, 11, 12, 13, 14, 15, 16, 17, 18};
    r = plan_reuse(held, prompt, checkpoints, false);
    EXPECT_EQ(r.common_prefix, 9);
    EXPECT_EQ(r.reused, 6);
    EXPECT_EQ(r.first_divergence, 9);  // the prompt ends where the held sequence goes on
    EXPECT_EQ(r.held_around, (std::vector<int32_t>{15, 16, 17, 18, 19}));  // [5, 10)
    EXPECT_EQ(r.prompt_around, (std::vector<int32_t>{15, 16, 17, 18}));    // [5, 9)
    EXPECT_EQ(plan_reuse(held, prompt, checkpoints, true).reused, 8);

    // Exactly the held tokens: common 10 = held, but the bound is 9: back to checkpoint 9.
    r = plan_reuse(held, held, checkpoints, false);
    EXPECT_EQ(r.common_prefix, 10);
    EXPECT_EQ(r.reused, 9);
    EXPECT_EQ(r.recomputed, 1);
    EXPECT_EQ(r.first_divergence, -1);

    // First token edited: nothing reused, divergence at 0.
    prompt = {77, 11, 12};
    r = plan_reuse(held, prompt, checkpoints, true);
    EXPECT_EQ(r.common_prefix, 0);
    EXPECT_EQ(r.reused, 0);
    EXPECT_EQ(r.recomputed, 3);
    EXPECT_EQ(r.first_divergence, 0);
    EXPECT_EQ(r.held_around, (std::vector<int32_t>{10, 11, 12, 13}));
    EXPECT_EQ(r.prompt_around, (std::vector<int32_t>{77, 11, 12}));

    // No checkpoint early enough: back to the start. An empty held sequence: nothing to reuse.
    EXPECT_EQ(plan_reuse(held, std::vector<int32_t>{10, 11, 5}, checkpoints, false).reused, 0);
    r = plan_reuse({}, held, checkpoints, false);
    EXPECT_EQ(r.reused, 0);
    EXPECT_EQ(r.first_divergence, -1);
}

// ---- reuse on the fixtures ----

enum class Scenario { continuation, middle, last_reply, first_message, regenerate };

std::string scenario_name(Scenario s) {
    switch (s) {
        case Scenario::continuation: return "continuation";
        case Scenario::middle: return "divergence_in_the_middle";
        case Scenario::last_reply: return "divergence_in_the_last_reply";
        case Scenario::first_message: return "edited_first_message";
        case Scenario::regenerate: return "regenerate";
    }
    return "?";
}

struct ReuseCase {
    test::Backend backend;
    std::string fixture;
    KvFormat kv;
    Scenario scenario;
};

std::string reuse_case_name(const ::testing::TestParamInfo<ReuseCase>& info) {
    return test::backend_label(info.param.backend) + "_" + info.param.fixture + "_" +
           std::string(kv_format_name(info.param.kv)) + "_" + scenario_name(info.param.scenario);
}

class SessionReuse : public ::testing::TestWithParam<ReuseCase> {};

constexpr int64_t kInterval = 64;
constexpr int64_t kPrompt1 = 200;  // > kivi4's 8 sinks + 128 residual + 32 group: it quantises
constexpr int64_t kReply1 = 12;

// Turn 1 takes checkpoints at 64, 128, 192 (interval pieces) and 200 (end of prompt); the ledger then
// holds 200 + 12 − 1 = 211 tokens (the last reply token is not fed). Turn 2's prompt per scenario and
// what must be reused, worked out from those positions:
//   continuation   turn 1 + reply + 30 new      common 211 = held          reused 211
//   middle         P1[0, 150) + 40 new          common 150                 reused 128 (any position: 150)
//   last_reply     P1 + reply[0, 5) + 25 new    common 205                 reused 200 (205)
//   first_message  P1 with [0] changed + ...    common 0                   reused 0
//   regenerate     P1 again                     common 200, bound 199      reused 192 (199)
// "Any position": attention only with an f32 or f16 cache, where cutting the cache back is exact.
TEST_P(SessionReuse, ReusedTurnEqualsRecomputation) {
    const ReuseCase& c = GetParam();
    const std::shared_ptr<const Model> shared_model = test::load_model(c.fixture);
    const Model& model = *shared_model;
    const std::unique_ptr<Engine> cpu = test::make_engine(shared_model, c.backend);  // "cpu": the engine under test
    if (!cpu) GTEST_SKIP() << "no CUDA on this machine";
    test::RecordingEngine engine(*cpu);
    const SessionOptions options{.sequence = {.max_positions = 1024, .kv_format = c.kv},
                                 .checkpoints = {.interval = kInterval, .max_kept = 8}};
    Session session(engine, options);
    const bool any_position = state_checkpoint_layout(model.config(), c.kv, 0).empty();
    bool attention_only = true;
    for (LayerKind k : model.config().layers) attention_only = attention_only && k == LayerKind::full_attention;
    EXPECT_EQ(any_position, attention_only && c.kv != KvFormat::kivi4);

    const std::vector<int32_t> p1 = test::random_tokens(kPrompt1, 11);
    const TurnResult t1 = session.run_turn(p1, test::greedy_options(kReply1));
    ASSERT_EQ(t1.generation.tokens.size(), size_t(kReply1));
    EXPECT_EQ(t1.reuse.reused, 0);
    EXPECT_EQ(t1.reuse.recomputed, kPrompt1);
    EXPECT_EQ(session.ledger().size(), kPrompt1 + kReply1 - 1);
    // Turn 1's calls: three interval pieces, the rest of the prompt, then one per fed reply token.
    ASSERT_EQ(engine.calls.size(), size_t(4 + kReply1 - 1));
    EXPECT_EQ(engine.calls[1].start, 64);
    EXPECT_EQ(engine.calls[3].start, 192);
    EXPECT_EQ(engine.calls[3].ids.size(), 8u);
    EXPECT_EQ(session.stats().checkpoints, any_position ? 0 : 4);

    const std::vector<int32_t>& reply = t1.generation.tokens;
    const std::span<const int32_t> p1s(p1);
    std::vector<int32_t> p2;
    int64_t common = 0, reused = 0, divergence = -1;
    switch (c.scenario) {
        case Scenario::continuation:
            p2 = concat({p1, reply, test::random_tokens(30, 12)});
            common = reused = 211;
            break;
        case Scenario::middle: {
            std::vector<int32_t> tail = test::random_tokens(40, 13);
            tail[0] = (p1[150] + 1) % 256;
            p2 = concat({p1s.first(150), tail});
            common = divergence = 150;
            reused = any_position ? 150 : 128;
            break;
        }
        case Scenario::last_reply: {
            std::vector<int32_t> tail = test::random_tokens(25, 14);
            tail[0] = (reply[5] + 1) % 256;
            p2 = concat({p1, std::span<const int32_t>(reply).first(5), tail});
            common = divergence = 205;
            reused = any_position ? 205 : 200;
            break;
        }
        case Scenario::first_message:
            p2 = concat({p1, reply});
            p2[0] = (p2[0] + 1) % 256;
            common = reused = divergence = 0;
            break;
        case Scenario::regenerate:
            p2 = p1;
            common = divergence = 200;
            reused = any_position ? 199 : 192;
            break;
    }
    const std::vector<int32_t> held = ids_of(session.ledger());
    const TurnResult t2 = session.run_turn(p2, test::greedy_options(kReply1));
    EXPECT_EQ(t2.reuse.prompt_tokens, int64_t(p2.size()));
    EXPECT_EQ(t2.reuse.common_prefix, common);
    EXPECT_EQ(t2.reuse.reused, reused);
    EXPECT_EQ(t2.reuse.recomputed, int64_t(p2.size()) - reused);
    EXPECT_EQ(t2.reuse.first_divergence, divergence);
    if (divergence >= 0) {
        const int64_t from = std::max<int64_t>(0, divergence - 4);
        EXPECT_EQ(t2.reuse.held_around,
                  std::vector<int32_t>(held.begin() + from, held.begin() + std::min<int64_t>(divergence + 4, 211)));
        EXPECT_EQ(t2.reuse.prompt_around,
                  std::vector<int32_t>(p2.begin() + from,
                                       p2.begin() + std::min<int64_t>(divergence + 4, int64_t(p2.size()))));
    }
    EXPECT_EQ(t2.generation.timings.prompt_tokens, int64_t(p2.size()) - reused);
    EXPECT_EQ(session.ledger().size(), int64_t(p2.size()) + kReply1 - 1);
    const SessionStats stats = session.stats();
    EXPECT_EQ(stats.turns, 2);
    EXPECT_EQ(stats.tokens_reused, reused);
    EXPECT_EQ(stats.tokens_recomputed, kPrompt1 + int64_t(p2.size()) - reused);

    // Every forward call of both turns equals a fresh sequence fed the same history in the same calls,
    // bit for bit: the restored state was exactly the state at its position.
    const std::vector<int32_t> history = test::expect_calls_replay_exactly(*cpu, options.sequence, engine.calls);
    EXPECT_EQ(history, ids_of(session.ledger()));

    // A fresh session given p2 feeds the same calls when the reuse point is one of its own piece
    // boundaries (0 or an interval multiple); with any-position reuse on the CPU the forward pass does
    // not depend on the split (test_engine_cpu.cpp). Then the turn must be the same to the bit.
    if (reused % kInterval == 0 || (any_position && c.backend == test::Backend::cpu)) {
        test::RecordingEngine fresh_engine(*cpu);
        Session fresh(fresh_engine, options);
        const TurnResult want = fresh.run_turn(p2, test::greedy_options(kReply1));
        EXPECT_EQ(t2.generation.tokens, want.generation.tokens);
        const size_t n_turn1 = size_t(kReply1);  // tokens chosen in turn 1
        ASSERT_EQ(engine.chosen_from.size(), n_turn1 + fresh_engine.chosen_from.size());
        for (size_t i = 0; i < fresh_engine.chosen_from.size(); ++i)
            EXPECT_TRUE(same_bits(engine.chosen_from[n_turn1 + i], fresh_engine.chosen_from[i])) << "token " << i;
    }
}

std::vector<ReuseCase> reuse_cases() {
    std::vector<ReuseCase> out;
    for (test::Backend backend : test::kAllBackends)
        for (const char* fixture : {"qwen3_5_binary", "qwen3_binary"})
            for (KvFormat kv : test::kAllKvFormats)
                for (Scenario s : {Scenario::continuation, Scenario::middle, Scenario::last_reply,
                                   Scenario::first_message, Scenario::regenerate})
                    out.push_back({backend, fixture, kv, s});
    return out;
}

INSTANTIATE_TEST_SUITE_P(Fixtures, SessionReuse, ::testing::ValuesIn(reuse_cases()), reuse_case_name);

// ---- checkpoint budget ----

// Interval 8 over a 100-token prompt takes checkpoints at 8, 16, ..., 96 and 100 (end of prompt); with
// max_kept 3 the oldest interval ones go first, leaving 88, 96 and 100. Each holds, per DeltaNet layer,
// the conv window (4 − 1) × 640 channels and the state 4 heads × 32 × 128, all f32:
// 2 layers × (7680 + 65536) bytes = 146432 bytes (the f32 attention layer needs nothing).
TEST(SessionCheckpoints, BudgetKeepsTheNewestAndTheEndsOfPrompts) {
    const Model model = Model::load(fixture_path("qwen3_5_binary"));
    const std::unique_ptr<Engine> engine = make_cpu_engine(model);
    const SessionOptions options{.sequence = {.max_positions = 256, .kv_format = KvFormat::f32},
                                 .checkpoints = {.interval = 8, .max_kept = 3}};
    Session session(*engine, options);
    const std::vector<int32_t> prompt = test::random_tokens(100, 21);
    session.run_turn(prompt, test::greedy_options(1));
    SessionStats s = session.stats();
    EXPECT_EQ(s.checkpoints_taken, 13);  // 12 interval + the end of the prompt
    EXPECT_EQ(s.checkpoints, 3);
    EXPECT_EQ(s.checkpoint_bytes, 3 * 146432);

    // Which three: a divergence at 95 returns to 88, one at 99 to 96, one at 50 to the start.
    auto reused_after_divergence_at = [&](int64_t at) {
        Session probe(*engine, options);
        probe.run_turn(prompt, test::greedy_options(1));
        std::vector<int32_t> p2(prompt.begin(), prompt.begin() + at);
        p2.push_back((prompt[size_t(at)] + 1) % 256);
        return probe.run_turn(p2, test::greedy_options(1)).reuse.reused;
    };
    EXPECT_EQ(reused_after_divergence_at(95), 88);
    EXPECT_EQ(reused_after_divergence_at(99), 96);
    EXPECT_EQ(reused_after_divergence_at(50), 0);

    // A second turn of 100 held + 20 new tokens adds 104, 112 (interval) and 120 (its end of prompt);
    // each time the oldest interval checkpoint goes (88, then 96, then 104), the first turn's end of
    // prompt stays: 100, 112, 120.
    std::vector<int32_t> p2 = concat({ids_of(session.ledger()), test::random_tokens(20, 22)});
    ASSERT_EQ(p2.size(), 120u);
    session.run_turn(p2, test::greedy_options(1));
    s = session.stats();
    EXPECT_EQ(s.checkpoints, 3);
    EXPECT_EQ(s.checkpoint_bytes, 3 * 146432);

    // max_kept 0 keeps nothing: any divergence re-reads from the start.
    Session none(*engine, {.sequence = options.sequence, .checkpoints = {.interval = 8, .max_kept = 0}});
    none.run_turn(prompt, test::greedy_options(1));
    EXPECT_EQ(none.stats().checkpoints, 0);
    EXPECT_EQ(none.run_turn(prompt, test::greedy_options(1)).reuse.reused, 0);

    EXPECT_EQ(message_of([&] { Session bad(*engine, {.sequence = options.sequence, .checkpoints = {.interval = -1}}); }),
              "session: checkpoint interval -1 is negative (0 turns interval checkpoints off)");
}

// A long prompt is read in interval pieces, each reported for a progress bar; the total counts only what
// is read (not what is reused), and the last report is the whole.
TEST(SessionProgress, PrefillReportsEachPieceThenTheWhole) {
    const Model model = Model::load(fixture_path("qwen3_5_binary"));
    const std::unique_ptr<Engine> engine = make_cpu_engine(model);
    Session session(*engine, {.sequence = {.max_positions = 256}, .checkpoints = {.interval = 32, .max_kept = 0}});
    using Reports = std::vector<std::pair<int64_t, int64_t>>;
    Reports reports;
    GenerationCallbacks callbacks;
    callbacks.on_prefill_progress = [&](int64_t done, int64_t total) { reports.emplace_back(done, total); };

    const std::vector<int32_t> prompt = test::random_tokens(100, 23);
    session.run_turn(prompt, test::greedy_options(1), callbacks);
    // Pieces end at 32, 64 and 96; generate() reads the last 4 and reports once.
    EXPECT_EQ(reports, (Reports{{32, 100}, {64, 100}, {96, 100}, {100, 100}}));

    // The 100 held tokens are reused; of 40 new ones, 28 reach the boundary at 128, then 12.
    reports.clear();
    session.run_turn(concat({ids_of(session.ledger()), test::random_tokens(40, 24)}), test::greedy_options(1),
                     callbacks);
    EXPECT_EQ(reports, (Reports{{28, 40}, {40, 40}}));
}

// ---- context limit, EOS, refusals ----

TEST(SessionContext, PromptTooLongIsRefusedAndGenerationStopsAtCapacity) {
    const Model model = Model::load(fixture_path("qwen3_5_binary"));
    const std::unique_ptr<Engine> engine = make_cpu_engine(model);
    Session session(*engine, {.sequence = {.max_positions = 48, .kv_format = KvFormat::f32},
                              .checkpoints = {.interval = 16, .max_kept = 4}});
    const std::vector<int32_t> p1 = test::random_tokens(30, 31);
    // 30 prompt tokens in a capacity of 48: 18 generated tokens fill it, and a 19th is sampled from the
    // logits of the 48th position but has no room: 48 − 30 + 1 = 19 tokens, finish "length".
    const TurnResult t1 = session.run_turn(p1, test::greedy_options(100));
    EXPECT_EQ(t1.generation.tokens.size(), 19u);
    EXPECT_EQ(t1.generation.finish, FinishReason::length);
    EXPECT_EQ(session.stats().position, 48);

    const std::vector<int32_t> before = ids_of(session.ledger());
    const SessionStats stats_before = session.stats();
    const std::vector<int32_t> too_long = test::random_tokens(49, 32);
    EXPECT_EQ(message_of([&] { session.run_turn(too_long, test::greedy_options(1)); }),
              "session: the prompt has 49 tokens, more than the sequence's capacity of 48; render fewer turns "
              "(docs/sessions.md, context limit)");
    std::vector<int32_t> bad_id = p1;
    bad_id[3] = 256;
    EXPECT_EQ(message_of([&] { session.run_turn(bad_id, test::greedy_options(1)); }),
              "session: prompt token 256 (at 3) is outside the vocabulary of 256 entries");
    EXPECT_EQ(message_of([&] { session.run_turn({}, test::greedy_options(1)); }),
              "session: the prompt is empty; a turn needs at least one token");
    GenerationOptions zero = test::greedy_options(1);
    zero.max_tokens = 0;
    EXPECT_EQ(message_of([&] { session.run_turn(p1, zero); }), "generate: max_tokens is 0; it must be at least 1");
    GenerationOptions open_ended = test::greedy_options(1);
    open_ended.max_tokens.reset();  // the fixture has no EOS
    EXPECT_NE(message_of([&] { session.run_turn(p1, open_ended); }).find("declares no EOS token"), std::string::npos);
    // None of these touched anything (p1 would have diverged at 30 and restored checkpoint 16).
    EXPECT_EQ(ids_of(session.ledger()), before);
    EXPECT_EQ(session.stats().position, stats_before.position);
    EXPECT_EQ(session.stats().checkpoints, stats_before.checkpoints);
    EXPECT_EQ(session.stats().turns, 1);

    // Dropping old turns is the caller's: a shorter conversation re-reads from where it differs.
    std::vector<int32_t> shorter = test::random_tokens(20, 33);
    shorter[0] = (p1[0] + 1) % 256;
    const TurnResult t2 = session.run_turn(shorter, test::greedy_options(5));
    EXPECT_EQ(t2.reuse.reused, 0);
    EXPECT_EQ(t2.generation.tokens.size(), 5u);
}

TEST(SessionEos, ReplyEndsAtEosWhichTheNextPromptFeeds) {
    const Model base = Model::load(fixture_path("qwen3_5_binary"));
    const std::unique_ptr<Engine> probe_engine = make_cpu_engine(base);
    const std::vector<int32_t> p1 = test::random_tokens(40, 41);
    Session probe(*probe_engine, {.sequence = {.max_positions = 256}, .checkpoints = {}});
    const std::vector<int32_t> free_run = probe.run_turn(p1, test::greedy_options(12)).generation.tokens;
    // The first token of the run not seen earlier in it, past position 0, plays EOS.
    size_t k = 1;
    while (k < free_run.size() && std::count(free_run.begin(), free_run.begin() + long(k), free_run[k]) > 0) ++k;
    ASSERT_LT(k, free_run.size());

    const std::shared_ptr<const Model> model = test::with_eos(base, {free_run[k]});
    const std::unique_ptr<Engine> engine = make_cpu_engine(model);
    Session session(*engine, {.sequence = {.max_positions = 256}, .checkpoints = {}});
    GenerationOptions open_ended = test::greedy_options(1);
    open_ended.max_tokens.reset();
    const TurnResult t1 = session.run_turn(p1, open_ended);
    EXPECT_EQ(t1.generation.finish, FinishReason::eos);
    EXPECT_EQ(t1.generation.tokens, std::vector<int32_t>(free_run.begin(), free_run.begin() + long(k) + 1));
    // The EOS is not fed: the ledger is the prompt and the reply without its last token.
    EXPECT_EQ(session.ledger().size(), int64_t(p1.size() + k));
    // The next prompt renders the reply with its end-of-turn token (the EOS) and a new message: all of
    // the held sequence is reused, and the EOS is the first token fed.
    const std::vector<int32_t> p2 = concat({p1, t1.generation.tokens, std::vector<int32_t>{1, 2, 3}});
    const TurnResult t2 = session.run_turn(p2, test::greedy_options(4));
    EXPECT_EQ(t2.reuse.reused, int64_t(p1.size() + k));
    EXPECT_EQ(t2.reuse.first_divergence, -1);
    EXPECT_EQ(session.ledger().tokens()[p1.size() + k], free_run[k]);
    EXPECT_EQ(session.ledger().generated()[p1.size() + k], 0);  // fed as prompt
    EXPECT_EQ(session.ledger().generated()[p1.size() + k - 1], 1);  // the reply kept its flags
}

// ---- measurement (printed; docs/sessions.md quotes it) ----

TEST(SessionMeasure, CheckpointSizeAndTime) {
    for (const char* fixture : {"qwen3_5_binary", "qwen3_binary"}) {
        const Model model = Model::load(fixture_path(fixture));
        const std::unique_ptr<Engine> engine = make_cpu_engine(model);
        for (KvFormat kv : test::kAllKvFormats) {
            std::unique_ptr<EngineSequence> s = engine->new_sequence({.max_positions = 512, .kv_format = kv});
            engine->forward(*s, test::random_tokens(300, 51));
            constexpr int kRepeats = 20;
            const auto start = std::chrono::steady_clock::now();
            size_t bytes = 0;
            for (int i = 0; i < kRepeats; ++i) bytes = s->checkpoint().byte_size();
            const double ms =
                std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count() / kRepeats;
            const size_t image = [&] {
                size_t n = 0;
                for (const StateChunk& c : s->save().chunks) n += c.bytes.size();
                return n;
            }();
            std::printf("[measure] %s %s at 300 tokens: checkpoint %zu bytes in %.3f ms; whole state %zu bytes\n",
                        fixture, std::string(kv_format_name(kv)).c_str(), bytes, ms, image);
            EXPECT_EQ(bytes, [&] {
                size_t n = 0;
                for (const StateChunkSpec& spec : state_checkpoint_layout(model.config(), kv, 300)) n += spec.bytes;
                return n;
            }());
        }
    }
    // Real geometries: sizes from the layout alone (nothing allocated).
    for (const char* name : {"bonsai-27b", "bonsai-8b"}) {
        const ModelConfig& config = find_geometry(name).config;
        for (KvFormat kv : test::kAllKvFormats) {
            size_t checkpoint = 0, image = 0;
            for (const StateChunkSpec& spec : state_checkpoint_layout(config, kv, 4096)) checkpoint += spec.bytes;
            for (const StateChunkSpec& spec : state_image_layout(config, kv, 4096)) image += spec.bytes;
            std::printf("[measure] %s %s at 4096 tokens: checkpoint %.1f MB, whole state %.1f MB\n", name,
                        std::string(kv_format_name(kv)).c_str(), checkpoint / 1e6, image / 1e6);
        }
    }
}

}  // namespace
}  // namespace deltabit
