#include "server/scheduler.h"

#include "core/error.h"
#include "server/diffusion_job.h"
#include "server/token_logprob.h"
#include "text/tokenizer_stream.h"

#include <algorithm>
#include <optional>

namespace deltabit::server {
namespace {

using Clock = std::chrono::steady_clock;

std::string finish_name(FinishReason reason) {
    return reason == FinishReason::length ? "length" : "stop";  // OpenAI's "stop": EOS or a stop string
}

}  // namespace

// One admitted job: its turn on a session, driven a step at a time by the scheduler thread. A job
// first wants prefill steps (scoring the prompt a chunk at a time for echo + logprobs, then its prompt
// pieces; the last piece's step draws the first token), then decode steps: feed the token drawn last,
// draw the next.
class ActiveJob {
public:
    ActiveJob(Scheduler& scheduler, std::shared_ptr<Job> job, Session* session, Clock::time_point deadline)
        : scheduler_(scheduler), job_(std::move(job)), session_(session), deadline_(deadline),
          detokenizer_(scheduler.tokenizer_, {.skip_special = false}) {
        done_.kind = JobEvent::Kind::done;
        done_.prompt_tokens = int64_t(job_->prompt.size());
    }
    ActiveJob(const ActiveJob&) = delete;
    ActiveJob& operator=(const ActiveJob&) = delete;

    // Ends the job when it was cancelled (Job::cancel, shutdown) or ran past its deadline; checked
    // before each of its steps, so it stops within one step of either. True when it has finished.
    bool stopped(Clock::time_point now) {
        if (!finished_ && job_->cancelled()) stop("cancelled");
        if (!finished_ && now > deadline_) stop("deadline");
        return finished_;
    }
    bool decoding() const { return turn_ && turn_->decoding(); }

    // A prefill step: one chunk of the prompt's scoring, or one prompt piece (the turn begins with the
    // first). Returns the prompt tokens it read.
    int64_t prefill_step() {
        const Clock::time_point start = Clock::now();
        int64_t read = 0;
        try {
            if (job_->prompt_logprobs && !scored_) {
                read = score_prompt_chunk();
            } else if (!job_->generate) {
                done_.finish = "length";
                finish();
            } else {
                if (!turn_) begin();
                const TurnStep step = turn_->step();
                read = step.prompt_tokens;
                if (step.finished) end_turn();  // its first token was its last
            }
        } catch (const std::exception& e) {
            fail_with(e);
        }
        tokens_read_ += read;
        prefill_seconds_ += seconds_since(start);
        return read;
    }

    // A decode step in its two halves around the forward call: the token drawn last, to be fed to
    // sequence(); then fed(), which records it and draws the next (the job may finish with it).
    int32_t token_to_feed() const { return turn_->token_to_feed(); }
    EngineSequence& sequence() { return turn_->sequence(); }
    // `forward_seconds`: this job's share of the forward call.
    void fed(double forward_seconds) {
        const Clock::time_point start = Clock::now();
        try {
            if (turn_->token_fed().finished) end_turn();
        } catch (const std::exception& e) {
            fail_with(e);
        }
        decode_seconds_ += forward_seconds + seconds_since(start);
    }
    // The forward call for the token failed: the job ends with the error (the turn, cancelled, holds
    // what it held before the token).
    void forward_failed(const std::exception& e) { fail_with(e); }

    // The job's reader is this many events behind: it is not stepped until it catches up (a slow
    // client holds back its own generation, not the others', and its queue stays bounded).
    bool backlogged() const { return job_->pending() >= kMaxBacklog && !job_->cancelled(); }
    static constexpr size_t kMaxBacklog = 256;
    bool finished() const { return finished_; }
    void cancel() { job_->cancel(); }

