#include "cli/progress.h"

#include <fmt/format.h>

#include <unistd.h>

#include <algorithm>
#include <cstdio>

namespace deltabit::cli {
namespace {

constexpr int kBarWidth = 24;
// Redraw period: fast enough to look alive, slow enough to cost nothing next to a forward pass.
constexpr std::chrono::milliseconds kRedrawPeriod{100};

}  // namespace

bool stderr_is_terminal() { return isatty(STDERR_FILENO) == 1; }

ProgressLine::ProgressLine(std::string label, bool enabled, std::chrono::milliseconds delay)
    : label_(std::move(label)), delay_(delay), start_(std::chrono::steady_clock::now()) {
    if (enabled) thread_ = std::thread([this] { draw_loop(); });
}

ProgressLine::~ProgressLine() { finish(); }

void ProgressLine::set_fraction(double fraction) { fraction_.store(std::clamp(fraction, 0.0, 1.0)); }

void ProgressLine::finish() {
    if (!thread_.joinable()) return;
    {
        std::lock_guard lock(mutex_);
        stop_ = true;
    }
    stop_signal_.notify_one();
    thread_.join();
    if (drawn_) {
        std::fputs("\r\033[K", stderr);  // carriage return, erase to the end of the line
        std::fflush(stderr);
    }
}

void ProgressLine::draw_loop() {
    std::unique_lock lock(mutex_);
    if (stop_signal_.wait_for(lock, delay_, [this] { return stop_; })) return;
    for (int tick = 0;; ++tick) {
        draw(std::chrono::steady_clock::now() - start_, tick);
        if (stop_signal_.wait_for(lock, kRedrawPeriod, [this] { return stop_; })) return;
    }
}

void ProgressLine::draw(std::chrono::steady_clock::duration elapsed, int tick) {
    const double seconds = std::chrono::duration<double>(elapsed).count();
    std::string bar(kBarWidth, ' ');
    std::string percent = "    ";
    const double fraction = fraction_.load();
    if (fraction >= 0.0) {
        const int filled = int(fraction * kBarWidth);
        std::fill_n(bar.begin(), filled, '=');
        if (filled < kBarWidth) bar[size_t(filled)] = '>';
        percent = fmt::format("{:3d}%", int(fraction * 100.0));
    } else {
        // A three-character marker bouncing between the ends of the bar.
        const int span = kBarWidth - 3;
        const int step = tick % (2 * span);
        const int at = step <= span ? step : 2 * span - step;
        bar.replace(size_t(at), 3, "<=>");
    }
    fmt::print(stderr, "\r\033[K{}  [{}] {}  {:.1f} s", label_, bar, percent, seconds);
    std::fflush(stderr);
    drawn_ = true;
}

}  // namespace deltabit::cli
