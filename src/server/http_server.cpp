#include "server/http_server.h"

#include "core/error.h"
#include "server/reply_parse.h"
#include "server/request_parse.h"
#include "server/responses.h"
#include "server/server_page.h"  // generated from web/chat.html (CMakeLists.txt)

#include <fmt/format.h>
#include <httplib.h>

#include <netinet/in.h>
#include <sys/socket.h>

#include <atomic>
#include <chrono>
#include <ctime>
#include <random>
#include <thread>

namespace deltabit::server {
namespace {

using namespace std::chrono_literals;

constexpr std::string_view kJsonType = "application/json";

// Decrements the in-flight count when a request's handler (or its stream) is done with it.
struct InFlight {
    HttpCounters& counters;
    ~InFlight() { --counters.in_flight; }
};

int64_t now_seconds() { return int64_t(std::time(nullptr)); }

// cpp-httplib listens with a backlog of 5 (compiled into Debian's library), too few for dozens of
// clients connecting at once: their SYNs would be dropped and retried a second later. Linux lets
// listen() be called again on a listening socket to change its backlog; the socket is found by its
// bound port among this process's descriptors.
void widen_backlog(int port) {
    for (int fd = 3; fd < 4096; ++fd) {
        sockaddr_storage address{};
        socklen_t length = sizeof address;
        if (getsockname(fd, reinterpret_cast<sockaddr*>(&address), &length) != 0) continue;
        int accepting = 0;
        socklen_t size = sizeof accepting;
        if (getsockopt(fd, SOL_SOCKET, SO_ACCEPTCONN, &accepting, &size) != 0 || !accepting) continue;
        int bound = -1;
        if (address.ss_family == AF_INET) bound = ntohs(reinterpret_cast<sockaddr_in*>(&address)->sin_port);
        if (address.ss_family == AF_INET6) bound = ntohs(reinterpret_cast<sockaddr_in6*>(&address)->sin6_port);
        if (bound == port) listen(fd, 1024);
    }
}

}  // namespace

struct HttpServer::Impl {
    Scheduler& scheduler;
    ModelText model;
    HttpOptions options;
    httplib::Server http;
    HttpCounters counters;
    std::mutex render_mutex;  // the template interpreter is not known to be safe to share between threads
    std::atomic<uint64_t> next_id{1};
    std::atomic<bool> stopping{false};

    Impl(Scheduler& s, ModelText m, HttpOptions o) : scheduler(s), model(std::move(m)), options(std::move(o)) {}

    void reply_error(httplib::Response& res, const ApiError& error) {
        res.status = error.status;
        res.set_content(error_body(error), std::string(kJsonType));
    }

    bool allowed_origin(const std::string& origin) const {
        return std::find(options.cors_origins.begin(), options.cors_origins.end(), origin) != options.cors_origins.end();
    }

    // The checks every request passes before its body is read (see http_server.h).
    httplib::Server::HandlerResponse pre_route(const httplib::Request& req, httplib::Response& res) {
        const std::string origin = req.get_header_value("Origin");
        if (!options.cors_origins.empty() && allowed_origin(origin)) {
            res.set_header("Access-Control-Allow-Origin", origin);
            res.set_header("Vary", "Origin");
        }
        if (req.method == "OPTIONS") {
            if (!options.cors_origins.empty() && allowed_origin(origin)) {
                res.status = 204;
                res.set_header("Access-Control-Allow-Methods", "GET, POST, OPTIONS");
                res.set_header("Access-Control-Allow-Headers", "Authorization, Content-Type");
                res.set_header("Access-Control-Max-Age", "600");
            } else {
                reply_error(res, {.status = 403, .message = "cross-origin requests are not allowed (serve --cors-origin)",
                                  .type = "forbidden"});
            }
            return httplib::Server::HandlerResponse::Handled;
        }
        const bool open_path = req.path == "/" || req.path == "/health";
        if (!options.api_key.empty() && !open_path &&
            req.get_header_value("Authorization") != "Bearer " + options.api_key) {
            res.set_header("WWW-Authenticate", "Bearer");
            reply_error(res, {.status = 401, .message = "missing or wrong API key (Authorization: Bearer KEY)",
                              .type = "authentication_error", .code = "invalid_api_key"});
            counters.count(req.path, 401);
            return httplib::Server::HandlerResponse::Handled;
        }
        if (req.method == "POST") {
            // Only application/json: the types a browser may send cross-site without a preflight
            // (text/plain, forms, multipart) never reach the parser.
            const std::string type = req.get_header_value("Content-Type");
            const std::string_view media = std::string_view(type).substr(0, type.find(';'));
            if (media != kJsonType) {
                res.set_header("Connection", "close");  // the unread body must not be taken for a request
                reply_error(res, {.status = 415,
                                  .message = fmt::format("Content-Type must be application/json, not '{}'",
                                                         type.empty() ? "(none)" : type),
                                  .type = "invalid_request_error", .code = "unsupported_media_type"});
                counters.count(req.path, 415);
                return httplib::Server::HandlerResponse::Handled;
            }
        }
        return httplib::Server::HandlerResponse::Unhandled;
    }

