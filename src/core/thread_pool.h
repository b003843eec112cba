// A small fixed pool of worker threads for the CPU fast path (ops/cpu_fast/matmul_cpu_fast.h): run(n, fn) calls
// fn(0) … fn(n−1), each once, spread over the pool's threads and the caller, and returns when all are
// done. Tasks are claimed one at a time from a shared counter, so a thread slowed by another process on
// its core simply takes fewer of them; callers make every task's result independent of which thread ran
// it, so a pool of 1 thread and a pool of 8 give the same bits.
//
// One run at a time: a second caller waits for the first to finish (run holds a mutex), so a pool can be
// shared by the sequences of one engine. fn must not call run on the same pool.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace deltabit {

// std::thread::hardware_concurrency(), or 1 when the platform cannot tell.
int hardware_threads();

class ThreadPool {
public:
    // `threads` counts the caller: threads − 1 workers are started. threads ≤ 0 means hardware_threads().
    explicit ThreadPool(int threads = 0);
    ~ThreadPool();
    ThreadPool(const ThreadPool&) = delete;
    ThreadPool& operator=(const ThreadPool&) = delete;

    int threads() const { return int(workers_.size()) + 1; }
    void run(int64_t n_tasks, const std::function<void(int64_t task)>& fn);

private:
    void worker_loop();
    void claim_tasks();

    std::vector<std::thread> workers_;
    std::mutex run_mutex_;  // one run at a time
    std::mutex mutex_;      // guards generation_, stopping_, busy_workers_
    std::condition_variable wake_, done_;
    uint64_t generation_ = 0;
    bool stopping_ = false;
    int busy_workers_ = 0;
    const std::function<void(int64_t)>* job_ = nullptr;
    int64_t n_tasks_ = 0;
    std::atomic<int64_t> next_task_{0};
};

}  // namespace deltabit
