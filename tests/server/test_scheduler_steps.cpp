// The scheduler on its own (no HTTP): several jobs in flight on one engine, prompts read in chunks
// between decode steps, decode steps batched (Engine::forward_batch), each job's tokens equal to those it
// gets alone; and the order of engine calls the CUDA engine needs — a sequence's token drawn after its
// own forward call (or the batch it was a row of) and before any other, since that engine keeps only the
// latest call's logits (runtime/engine.h). A CPU engine wrapped to refuse any other order stands in for it
// here. A prompt scored for echo + logprobs is read a chunk per iteration, with the logprobs of one
// forward pass over the whole prompt, while the other jobs decode between its chunks.
#include "core/error.h"
#include "runtime/engine.h"
#include "server/scheduler.h"
#include "server/token_logprob.h"
#include "server_process.h"
#include "text/tokenizer_load.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <functional>
#include <future>
#include <map>
#include <vector>

namespace deltabit {
namespace {

namespace fs = std::filesystem;

// The CUDA engine's contract on logits, enforced over the CPU engine: next_token() and last_logits()
// of a sequence whose logits a later forward call of another sequence would have overwritten are an
// Error, with the CUDA engine's words.
class LatestLogitsOnly final : public Engine {
public:
    explicit LatestLogitsOnly(std::unique_ptr<Engine> inner) : inner_(std::move(inner)) {}

    const ModelConfig& config() const override { return inner_->config(); }
    std::string_view backend_name() const override { return inner_->backend_name(); }
    std::string description() const override { return inner_->description(); }
    std::string fingerprint() const override { return inner_->fingerprint(); }
    std::unique_ptr<EngineSequence> new_sequence(const SequenceOptions& options) const override {
        return inner_->new_sequence(options);
    }
    void forward(EngineSequence& sequence, std::span<const int32_t> ids) override {
        record('f', sequence, ids.size());
        inner_->forward(sequence, ids);
        latest_ = {&sequence};
        ++forward_calls_;
    }
    void forward_batch(std::span<EngineSequence* const> sequences, std::span<const int32_t> ids) override {
        for (EngineSequence* sequence : sequences) record('b', *sequence, 1);
        inner_->forward_batch(sequences, ids);
        latest_.assign(sequences.begin(), sequences.end());
        ++batch_calls_;
        batch_rows_ += int64_t(sequences.size());
    }
    int32_t next_token(EngineSequence& sequence, Sampler& sampler, const TokenHistory& history) override {
        check_latest(sequence);
        return inner_->next_token(sequence, sampler, history);
    }
    std::vector<float> last_logits(const EngineSequence& sequence) const override {
        check_latest(sequence);
        return inner_->last_logits(sequence);
    }
    std::vector<float> forward_all(EngineSequence& sequence, std::span<const int32_t> ids) override {
        record('a', sequence, ids.size());
        std::vector<float> logits = inner_->forward_all(sequence, ids);
        latest_ = {&sequence};
        return logits;
    }

    int64_t forward_calls() const { return forward_calls_; }
    int64_t batch_calls() const { return batch_calls_; }
    int64_t batch_rows() const { return batch_rows_; }