    Session* session() const { return session_; }
    const JobEvent& done() const { return done_; }
    double prefill_seconds() const { return prefill_seconds_; }
    double decode_seconds() const { return decode_seconds_; }
    int64_t tokens_read() const { return tokens_read_; }

private:
    static double seconds_since(Clock::time_point start) {
        return std::chrono::duration<double>(Clock::now() - start).count();
    }
    // Ends the job early; the session keeps what the turn fed so far (consistent and reusable).
    void stop(const char* reason) {
        if (turn_) turn_->cancel();
        done_.finish = reason;
        finish();
    }
    void fail_with(const std::exception& e) {
        if (turn_) turn_->cancel();
        done_.kind = JobEvent::Kind::error;
        done_.status = 500;
        done_.message = e.what();
        finish();
    }
    void end_turn() {
        done_.cached_tokens = turn_->reuse().reused;
        done_.finish = finish_name(turn_->result().generation.finish);
        finish();
    }
    void finish() {
        turn_.reset();  // closes the turn before the session goes back to the pool
        scoring_.reset();  // a scoring cut short sends nothing: its logprobs go with its scratch sequence
        job_->push(done_);
        finished_ = true;
    }

    // echo + logprobs: every prompt token's logprob given the tokens before it, from a scratch sequence
    // (the session's own state is not touched) fed a chunk per step, at most `prefill_chunk` tokens, so
    // the host holds one chunk's logits [chunk][n_vocab] at a time and the other jobs step between
    // chunks. The logprobs gather here and go to the client in one event once the last chunk is read.
    // Feeding the prompt in pieces gives the logits one forward_all of the whole prompt gives (each
    // position sees the same tokens before it). The last prompt token is not fed: its logits would
    // score the token after the prompt.
    int64_t score_prompt_chunk() {
        Engine& engine = session_->engine();
        const std::vector<int32_t>& prompt = job_->prompt;
        // The request parser refuses an empty prompt; the reply would have no first token to echo.
        if (prompt.empty()) fail("echo: the prompt has no tokens to score");
        const size_t to_feed = prompt.size() - 1;
        if (!scoring_) {
            scoring_.emplace();
            const SequenceOptions options{.max_positions = std::max<int64_t>(int64_t(to_feed), 1),
                                          .kv_format = session_->sequence().kv_format()};
            scoring_->scratch = engine.new_sequence(options);
            scoring_->logprobs.reserve(to_feed);
        }
        PromptScoring& scoring = *scoring_;
        const int64_t chunk = scheduler_.options_.prefill_chunk;
        const size_t count = std::min(to_feed - scoring.fed, chunk > 0 ? size_t(chunk) : to_feed);
        if (count > 0) {
            const std::vector<float> logits = engine.forward_all(*scoring.scratch, std::span(prompt).subspan(scoring.fed, count));
            const size_t n_vocab = size_t(engine.config().n_vocab);
            for (size_t i = 0; i < count; ++i)
                scoring.logprobs.push_back(logprob_of(std::span(logits).subspan(i * n_vocab, n_vocab),
                                                      prompt[scoring.fed + i + 1], job_->top_logprobs));
            scoring.fed += count;
        }
        if (scoring.fed == to_feed) {
            JobEvent event;
            event.kind = JobEvent::Kind::prompt_logprobs;
            event.prompt_logprobs = std::move(scoring.logprobs);
            job_->push(std::move(event));
            scoring_.reset();
            scored_ = true;
        }
        return int64_t(count);
    }

    void begin() {
        Job& job = *job_;
        GenerationCallbacks callbacks;
        callbacks.detokenize = [this](int32_t id) { return detokenizer_.push(id); };
        callbacks.detokenize_finish = [this] { return detokenizer_.finish(); };
        callbacks.on_token = [this](int32_t token, std::string_view text) {
            JobEvent event;
            event.kind = JobEvent::Kind::token;
            event.token = token;
            event.text = std::string(text);
            if (job_->logprobs)
                event.logprob = logprob_of(session_->engine().last_logits(session_->sequence()), token, job_->top_logprobs);
            ++done_.completion_tokens;
            job_->push(std::move(event));
        };
        turn_ = session_->begin_turn(job.prompt, job.options, callbacks, {}, scheduler_.options_.prefill_chunk);
    }

