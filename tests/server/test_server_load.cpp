// A bounded load test of `deltabit serve` on loopback: 64 streaming clients at once, 1,000 requests in
// all, mixing new conversations, follow-up turns and cancellations (clients that hang up after the
// first words). Every completed reply must equal the reply the same request got when served alone
// (greedy decoding on an attention-only model, whose reuse is exact: runtime/session.h), nothing may
// fail, and the server's resident memory must stay flat. Prints requests/s, aggregate tok/s and time
// to first token.
#include "server_process.h"
#include "stream_client.h"

#include <algorithm>
#include <atomic>
#include <mutex>
#include <random>

#include <fmt/format.h>

namespace deltabit {
namespace {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;
using nlohmann::json;

constexpr int kClients = 64;
constexpr int kRequests = 1000;
constexpr int kConversations = 24;
constexpr int kReplyTokens = 12;

json turn_one(int i) { return json::array({{{"role", "user"}, {"content", "conversation " + std::to_string(i)}}}); }
json turn_two(int i, const std::string& reply) {
    json m = turn_one(i);
    m.push_back({{"role", "assistant"}, {"content", reply}});
    m.push_back({{"role", "user"}, {"content", "and then? " + std::to_string(i)}});
    return m;
}
std::string body_of(const json& messages, int max_tokens) {
    return json{{"messages", messages}, {"max_tokens", max_tokens}, {"temperature", 0}, {"stream", true},
                {"stream_options", {{"include_usage", true}}}}.dump();
}

double percentile(std::vector<double> v, double p) {
    if (v.empty()) return 0.0;
    std::sort(v.begin(), v.end());
    return v[std::min(v.size() - 1, size_t(p * double(v.size())))];
}

TEST(ServerLoad, SixtyFourStreamingClientsThousandRequestsNoErrorsNoCrossedReplies) {
    const fs::path dir = test::scratch_dir("deltabit_test_server_load");
    fs::remove_all(dir);
    test::ServerProcess server(test::server_model(dir / "model"),
                               {"--parallel", "16", "--max-concurrent", "256", "--park-budget", "64"});

    // The replies served alone, one request at a time.
    std::vector<std::string> first(kConversations), second(kConversations);
    for (int i = 0; i < kConversations; ++i) {
        const test::StreamResult a = test::stream_chat(server.port(), body_of(turn_one(i), kReplyTokens));
        ASSERT_TRUE(a.ok) << a.error;
        first[size_t(i)] = a.content;
        const test::StreamResult b = test::stream_chat(server.port(), body_of(turn_two(i, a.content), kReplyTokens));
        ASSERT_TRUE(b.ok) << b.error;
        second[size_t(i)] = b.content;
    }
    const int64_t rss_start = server.rss_kib();

    std::atomic<int> next{0}, errors{0}, crossed{0}, cancelled{0}, completed{0};
    std::atomic<int64_t> tokens{0};
    std::mutex mutex;
    std::vector<double> ttft;
    int64_t rss_middle = 0;
    std::vector<std::string> failures;
    const Clock::time_point start = Clock::now();
    std::vector<std::thread> clients;
    for (int c = 0; c < kClients; ++c)
        clients.emplace_back([&, c] {
            std::mt19937 rng{uint32_t(c)};
            for (int n; (n = next++) < kRequests;) {
                if (n == kRequests / 2) {
                    std::lock_guard lock(mutex);
                    rss_middle = server.rss_kib();
                }
                const int i = int(rng() % kConversations);
                const int kind = int(rng() % 10);  // 0..4 new, 5..8 follow-up, 9 hang up
                const bool hang_up = kind == 9;
                const bool follow = kind >= 5 && kind <= 8;
                const json messages = follow ? turn_two(i, first[size_t(i)]) : turn_one(i);
                const test::StreamResult r = test::stream_chat(server.port(), body_of(messages, hang_up ? 400 : kReplyTokens),
                                                              hang_up ? test::hang_up_at_first : test::ChunkCheck{});
                std::lock_guard lock(mutex);
                if (!r.ok) {
                    ++errors;
                    if (failures.size() < 5) failures.push_back(r.error);
                    continue;
                }
                if (r.ttft_ms >= 0) ttft.push_back(r.ttft_ms);
                const std::string& reference = follow ? second[size_t(i)] : first[size_t(i)];
                if (hang_up) {
                    ++cancelled;
                    // Its first words are the first words of the same prompt's greedy reply.
                    if (!reference.starts_with(r.content.substr(0, std::min(r.content.size(), reference.size())))) ++crossed;
                    continue;
                }
                ++completed;
                tokens += r.completion_tokens;
                if (r.content != reference || r.finish != "length" || r.completion_tokens != kReplyTokens) ++crossed;
            }
        });
    for (std::thread& t : clients) t.join();
    const double seconds = std::chrono::duration<double>(Clock::now() - start).count();
    const int64_t rss_end = server.rss_kib();

    EXPECT_EQ(errors.load(), 0) << (failures.empty() ? "" : failures.front());
    EXPECT_EQ(crossed.load(), 0);
    EXPECT_EQ(completed.load() + cancelled.load(), kRequests);
    EXPECT_GT(cancelled.load(), 0);
    // Flat memory: the second half of the run adds no more than a slack for allocator arenas and the
    // HTTP threads' buffers (64 clients × a few 100 KiB); a leak per request (1,000 of them) shows above it.
    EXPECT_LT(rss_end - rss_middle, 16 * 1024) << "RSS KiB: start " << rss_start << ", middle " << rss_middle << ", end " << rss_end;

    auto res = server.client()->Get("/metrics");
    ASSERT_TRUE(res);
    const std::string report = fmt::format(
        "load: {} requests ({} completed, {} hung up) from {} clients in {:.1f} s = {:.1f} requests/s; "
        "{} tokens generated = {:.0f} tok/s aggregate; TTFT p50 {:.1f} ms, p99 {:.1f} ms; RSS KiB start {} middle {} end {}",
        kRequests, completed.load(), cancelled.load(), kClients, seconds, kRequests / seconds, tokens.load(),
        double(tokens.load()) / seconds, percentile(ttft, 0.5), percentile(ttft, 0.99), rss_start, rss_middle, rss_end);
    std::printf("%s\n", report.c_str());
    RecordProperty("report", report);
    EXPECT_EQ(server.stop(), 0);
    fs::remove_all(dir);
}

}  // namespace
}  // namespace deltabit
