// The server's session pool (server/session_pool.h) on the CPU engine over a fixture model, one live slot so
// every new conversation parks the last one: a parked conversation that the host-memory budget pushes out
// moves to the spill folder and resumes from there holding its tokens; the spill budget drops the least
// recently used; a spilled snapshot that cannot be read back is dropped and the request gets a fresh
// session (no error); without a spill folder the pool drops as before; the pool's folders go with it.
#include "runtime/engine_test_support.h"
#include "server/session_pool.h"
#include "server_process.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <vector>

namespace deltabit {
namespace {

namespace fs = std::filesystem;

std::vector<int32_t> prompt_of(int32_t first, int n) {
    std::vector<int32_t> ids;
    for (int i = 0; i < n; ++i) ids.push_back(first + i);
    return ids;
}

struct PoolFixture {
    std::shared_ptr<const Model> model = test::load_model("qwen3_5_float");
    std::unique_ptr<Engine> engine = test::make_engine(model, test::Backend::cpu);
    fs::path dir;

    explicit PoolFixture(const std::string& name) : dir(test::scratch_dir("deltabit_test_session_pool_" + name)) {
        fs::remove_all(dir);
        fs::create_directories(dir / "spill");
    }
    ~PoolFixture() { fs::remove_all(dir); }

    server::PoolOptions options(bool spill, int64_t spill_budget = int64_t(1) << 30) const {
        server::PoolOptions o;
        o.live = 1;
        o.session = {.sequence = {.max_positions = 64}, .checkpoints = {}};
        o.park_budget_bytes = 1;  // every parked snapshot is over it at once
        o.park_dir = dir / "park";
        if (spill) o.spill_dir = dir / "spill";
        o.spill_budget_bytes = spill_budget;
        return o;
    }

    // A conversation held by the pool: its prompt run with two greedy tokens, released.
    std::vector<int32_t> converse(server::SessionPool& pool, const std::vector<int32_t>& prompt) {
        Session* s = pool.acquire(prompt);
        EXPECT_NE(s, nullptr);
        s->run_turn(prompt, test::greedy_options(2));
        std::vector<int32_t> held(s->ledger().tokens().begin(), s->ledger().tokens().end());
        pool.release(s);
        return held;
    }

