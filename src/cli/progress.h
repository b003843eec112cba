// A one-line progress indicator on stderr for the waits a user would otherwise sit through in silence
// (loading a model, a long prefill). It draws only when stderr is a terminal and the caller has not
// asked for quiet, only once the wait has lasted `delay` (a fast step never flickers), and it erases
// itself when done, so stdout and logs stay clean.
//
//   loading model.gguf on cuda  [=====>      ]  41%  2.3 s     (fraction known: set_fraction)
//   prefill 3100 tokens         [   <=>      ]       1.4 s     (unknown: a bouncing marker)
//
// A prefill reports its fraction as the session reads the prompt in pieces (every 512 tokens,
// GenerationCallbacks::on_prefill_progress); loading reports the weight bytes handled (open_engine's
// LoadFraction: per tensor on the host; on CUDA the upload is the second half, not reported yet).
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <mutex>
#include <string>
#include <thread>

namespace deltabit::cli {

// True when stderr is an interactive terminal (not a pipe or file).
bool stderr_is_terminal();

class ProgressLine {
public:
    // Draws nothing at all when `enabled` is false (--quiet, or stderr is not a terminal).
    ProgressLine(std::string label, bool enabled, std::chrono::milliseconds delay = std::chrono::seconds(1));
    ~ProgressLine();  // finish()
    ProgressLine(const ProgressLine&) = delete;
    ProgressLine& operator=(const ProgressLine&) = delete;

    // 0..1 when the total is known; draws a filled bar from then on.
    void set_fraction(double fraction);
    // Stops drawing and erases the line. Must be called before anything else is written to the
    // terminal (the first streamed token), and may be called more than once.
    void finish();

private:
    void draw_loop();
    void draw(std::chrono::steady_clock::duration elapsed, int tick);

    std::string label_;
    std::chrono::milliseconds delay_;
    std::chrono::steady_clock::time_point start_;
    std::atomic<double> fraction_{-1.0};  // < 0: unknown
    std::mutex mutex_;
    std::condition_variable stop_signal_;
    bool stop_ = false;
    bool drawn_ = false;  // whether the line has been drawn (and must be erased)
    std::thread thread_;
};

}  // namespace deltabit::cli
