// GET /metrics: the scheduler's counters and the HTTP side's, in Prometheus' text format (0.0.4).
#pragma once

#include "server/scheduler.h"

#include <atomic>
#include <cstdint>
#include <map>
#include <mutex>
#include <string>

namespace deltabit::server {

// Requests by endpoint and HTTP status, counted by the HTTP threads.
class HttpCounters {
public:
    void count(const std::string& endpoint, int status) {
        std::lock_guard lock(mutex_);
        ++by_status_[{endpoint, status}];
    }
    std::map<std::pair<std::string, int>, int64_t> snapshot() const {
        std::lock_guard lock(mutex_);
        return by_status_;
    }
    std::atomic<int> in_flight{0};

private:
    mutable std::mutex mutex_;
    std::map<std::pair<std::string, int>, int64_t> by_status_;
};

std::string prometheus_text(const SchedulerStats& scheduler, const HttpCounters& http);

}  // namespace deltabit::server