    // A job for `prompt` with the request's generation settings, checked against the limits.
    std::shared_ptr<Job> make_job(std::vector<int32_t> prompt, const GenerationRequest& g, std::string_view prompt_field,
                                  bool allow_zero_tokens) {
        const int64_t n = int64_t(prompt.size());
        const int64_t prompt_limit = options.limits.max_prompt_tokens > 0
                                         ? std::min(options.limits.max_prompt_tokens, model.context)
                                         : model.context;
        if (n == 0) throw RequestError({.message = "the prompt has no tokens", .param = std::string(prompt_field)});
        if (n > prompt_limit || (n >= model.context && !allow_zero_tokens))
            throw RequestError({.message = fmt::format("the prompt has {} tokens; at most {} fit (context {})", n,
                                                       std::min(prompt_limit, model.context - 1), model.context),
                                .param = std::string(prompt_field), .code = "context_length_exceeded"});
        auto job = std::make_shared<Job>();
        job->options.sampling = g.sampling;
        if (!g.seed_given) job->options.sampling.seed = std::random_device{}() ^ (uint64_t(std::random_device{}()) << 32);
        job->options.stop = g.stop;
        const int64_t default_max_tokens = model.block_tokens > 0 ? std::min(options.limits.max_tokens, model.default_max_tokens)
                                                                  : std::min(options.limits.max_tokens, model.context - n);
        int64_t max_tokens = g.max_tokens.value_or(default_max_tokens);
        // A block-diffusion model writes whole blocks: max_tokens rounded up is what must fit.
        const int64_t written = model.block_tokens > 0 ? (max_tokens + model.block_tokens - 1) / model.block_tokens * model.block_tokens
                                                       : max_tokens;
        if (g.max_tokens && n + written > model.context)
            throw RequestError({.message = fmt::format("the prompt's {} tokens plus max_tokens {}{} exceed the context of {}", n,
                                                       max_tokens,
                                                       written == max_tokens ? "" : fmt::format(" ({} in whole blocks)", written),
                                                       model.context),
                                .param = "max_tokens", .code = "context_length_exceeded"});
        job->generate = max_tokens > 0;
        job->options.max_tokens = std::max<int64_t>(max_tokens, 1);
        job->logprobs = g.logprobs;
        job->top_logprobs = g.top_logprobs;
        job->prompt = std::move(prompt);
        return job;
    }

    void submit(const std::shared_ptr<Job>& job) {
        if (!scheduler.submit(job))
            throw RequestError({.status = stopping ? 503 : 429,
                                .message = stopping ? "the server is shutting down" : "too many requests are waiting; retry later",
                                .type = stopping ? "server_error" : "rate_limit_error"});
    }

