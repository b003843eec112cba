// One request on its way through the scheduler: what the HTTP thread asks for (native ids and
// options, no JSON) and the events the scheduler sends back, through a queue owned by the job — so
// a reply can only ever reach the connection that asked for it.
#pragma once

#include "runtime/generate.h"

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

namespace deltabit::server {

struct TokenLogprob {
    int32_t token = 0;
    float logprob = 0.0f;
    std::vector<std::pair<int32_t, float>> top;  // the most likely tokens and their logprobs
};

struct JobEvent {
    enum class Kind { prompt_logprobs, token, done, error } kind = Kind::token;
    // token
    int32_t token = 0;
    std::string text;                    // the text released with it (stop strings held back)
    std::optional<TokenLogprob> logprob;
    // prompt_logprobs: one per prompt token after the first
    std::vector<TokenLogprob> prompt_logprobs;
    // done
    std::string finish;  // "stop" (EOS or stop string), "length", "cancelled", "deadline"
    int64_t prompt_tokens = 0, cached_tokens = 0, completion_tokens = 0;
    // error
    int status = 500;
    std::string message;
};

class Job {
public:
    using Clock = std::chrono::steady_clock;

    // Input, fixed before submit().
    std::vector<int32_t> prompt;
    GenerationOptions options;        // max_tokens always set
    bool generate = true;             // false: score the prompt only (completions, max_tokens 0, echo)
    bool prompt_logprobs = false;     // echo + logprobs: the logprob of every prompt token
    bool logprobs = false;            // of each generated token
    int top_logprobs = 0;
    Clock::time_point submitted = Clock::now();

    // Asked by the HTTP side (client gone, shutdown); the scheduler stops the job within one step.
    void cancel() { cancelled_.store(true); }
    bool cancelled() const { return cancelled_.load(); }

    void push(JobEvent event) {
        {
            std::lock_guard lock(mutex_);
            events_.push_back(std::move(event));
        }
        ready_.notify_one();
    }
    // Events not yet taken by the connection: the scheduler pauses a job whose reader falls behind.
    size_t pending() const {
        std::lock_guard lock(mutex_);
        return events_.size();
    }
    // The next event, waiting at most `timeout`; nullopt on timeout.
    std::optional<JobEvent> pop(std::chrono::milliseconds timeout) {
        std::unique_lock lock(mutex_);
        if (!ready_.wait_for(lock, timeout, [&] { return !events_.empty(); })) return std::nullopt;
        JobEvent e = std::move(events_.front());
        events_.pop_front();
        return e;
    }

private:
    std::atomic<bool> cancelled_{false};
    mutable std::mutex mutex_;
    std::condition_variable ready_;
    std::deque<JobEvent> events_;
};

}  // namespace deltabit::server
