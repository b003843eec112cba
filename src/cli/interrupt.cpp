#include "cli/interrupt.h"

#include <csignal>

namespace deltabit::cli {
namespace {

volatile std::sig_atomic_t g_interrupted = 0;

extern "C" void on_interrupt(int) { g_interrupted = 1; }

}  // namespace

InterruptScope::InterruptScope(bool enabled) : enabled_(enabled) {
    if (!enabled_) return;
    g_interrupted = 0;
    struct sigaction action {};
    action.sa_handler = on_interrupt;
    sigemptyset(&action.sa_mask);
    action.sa_flags = SA_RESETHAND;  // one-shot: the next Ctrl-C is the default one again
    sigaction(SIGINT, &action, &previous_);
}

InterruptScope::~InterruptScope() {
    if (!enabled_) return;
    sigaction(SIGINT, &previous_, nullptr);
    g_interrupted = 0;
}

bool interrupt_requested() { return g_interrupted != 0; }

}  // namespace deltabit::cli
