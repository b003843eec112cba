// Turn-start checkpoints (runtime/session.h): a caller names where a model's turn begins, the session
// checkpoints there, and a next turn whose template re-renders the reply differently reuses everything
// before it — exactly, bit for bit on every backend and KV format; the eviction classes and the byte
// budget; snapshots that keep the kind; and, on the real Qwen3.5 template, that preserve_thinking makes
// a well-formed reply re-render as generated (so the whole held sequence is reused).
#include "engine_test_support.h"
#include "models/sequence_state.h"
#include "runtime/session.h"

#ifdef DELTABIT_HAVE_TEXT
#include "text/chat_template.h"
#endif

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

namespace deltabit {
namespace {

using test::same_bits;

std::vector<int32_t> concat(std::initializer_list<std::span<const int32_t>> parts) {
    std::vector<int32_t> out;
    for (std::span<const int32_t> p : parts) out.insert(out.end(), p.begin(), p.end());
    return out;
}

struct TurnStartCase {
    test::Backend backend;
    std::string fixture;
    KvFormat kv;
};

std::string turn_start_case_name(const ::testing::TestParamInfo<TurnStartCase>& info) {
    return test::backend_label(info.param.backend) + "_" + info.param.fixture + "_" +
           std::string(kv_format_name(info.param.kv));
}

class SessionTurnStart : public ::testing::TestWithParam<TurnStartCase> {};

constexpr int64_t kInterval = 64;
constexpr int64_t kTurnStart = 150;  // end of the last message; a 22-token generation prompt follows
constexpr int64_t kPrompt1 = 172;
constexpr int64_t kReply = 12;

// Turn 1: 172 tokens with a turn start at 150 (pieces 0..64, 64..128, 128..150, 150..172), 12 generated.
// Turn 2 is what a template that drops the reply's scaffold renders: the first 150 tokens, then the
// reply without the generation prompt, then a new message (40 tokens: 202 in all) — it differs from the held
// sequence at 150. Reused: 150 from the turn-start checkpoint; without it, 128 (the interval one).
// Every forward call of both turns must equal a replay of the same history bit for bit, and a fresh
// session given turn 2's prompt with turn start 150 makes the same calls from 0, so its tokens and the
// logits they were chosen from must be the reused turn's, bit for bit.
TEST_P(SessionTurnStart, ANextTurnDivergingAfterTheTurnStartReusesItExactly) {
    const TurnStartCase& c = GetParam();
    const std::shared_ptr<const Model> model = test::load_model(c.fixture);
    const std::unique_ptr<Engine> inner = test::make_engine(model, c.backend);
    if (!inner) GTEST_SKIP() << "no CUDA on this machine";
    test::RecordingEngine engine(*inner);
    const SessionOptions options{.sequence = {.max_positions = 1024, .kv_format = c.kv},
                                 .checkpoints = {.interval = kInterval, .max_kept = 8}};
    Session session(engine, options);
    const bool any_position = state_checkpoint_layout(model->config(), c.kv, 0).empty();
    ASSERT_FALSE(any_position) << "this case needs checkpoints";

    const std::vector<int32_t> p1 = test::random_tokens(kPrompt1, 61);
    const std::vector<int64_t> starts1 = {kTurnStart};
    const TurnResult t1 = session.run_turn(p1, test::greedy_options(kReply), {}, starts1);
    ASSERT_EQ(engine.calls.size(), size_t(4 + kReply - 1));
    EXPECT_EQ(engine.calls[2].start, 128);
    EXPECT_EQ(engine.calls[3].start, kTurnStart);
    const SessionStats s1 = session.stats();
    EXPECT_EQ(s1.checkpoint_positions,
              (std::vector<std::pair<int64_t, CheckpointKind>>{{64, CheckpointKind::interval},
                                                                {128, CheckpointKind::interval},
                                                                {150, CheckpointKind::turn_start},
                                                                {172, CheckpointKind::end_of_prompt}}));

    std::vector<int32_t> reply = t1.generation.tokens;
    reply[0] = (p1[kTurnStart] + 1) % 256;  // the re-rendered reply starts where the generation prompt was
    const std::vector<int32_t> p2 =
        concat({std::span<const int32_t>(p1).first(kTurnStart), reply, test::random_tokens(40, 62)});
    const int64_t turn_start2 = int64_t(p2.size()) - 8;  // the new message's end; 8 more tokens of scaffold
    const std::vector<int64_t> starts2 = {turn_start2};
    const size_t calls_before = engine.calls.size(), chosen_before = engine.chosen_from.size();
    const TurnResult t2 = session.run_turn(p2, test::greedy_options(kReply), {}, starts2);
    EXPECT_EQ(t2.reuse.common_prefix, kTurnStart);
    EXPECT_EQ(t2.reuse.first_divergence, kTurnStart);
    EXPECT_EQ(t2.reuse.reused, kTurnStart);
    EXPECT_EQ(t2.reuse.from, ReuseFrom::checkpoint);
    EXPECT_EQ(t2.reuse.checkpoint_kind, CheckpointKind::turn_start);
    // Checkpoints past 150 belonged to the replaced history; turn 2 adds 192 (interval), its turn start
    // (194) and its end of prompt (202).
    ASSERT_EQ(p2.size(), 202u);
    std::vector<std::pair<int64_t, CheckpointKind>> want = {{64, CheckpointKind::interval},
                                                            {128, CheckpointKind::interval},
                                                            {150, CheckpointKind::turn_start},
                                                            {192, CheckpointKind::interval},
                                                            {turn_start2, CheckpointKind::turn_start},
                                                            {int64_t(p2.size()), CheckpointKind::end_of_prompt}};
    EXPECT_EQ(session.stats().checkpoint_positions, want);

    const std::vector<int32_t> history = test::expect_calls_replay_exactly(*inner, options.sequence, engine.calls);
    EXPECT_EQ(history, std::vector<int32_t>(session.ledger().tokens().begin(), session.ledger().tokens().end()));

    // From scratch: a fresh session on p2 with turn starts 150 and turn_start2 splits its prompt exactly
    // where the two turns did, so every call, and so every logit, is the same.
    test::RecordingEngine fresh_engine(*inner);
    Session fresh(fresh_engine, options);
    const std::vector<int64_t> both = {kTurnStart, turn_start2};
    const TurnResult want_turn = fresh.run_turn(p2, test::greedy_options(kReply), {}, both);
    EXPECT_EQ(t2.generation.tokens, want_turn.generation.tokens);
    ASSERT_EQ(engine.chosen_from.size() - chosen_before, fresh_engine.chosen_from.size());
    for (size_t i = 0; i < fresh_engine.chosen_from.size(); ++i)
        EXPECT_TRUE(same_bits(engine.chosen_from[chosen_before + i], fresh_engine.chosen_from[i])) << "token " << i;
    // The reused turn's own calls are the fresh session's calls past 150, logits included.
    std::vector<test::RecordingEngine::Call> fresh_tail;
    for (const test::RecordingEngine::Call& call : fresh_engine.calls)
        if (call.start >= kTurnStart) fresh_tail.push_back(call);
    ASSERT_EQ(engine.calls.size() - calls_before, fresh_tail.size());
    for (size_t i = 0; i < fresh_tail.size(); ++i) {
        const test::RecordingEngine::Call& got = engine.calls[calls_before + i];
        EXPECT_EQ(got.start, fresh_tail[i].start) << "call " << i;
        EXPECT_EQ(got.ids, fresh_tail[i].ids) << "call " << i;
        EXPECT_TRUE(same_bits(got.last_logits, fresh_tail[i].last_logits)) << "call " << i;
    }
}

std::vector<TurnStartCase> turn_start_cases() {
    std::vector<TurnStartCase> out;
    for (test::Backend backend : test::kAllBackends) {
        for (KvFormat kv : test::kAllKvFormats) out.push_back({backend, "qwen3_5_binary", kv});
        out.push_back({backend, "qwen3_binary", KvFormat::kivi4});  // attention only, but kivi4 needs checkpoints
    }
    return out;
}

INSTANTIATE_TEST_SUITE_P(Fixtures, SessionTurnStart, ::testing::ValuesIn(turn_start_cases()), turn_start_case_name);

// A chat of short turns (no interval checkpoints: interval 0), max_kept 3. Each turn i has a prompt that
// extends the held sequence by 20 tokens, a turn start 6 tokens before its end, and 1 generated token.
// Eviction classes (session.h): ends of prompts go before turn starts, and the newest of each kind
// stay (the taking order is traced in the comment below).
TEST(SessionTurnStartPolicy, EvictionKeepsTurnStartsAndTheNewestPair) {
    const std::shared_ptr<const Model> model = test::load_model("qwen3_5_binary");
    const std::unique_ptr<Engine> engine = make_cpu_engine(model);
    const SessionOptions options{.sequence = {.max_positions = 512}, .checkpoints = {.interval = 0, .max_kept = 3}};
    Session session(*engine, options);
    std::vector<int32_t> prompt;
    std::vector<int64_t> turn_starts, ends;
    for (int turn = 0; turn < 4; ++turn) {
        prompt.assign(session.ledger().tokens().begin(), session.ledger().tokens().end());
        const std::vector<int32_t> more = test::random_tokens(20, 70 + turn);
        prompt.insert(prompt.end(), more.begin(), more.end());
        const std::vector<int64_t> start = {int64_t(prompt.size()) - 6};
        turn_starts.push_back(start[0]);
        ends.push_back(int64_t(prompt.size()));
        const TurnResult t = session.run_turn(prompt, test::greedy_options(1), {}, start);
        EXPECT_EQ(t.reuse.from, turn == 0 ? ReuseFrom::nothing : ReuseFrom::held);
    }
    // Taken: T0 E0 T1 E1 T2 E2 T3 E3 (8), kept 3. Each eviction drops an end of prompt that is not the
    // newest, then turn starts that are not the newest, oldest first: what stays is T2, T3 and E3.
    const SessionStats s = session.stats();
    EXPECT_EQ(s.checkpoints_taken, 8);
    EXPECT_EQ(s.checkpoint_positions,
              (std::vector<std::pair<int64_t, CheckpointKind>>{{turn_starts[2], CheckpointKind::turn_start},
                                                                {turn_starts[3], CheckpointKind::turn_start},
                                                                {ends[3], CheckpointKind::end_of_prompt}}));

    // A byte budget of two checkpoints (each 146,432 bytes on this fixture: test_session.cpp) keeps the
    // newest pair, whatever max_kept allows.
    const int64_t one = s.checkpoint_bytes / 3;
    ASSERT_EQ(one, 146432);
    Session budget(*engine, {.sequence = options.sequence,
                             .checkpoints = {.interval = 0, .max_kept = 8, .max_bytes = 2 * one + one / 2}});
    std::vector<int32_t> p = test::random_tokens(40, 80);
    const std::vector<int64_t> start = {34};
    budget.run_turn(p, test::greedy_options(1), {}, start);
    p.assign(budget.ledger().tokens().begin(), budget.ledger().tokens().end());
    const std::vector<int32_t> more = test::random_tokens(20, 81);
    p.insert(p.end(), more.begin(), more.end());
    const std::vector<int64_t> start2 = {int64_t(p.size()) - 6};
    budget.run_turn(p, test::greedy_options(1), {}, start2);
    EXPECT_EQ(budget.stats().checkpoints, 2);
    EXPECT_EQ(budget.stats().checkpoint_bytes, 2 * one);
    EXPECT_EQ(budget.stats().checkpoint_positions,
              (std::vector<std::pair<int64_t, CheckpointKind>>{{start2[0], CheckpointKind::turn_start},
                                                                {int64_t(p.size()), CheckpointKind::end_of_prompt}}));

    // Refusals, before anything changes.
    EXPECT_EQ(test::message_of([&] {
                  const std::vector<int64_t> bad = {10, 10};
                  session.run_turn(prompt, test::greedy_options(1), {}, bad);
              }),
              "session: turn start 1 is at 10; turn starts must ascend within 1 .. " + std::to_string(prompt.size()) +
                  " (the prompt's length)");
    EXPECT_EQ(test::message_of([&] {
                  const std::vector<int64_t> bad = {0};
                  session.run_turn(prompt, test::greedy_options(1), {}, bad);
              }),
              "session: turn start 0 is at 0; turn starts must ascend within 1 .. " + std::to_string(prompt.size()) +
                  " (the prompt's length)");
    EXPECT_EQ(session.stats().turns, 4);
    EXPECT_EQ(test::message_of([&] {
                  Session bad(*engine, {.sequence = options.sequence, .checkpoints = {.max_bytes = -1}});
              }),
              "session: checkpoint max_bytes -1 is negative (0 sets no byte budget)");
}

// A snapshot keeps each checkpoint's kind, so a loaded session evicts and reports as the saved one.
TEST(SessionTurnStartSnapshot, KindsSurviveSaveAndLoad) {
    const std::shared_ptr<const Model> model = test::load_model("qwen3_5_binary");
    const std::unique_ptr<Engine> engine = make_cpu_engine(model);
    const SessionOptions options{.sequence = {.max_positions = 512}, .checkpoints = {.interval = 16, .max_kept = 8}};
    Session session(*engine, options);
    const std::vector<int32_t> p = test::random_tokens(40, 90);
    const std::vector<int64_t> start = {35};
    session.run_turn(p, test::greedy_options(3), {}, start);
    const std::filesystem::path file = std::filesystem::temp_directory_path() / "deltabit_test_turn_start.dbsnap";
    session.save(file);
    std::ifstream in(file, std::ios::binary);
    const std::string bytes{std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
    EXPECT_NE(bytes.find(R"({"position":35,"end_of_prompt":false,"turn_start":true})"), std::string::npos);
    EXPECT_NE(bytes.find(R"({"position":40,"end_of_prompt":true})"), std::string::npos);
    Session loaded(*engine, options);
    loaded.load(file);
    EXPECT_EQ(loaded.stats().checkpoint_positions, session.stats().checkpoint_positions);
    std::filesystem::remove(file);
}

#ifdef DELTABIT_HAVE_TEXT

std::vector<int32_t> bytes_of(const std::string& text) {
    std::vector<int32_t> ids;
    for (unsigned char c : text) ids.push_back(c);
    return ids;
}

// The real Qwen3.5 template (tests/text/templates/qwen3.5.jinja), thinking on, and a reply as the model
// writes one: its thinking, "\n</think>\n\n", the answer. With preserve_thinking the next turn's
// prompt starts with everything the session holds after the reply (the previous prompt, then the
// reply), so the whole of it is reused; without, the prompt differs right after the previous turn
// start's "<|im_start|>assistant\n" and the turn start is where the session returns to. Tokens are
// bytes, as with the fixtures' byte tokenizer; the reply is fed as if generated (the session cannot
// tell: what it holds is what it reuses).
TEST(SessionTurnStartTemplates, PreservedThinkingReusesTheWholeReplyOnQwen35) {
    std::ifstream in(std::filesystem::path(DELTABIT_SOURCE_DIR) / "tests" / "text" / "templates" / "qwen3.5.jinja");
    const std::string source{std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
    const text::ChatTemplate chat = text::ChatTemplate::from_string(source, "qwen3.5.jinja");
    const std::string reply = "The user greets me.\n</think>\n\nHello! How can I help?";

    const std::shared_ptr<const Model> model = test::load_model("qwen3_5_binary");
    const std::unique_ptr<Engine> engine = make_cpu_engine(model);
    for (bool preserve : {false, true}) {
        SCOPED_TRACE(preserve ? "preserve_thinking" : "default");
        text::ChatRequest request;
        request.messages = {{{"role", "user"}, {"content", "hi"}}};
        request.enable_thinking = true;
        if (preserve) request.preserve_thinking = true;
        request.add_generation_prompt = false;
        const int64_t turn_start = int64_t(chat.render(request).size());
        request.add_generation_prompt = true;
        const std::string prompt1 = chat.render(request);
        ASSERT_EQ(prompt1.substr(size_t(turn_start)), "<|im_start|>assistant\n<think>\n");

        Session session(*engine, {.sequence = {.max_positions = 512}, .checkpoints = {.interval = 0, .max_kept = 8}});
        const std::vector<int64_t> starts = {turn_start};
        session.run_turn(bytes_of(prompt1 + reply), test::greedy_options(1), {}, starts);
        const int64_t held = session.ledger().size();

        request.messages.push_back({{"role", "assistant"}, {"content", reply}});
        request.messages.push_back({{"role", "user"}, {"content", "tell me more"}});
        const std::string prompt2 = chat.render(request);
        const TurnResult t2 = session.run_turn(bytes_of(prompt2), test::greedy_options(1));
        if (preserve) {
            EXPECT_TRUE(prompt2.starts_with(prompt1 + reply)) << prompt2;
            EXPECT_EQ(t2.reuse.reused, held);
            EXPECT_EQ(t2.reuse.from, ReuseFrom::held);
        } else {
            EXPECT_EQ(t2.reuse.first_divergence, turn_start + 22);  // after "<|im_start|>assistant\n"
            EXPECT_EQ(t2.reuse.reused, turn_start);
            EXPECT_EQ(t2.reuse.checkpoint_kind, CheckpointKind::turn_start);
        }
    }
}

#endif

}  // namespace
}  // namespace deltabit
