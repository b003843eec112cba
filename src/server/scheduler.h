// The one thread that owns the model. HTTP threads submit() jobs (job.h) and read their events; the
// scheduler admits queued jobs to sessions (session_pool.h) up to --parallel at once and then steps
// every active job once per iteration:
//
//   loop:  admit queued jobs while a session is free  →  step_active()  →  retire finished jobs
//
// step_active() is the seam for batched decoding. Today it grants each active job one engine step in
// turn: a job runs Session::run_turn on a runner thread of its own that may touch the engine only
// between a grant and its next step boundary (after each forward call: a prompt piece of the session's
// checkpoint interval, or one token), so the engine is used by one thread at a time, in the order
// the scheduler chooses, and a long prompt is read in pieces between other jobs' tokens. A batched
// step (one forward call for N sequences, on the GPU) replaces that loop with one call; it needs a
// Session API that stops at step boundaries by itself (begin_turn / step) instead of the runner
// threads, and nothing on the HTTP side changes.
//
// Backpressure: a job whose connection has not taken 256 of its events is skipped until it has, so a
// slow reader holds back only its own generation and its queue stays bounded.
//
// Cancellation (Job::cancel, shutdown) and the deadline are checked at every step boundary: the
// runner throws out of run_turn, which leaves the session consistent (runtime/session.h) and reusable.
// Deadline: from admission, 30 s plus ten times the job's modelled cost — its prompt at the measured
// prefill rate plus max_tokens at the measured decode rate — so a long prefill is not taken for stuck.
#pragma once

#include "server/job.h"
#include "server/session_pool.h"
#include "text/tokenizer.h"

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

namespace deltabit::server {

struct SchedulerOptions {
    PoolOptions pool;
    int max_queued = 256;  // submit() refuses past this many waiting jobs
};

// Counters for /metrics, a consistent copy.
struct SchedulerStats {
    int queued = 0, active = 0;
    PoolCounts pool;
    int64_t prompt_tokens = 0, cached_tokens = 0, generated_tokens = 0;
    double prefill_seconds = 0.0, decode_seconds = 0.0;
    int64_t prefill_tokens = 0, decode_tokens = 0;  // tokens actually read, and generated, in those seconds
    int64_t steps = 0;
    std::map<std::string, int64_t> finished;  // by finish reason, and "error"
};

class TurnRunner;

class Scheduler {
public:
    Scheduler(Engine& engine, const text::Tokenizer& tokenizer, SchedulerOptions options);
    ~Scheduler();  // stop()

    // False when the queue is full (the HTTP side answers 429) or the scheduler is stopping.
    bool submit(std::shared_ptr<Job> job);
    // Cancels what is queued and in flight, waits for the runners, joins the thread.
    void stop();
    SchedulerStats stats() const;
    // The budget a job of this size gets (see the header comment).
    std::chrono::milliseconds deadline_for(int64_t prompt_tokens, int64_t max_tokens) const;

private:
    friend class TurnRunner;
    void run();
    void admit();
    void step_active();  // the seam (see above)
    void retire();
    void account(const TurnRunner& runner);

    Engine& engine_;
    const text::Tokenizer& tokenizer_;
    SchedulerOptions options_;
    SessionPool pool_;

    mutable std::mutex mutex_;  // guards queue_, stopping_ and stats_
    std::condition_variable wake_;
    std::deque<std::shared_ptr<Job>> queue_;
    bool stopping_ = false;
    SchedulerStats stats_;

    std::vector<std::unique_ptr<TurnRunner>> active_;  // the scheduler thread's alone
    std::thread thread_;
};

}  // namespace deltabit::server
