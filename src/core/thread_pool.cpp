#include "core/thread_pool.h"

namespace deltabit {

int hardware_threads() {
    const unsigned n = std::thread::hardware_concurrency();
    return n == 0 ? 1 : int(n);
}

ThreadPool::ThreadPool(int threads) {
    const int total = threads <= 0 ? hardware_threads() : threads;
    workers_.reserve(size_t(total - 1));
    for (int i = 1; i < total; ++i) workers_.emplace_back([this] { worker_loop(); });
}

ThreadPool::~ThreadPool() {
    {
        std::lock_guard lock(mutex_);
        stopping_ = true;
    }
    wake_.notify_all();
    for (std::thread& t : workers_) t.join();
}

void ThreadPool::claim_tasks() {
    for (int64_t task = next_task_.fetch_add(1); task < n_tasks_; task = next_task_.fetch_add(1)) (*job_)(task);
}

void ThreadPool::worker_loop() {
    uint64_t seen = 0;
    for (;;) {
        {
            std::unique_lock lock(mutex_);
            wake_.wait(lock, [&] { return stopping_ || generation_ != seen; });
            if (stopping_) return;
            seen = generation_;
        }
        claim_tasks();
        {
            std::lock_guard lock(mutex_);
            --busy_workers_;
        }
        done_.notify_one();
    }
}

void ThreadPool::run(int64_t n_tasks, const std::function<void(int64_t task)>& fn) {
    if (n_tasks <= 0) return;
    std::lock_guard run_lock(run_mutex_);
    if (workers_.empty() || n_tasks == 1) {
        for (int64_t task = 0; task < n_tasks; ++task) fn(task);
        return;
    }
    {
        std::lock_guard lock(mutex_);
        job_ = &fn;
        n_tasks_ = n_tasks;
        next_task_.store(0);
        busy_workers_ = int(workers_.size());
        ++generation_;
    }
    wake_.notify_all();
    claim_tasks();
    std::unique_lock lock(mutex_);
    done_.wait(lock, [&] { return busy_workers_ == 0; });
    job_ = nullptr;
}

}  // namespace deltabit