    std::string render_chat(const ChatCompletionRequest& r, std::string& forced_prefix) {
        text::ChatRequest request;
        request.messages = r.messages;
        request.add_generation_prompt = true;
        request.enable_thinking = r.enable_thinking;
        request.extra = r.template_kwargs;
        if (r.tools.is_array() && !r.tools.empty() && r.tool_choice.mode != ToolChoiceMode::none) {
            if (r.tool_choice.mode == ToolChoiceMode::named) {
                request.tools = ordered_json::array();
                for (const auto& t : r.tools)
                    if (t["function"]["name"] == r.tool_choice.name) request.tools.push_back(t);
            } else {
                request.tools = r.tools;
            }
        }
        std::string rendered;
        try {
            std::lock_guard lock(render_mutex);
            rendered = model.chat_template->render(request);
        } catch (const text::ChatTemplateError& e) {
            if (e.refused_input())
                throw RequestError({.message = fmt::format("the model's chat template refused the conversation: {}", e.what()),
                                    .param = "messages"});
            throw;
        }
        // A required or named tool call: the reply is started with the call's opening, in the form the
        // template teaches (reply_parse.h), so the model can only continue it.
        if (r.tool_choice.mode == ToolChoiceMode::required || r.tool_choice.mode == ToolChoiceMode::named) {
            const bool xml = model.chat_template->source("", true).find("<function=") != std::string::npos;
            forced_prefix = "<tool_call>\n";
            if (r.tool_choice.mode == ToolChoiceMode::named)
                forced_prefix += xml ? "<function=" + r.tool_choice.name + ">\n"
                                     : "{\"name\": \"" + r.tool_choice.name + "\", \"arguments\": ";
            rendered += forced_prefix;
        }
        return rendered;
    }

    // A stream with no event for a second gets an SSE comment line (clients skip it) on a block-diffusion
    // model, whose events come a block apart: a write is the only way this version of cpp-httplib learns
    // that the client has gone, and the job is then cancelled at its next denoising step rather than at
    // its next block. False (ending the stream) when the write fails.
    bool keep_alive(httplib::DataSink& sink, Job& job, int& quiet_polls) {
        if (model.block_tokens == 0 || ++quiet_polls < 10) return true;
        quiet_polls = 0;
        static constexpr std::string_view kComment = ": waiting for the next block\n\n";
        if (sink.write(kComment.data(), kComment.size())) return true;
        job.cancel();
        return false;
    }

    std::string new_id(std::string_view prefix) { return fmt::format("{}-{}", prefix, next_id++); }

