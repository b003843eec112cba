// A bounded load test of `deltabit serve` on loopback: 64 streaming clients at once, 1,000 requests in
// all, mixing new conversations, follow-up turns and cancellations (clients that hang up after the
// first words). Every completed reply must equal the reply the same request got when served alone
// (greedy decoding on an attention-only model, whose reuse is exact: runtime/session.h), nothing may
// fail, and the server's resident memory must stay flat. Prints requests/s, aggregate tok/s and time
// to first token.
#include "server_process.h"

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

struct StreamResult {
    bool ok = false;           // HTTP 200, well-formed chunks, ended with [DONE]
    std::string content;
    std::string finish;
    double ttft_ms = -1.0;     // to the first content delta
    int64_t completion_tokens = 0;
    std::string error;
};

// POSTs `body` on a fresh connection and reads the SSE stream (chunked transfer encoding decoded
// here); with `hang_up`, closes the connection right after the first content delta.
StreamResult stream_chat(int port, const std::string& body, bool hang_up) {
    StreamResult r;
    const Clock::time_point start = Clock::now();
    const int fd = test::connect_loopback(port);
    if (fd < 0) {
        r.error = "connect failed";
        return r;
    }
    const std::string request = "POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nConnection: close\r\n"
                                "Content-Type: application/json\r\nContent-Length: " +
                                std::to_string(body.size()) + "\r\n\r\n" + body;
    if (write(fd, request.data(), request.size()) != ssize_t(request.size())) {
        close(fd);
        r.error = "write failed";
        return r;
    }
    std::string raw, decoded;
    size_t parsed = 0;  // of raw, past the headers
    bool headers_done = false, done = false;
    char buffer[8192];
    while (!done) {
        const ssize_t n = read(fd, buffer, sizeof buffer);
        if (n <= 0) break;
        raw.append(buffer, size_t(n));
        if (!headers_done) {
            const size_t end = raw.find("\r\n\r\n");
            if (end == std::string::npos) continue;
            if (raw.rfind("HTTP/1.1 200", 0) != 0) {
                r.error = raw.substr(0, raw.find("\r\n"));
                break;
            }
            headers_done = true;
            parsed = end + 4;
        }
        // Chunks: size in hex, CRLF, data, CRLF.
        for (;;) {
            const size_t line_end = raw.find("\r\n", parsed);
            if (line_end == std::string::npos) break;
            const size_t size = std::stoul(raw.substr(parsed, line_end - parsed), nullptr, 16);
            if (raw.size() < line_end + 2 + size + 2) break;
            decoded += raw.substr(line_end + 2, size);
            parsed = line_end + 2 + size + 2;
            if (size == 0) done = true;
        }
        size_t at;
        while ((at = decoded.find("\n\n")) != std::string::npos) {
            const std::string event = decoded.substr(0, at);
            decoded.erase(0, at + 2);
            if (event.rfind("data: ", 0) != 0) continue;
            const std::string data = event.substr(6);
            if (data == "[DONE]") {
                r.ok = true;
                continue;
            }
            const json chunk = json::parse(data, nullptr, false);
            if (chunk.is_discarded() || chunk.contains("error")) {
                r.error = "bad chunk: " + data;
                close(fd);
                return r;
            }
            if (chunk.contains("usage")) {
                r.completion_tokens = chunk["usage"]["completion_tokens"];
                continue;
            }
            const json& c = chunk["choices"][0];
            if (c["delta"].contains("content") && !c["delta"]["content"].get<std::string>().empty()) {
                if (r.ttft_ms < 0) r.ttft_ms = std::chrono::duration<double, std::milli>(Clock::now() - start).count();
                r.content += c["delta"]["content"].get<std::string>();
                if (hang_up) {
                    close(fd);
                    r.ok = true;
                    return r;
                }
            }
            if (!c["finish_reason"].is_null()) r.finish = c["finish_reason"];
        }
    }
    close(fd);
    if (!r.ok && r.error.empty()) r.error = "stream ended without [DONE]";
    return r;
}

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
    const fs::path dir = fs::temp_directory_path() / "deltabit_test_server_load";
    fs::remove_all(dir);
    test::ServerProcess server(test::server_model(dir / "model"),
                               {"--parallel", "16", "--max-concurrent", "256", "--park-budget", "64"});

    // The replies served alone, one request at a time.
    std::vector<std::string> first(kConversations), second(kConversations);
    for (int i = 0; i < kConversations; ++i) {
        const StreamResult a = stream_chat(server.port(), body_of(turn_one(i), kReplyTokens), false);
        ASSERT_TRUE(a.ok) << a.error;
        first[size_t(i)] = a.content;
        const StreamResult b = stream_chat(server.port(), body_of(turn_two(i, a.content), kReplyTokens), false);
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
                const StreamResult r = stream_chat(server.port(), body_of(messages, hang_up ? 400 : kReplyTokens), hang_up);
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
