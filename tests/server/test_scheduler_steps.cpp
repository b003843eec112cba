// The scheduler on its own (no HTTP): several jobs in flight on one engine, prompts read in chunks
// between decode steps, decode steps batched (Engine::forward_batch), each job's tokens equal to those it
// gets alone; and the order of engine calls the CUDA engine needs — a sequence's token drawn after its
// own forward call (or the batch it was a row of) and before any other, since that engine keeps only the
// latest call's logits (runtime/engine.h). A CPU engine wrapped to refuse any other order stands in for it
// here.
#include "core/error.h"
#include "runtime/engine.h"
#include "server/scheduler.h"
#include "server_process.h"
#include "text/tokenizer_load.h"

#include <gtest/gtest.h>

#include <algorithm>
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
        inner_->forward(sequence, ids);
        latest_ = {&sequence};
        ++forward_calls_;
    }
    void forward_batch(std::span<EngineSequence* const> sequences, std::span<const int32_t> ids) override {
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
        std::vector<float> logits = inner_->forward_all(sequence, ids);
        latest_ = {&sequence};
        return logits;
    }

    int64_t forward_calls() const { return forward_calls_; }
    int64_t batch_calls() const { return batch_calls_; }
    int64_t batch_rows() const { return batch_rows_; }

private:
    void check_latest(const EngineSequence& sequence) const {
        if (std::find(latest_.begin(), latest_.end(), &sequence) == latest_.end())
            fail("engine: cuda: another sequence ran a forward pass since this one's; feed this sequence again first");
    }
    std::unique_ptr<Engine> inner_;
    std::vector<const EngineSequence*> latest_;  // the last call's sequences (a batch's rows)
    int64_t forward_calls_ = 0, batch_calls_ = 0, batch_rows_ = 0;
};

struct Reply {
    std::vector<int32_t> tokens;
    std::vector<float> logprobs;
    server::JobEvent done;
    std::string error;
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

// Three jobs at once, prompts of 70, 41 and 5 tokens read in chunks of 16 between decode steps, one
// with logprobs: none errs under the latest-logits rule, and each gets the tokens (and logprobs) it
// gets alone on a fresh scheduler.
TEST(SchedulerSteps, ConcurrentJobsKeepTheCudaCallOrderAndTheirAloneTokens) {
    const fs::path dir = test::scratch_dir("deltabit_test_scheduler_steps");
    fs::remove_all(dir);
    const fs::path model = test::server_model(dir / "model");
    const text::Tokenizer tokenizer = text::load_tokenizer(model.string());
    server::SchedulerOptions options;
    options.pool.live = 3;
    options.pool.session = {.sequence = {.max_positions = 256, .kv_format = KvFormat::f32}};
    options.prefill_chunk = 16;

    const std::vector<std::vector<int32_t>> prompts = {bytes_of(70, 'a'), bytes_of(41, 'h'), bytes_of(5, 'q')};
    constexpr int64_t kTokens = 24;
    std::vector<Reply> alone;
    for (size_t i = 0; i < prompts.size(); ++i) {
        LatestLogitsOnly engine(open_engine(model, "cpu"));
        server::Scheduler scheduler(engine, tokenizer, options);
        const auto job = job_for(prompts[i], kTokens, i == 1);
        ASSERT_TRUE(scheduler.submit(job));
        alone.push_back(collect(*job));
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

}  // namespace
}  // namespace deltabit