    void chat_completions(const httplib::Request& req, httplib::Response& res, const std::shared_ptr<InFlight>& in_flight) {
        ChatCompletionRequest r = parse_chat_request(req.body, options.limits, model.block_tokens > 0);
        std::string forced_prefix;
        const std::string rendered = render_chat(r, forced_prefix);
        std::shared_ptr<Job> job = make_job(model.encode_rendered(rendered), r.generation, "messages", false);
        // A block-diffusion reply is run's text as it stands (special tokens, thinking tags among them, are
        // skipped as run skips them), so it is not split into reasoning and content.
        const bool thinking = model.block_tokens == 0 && prompt_opens_thinking(rendered);
        const bool tools = !forced_prefix.empty() ||
                           (r.tools.is_array() && !r.tools.empty() && r.tool_choice.mode != ToolChoiceMode::none);
        submit(job);
        const std::string id = new_id("chatcmpl");
        const ordered_json head = {{"id", id}, {"object", r.generation.stream ? "chat.completion.chunk" : "chat.completion"},
                                   {"created", now_seconds()}, {"model", model.model_id}};
        auto splitter = std::make_shared<ReplySplitter>(thinking, tools);
        if (!forced_prefix.empty()) splitter->push(forced_prefix);  // held: it starts a <tool_call>

        if (!r.generation.stream) {
            std::string content, reasoning;
            ordered_json logprobs = ordered_json::array();
            for (;;) {
                std::optional<JobEvent> e = job->pop(100ms);
                if (!e) continue;
                if (e->kind == JobEvent::Kind::error) throw RequestError({.status = e->status, .message = e->message, .type = "server_error"});
                if (e->kind == JobEvent::Kind::token) {
                    ReplyDelta d = splitter->push(e->text);
                    content += d.content;
                    reasoning += d.reasoning;
                    if (e->logprob) logprobs.push_back(chat_logprob_json(*e->logprob, *model.tokenizer));
                    continue;
                }
                if (e->kind != JobEvent::Kind::done) continue;
                ReplyEnd end = splitter->finish();
                content += end.rest.content;
                reasoning += end.rest.reasoning;
                ordered_json message = {{"role", "assistant"}, {"content", content}};
                if (!reasoning.empty()) message["reasoning_content"] = reasoning;
                std::string finish = e->finish;
                if (!end.tool_calls.empty()) {
                    message["tool_calls"] = tool_calls_json(end.tool_calls, "call-" + id, false);
                    if (content.empty()) message["content"] = nullptr;
                    if (finish == "stop") finish = "tool_calls";
                } else if (end.malformed) {
                    finish = "malformed_tool_call";
                }
                ordered_json choice = {{"index", 0}, {"message", message},
                                       {"logprobs", r.generation.logprobs ? ordered_json{{"content", logprobs}} : ordered_json(nullptr)},
                                       {"finish_reason", finish}};
                ordered_json body = head;
                body["choices"] = ordered_json::array({choice});
                body["usage"] = usage_json(*e);
                res.set_content(dump_json(body), std::string(kJsonType));
                return;
            }
        }

        const bool include_usage = r.generation.include_usage;
        const bool want_logprobs = r.generation.logprobs;
        res.set_header("Cache-Control", "no-cache");
        res.set_header("X-Accel-Buffering", "no");
        res.set_header("Connection", "close");  // a stream ends its connection: no keep-alive wait after it
        auto sent_role = std::make_shared<bool>(false);
        auto quiet_polls = std::make_shared<int>(0);
        res.set_chunked_content_provider(
            "text/event-stream",
            [this, job, splitter, head, include_usage, want_logprobs, sent_role, id, quiet_polls](size_t, httplib::DataSink& sink) {
                auto send = [&](const ordered_json& chunk) {
                    const std::string line = "data: " + dump_json(chunk) + "\n\n";
                    if (!sink.write(line.data(), line.size())) {
                        job->cancel();  // the client is gone
                        return false;
                    }
                    return true;
                };
                auto chunk = [&](ordered_json delta, ordered_json finish, ordered_json logprobs = nullptr) {
                    ordered_json c = head;
                    ordered_json choice = {{"index", 0}, {"delta", std::move(delta)}, {"logprobs", std::move(logprobs)},
                                           {"finish_reason", std::move(finish)}};
                    c["choices"] = ordered_json::array({choice});
                    return c;
                };
                if (!*sent_role) {
                    *sent_role = true;
                    return send(chunk({{"role", "assistant"}, {"content", ""}}, nullptr));
                }
                std::optional<JobEvent> e = job->pop(100ms);
                if (!e) return keep_alive(sink, *job, *quiet_polls);
                *quiet_polls = 0;
                if (e->kind == JobEvent::Kind::error) {
                    send({{"error", {{"message", e->message}, {"type", "server_error"}, {"param", nullptr}, {"code", nullptr}}}});
                    const std::string done = "data: [DONE]\n\n";
                    sink.write(done.data(), done.size());
                    sink.done();
                    return true;
                }
                if (e->kind == JobEvent::Kind::token) {
                    const ReplyDelta d = splitter->push(e->text);
                    ordered_json delta = ordered_json::object();
                    if (!d.reasoning.empty()) delta["reasoning_content"] = d.reasoning;
                    if (!d.content.empty()) delta["content"] = d.content;
                    ordered_json lp = nullptr;
                    if (e->logprob) lp = {{"content", ordered_json::array({chat_logprob_json(*e->logprob, *model.tokenizer)})}};
                    if (delta.empty() && !want_logprobs) return true;
                    return send(chunk(delta, nullptr, lp));
                }
                if (e->kind != JobEvent::Kind::done) return true;
                const ReplyEnd end = splitter->finish();
                ordered_json rest = ordered_json::object();
                if (!end.rest.reasoning.empty()) rest["reasoning_content"] = end.rest.reasoning;
                if (!end.rest.content.empty()) rest["content"] = end.rest.content;
                if (!rest.empty() && !send(chunk(rest, nullptr))) return false;
                std::string finish = e->finish;
                if (!end.tool_calls.empty()) {
                    if (!send(chunk({{"tool_calls", tool_calls_json(end.tool_calls, "call-" + id, true)}}, nullptr))) return false;
                    if (finish == "stop") finish = "tool_calls";
                } else if (end.malformed) {
                    finish = "malformed_tool_call";
                }
                if (!send(chunk(ordered_json::object(), finish))) return false;
                if (include_usage) {
                    ordered_json u = head;
                    u["choices"] = ordered_json::array();
                    u["usage"] = usage_json(*e);
                    if (!send(u)) return false;
                }
                const std::string done = "data: [DONE]\n\n";
                sink.write(done.data(), done.size());
                sink.done();
                return true;
            },
            // Finished or not, nothing more is wanted from the job; in_flight is counted until the stream ends.
            [job, in_flight](bool) { job->cancel(); });
    }