    Scheduler& scheduler_;
    std::shared_ptr<Job> job_;
    Session* session_;
    Clock::time_point deadline_;
    text::StreamingDetokenizer detokenizer_;
    std::unique_ptr<SessionTurn> turn_;
    // The prompt's scoring under way (echo + logprobs): its scratch sequence, the prompt tokens fed to it,
    // the logprobs so far (one per prompt token after the first).
    struct PromptScoring {
        std::unique_ptr<EngineSequence> scratch;
        size_t fed = 0;
        std::vector<TokenLogprob> logprobs;
    };
    std::optional<PromptScoring> scoring_;
    JobEvent done_;
    double prefill_seconds_ = 0.0, decode_seconds_ = 0.0;
    int64_t tokens_read_ = 0;
    bool scored_ = false, finished_ = false;
};

Scheduler::Scheduler(Engine& engine, const text::Tokenizer& tokenizer, SchedulerOptions options)
    : engine_(&engine), tokenizer_(tokenizer), options_(std::move(options)) {
    pool_.emplace(engine, options_.pool);
    thread_ = std::thread([this] { run(); });
}

Scheduler::Scheduler(DiffusionRunner& runner, const text::Tokenizer& tokenizer, SchedulerOptions options)
    : diffusion_(&runner), tokenizer_(tokenizer), options_(std::move(options)) {
    stats_.block_diffusion = true;
    thread_ = std::thread([this] { run_diffusion(); });
}

Scheduler::~Scheduler() { stop(); }

bool Scheduler::submit(std::shared_ptr<Job> job) {
    {
        std::lock_guard lock(mutex_);
        if (stopping_ || int(queue_.size()) >= options_.max_queued) return false;
        queue_.push_back(std::move(job));
        stats_.queued = int(queue_.size());
    }
    wake_.notify_one();
    return true;
}

void Scheduler::stop() {
    {
        std::lock_guard lock(mutex_);
        if (stopping_ && !thread_.joinable()) return;
        stopping_ = true;
    }
    wake_.notify_one();
    if (thread_.joinable()) thread_.join();
}

std::chrono::milliseconds Scheduler::deadline_for(int64_t prompt_tokens, int64_t max_tokens) const {
    std::lock_guard lock(mutex_);
    // Until there are measurements, rates far below any real backend's, so that nothing is cut short.
    const double prefill_rate = stats_.prefill_seconds > 0.1 ? stats_.prefill_tokens / stats_.prefill_seconds : 20.0;
    const double decode_rate = stats_.decode_seconds > 0.1 ? stats_.decode_tokens / stats_.decode_seconds : 2.0;
    const double cost_s = double(prompt_tokens) / std::max(prefill_rate, 1.0) + double(max_tokens) / std::max(decode_rate, 0.1);
    return std::chrono::milliseconds(int64_t(1e3 * (30.0 + 10.0 * cost_s)));
}

void Scheduler::run() {
    for (;;) {
        bool stopping = false;
        {
            std::unique_lock lock(mutex_);
            wake_.wait(lock, [&] { return stopping_ || !queue_.empty() || !active_.empty(); });
            stopping = stopping_;
            if (stopping) {
                // Shutdown: nothing new starts; what runs is cancelled and stops at its next step.
                refuse_queued();
                if (active_.empty()) return;
            }
        }
        if (stopping)
            for (auto& job : active_) job->cancel();
        else
            admit();
        iterate();
        retire();
    }
}

void Scheduler::end_cancelled(Job& job) {
    JobEvent e;
    e.kind = JobEvent::Kind::done;
    e.finish = "cancelled";
    job.push(std::move(e));
    std::lock_guard lock(mutex_);
    ++stats_.finished["cancelled"];
}

void Scheduler::refuse_queued() {
    for (auto& job : queue_) {
        JobEvent e;
        e.kind = JobEvent::Kind::error;
        e.status = 503;
        e.message = "the server is shutting down";
        job->push(std::move(e));
    }
    queue_.clear();
    stats_.queued = 0;
}

// The block-diffusion loop (scheduler.h): the oldest queued job, run to its end, then the next.
void Scheduler::run_diffusion() {
    for (;;) {
        std::shared_ptr<Job> job;
        {
            std::unique_lock lock(mutex_);
            wake_.wait(lock, [&] { return stopping_ || !queue_.empty(); });
            if (stopping_) {
                refuse_queued();
                return;
            }
            job = queue_.front();
            queue_.pop_front();
            stats_.queued = int(queue_.size());
            stats_.active = 1;
            ++stats_.steps;
        }
        if (job->cancelled()) {  // its client left while it waited
            end_cancelled(*job);
            std::lock_guard lock(mutex_);
            stats_.active = 0;
            continue;
        }
        const Clock::time_point deadline =
            Clock::now() + deadline_for(int64_t(job->prompt.size()), job->options.max_tokens.value_or(0));
        const DiffusionJobResult r = run_diffusion_job(*diffusion_, tokenizer_, *job, deadline, [this] {
            std::lock_guard lock(mutex_);
            return stopping_;
        });
        {
            std::lock_guard lock(mutex_);
            stats_.active = 0;
            ++stats_.finished[r.done.kind == JobEvent::Kind::error ? std::string("error") : r.done.finish];
            stats_.prompt_tokens += r.done.prompt_tokens;
            stats_.generated_tokens += r.done.completion_tokens;
            stats_.decode_seconds += r.seconds;
            stats_.decode_tokens += r.done.completion_tokens;
            stats_.diffusion_blocks += r.blocks;
            stats_.denoising_steps += r.denoising_steps;
        }
        job->push(r.done);
    }
}

void Scheduler::admit() {
    while (int(active_.size()) < options_.pool.live) {
        std::shared_ptr<Job> job;
        {
            std::lock_guard lock(mutex_);
            if (queue_.empty()) return;
            job = queue_.front();
            queue_.pop_front();
            stats_.queued = int(queue_.size());
        }
        if (job->cancelled()) {
            end_cancelled(*job);
            continue;
        }
        Session* session = nullptr;
        try {
            session = pool_->acquire(job->prompt);
        } catch (const std::exception& e) {
            JobEvent event;
            event.kind = JobEvent::Kind::error;
            event.message = e.what();
            job->push(std::move(event));
            std::lock_guard lock(mutex_);
            ++stats_.finished["error"];
            continue;
        }
        if (!session) {  // every session is busy: wait for one
            std::lock_guard lock(mutex_);
            queue_.push_front(std::move(job));
            stats_.queued = int(queue_.size());
            return;
        }
        const int64_t max_tokens = job->generate ? job->options.max_tokens.value_or(0) : 0;
        // A scored prompt that then generates is read twice: scratch sequence, then session.
        const int64_t reads = job->prompt_logprobs && job->generate ? 2 : 1;
        const Clock::time_point deadline = Clock::now() + deadline_for(reads * int64_t(job->prompt.size()), max_tokens);
        active_.push_back(std::make_unique<ActiveJob>(*this, std::move(job), session, deadline));
    }
}

// One iteration (scheduler.h): the jobs that can take a step this time, prefill pieces within the
// chunk, then one decode step for every job past its prompt.
void Scheduler::iterate() {
    {
        std::lock_guard lock(mutex_);
        stats_.active = int(active_.size());
        ++stats_.steps;
    }
    const Clock::time_point now = Clock::now();
    std::vector<ActiveJob*> prefilling, decoding;
    for (auto& job : active_) {
        if (job->backlogged() || job->stopped(now)) continue;
        (job->decoding() ? decoding : prefilling).push_back(job.get());
    }
    // Admission order: the oldest prompt first, up to the chunk's tokens in all (a piece may take the
    // total past it; the next job waits for the next iteration).
    int64_t budget = options_.prefill_chunk > 0 ? options_.prefill_chunk : INT64_MAX;
    for (ActiveJob* job : prefilling) {
        while (budget > 0 && !job->finished() && !job->decoding()) budget -= std::max<int64_t>(job->prefill_step(), 1);
        if (budget <= 0) break;
    }
    step_active(decoding);
    // Every active job waits for its reader: give the readers time instead of spinning.
    if (prefilling.empty() && decoding.empty() && !active_.empty())
        std::this_thread::sleep_for(std::chrono::milliseconds(1));
}

// The batched decode step (scheduler.h): every job in `decoding` feeds the token it drew last in one
// forward call (Engine::forward_batch: on the GPU the weights are read once for all of them), then each
// job's fed() records its token and draws the next from its own row of logits. A lone job takes forward(),
// which lets the CUDA engine run greedy decoding a step ahead. A batch the engine refuses (a row past its
// capacity, say) changed nothing, so each job then takes its own call and only the faulty one fails.
void Scheduler::step_active(std::span<ActiveJob* const> decoding) {
    if (decoding.empty()) return;
    const Clock::time_point start = Clock::now();
    if (decoding.size() > 1) {
        std::vector<EngineSequence*> sequences;
        std::vector<int32_t> tokens;
        for (ActiveJob* job : decoding) {
            sequences.push_back(&job->sequence());
            tokens.push_back(job->token_to_feed());
        }
        bool stepped = false;
        try {
            engine_->forward_batch(sequences, tokens);
            stepped = true;
        } catch (const std::exception&) {
            // Refused before any state changed: each job alone below, so the error lands on its owner.
        }
        if (stepped) {
            // The step's time is every row's: each waited for all of it.
            const double seconds = std::chrono::duration<double>(Clock::now() - start).count();
            {
                std::lock_guard lock(mutex_);
                ++stats_.batched_steps;
                stats_.batched_rows += int64_t(decoding.size());
                ++stats_.decode_steps;
                stats_.decode_rows += int64_t(decoding.size());
            }
            for (ActiveJob* job : decoding) job->fed(seconds);
            return;
        }
    }
    for (ActiveJob* job : decoding) {
        const Clock::time_point job_start = Clock::now();
        try {
            const int32_t token = job->token_to_feed();
            engine_->forward(job->sequence(), std::span(&token, 1));
        } catch (const std::exception& e) {
            job->forward_failed(e);
            continue;
        }
        {  // counted before fed() sends the token, so a client that has its reply sees the step in stats()
            std::lock_guard lock(mutex_);
            ++stats_.decode_steps;
            ++stats_.decode_rows;
        }
        job->fed(std::chrono::duration<double>(Clock::now() - job_start).count());
    }
}

void Scheduler::retire() {
    for (auto it = active_.begin(); it != active_.end();) {
        if (!(*it)->finished()) {
            ++it;
            continue;
        }
        account(**it);
        pool_->release((*it)->session());
        it = active_.erase(it);
    }
    std::lock_guard lock(mutex_);
    stats_.active = int(active_.size());
    stats_.pool = pool_->counts();
}

void Scheduler::account(const ActiveJob& job) {
    const JobEvent& done = job.done();
    std::lock_guard lock(mutex_);
    ++stats_.finished[done.kind == JobEvent::Kind::error ? std::string("error") : done.finish];
    stats_.prompt_tokens += done.prompt_tokens;
    stats_.cached_tokens += done.cached_tokens;
    stats_.generated_tokens += done.completion_tokens;
    stats_.prefill_seconds += job.prefill_seconds();
    stats_.prefill_tokens += job.tokens_read();
    stats_.decode_seconds += job.decode_seconds();
    stats_.decode_tokens += done.completion_tokens;
}

SchedulerStats Scheduler::stats() const {
    std::lock_guard lock(mutex_);
    return stats_;
}

}  // namespace deltabit::server
