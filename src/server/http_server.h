// The HTTP side of `deltabit serve` (cpp-httplib): routes, the safety checks every request passes
// before its body is read, and the translation of JSON bodies into jobs and of job events into
// OpenAI responses. No model code runs here: rendering a chat template and tokenizing are text work;
// everything that touches the engine happens on the scheduler's thread (scheduler.h).
//
// Order of checks (docs/server.md, security): CORS preflight → API key (401) → concurrency (429 with
// Retry-After) → Content-Type of a POST (415, before its body is read) → body size (413) → JSON and
// fields (400 naming the field) → prompt and token limits (400).
#pragma once

#include "server/metrics.h"
#include "server/request_limits.h"
#include "server/scheduler.h"
#include "text/chat_template.h"
#include "text/tokenizer.h"

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

namespace deltabit::server {

// The model's text side, as the HTTP threads use it.
struct ModelText {
    std::string model_id;  // the name /v1/models lists
    const text::Tokenizer* tokenizer = nullptr;
    const text::ChatTemplate* chat_template = nullptr;
    std::function<std::vector<int32_t>(const std::string&)> encode_rendered;  // template output → ids
    std::function<std::vector<int32_t>(const std::string&)> encode_raw;       // a plain prompt (BOS added)
    int64_t n_vocab = 0;
    int64_t context = 0;  // a session's capacity in tokens (block diffusion: the trained context)
    // A block-diffusion model (scheduler.h): the tokens it commits at once, and the max_tokens a chat
    // request gets when it gives none (generation_config.json's max_new_tokens, as `deltabit run`).
    // block_tokens 0: the model decodes left to right.
    int64_t block_tokens = 0;
    int64_t default_max_tokens = 0;
};

struct HttpOptions {
    std::string host = "127.0.0.1";
    int port = 8080;  // 0: any free port (bound_port() says which)
    std::string api_key;                    // empty: no key needed
    std::vector<std::string> cors_origins;  // empty: no CORS headers at all
    RequestLimits limits;
    int max_concurrent = 128;  // requests served at once; more get 429
    int threads = 0;           // HTTP worker threads; 0: max_concurrent + 8
};

class HttpServer {
public:
    HttpServer(Scheduler& scheduler, ModelText model, HttpOptions options);
    ~HttpServer();

    // Binds (Error naming the address when it cannot) and serves until stop().
    void bind();
    int bound_port() const { return port_; }
    void serve();
    // Shutdown in two halves: refuse new work (503) while the scheduler finishes or cancels what is in
    // flight, then wait (at most `grace`) for the responses in flight to be written, then close.
    void refuse_new();
    void wait_idle(std::chrono::milliseconds grace);
    void stop();

private:
    struct Impl;
    std::unique_ptr<Impl> impl_;
    int port_ = 0;
};

}  // namespace deltabit::server