    void completions(const httplib::Request& req, httplib::Response& res, const std::shared_ptr<InFlight>& in_flight) {
        CompletionRequest r = parse_completion_request(req.body, options.limits, model.block_tokens > 0);
        std::vector<int32_t> prompt;
        if (r.prompt_text) {
            prompt = model.encode_raw(*r.prompt_text);
        } else {
            for (size_t i = 0; i < r.prompt_ids.size(); ++i)
                if (r.prompt_ids[i] >= model.n_vocab)
                    throw RequestError({.message = fmt::format("'prompt[{}]' is {}, outside the vocabulary of {} tokens", i,
                                                               r.prompt_ids[i], model.n_vocab),
                                        .param = fmt::format("prompt[{}]", i)});
            prompt = r.prompt_ids;
        }
        const std::vector<int32_t> prompt_ids = prompt;
        std::shared_ptr<Job> job = make_job(std::move(prompt), r.generation, "prompt", r.echo);
        job->prompt_logprobs = r.echo && r.generation.logprobs;
        if (job->prompt_logprobs && int64_t(prompt_ids.size()) > model.context)
            throw RequestError({.message = "the prompt does not fit the context", .param = "prompt"});
        submit(job);
        const std::string id = new_id("cmpl");
        ordered_json head = {{"id", id}, {"object", "text_completion"}, {"created", now_seconds()}, {"model", model.model_id}};
        const text::Tokenizer& tokenizer = *model.tokenizer;
        const bool with_top = r.generation.top_logprobs > 0;

        if (!r.generation.stream) {
            std::string text;
            CompletionLogprobs logprobs;
            if (r.echo) {
                text = tokenizer.decode(prompt_ids);
                if (!job->prompt_logprobs && r.generation.logprobs)
                    for (int32_t t : prompt_ids) logprobs.add(t, nullptr, tokenizer, with_top);
            }
            for (;;) {
                std::optional<JobEvent> e = job->pop(100ms);
                if (!e) continue;
                if (e->kind == JobEvent::Kind::error) throw RequestError({.status = e->status, .message = e->message, .type = "server_error"});
                if (e->kind == JobEvent::Kind::prompt_logprobs) {
                    logprobs.add(prompt_ids[0], nullptr, tokenizer, with_top);
                    for (size_t i = 0; i < e->prompt_logprobs.size(); ++i)
                        logprobs.add(prompt_ids[i + 1], &e->prompt_logprobs[i], tokenizer, with_top);
                    continue;
                }
                if (e->kind == JobEvent::Kind::token) {
                    text += e->text;
                    if (r.generation.logprobs) logprobs.add(e->token, e->logprob ? &*e->logprob : nullptr, tokenizer, with_top);
                    continue;
                }
                ordered_json choice = {{"index", 0}, {"text", text},
                                       {"logprobs", r.generation.logprobs ? logprobs.json() : ordered_json(nullptr)},
                                       {"finish_reason", e->finish}};
                ordered_json body = head;
                body["choices"] = ordered_json::array({choice});
                JobEvent usage = *e;
                usage.prompt_tokens = int64_t(prompt_ids.size());
                body["usage"] = usage_json(usage);
                res.set_content(dump_json(body), std::string(kJsonType));
                return;
            }
        }

        const bool include_usage = r.generation.include_usage;
        res.set_header("Cache-Control", "no-cache");
        res.set_header("X-Accel-Buffering", "no");
        res.set_header("Connection", "close");  // a stream ends its connection: no keep-alive wait after it
        auto echoed = std::make_shared<bool>(!r.echo);
        const std::string echo_text = r.echo ? tokenizer.decode(prompt_ids) : std::string();
        auto quiet_polls = std::make_shared<int>(0);
        res.set_chunked_content_provider(
            "text/event-stream",
            [this, job, head, include_usage, echoed, echo_text, quiet_polls](size_t, httplib::DataSink& sink) {
                auto send = [&](const ordered_json& body) {
                    const std::string line = "data: " + dump_json(body) + "\n\n";
                    if (!sink.write(line.data(), line.size())) {
                        job->cancel();
                        return false;
                    }
                    return true;
                };
                auto chunk = [&](const std::string& text, ordered_json finish) {
                    ordered_json c = head;
                    c["choices"] = ordered_json::array({{{"index", 0}, {"text", text}, {"logprobs", nullptr}, {"finish_reason", finish}}});
                    return c;
                };
                if (!*echoed) {
                    *echoed = true;
                    return send(chunk(echo_text, nullptr));
                }
                std::optional<JobEvent> e = job->pop(100ms);
                if (!e) return keep_alive(sink, *job, *quiet_polls);
                *quiet_polls = 0;
                if (e->kind == JobEvent::Kind::error) {
                    send({{"error", {{"message", e->message}, {"type", "server_error"}, {"param", nullptr}, {"code", nullptr}}}});
                } else if (e->kind == JobEvent::Kind::token) {
                    return e->text.empty() ? true : send(chunk(e->text, nullptr));
                } else if (e->kind == JobEvent::Kind::done) {
                    if (!send(chunk("", e->finish))) return false;
                    if (include_usage) {
                        ordered_json u = head;
                        u["choices"] = ordered_json::array();
                        u["usage"] = usage_json(*e);
                        if (!send(u)) return false;
                    }
                } else {
                    return true;
                }
                const std::string done = "data: [DONE]\n\n";
                sink.write(done.data(), done.size());
                sink.done();
                return true;
            },
            [job, in_flight](bool) { job->cancel(); });
    }

