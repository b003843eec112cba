// Ctrl-C during a reply: stop the reply, not the program. While an InterruptScope is alive, the first
// SIGINT only sets a flag that the generation loop's callback polls (interrupt_requested); the handler
// is installed one-shot (SA_RESETHAND), so a second Ctrl-C — e.g. during a long prefill, which is one
// forward call and cannot be stopped midway — ends the program as usual. Outside a scope SIGINT keeps
// its default meaning.
#pragma once

#include <signal.h>

namespace deltabit::cli {

class InterruptScope {
public:
    explicit InterruptScope(bool enabled);
    ~InterruptScope();  // the previous handler back, the flag cleared
    InterruptScope(const InterruptScope&) = delete;
    InterruptScope& operator=(const InterruptScope&) = delete;

private:
    bool enabled_;
    struct sigaction previous_ {};
};

bool interrupt_requested();

}  // namespace deltabit::cli
