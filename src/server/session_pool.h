// The conversations the server holds: up to `live` Sessions in the engine's memory, and parked ones —
// a session saved as a snapshot (runtime/snapshot.h) into a directory on tmpfs (host memory) when
// one exists, LRU within `park_budget_bytes`. With a spill directory, a snapshot pushed out of that
// budget moves there (a disk, typically) instead of being dropped, LRU within `spill_budget_bytes`.
// A parked or spilled snapshot that cannot be read back (a disk error, a file changed under the
// server) is dropped and the request starts a fresh session: its reply is the same, only the reuse is
// lost. Only the scheduler thread touches it, between steps.
//
// Matching: a request goes to the idle live or parked session whose held tokens share the longest
// prefix with its prompt; the Session then reuses what its checkpoints allow (the reported
// cached_tokens is the Session's `reused`, not this prefix). With no match it gets a fresh session;
// when all `live` slots hold sessions, the least recently used idle one is parked to make room. A
// live session matched by a request that keeps less than half of what it holds (another conversation:
// two share at least the chat template's opening) is parked as a copy before it is reused, so the
// conversation it held is not lost to the rewind.
#pragma once

#include "runtime/session.h"

#include <cstdint>
#include <filesystem>
#include <list>
#include <memory>
#include <optional>
#include <span>
#include <vector>

namespace deltabit::server {

struct PoolOptions {
    int live = 4;                        // sessions in the engine at once (= requests generating at once)
    SessionOptions session;
    int64_t park_budget_bytes = 1 << 30;  // parked snapshots kept, least recently used dropped first
    std::filesystem::path park_dir;       // empty: a fresh folder under /dev/shm (or the temp dir)
    // Empty: no spilling. Else a fresh folder of this server's is made inside it (and removed at exit).
    std::filesystem::path spill_dir;
    int64_t spill_budget_bytes = int64_t(4) << 30;
};

struct PoolCounts {
    int live = 0, busy = 0, parked = 0, spilled = 0;  // parked counts the spilled ones too
    int64_t parked_bytes = 0, spilled_bytes = 0;     // in host memory, on the spill disk
    int64_t parks = 0, resumes = 0, evictions = 0, spills = 0;
    int64_t failed_resumes = 0;  // snapshots that could not be read back (dropped; the request ran fresh)
};

class SessionPool {
public:
    SessionPool(Engine& engine, PoolOptions options);
    ~SessionPool();  // removes the park folder

    // The session for `prompt`, marked busy; nullopt when every live slot is busy.
    Session* acquire(std::span<const int32_t> prompt);
    void release(Session* session);
    PoolCounts counts() const;

private:
    struct Live {
        std::unique_ptr<Session> session;
        bool busy = false;
        uint64_t last_used = 0;
    };
    struct Parked {
        std::filesystem::path file;
        std::vector<int32_t> tokens;
        int64_t bytes = 0;
        uint64_t last_used = 0;
        bool spilled = false;  // the file is in the spill folder
    };
    using ParkedList = std::list<Parked>;
    Live* free_slot();  // an idle or new slot, its old session parked; nullptr when all are busy
    void park(Live& slot);               // save_parked, then the slot's session emptied
    void save_parked(const Live& slot);  // a snapshot of what it holds, parked (nothing if it holds nothing)
    void trim_parked();  // over park_budget: the least recently used in memory spilled, or dropped
    void trim_spilled();
    void spill(ParkedList::iterator p);
    void drop(ParkedList::iterator p);
    // The oldest parked entry in memory (spilled = false) or on the spill disk (true); end() if none.
    ParkedList::iterator oldest(bool spilled);

    Engine& engine_;
    PoolOptions options_;
    std::vector<std::unique_ptr<Live>> live_;
    ParkedList parked_;
    uint64_t clock_ = 0, next_file_ = 0;
    PoolCounts totals_;
};

}  // namespace deltabit::server
