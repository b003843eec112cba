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

fs::path server_folder(const fs::path& base) { return base / fmt::format("deltabit-serve-{}", getpid()); }

fs::path default_park_dir() {
    return server_folder(fs::is_directory("/dev/shm") ? fs::path("/dev/shm") : fs::temp_directory_path());
}

}  // namespace

SessionPool::SessionPool(Engine& engine, PoolOptions options) : engine_(engine), options_(std::move(options)) {
    if (options_.park_dir.empty()) options_.park_dir = default_park_dir();
    fs::create_directories(options_.park_dir);
    if (!options_.spill_dir.empty()) {
        if (!fs::is_directory(options_.spill_dir))
            fail("serve: --spill-dir {}: not a directory (create it first)", options_.spill_dir.string());
        options_.spill_dir = server_folder(options_.spill_dir);
        fs::create_directories(options_.spill_dir);
    }
}

SessionPool::~SessionPool() {
    std::error_code ignored;
    fs::remove_all(options_.park_dir, ignored);
    if (!options_.spill_dir.empty()) fs::remove_all(options_.spill_dir, ignored);
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
        // The request keeps less than half of what this session holds (often just the chat template's
        // opening): it is another conversation, and the one held is parked as a copy first, so a follow-up
        // of it can still resume instead of being rewound away. A request that keeps most of it (a retry of
        // the last reply) rewinds in place: a snapshot on every retry would cost a save for a branch the
        // user left.
        if (2 * best < best_live->session->ledger().size()) save_parked(*best_live);
        best_live->busy = true;
        best_live->last_used = clock_;
        return best_live->session.get();
    }
    // The chosen snapshot is held out of the list while a slot is freed: parking the slot's session may
    // push the budget over, and trimming must not drop (or free) the snapshot about to be loaded.
    // Its bytes leave the budgets meanwhile: it is about to be loaded and deleted, and must not make the
    // trim drop others.
    ParkedList chosen;
    if (best_parked != parked_.end()) {
        chosen.splice(chosen.end(), parked_, best_parked);
        (best_parked->spilled ? totals_.spilled_bytes : totals_.parked_bytes) -= best_parked->bytes;
    }
    Live* slot = free_slot();
    if (!chosen.empty()) {
        (best_parked->spilled ? totals_.spilled_bytes : totals_.parked_bytes) += best_parked->bytes;
        parked_.splice(parked_.end(), chosen);
    }
    if (!slot) return nullptr;
    if (best_parked != parked_.end()) {
        try {
            slot->session->load(best_parked->file);  // on Error the (empty) session is unchanged
            ++totals_.resumes;
        } catch (const Error&) {
            ++totals_.failed_resumes;
        }
        drop(best_parked);
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
    save_parked(slot);
    slot.session->reset();
}

void SessionPool::save_parked(const Live& slot) {
    const Session& s = *slot.session;
    if (s.ledger().size() == 0 || (options_.park_budget_bytes == 0 && options_.spill_dir.empty())) return;
    Parked p;
    p.file = options_.park_dir / fmt::format("session-{}.dbsnap", next_file_++);
    try {
        s.save(p.file);
    } catch (const Error&) {  // a build without snapshots, a full tmpfs: the conversation is not kept
        std::error_code ignored;
        fs::remove(p.file, ignored);
        ++totals_.evictions;
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

SessionPool::ParkedList::iterator SessionPool::oldest(bool spilled) {
    auto found = parked_.end();
    for (auto it = parked_.begin(); it != parked_.end(); ++it)
        if (it->spilled == spilled && (found == parked_.end() || it->last_used < found->last_used)) found = it;
    return found;
}

void SessionPool::drop(ParkedList::iterator p) {
    (p->spilled ? totals_.spilled_bytes : totals_.parked_bytes) -= p->bytes;
    std::error_code ignored;
    fs::remove(p->file, ignored);
    parked_.erase(p);
}

void SessionPool::spill(ParkedList::iterator p) {
    // Another file system, typically: a copy, not a rename. A failed copy drops the conversation.
    const fs::path to = options_.spill_dir / p->file.filename();
    std::error_code failed;
    fs::copy_file(p->file, to, fs::copy_options::overwrite_existing, failed);
    if (failed) {
        fs::remove(to, failed);
        drop(p);
        ++totals_.evictions;
        return;
    }
    totals_.parked_bytes -= p->bytes;
    std::error_code ignored;
    fs::remove(p->file, ignored);
    p->file = to;
    p->spilled = true;
    totals_.spilled_bytes += p->bytes;
    ++totals_.spills;
}

void SessionPool::trim_parked() {
    while (totals_.parked_bytes > options_.park_budget_bytes) {
        const auto p = oldest(false);
        if (p == parked_.end()) break;
        if (!options_.spill_dir.empty() && p->bytes <= options_.spill_budget_bytes) {
            spill(p);
        } else {
            drop(p);
            ++totals_.evictions;
        }
    }
    trim_spilled();
}

void SessionPool::trim_spilled() {
    while (totals_.spilled_bytes > options_.spill_budget_bytes) {
        const auto p = oldest(true);
        if (p == parked_.end()) break;
        drop(p);
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
    c.spilled = int(std::count_if(parked_.begin(), parked_.end(), [](const Parked& p) { return p.spilled; }));
    return c;
}

}  // namespace deltabit::server
