#include "server/session_pool.h"

#include "core/error.h"

#include <fmt/format.h>

#include <unistd.h>

#include <algorithm>
#include <system_error>

namespace deltabit::server {
namespace {

namespace fs = std::filesystem;

int64_t common_prefix(std::span<const int32_t> a, std::span<const int32_t> b) {
    const auto [ia, ib] = std::mismatch(a.begin(), a.end(), b.begin(), b.end());
    return int64_t(ia - a.begin());
}

fs::path default_park_dir() {
    const fs::path base = fs::is_directory("/dev/shm") ? fs::path("/dev/shm") : fs::temp_directory_path();
    return base / fmt::format("deltabit-serve-{}", getpid());
}

}  // namespace

SessionPool::SessionPool(Engine& engine, PoolOptions options) : engine_(engine), options_(std::move(options)) {
    if (options_.park_dir.empty()) options_.park_dir = default_park_dir();
    fs::create_directories(options_.park_dir);
}

SessionPool::~SessionPool() {
    std::error_code ignored;
    fs::remove_all(options_.park_dir, ignored);
}

Session* SessionPool::acquire(std::span<const int32_t> prompt) {
    ++clock_;
    Live* best_live = nullptr;
    int64_t best = 0;
    for (auto& slot : live_) {
        if (slot->busy) continue;
        const int64_t n = common_prefix(slot->session->ledger().tokens(), prompt);
        if (n > best) best = n, best_live = slot.get();
    }
    auto best_parked = parked_.end();
    for (auto it = parked_.begin(); it != parked_.end(); ++it) {
        const int64_t n = common_prefix(it->tokens, prompt);
        if (n > best) best = n, best_parked = it, best_live = nullptr;
    }
    if (best_live) {
        best_live->busy = true;
        best_live->last_used = clock_;
        return best_live->session.get();
    }
    Live* slot = free_slot();
    if (!slot) return nullptr;
    if (best_parked != parked_.end()) {
        slot->session->load(best_parked->file);
        totals_.parked_bytes -= best_parked->bytes;
        fs::remove(best_parked->file);
        parked_.erase(best_parked);
        ++totals_.resumes;
    }
    slot->busy = true;
    slot->last_used = clock_;
    return slot->session.get();
}

SessionPool::Live* SessionPool::free_slot() {
    if (int(live_.size()) < options_.live) {
        live_.push_back(std::make_unique<Live>());
        live_.back()->session = std::make_unique<Session>(engine_, options_.session);
        return live_.back().get();
    }
    Live* victim = nullptr;
    for (auto& slot : live_)
        if (!slot->busy && (!victim || slot->last_used < victim->last_used)) victim = slot.get();
    if (victim) park(*victim);
    return victim;
}

void SessionPool::park(Live& slot) {
    Session& s = *slot.session;
    if (s.ledger().size() > 0 && options_.park_budget_bytes > 0) {
        Parked p;
        p.file = options_.park_dir / fmt::format("session-{}.dbsnap", next_file_++);
        try {
            s.save(p.file);
        } catch (const Error&) {  // a build without snapshots, a full tmpfs: the conversation is dropped
            ++totals_.evictions;
            s.reset();
            return;
        }
        p.bytes = int64_t(fs::file_size(p.file));
        p.tokens.assign(s.ledger().tokens().begin(), s.ledger().tokens().end());
        p.last_used = slot.last_used;
        totals_.parked_bytes += p.bytes;
        parked_.push_back(std::move(p));
        ++totals_.parks;
        trim_parked();
    }
    s.reset();
}

void SessionPool::trim_parked() {
    while (totals_.parked_bytes > options_.park_budget_bytes && !parked_.empty()) {
        auto oldest = std::min_element(parked_.begin(), parked_.end(),
                                       [](const Parked& a, const Parked& b) { return a.last_used < b.last_used; });
        totals_.parked_bytes -= oldest->bytes;
        std::error_code ignored;
        fs::remove(oldest->file, ignored);
        parked_.erase(oldest);
        ++totals_.evictions;
    }
}

void SessionPool::release(Session* session) {
    for (auto& slot : live_)
        if (slot->session.get() == session) {
            slot->busy = false;
            slot->last_used = ++clock_;
        }
}

PoolCounts SessionPool::counts() const {
    PoolCounts c = totals_;
    c.live = int(live_.size());
    c.busy = int(std::count_if(live_.begin(), live_.end(), [](const auto& s) { return s->busy; }));
    c.parked = int(parked_.size());
    return c;
}

}  // namespace deltabit::server
