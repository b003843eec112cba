// A streaming chat request on a raw loopback connection, read as it arrives: the SSE chunks (chunked
// transfer encoding decoded here), the content, and when each piece of content came — what the load
// and interleaving tests measure. A caller's check runs after every token's chunk and can hang up.
#pragma once

#include "server_process.h"

#include <chrono>
#include <functional>
#include <string>
#include <vector>

namespace deltabit::test {

struct StreamResult {
    using Clock = std::chrono::steady_clock;
    bool ok = false;  // HTTP 200, well-formed chunks, ended with [DONE] (or hung up by the check)
    std::string content;
    std::string finish;
    double ttft_ms = -1.0;  // to the first content delta
    int64_t completion_tokens = 0;
    std::string error;
    Clock::time_point sent;                      // when the request was written
    std::vector<Clock::time_point> token_times;  // when each chunk with a token arrived (content or logprobs)
};

// Called after each chunk with a token, with the result so far; false hangs up (the result counts as
// ok). A chunk carries a token when it has content, or logprobs (requested: then every token has one).
using ChunkCheck = std::function<bool(const StreamResult&)>;
inline bool hang_up_at_first(const StreamResult&) { return false; }

// POSTs `body` to /v1/chat/completions on a fresh connection and reads the SSE stream to its end.
inline StreamResult stream_chat(int port, const std::string& body, const ChunkCheck& go_on = {}) {
    using nlohmann::json;
    using Clock = StreamResult::Clock;
    StreamResult r;
    const int fd = connect_loopback(port);
    if (fd < 0) {
        r.error = "connect failed";
        return r;
    }
    const std::string request = "POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nConnection: close\r\n"
                                "Content-Type: application/json\r\nContent-Length: " +
                                std::to_string(body.size()) + "\r\n\r\n" + body;
    r.sent = Clock::now();
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
            const bool has_content = c["delta"].contains("content") && !c["delta"]["content"].get<std::string>().empty();
            if (has_content || !c["logprobs"].is_null()) {
                const Clock::time_point now = Clock::now();
                if (has_content) {
                    if (r.ttft_ms < 0) r.ttft_ms = std::chrono::duration<double, std::milli>(now - r.sent).count();
                    r.content += c["delta"]["content"].get<std::string>();
                }
                r.token_times.push_back(now);
                if (go_on && !go_on(r)) {
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

}  // namespace deltabit::test
