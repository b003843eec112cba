#include "cli/bench_serve.h"

#include "core/error.h"
#include "server/http_server.h"
#include "server/scheduler.h"

#include <fmt/format.h>
#include <httplib.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <optional>
#include <latch>
#include <random>
#include <thread>

namespace deltabit::cli {
namespace {

using Clock = BenchClock;
using nlohmann::json;

// A streamed reply may wait this long between two reads (a 64-stream level of a large model on a slow
// machine); past it the request fails rather than hangs the bench.
constexpr int kReadTimeoutSeconds = 600;
// The untimed request of each stream before a level: enough tokens to pass the prompt and a few batched
// steps, so the level's sessions exist and the engine's scratch is sized.
constexpr int64_t kWarmupTokens = 8;

// One streamed request, as its client saw it.
struct RequestRecord {
    Clock::time_point sent, first_token, last_token, ended;
    int64_t text_chunks = 0;         // chunks with text (each token's, with the placeholder tokenizer)
    int64_t completion_tokens = -1;  // the usage chunk's
    std::string finish;
    bool done = false;               // data: [DONE] arrived
    std::string error;
};

// One SSE `data:` payload of a streamed completion.
void read_event(const std::string& data, RequestRecord& r) {
    if (data == "[DONE]") {
        r.done = true;
        return;
    }
    const json chunk = json::parse(data, nullptr, false);
    if (chunk.is_discarded() || !chunk.is_object() || chunk.contains("error")) {
        if (r.error.empty()) r.error = "bad chunk: " + data.substr(0, 200);
        return;
    }
    if (chunk.contains("usage") && chunk["usage"].is_object())
        r.completion_tokens = chunk["usage"].value("completion_tokens", int64_t(-1));
    if (!chunk.contains("choices") || !chunk["choices"].is_array() || chunk["choices"].empty()) return;
    const json& choice = chunk["choices"][0];
    if (choice.contains("text") && choice["text"].is_string() && !choice["text"].get_ref<const std::string&>().empty()) {
        const Clock::time_point now = Clock::now();
        if (r.text_chunks == 0) r.first_token = now;
        r.last_token = now;
        ++r.text_chunks;
    }
    if (choice.contains("finish_reason") && choice["finish_reason"].is_string()) r.finish = choice["finish_reason"];
}

// POSTs `body` to /v1/completions on a fresh connection and reads its SSE stream to the end.
RequestRecord stream_completion(int port, const std::string& body) {
    httplib::Client client("127.0.0.1", port);
    client.set_connection_timeout(10, 0);
    client.set_read_timeout(kReadTimeoutSeconds, 0);
    httplib::Request request;
    request.method = "POST";
    request.path = "/v1/completions";
    request.set_header("Content-Type", "application/json");
    request.body = body;
    RequestRecord r;
    int status = 0;
    std::string pending, refused;
    request.response_handler = [&](const httplib::Response& response) {
        status = response.status;
        return true;
    };
    request.content_receiver = [&](const char* data, size_t n, uint64_t, uint64_t) {
        if (status != 200) {
            refused.append(data, n);
            return true;
        }
        pending.append(data, n);
        for (size_t end; (end = pending.find("\n\n")) != std::string::npos;) {
            const std::string event = pending.substr(0, end);
            pending.erase(0, end + 2);
            if (event.starts_with("data: ")) read_event(event.substr(6), r);
        }
        return true;
    };
    r.sent = Clock::now();
    const httplib::Result result = client.send(request);
    r.ended = Clock::now();
    if (!result) r.error = "HTTP: " + httplib::to_string(result.error());
    else if (status != 200) r.error = fmt::format("HTTP {}: {}", status, refused.substr(0, 300));
    else if (r.error.empty() && !r.done) r.error = "the stream ended without data: [DONE]";
    return r;
}

std::string completion_body(const std::vector<int32_t>& prompt, int64_t max_tokens) {
    return json{{"prompt", prompt},
                {"max_tokens", max_tokens},
                {"temperature", 0},
                {"stream", true},
                {"stream_options", {{"include_usage", true}}}}
        .dump();
}

// The prompt of one request: random ids from a generator of its own (seed, level, stream, request), so
// no two requests share a prefix the server could reuse and a rerun sends the same prompts.
std::vector<int32_t> prompt_for(const ServeBenchPlan& plan, int64_t n_vocab, uint64_t level, uint64_t stream,
                                uint64_t request) {
    std::seed_seq seed{uint32_t(plan.seed), uint32_t(plan.seed >> 32), uint32_t(level), uint32_t(stream),
                       uint32_t(request)};
    std::mt19937_64 rng(seed);
    std::uniform_int_distribution<int32_t> pick(0, int32_t(n_vocab - 1));
    std::vector<int32_t> ids(size_t(plan.prompt_tokens));
    for (int32_t& id : ids) id = pick(rng);
    return ids;
}

// Sends bodies[s][k] from stream s, k in order, all streams released at once; the records in the same
// layout, and when the release was.
struct Round {
    Clock::time_point released;
    std::vector<std::vector<RequestRecord>> records;
};
Round run_streams(int port, const std::vector<std::vector<std::string>>& bodies) {
    Round round;
    round.records.resize(bodies.size());
    std::latch go(1);
    std::vector<std::thread> clients;
    for (size_t s = 0; s < bodies.size(); ++s)
        clients.emplace_back([&, s] {
            go.wait();
            for (const std::string& body : bodies[s]) round.records[s].push_back(stream_completion(port, body));
        });
    round.released = Clock::now();
    go.count_down();
    for (std::thread& t : clients) t.join();
    return round;
}

// Error for the first request that failed or did not generate exactly `max_tokens` tokens.
void require_complete(const Round& round, int64_t max_tokens, const std::string& what) {
    int64_t bad = 0, total = 0;
    std::string first;
    for (size_t s = 0; s < round.records.size(); ++s)
        for (size_t k = 0; k < round.records[s].size(); ++k) {
            const RequestRecord& r = round.records[s][k];
            ++total;
            std::string problem = r.error;
            if (problem.empty() && r.finish != "length")
                problem = fmt::format("finish_reason {:?}, expected \"length\"", r.finish);
            if (problem.empty() && r.completion_tokens != max_tokens)
                problem = fmt::format("usage.completion_tokens {}, expected {}", r.completion_tokens, max_tokens);
            if (problem.empty()) continue;
            if (bad++ == 0) first = fmt::format("stream {} request {}: {}", s, k, problem);
        }
    if (bad > 0) fail("bench: {}: {} of {} requests did not complete as asked (first: {})", what, bad, total, first);
}

// Nearest rank: the smallest value with at least p of the values at or below it.
double percentile(std::vector<double> v, double p) {
    if (v.empty()) return 0.0;
    std::sort(v.begin(), v.end());
    const size_t rank = size_t(std::ceil(p * double(v.size())));
    return v[std::clamp<size_t>(rank, 1, v.size()) - 1];
}

// Waits (up to 10 s) until the scheduler has retired every job: its thread then waits for work and makes no
// CUDA call, so another thread may read the device's memory (a call during a graph capture on the
// scheduler's thread would invalidate the capture), and its counters are final.
void wait_until_idle(const server::Scheduler& scheduler) {
    for (int i = 0; i < 10000; ++i) {
        const server::SchedulerStats s = scheduler.stats();
        if (s.active == 0 && s.queued == 0) return;
        std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
}

double milliseconds(Clock::duration d) { return std::chrono::duration<double, std::milli>(d).count(); }

BenchMeasurement measure_level(server::Scheduler& scheduler, int port, const ServeBenchPlan& plan, int64_t n_vocab,
                               int streams) {
    const std::string name = fmt::format("serve{}", streams);
    bench_progress(fmt::format("{}: {} streams x {} requests of {} prompt + {} generated tokens", name, streams,
                               plan.requests_per_stream, plan.prompt_tokens, plan.max_tokens));
    const uint64_t level = uint64_t(streams);
    std::vector<std::vector<std::string>> warmup(static_cast<size_t>(streams)), timed(static_cast<size_t>(streams));
    const int64_t warmup_tokens = std::min(kWarmupTokens, plan.max_tokens);
    for (int s = 0; s < streams; ++s) {
        // Request numbers past the timed ones: the warm-up prompts are the level's own, never reused.
        warmup[size_t(s)].push_back(
            completion_body(prompt_for(plan, n_vocab, level, uint64_t(s), uint64_t(plan.requests_per_stream)), warmup_tokens));
        for (int64_t k = 0; k < plan.requests_per_stream; ++k)
            timed[size_t(s)].push_back(completion_body(prompt_for(plan, n_vocab, level, uint64_t(s), uint64_t(k)), plan.max_tokens));
    }
    require_complete(run_streams(port, warmup), warmup_tokens, name + " warm-up");

    wait_until_idle(scheduler);
    const server::SchedulerStats before = scheduler.stats();
    const Round round = run_streams(port, timed);
    wait_until_idle(scheduler);
    const server::SchedulerStats after = scheduler.stats();
    require_complete(round, plan.max_tokens, name);

    Clock::time_point last_end = round.released;
    std::vector<double> ttft_ms, stream_rates;
    int64_t requests = 0, tokens = 0, fewest = INT64_MAX, most = 0;
    for (const auto& records : round.records)
        for (const RequestRecord& r : records) {
            ++requests;
            tokens += r.completion_tokens;
            fewest = std::min(fewest, r.completion_tokens);
            most = std::max(most, r.completion_tokens);
            last_end = std::max(last_end, r.ended);
            if (r.text_chunks > 0) ttft_ms.push_back(milliseconds(r.first_token - r.sent));
            const double decode_s = std::chrono::duration<double>(r.last_token - r.first_token).count();
            if (r.completion_tokens > 1 && decode_s > 0) stream_rates.push_back(double(r.completion_tokens - 1) / decode_s);
        }
    const double seconds = std::chrono::duration<double>(last_end - round.released).count();

    ServeFigures f;
    f.streams = streams;
    f.requests = requests;
    f.prompt_tokens = plan.prompt_tokens;
    f.max_tokens = plan.max_tokens;
    f.completion_tokens_min = fewest;
    f.completion_tokens_max = most;
    f.requests_per_s = double(requests) / seconds;
    f.stream_tok_s_median = percentile(stream_rates, 0.5);
    f.ttft_p50_ms = percentile(ttft_ms, 0.5);
    f.ttft_p99_ms = percentile(ttft_ms, 0.99);
    if (plan.traffic) {
        const double weights = double(plan.traffic->weight_bytes);
        const double row = double(plan.traffic->kv_bytes + plan.traffic->state_bytes);
        f.ceiling_vs_one_stream = double(streams) * (weights + row) / (weights + double(streams) * row);
    }
    f.decode_steps = after.decode_steps - before.decode_steps;
    f.decode_rows = after.decode_rows - before.decode_rows;

    BenchMeasurement m;
    m.test = name;
    m.depth = plan.prompt_tokens;
    m.tokens = tokens;
    m.seconds = seconds;
    m.tokens_per_s = double(tokens) / seconds;
    m.unit_us = f.stream_tok_s_median > 0 ? 1e6 / f.stream_tok_s_median : 0.0;
    if (plan.memory_in_use_gib) m.peak_memory_gib = plan.memory_in_use_gib();
    m.serve = f;
    bench_progress(fmt::format("  {:.1f} tok/s aggregate, {:.1f} tok/s per stream (median), {:.2f} requests/s, "
                               "TTFT p50 {:.1f} ms p99 {:.1f} ms, {:.1f} rows per decode step",
                               *m.tokens_per_s, f.stream_tok_s_median, f.requests_per_s, f.ttft_p50_ms, f.ttft_p99_ms,
                               f.decode_steps > 0 ? double(f.decode_rows) / double(f.decode_steps) : 0.0));
    return m;
}

// The rest of each row's note, once every level has run (the 1-stream figure is then known).
void describe(std::vector<BenchMeasurement>& rows, int parallel) {
    std::optional<double> one_stream;
    for (const BenchMeasurement& m : rows)
        if (m.serve->streams == 1) one_stream = m.tokens_per_s;
    for (BenchMeasurement& m : rows) {
        ServeFigures& f = *m.serve;
        if (one_stream && *one_stream > 0) f.vs_one_stream = *m.tokens_per_s / *one_stream;
        m.note = fmt::format(
            "serve: {} streams x {} streamed /v1/completions requests over HTTP, prompt {} + {} generated tokens each "
            "(greedy, no EOS); {:.2f} req/s; per stream {:.1f} tok/s (median); TTFT p50 {:.1f} ms p99 {:.1f} ms; "
            "{}{}; {:.2f} rows per decode step; --parallel {}, no parking",
            f.streams, f.requests / std::max(f.streams, 1), f.prompt_tokens, f.max_tokens, f.requests_per_s,
            f.stream_tok_s_median, f.ttft_p50_ms, f.ttft_p99_ms,
            f.vs_one_stream ? fmt::format("{:.2f}x the 1-stream aggregate", *f.vs_one_stream) : "no 1-stream level",
            f.ceiling_vs_one_stream ? fmt::format(" (byte ceiling {:.1f}x)", *f.ceiling_vs_one_stream) : "",
            f.decode_steps > 0 ? double(f.decode_rows) / double(f.decode_steps) : 0.0, parallel);
    }
}

class EosHiddenEngine final : public Engine {
public:
    explicit EosHiddenEngine(std::unique_ptr<Engine> inner) : inner_(std::move(inner)), config_(inner_->config()) {
        config_.eos_ids.clear();
    }
    const ModelConfig& config() const override { return config_; }
    std::string_view backend_name() const override { return inner_->backend_name(); }
    std::string description() const override { return inner_->description(); }
    std::string fingerprint() const override { return inner_->fingerprint(); }
    std::unique_ptr<EngineSequence> new_sequence(const SequenceOptions& options) const override {
        return inner_->new_sequence(options);
    }
    void forward(EngineSequence& sequence, std::span<const int32_t> ids) override { inner_->forward(sequence, ids); }
    int32_t next_token(EngineSequence& sequence, Sampler& sampler, const TokenHistory& history) override {
        return inner_->next_token(sequence, sampler, history);
    }
    void forward_batch(std::span<EngineSequence* const> sequences, std::span<const int32_t> ids) override {
        inner_->forward_batch(sequences, ids);
    }
    std::vector<float> last_logits(const EngineSequence& sequence) const override { return inner_->last_logits(sequence); }
    std::vector<float> forward_all(EngineSequence& sequence, std::span<const int32_t> ids) override {
        return inner_->forward_all(sequence, ids);
    }
    EngineCounters counters() const override { return inner_->counters(); }
    void set_cpu_threads(int threads) override { inner_->set_cpu_threads(threads); }

private:
    std::unique_ptr<Engine> inner_;
    ModelConfig config_;
};

}  // namespace

std::unique_ptr<text::Tokenizer> placeholder_tokenizer(int64_t n_vocab) {
    text::TokenizerSpec spec;
    spec.source = "placeholder tokenizer of the serve bench";
    spec.model.units = text::BpeUnits::Bytes;
    spec.model.keys.resize(size_t(n_vocab));  // holes: nothing encodes to these ids
    spec.token_strings.reserve(size_t(n_vocab));
    for (int64_t id = 0; id < n_vocab; ++id) spec.token_strings.push_back(fmt::format(" t{}", id));
    return std::make_unique<text::Tokenizer>(std::move(spec));
}

std::unique_ptr<Engine> hide_eos(std::unique_ptr<Engine> engine) {
    return std::make_unique<EosHiddenEngine>(std::move(engine));
}

std::vector<BenchMeasurement> run_serve_bench(Engine& engine, const text::Tokenizer& tokenizer,
                                              const ServeBenchPlan& plan) {
    if (!engine.config().eos_ids.empty())
        fail("bench --serve: the engine declares EOS ids; serve it through hide_eos so every reply runs to max_tokens");
    const int parallel = int(*std::max_element(plan.streams.begin(), plan.streams.end()));
    const int64_t n_vocab = engine.config().n_vocab;

    server::SchedulerOptions scheduler_options;
    scheduler_options.pool.live = parallel;
    scheduler_options.pool.session = {
        .sequence = {.max_positions = plan.prompt_tokens + plan.max_tokens + 8, .kv_format = plan.kv}, .checkpoints = {}};
    scheduler_options.pool.park_budget_bytes = 0;
    scheduler_options.max_queued = 4 * parallel;
    server::Scheduler scheduler(engine, tokenizer, scheduler_options);

    server::ModelText model;
    model.model_id = "bench";
    model.tokenizer = &tokenizer;
    // The bench sends token ids; a text prompt or a chat would need the model's tokenizer and template.
    model.encode_rendered = [](const std::string&) -> std::vector<int32_t> {
        fail("bench --serve: the bench's server takes token-id prompts only");
    };
    model.encode_raw = model.encode_rendered;
    model.n_vocab = n_vocab;
    model.context = scheduler_options.pool.session.sequence.max_positions;

    server::HttpOptions http_options;
    http_options.host = "127.0.0.1";
    http_options.port = 0;
    http_options.max_concurrent = 2 * parallel;  // every stream's request in flight, with room to spare
    http_options.limits.max_tokens = plan.max_tokens;
    server::HttpServer http(scheduler, model, http_options);
    http.bind();
    std::thread serving([&] { http.serve(); });
    bench_progress(fmt::format("serving on http://127.0.0.1:{} ({}; --parallel {})", http.bound_port(),
                               engine.description(), parallel));

    std::vector<BenchMeasurement> rows;
    std::exception_ptr failure;
    try {
        for (int64_t streams : plan.streams)
            rows.push_back(measure_level(scheduler, http.bound_port(), plan, n_vocab, int(streams)));
    } catch (...) {
        failure = std::current_exception();
    }
    http.refuse_new();
    scheduler.stop();
    http.wait_idle(std::chrono::seconds(5));
    http.stop();
    serving.join();
    if (failure) std::rethrow_exception(failure);
    describe(rows, parallel);
    return rows;
}

}  // namespace deltabit::cli