    // The spill folder's snapshot files.
    std::vector<fs::path> spilled_files() const {
        std::vector<fs::path> files;
        for (const auto& e : fs::recursive_directory_iterator(dir / "spill"))
            if (e.is_regular_file()) files.push_back(e.path());
        return files;
    }
};

TEST(SessionPool, OverTheMemoryBudgetAConversationSpillsAndResumesFromDisk) {
    PoolFixture f("resume");
    std::vector<int32_t> held_a;
    {
        server::SessionPool pool(*f.engine, f.options(true));
        held_a = f.converse(pool, prompt_of(3, 10));
        f.converse(pool, prompt_of(60, 10));  // parks A: over the memory budget, so spilled
        server::PoolCounts c = pool.counts();
        EXPECT_EQ(c.parks, 1);
        EXPECT_EQ(c.spills, 1);
        EXPECT_EQ(c.parked, 1);
        EXPECT_EQ(c.spilled, 1);
        EXPECT_EQ(c.parked_bytes, 0);
        EXPECT_GT(c.spilled_bytes, 0);
        ASSERT_EQ(f.spilled_files().size(), 1u);
        EXPECT_EQ(int64_t(fs::file_size(f.spilled_files()[0])), c.spilled_bytes);

        // A follow-up of A: its spilled snapshot is the best match; B goes to disk in its place.
        std::vector<int32_t> follow_up = held_a;
        follow_up.push_back(5);
        Session* s = pool.acquire(follow_up);
        ASSERT_NE(s, nullptr);
        EXPECT_EQ(std::vector<int32_t>(s->ledger().tokens().begin(), s->ledger().tokens().end()), held_a);
        pool.release(s);
        c = pool.counts();
        EXPECT_EQ(c.resumes, 1);
        EXPECT_EQ(c.failed_resumes, 0);
        EXPECT_EQ(c.spills, 2);
        EXPECT_EQ(c.spilled, 1);
        EXPECT_EQ(f.spilled_files().size(), 1u);
    }
    // The pool's folder in the spill directory goes with it; the directory itself stays.
    EXPECT_TRUE(f.spilled_files().empty());
    EXPECT_TRUE(fs::is_directory(f.dir / "spill"));
    EXPECT_FALSE(fs::exists(f.dir / "park"));
}

TEST(SessionPool, TheSpillBudgetDropsTheLeastRecentlyUsed) {
    PoolFixture f("budget");
    int64_t one = 0;
    {  // the size of one spilled conversation
        server::SessionPool pool(*f.engine, f.options(true));
        f.converse(pool, prompt_of(3, 10));
        f.converse(pool, prompt_of(60, 10));
        one = pool.counts().spilled_bytes;
    }
    ASSERT_GT(one, 0);
    server::SessionPool pool(*f.engine, f.options(true, one + one / 2));
    const std::vector<int32_t> held_a = f.converse(pool, prompt_of(3, 10));
    f.converse(pool, prompt_of(60, 10));  // A spilled
    f.converse(pool, prompt_of(90, 10));  // B spilled: over the spill budget, A (older) dropped
    const server::PoolCounts c = pool.counts();
    EXPECT_EQ(c.spills, 2);
    EXPECT_EQ(c.spilled, 1);
    EXPECT_EQ(c.evictions, 1);
    EXPECT_LE(c.spilled_bytes, one + one / 2);
    // A is gone: its follow-up starts fresh.
    std::vector<int32_t> follow_up = held_a;
    follow_up.push_back(5);
    Session* s = pool.acquire(follow_up);
    ASSERT_NE(s, nullptr);
    EXPECT_EQ(s->ledger().size(), 0);
    pool.release(s);
    EXPECT_EQ(pool.counts().resumes, 0);
}

TEST(SessionPool, AnUnreadableSpilledSnapshotIsDroppedAndTheRequestRunsFresh) {
    PoolFixture f("corrupt");
    server::SessionPool pool(*f.engine, f.options(true));
    const std::vector<int32_t> held_a = f.converse(pool, prompt_of(3, 10));
    f.converse(pool, prompt_of(60, 10));
    ASSERT_EQ(f.spilled_files().size(), 1u);
    {
        std::fstream file(f.spilled_files()[0], std::ios::in | std::ios::out | std::ios::binary);
        file.seekp(40);
        file.write("garbage!", 8);
    }
    std::vector<int32_t> follow_up = held_a;
    follow_up.push_back(5);
    Session* s = pool.acquire(follow_up);  // no throw
    ASSERT_NE(s, nullptr);
    EXPECT_EQ(s->ledger().size(), 0);
    s->run_turn(follow_up, test::greedy_options(2));  // and the fresh session works
    pool.release(s);
    const server::PoolCounts c = pool.counts();
    EXPECT_EQ(c.failed_resumes, 1);
    EXPECT_EQ(c.resumes, 0);
}

TEST(SessionPool, WithoutASpillFolderOverTheBudgetIsDropped) {
    PoolFixture f("nospill");
    server::SessionPool pool(*f.engine, f.options(false));
    f.converse(pool, prompt_of(3, 10));
    f.converse(pool, prompt_of(60, 10));
    const server::PoolCounts c = pool.counts();
    EXPECT_EQ(c.parks, 1);
    EXPECT_EQ(c.spills, 0);
    EXPECT_EQ(c.parked, 0);
    EXPECT_EQ(c.evictions, 1);
    EXPECT_TRUE(f.spilled_files().empty());
}

// The budget holds one snapshot and there is no spill folder: resuming A parks B, which pushes the
// budget over; the trim must not drop A (the snapshot being resumed), only what is over once A is taken.
TEST(SessionPool, ResumingAParkedConversationIsNotTrimmedAwayByTheParkItCauses) {
    PoolFixture f("trim");
    int64_t one = 0;
    {  // the size of one parked conversation
        server::PoolOptions o = f.options(false);
        o.park_budget_bytes = int64_t(1) << 30;
        server::SessionPool pool(*f.engine, o);
        f.converse(pool, prompt_of(3, 10));
        f.converse(pool, prompt_of(60, 10));
        one = pool.counts().parked_bytes;
    }
    ASSERT_GT(one, 0);
    server::PoolOptions o = f.options(false);
    o.park_budget_bytes = one + one / 2;
    server::SessionPool pool(*f.engine, o);
    const std::vector<int32_t> held_a = f.converse(pool, prompt_of(3, 10));
    f.converse(pool, prompt_of(60, 10));  // A parked, within the budget
    std::vector<int32_t> follow_up = held_a;
    follow_up.push_back(5);
    Session* s = pool.acquire(follow_up);  // B parked to free the slot, A resumed
    ASSERT_NE(s, nullptr);
    EXPECT_EQ(std::vector<int32_t>(s->ledger().tokens().begin(), s->ledger().tokens().end()), held_a);
    pool.release(s);
    const server::PoolCounts c = pool.counts();
    EXPECT_EQ(c.resumes, 1);
    EXPECT_EQ(c.parked, 1);  // B
    EXPECT_EQ(c.evictions, 0);
    EXPECT_LE(c.parked_bytes, one + one / 2);
}

// A request that keeps most of what a live session holds (a retry of its last reply) rewinds it in place;
// one that keeps less than half (another conversation) parks a copy of it first.
TEST(SessionPool, OnlyARequestKeepingLessThanHalfParksACopy) {
    PoolFixture f("copy");
    server::SessionPool pool(*f.engine, f.options(true));
    const std::vector<int32_t> held = f.converse(pool, prompt_of(3, 10));  // 11 tokens held
    std::vector<int32_t> retry(held.begin(), held.end() - 2);
    retry.push_back(200);
    f.converse(pool, retry);  // keeps 9 of 11
    EXPECT_EQ(pool.counts().parks, 0);
    std::vector<int32_t> other(held.begin(), held.begin() + 3);
    other.push_back(201);
    f.converse(pool, other);  // keeps 3 of 11
    EXPECT_EQ(pool.counts().parks, 1);
}

TEST(SessionPool, ASpillFolderThatIsNotADirectoryIsRefused) {
    PoolFixture f("missing");
    server::PoolOptions o = f.options(true);
    o.spill_dir = f.dir / "no-such-folder";
    EXPECT_NE(test::message_of([&] { server::SessionPool pool(*f.engine, o); }).find("not a directory"),
              std::string::npos);
}

}  // namespace
}  // namespace deltabit
