// The one thread that owns the model: it takes jobs (job.h) from the HTTP threads (submit), runs up to
// --parallel of them at once on sessions from the pool (session_pool.h), and sends their events back
// through each job's own queue. It alone touches the engine, the pool and the sessions, so none of
// them needs a lock.
//
//   loop:  admit queued jobs while a session is free  →  iterate()  →  retire finished jobs
//   iterate():  prefill pieces, oldest job first, up to `prefill_chunk` prompt tokens in all
//               →  step_active(the jobs past their prompt): one decode step each
//
// Each job's turn is a SessionTurn (runtime/session.h), driven a step at a time on this thread: a
// prefill step reads one prompt piece (at most `prefill_chunk` tokens, ending also at the session's
// checkpoint interval; the last piece's step draws the first token), a decode step feeds the token
// drawn last and draws the next. So a long prompt is read a chunk per iteration between the running
// streams' tokens, and a request admitted mid-stream joins at the next iteration.
//
// Scoring a prompt (completions with echo + logprobs) takes prefill steps the same way, before the
// job's own prompt pieces: each runs forward_all on the next at most `prefill_chunk` prompt tokens of a
// scratch sequence kept across the job's steps, and turns that chunk's logits into logprobs at once, so
// the host holds [chunk][n_vocab] floats, never [prompt][n_vocab], and the other jobs step between
// chunks. The logprobs reach the client in one event after the last chunk; a job stopped between
// chunks sends none (its scratch sequence and logprobs are dropped).
//
// step_active() is the batched decode step: it receives every job that wants a decode step this
// iteration, and each job's step is two halves around one forward call — the token to feed, then
// fed() (record it, draw the next: sampling, stop strings, the event to the client). All the jobs' tokens
// go in one Engine::forward_batch call (on the GPU one read of the weights for all of them), then each
// job's second half runs on its own row of logits.
//
// Backpressure: a job whose connection has not taken 256 of its events is skipped until it has, so a
// slow reader holds back only its own generation and its queue stays bounded.
//
// Cancellation (Job::cancel, shutdown) and the deadline are checked before every step of a job: the
// turn is cancelled there, which leaves the session consistent (runtime/session.h) and reusable.
// Deadline: from admission, 30 s plus ten times the job's modelled cost — its prompt at the measured
// prefill rate plus max_tokens at the measured decode rate — so a long prefill is not taken for stuck.
//
// A block-diffusion model (runtime/diffusion_runner.h) has no sessions and no left-to-right step: its
// scheduler takes the queued jobs one at a time, oldest first, and runs each to its end
// (diffusion_job.h); cancellation, the deadline and shutdown are checked after every denoising step
// (on CUDA at the device loop's sync points, every few steps).
// Its decode rate is committed tokens per second of whole runs (prompt encoding included).
#pragma once

#include "runtime/diffusion_runner.h"
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
#include <optional>
#include <span>
#include <string>
#include <thread>
#include <vector>

namespace deltabit::server {

struct SchedulerOptions {
    PoolOptions pool;
    int max_queued = 256;  // submit() refuses past this many waiting jobs
    // Prompt tokens read per iteration, in pieces of at most this many (Session::begin_turn's
    // max_piece, and the chunks of a prompt's scoring), so a long prompt is read between the other jobs'
    // tokens. 0: no bound (pieces end only at checkpoint intervals, a prompt is scored in one chunk, and
    // every waiting prompt is read in one iteration).
    int64_t prefill_chunk = 256;
};

// Counters for /metrics, a consistent copy.
struct SchedulerStats {
    int queued = 0, active = 0;
    PoolCounts pool;
    int64_t prompt_tokens = 0, cached_tokens = 0, generated_tokens = 0;
    double prefill_seconds = 0.0, decode_seconds = 0.0;
    int64_t prefill_tokens = 0, decode_tokens = 0;  // tokens actually read, and generated, in those seconds
    int64_t steps = 0;
    int64_t batched_steps = 0, batched_rows = 0;  // decode steps of several jobs in one call, and their rows
    int64_t decode_steps = 0, decode_rows = 0;    // every decode step (batched or one job's), and its rows
    std::map<std::string, int64_t> finished;  // by finish reason, and "error"
    bool block_diffusion = false;             // the model is a block-diffusion one: the two below count
    int64_t diffusion_blocks = 0, denoising_steps = 0;  // blocks committed, decoder passes run
};

class ActiveJob;

class Scheduler {
public:
    Scheduler(Engine& engine, const text::Tokenizer& tokenizer, SchedulerOptions options);
    // A block-diffusion model: one job at a time (see above); options.pool is not used.
    Scheduler(DiffusionRunner& runner, const text::Tokenizer& tokenizer, SchedulerOptions options);
    ~Scheduler();  // stop()

    // False when the queue is full (the HTTP side answers 429) or the scheduler is stopping.
    bool submit(std::shared_ptr<Job> job);
    // Cancels what is queued and in flight, joins the thread.
    void stop();
    SchedulerStats stats() const;
    // The budget a job of this size gets (see the header comment).
    std::chrono::milliseconds deadline_for(int64_t prompt_tokens, int64_t max_tokens) const;

private:
    friend class ActiveJob;
    void run();
    void run_diffusion();
    void refuse_queued();  // shutdown: every waiting job gets a 503; mutex_ held
    void end_cancelled(Job& job);  // a job whose client left while it waited: its done event, counted
    void admit();
    void iterate();
    void step_active(std::span<ActiveJob* const> decoding);  // the seam (see above)
    void retire();
    void account(const ActiveJob& job);

    Engine* engine_ = nullptr;                     // a left-to-right model, or
    DiffusionRunner* diffusion_ = nullptr;   // a block-diffusion one
    const text::Tokenizer& tokenizer_;
    SchedulerOptions options_;
    std::optional<SessionPool> pool_;  // left to right only

    mutable std::mutex mutex_;  // guards queue_, stopping_ and stats_
    std::condition_variable wake_;
    std::deque<std::shared_ptr<Job>> queue_;
    bool stopping_ = false;
    SchedulerStats stats_;

    std::vector<std::unique_ptr<ActiveJob>> active_;  // the scheduler thread's alone
    std::thread thread_;
};

}  // namespace deltabit::server
