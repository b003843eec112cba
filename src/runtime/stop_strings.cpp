#include "runtime/stop_strings.h"

#include "core/error.h"

#include <algorithm>

namespace deltabit {

StopStringMatcher::StopStringMatcher(std::vector<std::string> stops) : stops_(std::move(stops)) {
    for (size_t i = 0; i < stops_.size(); ++i)
        if (stops_[i].empty()) fail("generate: stop string {} is empty", i);
}

StopStringMatcher::Step StopStringMatcher::push(std::string_view text) {
    Step step;
    if (stopped_) return step;
    held_ += text;

    // Earliest match over all stop strings: no match can start before held_, since everything
    // released earlier was shown not to begin any stop string.
    size_t match = std::string::npos;
    for (const std::string& stop : stops_) match = std::min(match, held_.find(stop));
    if (match != std::string::npos) {
        step.released = held_.substr(0, match);
        step.stopped = true;
        stopped_ = true;
        held_.clear();
        return step;
    }

    // Hold the longest tail of held_ that a stop string begins with.
    size_t hold = 0;
    for (const std::string& stop : stops_) {
        const size_t longest = std::min(stop.size() - 1, held_.size());
        for (size_t n = longest; n > hold; --n) {
            if (std::string_view(held_).substr(held_.size() - n) == std::string_view(stop).substr(0, n)) {
                hold = n;
                break;
            }
        }
    }
    step.released = held_.substr(0, held_.size() - hold);
    held_.erase(0, held_.size() - hold);
    return step;
}

std::string StopStringMatcher::finish() {
    std::string rest = std::move(held_);
    held_.clear();
    return rest;
}

}  // namespace deltabit