    // Wraps a JSON endpoint: concurrency limit, errors as OpenAI error objects, request counts.
    using Endpoint = void (Impl::*)(const httplib::Request&, httplib::Response&, const std::shared_ptr<InFlight>&);
    httplib::Server::Handler endpoint(std::string name, Endpoint handler) {
        return [this, name, handler](const httplib::Request& req, httplib::Response& res) {
            if (++counters.in_flight > options.max_concurrent) {
                --counters.in_flight;
                res.set_header("Retry-After", "1");
                reply_error(res, {.status = 429, .message = fmt::format("more than {} requests at once; retry later",
                                                                         options.max_concurrent),
                                  .type = "rate_limit_error"});
                counters.count(name, 429);
                return;
            }
            // Held by a streamed response until its stream ends, so streams count against the limit.
            const auto in_flight = std::make_shared<InFlight>(counters);
            try {
                (this->*handler)(req, res, in_flight);
            } catch (const RequestError& e) {
                if (e.error().status == 429 || e.error().status == 503) res.set_header("Retry-After", "1");
                reply_error(res, e.error());
            } catch (const std::exception& e) {
                reply_error(res, {.status = 500, .message = e.what(), .type = "server_error"});
            }
            counters.count(name, res.status > 0 ? res.status : 200);  // httplib sets 200 after the handler
        };
    }
};

HttpServer::HttpServer(Scheduler& scheduler, ModelText model, HttpOptions options)
    : impl_(std::make_unique<Impl>(scheduler, std::move(model), std::move(options))) {
    Impl& s = *impl_;
    httplib::Server& http = s.http;
    const int threads = s.options.threads > 0 ? s.options.threads : s.options.max_concurrent + 8;
    http.new_task_queue = [threads] { return new httplib::ThreadPool(size_t(threads)); };
    http.set_tcp_nodelay(true);
    http.set_payload_max_length(size_t(s.options.limits.max_body_bytes));
    http.set_pre_routing_handler([&s](const httplib::Request& req, httplib::Response& res) { return s.pre_route(req, res); });

    http.Get("/", [&s](const httplib::Request&, httplib::Response& res) {
        res.set_content(std::string(kChatPage), "text/html; charset=utf-8");
        res.set_header("Content-Security-Policy", "default-src 'self'; style-src 'unsafe-inline'; script-src 'unsafe-inline'");
        s.counters.count("/", 200);
    });
    http.Get("/health", [&s](const httplib::Request&, httplib::Response& res) {
        if (s.stopping) {
            res.status = 503;
            res.set_content(R"({"status":"stopping"})", std::string(kJsonType));
        } else {
            res.set_content(R"({"status":"ok"})", std::string(kJsonType));
        }
    });
    http.Get("/metrics", [&s](const httplib::Request&, httplib::Response& res) {
        res.set_content(prometheus_text(s.scheduler.stats(), s.counters), "text/plain; version=0.0.4");
        s.counters.count("/metrics", 200);
    });
    http.Get("/v1/models", [&s](const httplib::Request&, httplib::Response& res) {
        ordered_json entry = {{"id", s.model.model_id}, {"object", "model"}, {"created", 0}, {"owned_by", "deltabit"},
                              {"context_length", s.model.context}};
        if (s.model.block_tokens > 0) {
            entry["decoding"] = "block_diffusion";
            entry["block_tokens"] = s.model.block_tokens;
        }
        res.set_content(dump_json({{"object", "list"}, {"data", ordered_json::array({entry})}}), std::string(kJsonType));
        s.counters.count("/v1/models", 200);
    });
    http.Post("/v1/chat/completions", s.endpoint("/v1/chat/completions", &Impl::chat_completions));
    http.Post("/v1/completions", s.endpoint("/v1/completions", &Impl::completions));
    http.set_error_handler([&s](const httplib::Request& req, httplib::Response& res) {
        if (!res.body.empty()) return;  // an error a handler already described
        std::string message = fmt::format("{} {}: ", req.method, req.path);
        if (res.status == 404) message += "no such endpoint";
        else if (res.status == 413) message += fmt::format("the body is larger than {} bytes", s.options.limits.max_body_bytes);
        else message += "request refused";
        res.set_content(error_body({.status = res.status, .message = message}), std::string(kJsonType));
    });
}

HttpServer::~HttpServer() { stop(); }

void HttpServer::bind() {
    Impl& s = *impl_;
    if (s.options.port == 0) {
        port_ = s.http.bind_to_any_port(s.options.host);
        if (port_ <= 0) fail("serve: cannot bind {} on any port", s.options.host);
    } else {
        if (!s.http.bind_to_port(s.options.host, s.options.port))
            fail("serve: cannot listen on {}:{} (in use, or not an address of this machine)", s.options.host, s.options.port);
        port_ = s.options.port;
    }
    widen_backlog(port_);
}

void HttpServer::serve() { impl_->http.listen_after_bind(); }

void HttpServer::refuse_new() { impl_->stopping = true; }

void HttpServer::wait_idle(std::chrono::milliseconds grace) {
    const auto until = std::chrono::steady_clock::now() + grace;
    while (impl_->counters.in_flight.load() > 0 && std::chrono::steady_clock::now() < until)
        std::this_thread::sleep_for(10ms);
}

void HttpServer::stop() {
    impl_->stopping = true;
    impl_->http.stop();
}

}  // namespace deltabit::server