    // Every forward call in order, a batch as one entry per row: 'f' forward, 'b' a row of forward_batch,
    // 'a' forward_all. Read once the scheduler is idle or stopped.
    struct Call {
        char kind;
        const EngineSequence* sequence;
        size_t ids;
    };
    const std::vector<Call>& calls() const { return calls_; }
    // Runs on the scheduler thread before each call is recorded (and made).
    std::function<void(const Call&)> before_call;

private:
    void record(char kind, const EngineSequence& sequence, size_t ids) {
        const Call call{kind, &sequence, ids};
        if (before_call) before_call(call);
        calls_.push_back(call);
    }
    void check_latest(const EngineSequence& sequence) const {
        if (std::find(latest_.begin(), latest_.end(), &sequence) == latest_.end())
            fail("engine: cuda: another sequence ran a forward pass since this one's; feed this sequence again first");
    }
    std::unique_ptr<Engine> inner_;
    std::vector<const EngineSequence*> latest_;  // the last call's sequences (a batch's rows)
    int64_t forward_calls_ = 0, batch_calls_ = 0, batch_rows_ = 0;
    std::vector<Call> calls_;
};

struct Reply {
    std::vector<int32_t> tokens;
    std::vector<float> logprobs;
    server::JobEvent done;
    std::string error;
    std::vector<server::TokenLogprob> prompt_logprobs;
    int prompt_logprobs_events = 0;
};

std::shared_ptr<server::Job> job_for(const std::vector<int32_t>& prompt, int64_t max_tokens, bool logprobs) {
    auto job = std::make_shared<server::Job>();
    job->prompt = prompt;
    job->options.max_tokens = max_tokens;
    job->options.sampling.temperature = 0.0f;
    job->logprobs = logprobs;
    return job;
}

Reply collect(server::Job& job) {
    Reply reply;
    for (;;) {
        const std::optional<server::JobEvent> e = job.pop(std::chrono::seconds(60));
        if (!e) {
            reply.error = "no event within 60 s";
            return reply;
        }
        if (e->kind == server::JobEvent::Kind::token) {
            reply.tokens.push_back(e->token);
            if (e->logprob) reply.logprobs.push_back(e->logprob->logprob);
        } else if (e->kind == server::JobEvent::Kind::prompt_logprobs) {
            reply.prompt_logprobs = e->prompt_logprobs;
            ++reply.prompt_logprobs_events;
        } else if (e->kind == server::JobEvent::Kind::error) {
            reply.error = e->message;
            return reply;
        } else if (e->kind == server::JobEvent::Kind::done) {
            reply.done = *e;
            return reply;
        }
    }
}

std::vector<int32_t> bytes_of(size_t n, char first) {
    std::vector<int32_t> ids;
    for (size_t i = 0; i < n; ++i) ids.push_back(int32_t('a' + (first - 'a' + int(i % 7)) % 26));
    return ids;
}

// A scheduler's options for these tests: `live` sessions of 256 f32 positions, prompts read `chunk` tokens
// an iteration.
server::SchedulerOptions scheduler_options(int live, int64_t chunk) {
    server::SchedulerOptions options;
    options.pool.live = live;
    options.pool.session = {.sequence = {.max_positions = 256, .kv_format = KvFormat::f32}};
    options.prefill_chunk = chunk;
    return options;
}

// What `job` gets served alone, on a fresh engine and scheduler of its own (the stand-in's rules enforced).
Reply served_alone(const fs::path& model, const text::Tokenizer& tokenizer, const server::SchedulerOptions& options,
                   const std::shared_ptr<server::Job>& job) {
    LatestLogitsOnly engine(open_engine(model, "cpu"));
    server::Scheduler scheduler(engine, tokenizer, options);
    if (!scheduler.submit(job)) return Reply{.error = "not admitted"};
    return collect(*job);
}

// Three jobs at once, prompts of 70, 41 and 5 tokens read in chunks of 16 between decode steps, one
// with logprobs: none errs under the latest-logits rule, and each gets the tokens (and logprobs) it
// gets alone on a fresh scheduler.
TEST(SchedulerSteps, ConcurrentJobsKeepTheCudaCallOrderAndTheirAloneTokens) {
    const fs::path dir = test::scratch_dir("deltabit_test_scheduler_steps");
    fs::remove_all(dir);
    const fs::path model = test::server_model(dir / "model");
    const text::Tokenizer tokenizer = text::load_tokenizer(model.string());
    const server::SchedulerOptions options = scheduler_options(3, 16);

    const std::vector<std::vector<int32_t>> prompts = {bytes_of(70, 'a'), bytes_of(41, 'h'), bytes_of(5, 'q')};
    constexpr int64_t kTokens = 24;
    std::vector<Reply> alone;
    for (size_t i = 0; i < prompts.size(); ++i) {
        alone.push_back(served_alone(model, tokenizer, options, job_for(prompts[i], kTokens, i == 1)));
        ASSERT_EQ(alone.back().error, "");
    }

    LatestLogitsOnly engine(open_engine(model, "cpu"));
    server::Scheduler scheduler(engine, tokenizer, options);
    std::vector<std::shared_ptr<server::Job>> jobs;
    for (size_t i = 0; i < prompts.size(); ++i) {
        jobs.push_back(job_for(prompts[i], kTokens, i == 1));
        ASSERT_TRUE(scheduler.submit(jobs.back()));
    }
    for (size_t i = 0; i < jobs.size(); ++i) {
        const Reply got = collect(*jobs[i]);
        SCOPED_TRACE(i);
        EXPECT_EQ(got.error, "");
        EXPECT_EQ(got.done.finish, "length");
        EXPECT_EQ(got.done.completion_tokens, kTokens);
        EXPECT_EQ(got.tokens, alone[i].tokens);
        EXPECT_EQ(got.logprobs, alone[i].logprobs);
    }
    EXPECT_EQ(jobs[1]->pending(), 0u);
    // Chunks of 16: 5 + 3 + 1 prompt calls, and one row per fed token (all but each job's last): a call of
    // its own, or a row of a batched step when other jobs decoded at the same time — as all three do once
    // the 70-token prompt is read (each has 23 tokens to feed; the prompts take 8 iterations).
    EXPECT_EQ(engine.forward_calls() + engine.batch_rows(), 5 + 3 + 1 + 3 * (kTokens - 1));
    EXPECT_GT(engine.batch_calls(), 0);
    EXPECT_GE(engine.batch_rows(), 2 * engine.batch_calls());
    scheduler.stop();  // after the jobs are retired: their counts are in the stats
    const server::SchedulerStats stats = scheduler.stats();
    EXPECT_EQ(stats.finished.at("length"), 3);
    EXPECT_EQ(stats.generated_tokens, 3 * kTokens);
    EXPECT_EQ(stats.batched_steps, engine.batch_calls());
    EXPECT_EQ(stats.batched_rows, engine.batch_rows());
    fs::remove_all(dir);
}

// The wrapper itself refuses the order it stands for (a test that cannot fail would prove nothing).
TEST(SchedulerSteps, TheStandInRefusesADrawAfterAnotherSequencesCall) {
    const fs::path dir = test::scratch_dir("deltabit_test_scheduler_standin");
    fs::remove_all(dir);
    LatestLogitsOnly engine(open_engine(test::server_model(dir / "model"), "cpu"));
    const SequenceOptions options{.max_positions = 16, .kv_format = KvFormat::f32};
    std::unique_ptr<EngineSequence> a = engine.new_sequence(options), b = engine.new_sequence(options);
    const int32_t ids[2] = {1, 2};
    engine.forward(*a, ids);
    engine.forward(*b, ids);
    Sampler sampler(SamplingParams{.temperature = 0.0f});
    TokenHistory history;
    EXPECT_THROW(engine.next_token(*a, sampler, history), Error);
    EXPECT_NO_THROW(engine.next_token(*b, sampler, history));
    // A batch's rows may all draw; a sequence outside it may not.
    std::unique_ptr<EngineSequence> c = engine.new_sequence(options);
    engine.forward(*c, ids);
    EngineSequence* rows[2] = {a.get(), b.get()};
    const int32_t next[2] = {3, 4};
    engine.forward_batch(rows, next);
    EXPECT_NO_THROW(engine.next_token(*a, sampler, history));
    EXPECT_NO_THROW(engine.next_token(*b, sampler, history));
    EXPECT_THROW(engine.next_token(*c, sampler, history), Error);
    fs::remove_all(dir);
}

// echo + logprobs with max_tokens 0 (lm-evaluation-harness's loglikelihood request).
std::shared_ptr<server::Job> scoring_job(const std::vector<int32_t>& prompt, int top_logprobs) {
    auto job = job_for(prompt, 0, false);
    job->generate = false;
    job->prompt_logprobs = true;
    job->top_logprobs = top_logprobs;
    return job;
}

// The one-step scoring the chunks must reproduce: one forward_all over the whole prompt on a fresh engine,
// prompt token i scored by the logits of position i − 1.
std::vector<server::TokenLogprob> scored_in_one_pass(const fs::path& model, const std::vector<int32_t>& prompt, int top) {
    std::unique_ptr<Engine> engine = open_engine(model, "cpu");
    std::unique_ptr<EngineSequence> sequence =
        engine->new_sequence({.max_positions = int64_t(prompt.size()), .kv_format = KvFormat::f32});
    const std::vector<float> logits = engine->forward_all(*sequence, prompt);
    const size_t n_vocab = size_t(engine->config().n_vocab);
    std::vector<server::TokenLogprob> out;
    for (size_t i = 1; i < prompt.size(); ++i)
        out.push_back(server::logprob_of(std::span(logits).subspan((i - 1) * n_vocab, n_vocab), prompt[i], top));
    return out;
}

// Bit for bit: the same floats, the same alternatives in the same order.
void expect_same_logprobs(const std::vector<server::TokenLogprob>& got, const std::vector<server::TokenLogprob>& want) {
    ASSERT_EQ(got.size(), want.size());
    for (size_t i = 0; i < got.size(); ++i) {
        SCOPED_TRACE(testing::Message() << "prompt token " << i + 1);
        ASSERT_EQ(got[i].token, want[i].token);
        ASSERT_EQ(got[i].logprob, want[i].logprob);
        ASSERT_EQ(got[i].top, want[i].top);
    }
}

std::vector<LatestLogitsOnly::Call> calls_of(const LatestLogitsOnly& engine, char kind) {
    std::vector<LatestLogitsOnly::Call> out;
    for (const LatestLogitsOnly::Call& c : engine.calls())
        if (c.kind == kind) out.push_back(c);
    return out;
}

// A 70-token prompt scored in chunks of 16 (69 tokens fed: 16 + 16 + 16 + 16 + 5), and unbounded (one
// chunk of 69), on the attention-only fixture and on a gated-DeltaNet hybrid: the logprobs and top
// alternatives of one forward pass over the whole prompt, exactly, in one event.
TEST(SchedulerSteps, EchoScoringInChunksEqualsOneForwardPassOverThePrompt) {
    const fs::path dir = test::scratch_dir("deltabit_test_scheduler_echo");
    fs::remove_all(dir);
    const std::vector<int32_t> prompt = bytes_of(70, 'c');
    constexpr int kTop = 3;
    for (const char* fixture : {"qwen3_binary", "qwen3_5_binary"}) {
        const fs::path model = test::server_model(dir / fixture, fixture);
        const text::Tokenizer tokenizer = text::load_tokenizer(model.string());
        const std::vector<server::TokenLogprob> want = scored_in_one_pass(model, prompt, kTop);
        for (const int64_t chunk : {int64_t(16), int64_t(0)}) {
            SCOPED_TRACE(testing::Message() << fixture << ", prefill_chunk " << chunk);
            const server::SchedulerOptions options = scheduler_options(1, chunk);
            LatestLogitsOnly engine(open_engine(model, "cpu"));
            server::Scheduler scheduler(engine, tokenizer, options);
            const auto job = scoring_job(prompt, kTop);
            ASSERT_TRUE(scheduler.submit(job));
            const Reply got = collect(*job);
            scheduler.stop();
            ASSERT_EQ(got.error, "");
            EXPECT_EQ(got.done.finish, "length");
            EXPECT_EQ(got.done.prompt_tokens, 70);
            EXPECT_EQ(got.done.completion_tokens, 0);
            EXPECT_EQ(got.prompt_logprobs_events, 1);
            expect_same_logprobs(got.prompt_logprobs, want);
            // The chunks the scratch sequence was fed: none past the chunk, all of them one sequence.
            const std::vector<LatestLogitsOnly::Call> scoring = calls_of(engine, 'a');
            std::vector<size_t> sizes;
            for (const auto& c : scoring) sizes.push_back(c.ids);
            const std::vector<size_t> want_sizes = chunk == 16 ? std::vector<size_t>{16, 16, 16, 16, 5} : std::vector<size_t>{69};
            EXPECT_EQ(sizes, want_sizes);
            for (const auto& c : scoring) EXPECT_EQ(c.sequence, scoring.front().sequence);
            EXPECT_EQ(engine.calls().size(), scoring.size());  // nothing else ran: max_tokens 0
        }
    }
    fs::remove_all(dir);
}

// A job decoding while another's 97-token prompt is scored in chunks of 16: the first job takes a decode
// step, and sends its token, between every two chunks, and each gets what it gets alone.
TEST(SchedulerSteps, AnotherJobStreamsWhileALongPromptIsScored) {
    const fs::path dir = test::scratch_dir("deltabit_test_scheduler_echo_streams");
    fs::remove_all(dir);
    const fs::path model = test::server_model(dir / "model");
    const text::Tokenizer tokenizer = text::load_tokenizer(model.string());
    const server::SchedulerOptions options = scheduler_options(2, 16);
    const std::vector<int32_t> long_prompt = bytes_of(97, 'e');
    constexpr int64_t kTokens = 40;

    const Reply alone = served_alone(model, tokenizer, options, job_for(bytes_of(5, 'q'), kTokens, true));
    ASSERT_EQ(alone.error, "");

    LatestLogitsOnly engine(open_engine(model, "cpu"));
    // The streaming job's first decode step (its second forward call, after its prompt) waits until the
    // scored job is queued: that one is admitted while the other decodes with nearly all its tokens to
    // go, whatever the timing.
    std::promise<void> decoding, both_queued;
    std::shared_future<void> gate = both_queued.get_future().share();
    const auto streaming = job_for(bytes_of(5, 'q'), kTokens, true);
    const auto scored = scoring_job(long_prompt, 2);
    std::vector<size_t> streamed_at_chunk;  // the streaming job's events waiting when each chunk starts
    int forwards = 0;
    engine.before_call = [&](const LatestLogitsOnly::Call& call) {
        if (call.kind == 'f' && ++forwards == 2) {
            decoding.set_value();
            gate.wait();
        }
        if (call.kind == 'a') streamed_at_chunk.push_back(streaming->pending());
    };
    server::Scheduler scheduler(engine, tokenizer, options);
    ASSERT_TRUE(scheduler.submit(streaming));
    decoding.get_future().wait();
    ASSERT_TRUE(scheduler.submit(scored));
    both_queued.set_value();
    const Reply got_scored = collect(*scored);
    const Reply got_streaming = collect(*streaming);
    scheduler.stop();

    ASSERT_EQ(got_scored.error, "");
    expect_same_logprobs(got_scored.prompt_logprobs, scored_in_one_pass(model, long_prompt, 2));
    ASSERT_EQ(got_streaming.error, "");
    EXPECT_EQ(got_streaming.tokens, alone.tokens);
    EXPECT_EQ(got_streaming.logprobs, alone.logprobs);
    // 96 tokens fed in 6 chunks, one per iteration; the streaming job's token count grew between each two.
    ASSERT_EQ(streamed_at_chunk.size(), 6u);
    for (size_t i = 1; i < streamed_at_chunk.size(); ++i) EXPECT_GT(streamed_at_chunk[i], streamed_at_chunk[i - 1]) << i;
    const auto& calls = engine.calls();
    const auto first = std::find_if(calls.begin(), calls.end(), [](const auto& c) { return c.kind == 'a'; });
    const auto last = std::find_if(calls.rbegin(), calls.rend(), [](const auto& c) { return c.kind == 'a'; }).base();
    EXPECT_GE(std::count_if(first, last, [](const auto& c) { return c.kind != 'a'; }), 5);
    fs::remove_all(dir);
}

// A scoring job cancelled after its second chunk: no third chunk, no logprobs sent, finish "cancelled";
// the session it held then scores the same prompt whole and exactly.
TEST(SchedulerSteps, ScoringCancelledBetweenChunksLeavesNothingBehind) {
    const fs::path dir = test::scratch_dir("deltabit_test_scheduler_echo_cancel");
    fs::remove_all(dir);
    const fs::path model = test::server_model(dir / "model");
    const text::Tokenizer tokenizer = text::load_tokenizer(model.string());
    const server::SchedulerOptions options = scheduler_options(1, 16);
    const std::vector<int32_t> prompt = bytes_of(97, 'k');

    LatestLogitsOnly engine(open_engine(model, "cpu"));
    const auto cancelled = scoring_job(prompt, 1);
    int chunks = 0;
    engine.before_call = [&](const LatestLogitsOnly::Call& call) {
        if (call.kind == 'a' && ++chunks == 2) cancelled->cancel();  // checked before the job's next step
    };
    server::Scheduler scheduler(engine, tokenizer, options);
    ASSERT_TRUE(scheduler.submit(cancelled));
    const Reply got_cancelled = collect(*cancelled);
    EXPECT_EQ(got_cancelled.error, "");
    EXPECT_EQ(got_cancelled.done.finish, "cancelled");
    EXPECT_EQ(got_cancelled.prompt_logprobs_events, 0);
    EXPECT_EQ(calls_of(engine, 'a').size(), 2u);

    const auto again = scoring_job(prompt, 1);
    ASSERT_TRUE(scheduler.submit(again));
    const Reply got = collect(*again);
    scheduler.stop();
    ASSERT_EQ(got.error, "");
    EXPECT_EQ(got.done.finish, "length");
    expect_same_logprobs(got.prompt_logprobs, scored_in_one_pass(model, prompt, 1));
    EXPECT_EQ(calls_of(engine, 'a').size(), 2u + 6u);
    const server::SchedulerStats stats = scheduler.stats();
    EXPECT_EQ(stats.finished.at("cancelled"), 1);
    EXPECT_EQ(stats.finished.at("length"), 1);
    fs::remove_all(dir);
}

// echo + logprobs with generation: the prompt scored in chunks first (its logprobs before any token),
// then the same tokens and logprobs as without echo. A one-token prompt has nothing to score: an empty
// event and no forward call for it.
TEST(SchedulerSteps, ScoredPromptThenGeneratesAndAOneTokenPromptScoresNothing) {
    const fs::path dir = test::scratch_dir("deltabit_test_scheduler_echo_generate");
    fs::remove_all(dir);
    const fs::path model = test::server_model(dir / "model");
    const text::Tokenizer tokenizer = text::load_tokenizer(model.string());
    const server::SchedulerOptions options = scheduler_options(1, 16);
    const std::vector<int32_t> prompt = bytes_of(50, 'm');
    constexpr int64_t kTokens = 12;

    const Reply plain = served_alone(model, tokenizer, options, job_for(prompt, kTokens, true));
    ASSERT_EQ(plain.error, "");
    LatestLogitsOnly engine(open_engine(model, "cpu"));
    server::Scheduler scheduler(engine, tokenizer, options);
    const auto echoed = job_for(prompt, kTokens, true);
    echoed->prompt_logprobs = true;
    echoed->top_logprobs = 2;
    ASSERT_TRUE(scheduler.submit(echoed));
    const std::optional<server::JobEvent> first = echoed->pop(std::chrono::seconds(60));
    ASSERT_TRUE(first.has_value());
    ASSERT_EQ(first->kind, server::JobEvent::Kind::prompt_logprobs);
    expect_same_logprobs(first->prompt_logprobs, scored_in_one_pass(model, prompt, 2));
    const Reply got = collect(*echoed);
    ASSERT_EQ(got.error, "");
    EXPECT_EQ(got.tokens, plain.tokens);
    EXPECT_EQ(got.logprobs, plain.logprobs);
    EXPECT_EQ(got.done.completion_tokens, kTokens);
    EXPECT_EQ(calls_of(engine, 'a').size(), 4u);  // 49 tokens: 16 + 16 + 16 + 1

    const size_t calls_before = engine.calls().size();
    const auto single = scoring_job({int32_t('z')}, 2);
    ASSERT_TRUE(scheduler.submit(single));
    const Reply scored_single = collect(*single);
    scheduler.stop();
    ASSERT_EQ(scored_single.error, "");
    EXPECT_EQ(scored_single.done.finish, "length");
    EXPECT_EQ(scored_single.prompt_logprobs_events, 1);
    EXPECT_TRUE(scored_single.prompt_logprobs.empty());
    EXPECT_EQ(engine.calls().size(), calls_before);
    fs::remove_all(dir);
}

}  // namespace
}  // namespace deltabit
