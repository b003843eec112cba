#include "server/scheduler.h"

#include "core/error.h"
#include "text/tokenizer_stream.h"

#include <algorithm>
#include <cmath>

namespace deltabit::server {
namespace {

using Clock = std::chrono::steady_clock;

// Thrown out of Session::run_turn at a step boundary to end a job early.
struct StopTurn {
    std::string reason;  // "cancelled" or "deadline"
};

// log-softmax of `logits` at `token`, and the `top` most likely tokens (ties to the lower id).
TokenLogprob logprob_of(std::span<const float> logits, int32_t token, int top) {
    float max = -INFINITY;
    for (float x : logits) max = std::max(max, x);
    double sum = 0.0;
    for (float x : logits) sum += std::exp(double(x) - max);
    const float log_z = float(std::log(sum)) + max;
    TokenLogprob out;
    out.token = token;
    out.logprob = logits[size_t(token)] - log_z;
    if (top > 0) {
        std::vector<int32_t> ids(logits.size());
        for (size_t i = 0; i < ids.size(); ++i) ids[i] = int32_t(i);
        const size_t k = std::min(ids.size(), size_t(top));
        std::partial_sort(ids.begin(), ids.begin() + ptrdiff_t(k), ids.end(), [&](int32_t a, int32_t b) {
            return logits[size_t(a)] != logits[size_t(b)] ? logits[size_t(a)] > logits[size_t(b)] : a < b;
        });
        for (size_t i = 0; i < k; ++i) out.top.emplace_back(ids[i], logits[size_t(ids[i])] - log_z);
    }
    return out;
}

std::string finish_name(FinishReason reason) {
    return reason == FinishReason::length ? "length" : "stop";  // OpenAI's "stop": EOS or a stop string
}

}  // namespace

// One admitted job, run on a thread of its own that holds the engine only between a grant (step())
// and its next step boundary (see scheduler.h).
class TurnRunner {
public:
    TurnRunner(Scheduler& scheduler, std::shared_ptr<Job> job, Session* session, Clock::time_point deadline)
        : scheduler_(scheduler), job_(std::move(job)), session_(session), deadline_(deadline),
          thread_([this] { body(); }) {}
    ~TurnRunner() { thread_.join(); }

    // Lets the runner take one step; returns at its next boundary or when it has finished.
    void step() {
        const Clock::time_point start = Clock::now();
        std::unique_lock lock(mutex_);
        if (finished_) return;
        runner_turn_ = true;
        turn_.notify_all();
        turn_.wait(lock, [&] { return !runner_turn_; });
        (decoding_ ? decode_seconds_ : prefill_seconds_) += std::chrono::duration<double>(Clock::now() - start).count();
    }
    void cancel() { job_->cancel(); }
    // The job's reader is this many events behind: it is not stepped until it catches up (a slow
    // client holds back its own generation, not the others', and its queue stays bounded).
    bool backlogged() const { return job_->pending() >= kMaxBacklog && !job_->cancelled(); }
    static constexpr size_t kMaxBacklog = 256;
    bool finished() const {
        std::lock_guard lock(mutex_);
        return finished_;
    }

    Session* session() const { return session_; }
    const JobEvent& done() const { return done_; }
    double prefill_seconds() const { return prefill_seconds_; }
    double decode_seconds() const { return decode_seconds_; }
    int64_t tokens_read() const { return tokens_read_; }

private:
    // The runner's side of a step boundary: hand the engine back, wait for the next grant, then stop
    // here if the job was cancelled or ran out of time.
    void boundary() {
        {
            std::unique_lock lock(mutex_);
            runner_turn_ = false;
            turn_.notify_all();
            turn_.wait(lock, [&] { return runner_turn_; });
        }
        if (job_->cancelled()) throw StopTurn{"cancelled"};
        if (Clock::now() > deadline_) throw StopTurn{"deadline"};
    }

    void body() {
        {
            std::unique_lock lock(mutex_);
            turn_.wait(lock, [&] { return runner_turn_; });
        }
        Job& job = *job_;
        done_.kind = JobEvent::Kind::done;
        done_.prompt_tokens = int64_t(job.prompt.size());
        try {
            if (job.cancelled()) throw StopTurn{"cancelled"};
            if (job.prompt_logprobs) score_prompt();
            if (job.generate) {
                generate();
            } else {
                done_.finish = "length";
            }
        } catch (const StopTurn& stop) {
            done_.finish = stop.reason;
        } catch (const std::exception& e) {
            done_.kind = JobEvent::Kind::error;
            done_.status = 500;
            done_.message = e.what();
        }
        job.push(done_);
        std::lock_guard lock(mutex_);
        finished_ = true;
        runner_turn_ = false;
        turn_.notify_all();
    }

    // echo + logprobs: every prompt token's logprob given the tokens before it, from a scratch sequence
    // (the session's own state is not touched).
    void score_prompt() {
        Engine& engine = session_->engine();
        const std::vector<int32_t>& prompt = job_->prompt;
        const SequenceOptions options{.max_positions = int64_t(prompt.size()), .kv_format = session_->sequence().kv_format()};
        std::unique_ptr<EngineSequence> scratch = engine.new_sequence(options);
        const std::vector<float> logits = engine.forward_all(*scratch, prompt);
        tokens_read_ += int64_t(prompt.size());
        const size_t n_vocab = size_t(engine.config().n_vocab);
        JobEvent event;
        event.kind = JobEvent::Kind::prompt_logprobs;
        for (size_t i = 1; i < prompt.size(); ++i)
            event.prompt_logprobs.push_back(logprob_of(std::span(logits).subspan((i - 1) * n_vocab, n_vocab), prompt[i],
                                                       job_->top_logprobs));
        job_->push(std::move(event));
        boundary();
    }

