// Turns driven a step at a time (Session::begin_turn, SessionTurn; runtime/session.h): the same tokens
// and logits, bit for bit, as run_turn, on the qwen3_5 (hybrid) and qwen3 (attention only) fixtures,
// greedy and seeded, fresh and reusing an earlier turn; stop strings; bounded prompt pieces; decode
// steps in their two halves (token_to_feed / token_fed, the batched executor's seam); cancel mid-prefill
// and mid-decode; refusals.
#include "engine_test_support.h"
#include "runtime/session.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace deltabit {
namespace {

using test::fixture_path;
using test::message_of;
using test::same_bits;

// Text through a stand-in detokenizer: each id is one lowercase letter.
std::string letter(int32_t id) { return std::string(1, char('a' + id % 26)); }

// What a turn produced: its tokens, the logits each was drawn from, and the sequence afterwards.
struct Trace {
    std::vector<int32_t> tokens;
    std::vector<std::vector<float>> logits;
    std::vector<int32_t> ledger;
    std::vector<float> last_logits;
    int64_t reused = 0;
    FinishReason finish = FinishReason::length;
    std::string streamed, text;  // what on_token released; the result's text
    int steps = 0;
};

GenerationCallbacks recording(Session& session, Trace& trace) {
    GenerationCallbacks callbacks;
    callbacks.on_token = [&session, &trace](int32_t token, std::string_view text) {
        trace.tokens.push_back(token);
        trace.logits.push_back(session.engine().last_logits(session.sequence()));
        trace.streamed += text;
    };
    callbacks.detokenize = letter;
    return callbacks;
}

void finish_trace(Session& session, const TurnResult& result, Trace& trace) {
    EXPECT_EQ(result.generation.tokens, trace.tokens);
    trace.ledger.assign(session.ledger().tokens().begin(), session.ledger().tokens().end());
    trace.last_logits = session.engine().last_logits(session.sequence());
    trace.reused = result.reuse.reused;
    trace.finish = result.generation.finish;
    trace.text = result.generation.text;
}

Trace by_run_turn(Session& session, std::span<const int32_t> prompt, const GenerationOptions& options) {
    Trace trace;
    const TurnResult result = session.run_turn(prompt, options, recording(session, trace));
    finish_trace(session, result, trace);
    return trace;
}

// Drives the turn step by step, checking each step's report: a piece of at most `max_piece` tokens
// (when > 0) until the prompt is read, the last piece with the first token; then one token per step.
Trace by_steps(Session& session, std::span<const int32_t> prompt, const GenerationOptions& options,
               int64_t max_piece = 0) {
    Trace trace;
    std::unique_ptr<SessionTurn> turn = session.begin_turn(prompt, options, recording(session, trace), {}, max_piece);
    int64_t read = 0;
    while (!turn->finished()) {
        const bool decoding = turn->decoding();
        const size_t tokens_before = trace.tokens.size();
        const TurnStep step = turn->step();
        ++trace.steps;
        const bool drew = decoding || turn->decoding() || turn->finished();  // a decode step, or the last piece
        EXPECT_EQ(step.token.has_value(), drew);
        EXPECT_EQ(trace.tokens.size(), tokens_before + (drew ? 1 : 0));
        if (step.token) EXPECT_EQ(*step.token, trace.tokens.back());
        EXPECT_EQ(step.finished, turn->finished());
        if (decoding) {
            EXPECT_EQ(step.prompt_tokens, 0);
        } else {
            EXPECT_GT(step.prompt_tokens, 0);
            if (max_piece > 0) EXPECT_LE(step.prompt_tokens, max_piece);
            read += step.prompt_tokens;
        }
    }
    EXPECT_EQ(read, int64_t(prompt.size()) - turn->reuse().reused);
    finish_trace(session, turn->result(), trace);
    return trace;
}

void expect_same(const Trace& a, const Trace& b) {
    EXPECT_EQ(a.tokens, b.tokens);
    ASSERT_EQ(a.logits.size(), b.logits.size());
    for (size_t i = 0; i < a.logits.size(); ++i) EXPECT_TRUE(same_bits(a.logits[i], b.logits[i])) << "token " << i;
    EXPECT_EQ(a.ledger, b.ledger);
    EXPECT_TRUE(same_bits(a.last_logits, b.last_logits));
    EXPECT_EQ(a.reused, b.reused);
    EXPECT_EQ(a.finish, b.finish);
    EXPECT_EQ(a.streamed, b.streamed);
    EXPECT_EQ(a.text, b.text);
}

struct StepCase {
    std::string fixture;
    bool sampled = false;
};

class SessionSteps : public testing::TestWithParam<StepCase> {};

// Two turns (the second reuses the first's work), run_turn against step by step: equal bits.
TEST_P(SessionSteps, StepByStepEqualsRunTurn) {
    const StepCase& c = GetParam();
    const std::shared_ptr<const Model> model = test::load_model(c.fixture);
    const std::unique_ptr<Engine> engine = make_cpu_engine(*model);
    // Interval 16 splits the 45-token prompt into three pieces; checkpoints make the reuse non-trivial.
    const SessionOptions options{.sequence = {.max_positions = 256, .kv_format = KvFormat::f32},
                                 .checkpoints = {.interval = 16, .max_kept = 4}};
    const GenerationOptions generation = c.sampled ? test::sampled_options(9, 77) : test::greedy_options(9);
    const std::vector<int32_t> first = test::random_tokens(45, 5);

    Session reference(*engine, options), stepped(*engine, options);
    const Trace ref1 = by_run_turn(reference, first, generation);
    const Trace step1 = by_steps(stepped, first, generation);
    expect_same(ref1, step1);
    EXPECT_EQ(step1.steps, 3 + 8);  // pieces [0, 16), [16, 32), [32, 45) (and token 1); then 8 tokens
    EXPECT_EQ(reference.stats().turns, stepped.stats().turns);
    EXPECT_EQ(reference.stats().checkpoints_taken, stepped.stats().checkpoints_taken);

    // A follow-up: the held conversation plus new tokens, reusing the first turn.
    std::vector<int32_t> second = ref1.ledger;
    for (int32_t id : test::random_tokens(20, 6)) second.push_back(id);
    const Trace ref2 = by_run_turn(reference, second, generation);
    const Trace step2 = by_steps(stepped, second, generation);
    EXPECT_GT(ref2.reused, 0);
    expect_same(ref2, step2);
}

INSTANTIATE_TEST_SUITE_P(Fixtures, SessionSteps,
                         testing::Values(StepCase{"qwen3_5_binary", false}, StepCase{"qwen3_5_binary", true},
                                         StepCase{"qwen3_binary", false}, StepCase{"qwen3_binary", true}),
                         [](const testing::TestParamInfo<StepCase>& info) {
                             return info.param.fixture + (info.param.sampled ? "_seeded" : "_greedy");
                         });

// Bounded pieces feed the forward calls that a checkpoint interval of the same size would, so for the
// hybrid model (whose logits depend on how the prompt is split) a turn with max_piece 8 equals run_turn
// with interval 8 bit for bit.
TEST(SessionStepsPieces, BoundedPiecesEqualRunTurnWithThatInterval) {
    const std::shared_ptr<const Model> model = test::load_model("qwen3_5_binary");
    const std::unique_ptr<Engine> engine = make_cpu_engine(*model);
    const SequenceOptions sequence{.max_positions = 256, .kv_format = KvFormat::f32};
    const std::vector<int32_t> prompt = test::random_tokens(45, 8);
    Session reference(*engine, {.sequence = sequence, .checkpoints = {.interval = 8, .max_kept = 2}});
    Session stepped(*engine, {.sequence = sequence, .checkpoints = {.interval = 16, .max_kept = 2}});
    const Trace ref = by_run_turn(reference, prompt, test::greedy_options(6));
    const Trace step = by_steps(stepped, prompt, test::greedy_options(6), 8);
    expect_same(ref, step);
    EXPECT_EQ(step.steps, 6 + 5);  // pieces ending at 8, 16, 24, 32, 40, 45 (and token 1); then 5 tokens
}

// cancel() leaves the session holding what was fed, consistent: the next turn reuses it and gives the
// tokens a session that never saw the cancelled turn gives (qwen3 with f32: a KV cut is exact).
TEST(SessionStepsCancel, CancelledTurnLeavesAReusableSession) {
    const std::shared_ptr<const Model> model = test::load_model("qwen3_binary");
    const std::unique_ptr<Engine> engine = make_cpu_engine(*model);
    const SessionOptions options{.sequence = {.max_positions = 256, .kv_format = KvFormat::f32}};
    const std::vector<int32_t> prompt = test::random_tokens(30, 9);
    Session session(*engine, options);
    std::unique_ptr<SessionTurn> turn = session.begin_turn(prompt, test::greedy_options(10));
    EXPECT_EQ(message_of([&] { session.begin_turn(prompt, test::greedy_options(10)); }),
              "session: a turn is in progress; finish or cancel it before starting another");
    EXPECT_EQ(message_of([&] { session.reset(); }),
              "session: a turn is in progress; finish or cancel it before resetting");
    turn->step();                              // the prompt, one piece, and token 1
    for (int i = 0; i < 3; ++i) turn->step();  // tokens 1..3 fed, 2..4 drawn (none ended the turn)
    turn->cancel();
    EXPECT_TRUE(turn->finished());
    EXPECT_TRUE(turn->cancelled());
    EXPECT_EQ(turn->result().generation.tokens.size(), 4u);  // all reported; the last was never fed
    EXPECT_EQ(session.ledger().size(), 30 + 3);
    EXPECT_EQ(session.ledger().size(), session.sequence().position());
    EXPECT_EQ(message_of([&] { turn->step(); }), "session: internal: a step after the turn finished");

    // The session is free again; the cancelled turn's tokens are held, so a new prompt reuses up to the
    // divergence and answers as a fresh session does.
    std::vector<int32_t> next = prompt;
    next.push_back(7);
    Session fresh(*engine, options);
    const Trace want = by_run_turn(fresh, next, test::greedy_options(5));
    const Trace got = by_steps(session, next, test::greedy_options(5));
    EXPECT_EQ(got.tokens, want.tokens);
    EXPECT_EQ(got.ledger, want.ledger);
    EXPECT_GE(got.reused, 29);

    // Destroying an unfinished turn closes it too.
    { std::unique_ptr<SessionTurn> open = session.begin_turn(next, test::greedy_options(2)); }
    EXPECT_FALSE(session.in_turn());
    EXPECT_EQ(message_of([&] { session.begin_turn(next, test::greedy_options(2), {}, {}, -1); }),
              "session: max_piece -1 is negative (0 leaves prompt pieces unbounded)");
}

// A stop string ends a stepped turn where it ends run_turn: same tokens, same text held back.
TEST(SessionStepsStop, StopStringEndsBothTheSame) {
    const std::shared_ptr<const Model> model = test::load_model("qwen3_5_binary");
    const std::unique_ptr<Engine> engine = make_cpu_engine(*model);
    const SessionOptions options{.sequence = {.max_positions = 256, .kv_format = KvFormat::f32},
                                 .checkpoints = {.interval = 16, .max_kept = 4}};
    const std::vector<int32_t> prompt = test::random_tokens(40, 11);
    Session probe(*engine, options);
    const Trace free_run = by_run_turn(probe, prompt, test::greedy_options(12));
    ASSERT_EQ(free_run.text.size(), 12u);
    // The letters of tokens 5 and 6: the turn ends at token 6 at the latest, the text before the match.
    const std::string stop = free_run.text.substr(5, 2);
    const size_t match = free_run.text.find(stop);
    ASSERT_GE(match, 1u) << "a match at the very start would not test the held-back text";
    GenerationOptions with_stop = test::greedy_options(12);
    with_stop.stop = {stop};

    Session reference(*engine, options), stepped(*engine, options);
    const Trace ref = by_run_turn(reference, prompt, with_stop);
    const Trace step = by_steps(stepped, prompt, with_stop);
    expect_same(ref, step);
    EXPECT_EQ(step.finish, FinishReason::stop);
    EXPECT_EQ(step.text, free_run.text.substr(0, match));
    EXPECT_EQ(step.streamed, step.text);
    EXPECT_EQ(step.tokens.size(), match + 2);
}

// The two halves of a decode step, with the caller feeding the token (what the server's scheduler does
// so that a batched executor can feed many sessions at once), in a batch's order over two sessions on
// one engine — every token fed, then every turn's record-and-draw: each gives the tokens and logits it
// gives alone through run_turn (the CPU engine keeps every sequence's logits; the CUDA engine only the
// latest call's, so there the scheduler interleaves call and draw per session).
TEST(SessionStepsHalves, FeedThenRecordInABatchEqualsRunTurn) {
    const std::shared_ptr<const Model> model = test::load_model("qwen3_5_binary");
    const std::unique_ptr<Engine> engine = make_cpu_engine(*model);
    const SessionOptions options{.sequence = {.max_positions = 256, .kv_format = KvFormat::f32},
                                 .checkpoints = {.interval = 16, .max_kept = 4}};
    const std::vector<int32_t> prompt_a = test::random_tokens(30, 12), prompt_b = test::random_tokens(50, 13);
    const GenerationOptions gen_a = test::sampled_options(10, 5), gen_b = test::greedy_options(7);

    Session ref_a(*engine, options), ref_b(*engine, options);
    const Trace want_a = by_run_turn(ref_a, prompt_a, gen_a);
    const Trace want_b = by_run_turn(ref_b, prompt_b, gen_b);

    Session a(*engine, options), b(*engine, options);
    Trace got_a, got_b;
    std::unique_ptr<SessionTurn> turn_a = a.begin_turn(prompt_a, gen_a, recording(a, got_a));
    std::unique_ptr<SessionTurn> turn_b = b.begin_turn(prompt_b, gen_b, recording(b, got_b));
    EXPECT_EQ(message_of([&] { turn_a->token_to_feed(); }),
              "session: internal: no token to feed (the prompt is unread or the turn has finished)");
    while (!turn_a->decoding()) turn_a->step();
    while (!turn_b->decoding()) turn_b->step();
    int both = 0;
    while (turn_a->decoding() || turn_b->decoding()) {
        std::vector<SessionTurn*> batch;
        for (SessionTurn* turn : {turn_a.get(), turn_b.get()})
            if (turn->decoding()) batch.push_back(turn);
        if (batch.size() == 2) ++both;
        for (SessionTurn* turn : batch) {
            const int32_t token = turn->token_to_feed();
            engine->forward(turn->sequence(), std::span(&token, 1));
        }
        for (SessionTurn* turn : batch) turn->token_fed();
    }
    EXPECT_EQ(both, 6);  // b's 7 tokens: 6 decode steps, all in a batch with a's
    finish_trace(a, turn_a->result(), got_a);
    finish_trace(b, turn_b->result(), got_b);
    expect_same(want_a, got_a);
    expect_same(want_b, got_b);
    EXPECT_EQ(a.stats().turns, 1);
    EXPECT_EQ(message_of([&] { turn_a->token_fed(); }), "session: internal: token_fed() without a token to feed");
}

// Cancelled mid-prefill (after some pieces): the session holds the pieces read, consistent, and the
// next turn with the same prompt reuses them and answers as a fresh session does.
TEST(SessionStepsCancel, CancelMidPrefillLeavesAReusableSession) {
    const std::shared_ptr<const Model> model = test::load_model("qwen3_binary");
    const std::unique_ptr<Engine> engine = make_cpu_engine(*model);
    const SessionOptions options{.sequence = {.max_positions = 256, .kv_format = KvFormat::f32}};
    const std::vector<int32_t> prompt = test::random_tokens(70, 14);
    Session session(*engine, options);
    std::unique_ptr<SessionTurn> turn = session.begin_turn(prompt, test::greedy_options(6), {}, {}, 16);
    EXPECT_EQ(turn->step().prompt_tokens, 16);
    EXPECT_EQ(turn->step().prompt_tokens, 16);
    EXPECT_FALSE(turn->decoding());
    turn->cancel();
    EXPECT_TRUE(turn->cancelled());
    EXPECT_TRUE(turn->result().generation.tokens.empty());
    EXPECT_EQ(session.ledger().size(), 32);
    EXPECT_EQ(session.sequence().position(), 32);
    EXPECT_FALSE(session.in_turn());

    Session fresh(*engine, options);
    const Trace want = by_run_turn(fresh, prompt, test::greedy_options(6));
    const Trace got = by_steps(session, prompt, test::greedy_options(6), 16);
    EXPECT_EQ(got.reused, 32);
    EXPECT_EQ(got.tokens, want.tokens);
    EXPECT_EQ(got.ledger, want.ledger);
}

}  // namespace
}  // namespace deltabit