    void generate() {
        Job& job = *job_;
        const text::Tokenizer& tokenizer = scheduler_.tokenizer_;
        text::StreamingDetokenizer detokenizer(tokenizer, {.skip_special = false});
        GenerationCallbacks callbacks;
        callbacks.detokenize = [&](int32_t id) { return detokenizer.push(id); };
        callbacks.detokenize_finish = [&] { return detokenizer.finish(); };
        callbacks.on_token = [&](int32_t token, std::string_view text) {
            decoding_ = true;
            JobEvent event;
            event.kind = JobEvent::Kind::token;
            event.token = token;
            event.text = std::string(text);
            if (job.logprobs)
                event.logprob = logprob_of(session_->engine().last_logits(session_->sequence()), token, job.top_logprobs);
            ++done_.completion_tokens;
            job.push(std::move(event));
        };
        callbacks.after_forward = [&](int64_t) { boundary(); };
        callbacks.on_prefill_progress = [&](int64_t done, int64_t total) {
            if (done < total) boundary();  // a piece of a long prompt; the last is followed by after_forward
        };
        const TurnResult turn = session_->run_turn(job.prompt, job.options, callbacks);
        done_.cached_tokens = turn.reuse.reused;
        tokens_read_ += turn.generation.timings.prompt_tokens;
        done_.finish = finish_name(turn.generation.finish);
    }

    Scheduler& scheduler_;
    std::shared_ptr<Job> job_;
    Session* session_;
    Clock::time_point deadline_;
    JobEvent done_;
    double prefill_seconds_ = 0.0, decode_seconds_ = 0.0;
    int64_t tokens_read_ = 0;
    bool decoding_ = false;  // written by the runner, read by step() after the runner has yielded

    mutable std::mutex mutex_;
    std::condition_variable turn_;
    bool runner_turn_ = false;
    bool finished_ = false;
    std::thread thread_;  // last: starts after every member above exists
};

Scheduler::Scheduler(Engine& engine, const text::Tokenizer& tokenizer, SchedulerOptions options)
    : engine_(engine), tokenizer_(tokenizer), options_(std::move(options)), pool_(engine, options_.pool) {
    thread_ = std::thread([this] { run(); });
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
                // Shutdown: nothing new starts; what runs is cancelled and stops at its next boundary.
                for (auto& job : queue_) {
                    JobEvent e;
                    e.kind = JobEvent::Kind::error;
                    e.status = 503;
                    e.message = "the server is shutting down";
                    job->push(std::move(e));
                }
                queue_.clear();
                stats_.queued = 0;
                if (active_.empty()) return;
            }
        }
        if (!stopping) admit();
        step_active();
        retire();
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
            JobEvent e;
            e.kind = JobEvent::Kind::done;
            e.finish = "cancelled";
            job->push(std::move(e));
            std::lock_guard lock(mutex_);
            ++stats_.finished["cancelled"];
            continue;
        }
        Session* session = nullptr;
        try {
            session = pool_.acquire(job->prompt);
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
        const Clock::time_point deadline = Clock::now() + deadline_for(int64_t(job->prompt.size()), max_tokens);
        active_.push_back(std::make_unique<TurnRunner>(*this, std::move(job), session, deadline));
    }
}

// The seam for batched decoding (scheduler.h): one step of every active job.
void Scheduler::step_active() {
    bool stopping;
    {
        std::lock_guard lock(mutex_);
        stopping = stopping_;
        stats_.active = int(active_.size());
        ++stats_.steps;
    }
    bool stepped = false;
    for (auto& runner : active_) {
        if (stopping) runner->cancel();
        if (runner->backlogged()) continue;
        runner->step();
        stepped = true;
    }
    // Every active job waits for its reader: give the readers time instead of spinning.
    if (!stepped && !active_.empty()) std::this_thread::sleep_for(std::chrono::milliseconds(1));
}

void Scheduler::retire() {
    for (auto it = active_.begin(); it != active_.end();) {
        if (!(*it)->finished()) {
            ++it;
            continue;
        }
        account(**it);
        pool_.release((*it)->session());
        it = active_.erase(it);
    }
    std::lock_guard lock(mutex_);
    stats_.active = int(active_.size());
    stats_.pool = pool_.counts();
}

void Scheduler::account(const TurnRunner& runner) {
    const JobEvent& done = runner.done();
    std::lock_guard lock(mutex_);
    ++stats_.finished[done.kind == JobEvent::Kind::error ? std::string("error") : done.finish];
    stats_.prompt_tokens += done.prompt_tokens;
    stats_.cached_tokens += done.cached_tokens;
    stats_.generated_tokens += done.completion_tokens;
    stats_.prefill_seconds += runner.prefill_seconds();
    stats_.prefill_tokens += runner.tokens_read();
    stats_.decode_seconds += runner.decode_seconds();
    stats_.decode_tokens += done.completion_tokens;
}

SchedulerStats Scheduler::stats() const {
    std::lock_guard lock(mutex_);
    return stats_;
}

}  // namespace deltabit::server
