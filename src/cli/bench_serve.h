// The serving half of `deltabit bench --serve`: the real HTTP server (server/http_server.h and its
// scheduler, as `deltabit serve` runs them) started in this process on an ephemeral loopback port over
// the bench's engine, and driven by N concurrent streaming clients over real HTTP and SSE, for each N of
// the plan (a "level": serve1, serve8, ...).
//
// A level. N client threads (cpp-httplib's client, one connection per request) each send
// `requests_per_stream` requests back to back, all released at once: POST /v1/completions with a prompt
// of `prompt_tokens` random token ids (fresh per request, so no request reuses another's work),
// max_tokens = `max_tokens`, temperature 0 (greedy: on the GPU the batched argmax), stream true and
// include_usage. Each request must end with finish_reason "length" and usage.completion_tokens equal to
// max_tokens; any other outcome (an HTTP error, a stream without [DONE], a short reply) fails the bench,
// since a figure over replies of unequal lengths would not be the figure asked for. Before the timed
// requests, one untimed request per stream (at most 8 tokens) creates the sessions the level needs, so
// the timed part does not pay for allocating them.
//
// Fixed length. The server has no ignore-EOS knob; the bench makes every reply run to max_tokens
// another way: a --geometry model declares no EOS token, and a model that does (-m) is served through
// an engine whose config() hides its EOS ids (the note says so). Stop strings are never sent.
//
// Figures, per level: wall time from the release of the clients to the last request's end;
// requests/s and aggregate generated tok/s over it; per request, its decode rate as its client saw it,
// (tokens − 1) / (last token's arrival − first token's), whose median is the per-stream tok/s; TTFT from
// writing the request to reading the chunk of its first token, p50 and p99 (nearest rank) over the
// level's requests; the aggregate over the 1-stream level's of the same run; and, from the scheduler's
// counters, how many decode steps ran and how many rows they stepped (rows / steps: the real batch). On
// the GPU the row's peak GiB is the device memory in use when the level ends, its sessions still held
// (read once the scheduler is idle: a CUDA call from another thread during a graph capture would break it).
//
// Ceiling. With `traffic` (InferenceCost::decode_traffic of one row at the level's mean decode depth,
// prompt_tokens + max_tokens / 2) each row's note and JSON give what the aggregate over one stream's
// could be if a decode step were bound by the bytes it moves and moved them as fast at every batch: a
// step of B rows reads the weights W once and each row's KV and DeltaNet state R, so
//   ceiling(B) = B · (W + R) / (W + B · R)
// — near B while B · R is small beside W, and never above (W + R) / R: where batching stops paying
// (Bonsai-27B's f32 DeltaNet state, ~0.31 GB a row, caps it near 12 whatever B). Prefill, HTTP and
// compute are left out, so a measured ratio above it means the batch-1 figure had other costs.
//
// The scheduler runs with --parallel = the largest stream count (every stream has a live session),
// the serve command's prefill chunk (256 tokens), its checkpoint policy, and no parking (budget 0: a
// finished conversation's session is reset for the next request rather than saved to host memory, so
// the figure is decode and prefill, not snapshot writes). Sessions hold prompt_tokens + max_tokens + 8
// positions in the plan's KV format.
// (Built only with the server: CMakeLists.txt leaves bench_serve*.cpp out without cpp-httplib.)
#pragma once

#include "cli/bench_report.h"
#include "models/inference_cost.h"
#include "models/kv_format.h"
#include "runtime/engine.h"
#include "text/tokenizer.h"

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace deltabit::cli {

struct ServeBenchPlan {
    std::vector<int64_t> streams = {1, 8, 32, 64};
    int64_t requests_per_stream = 4;
    int64_t prompt_tokens = 64;
    int64_t max_tokens = 128;
    KvFormat kv = KvFormat::f32;
    uint64_t seed = 1;
    std::optional<DecodeTraffic> traffic;  // one row's, for the ceiling (above); none: no ceiling
    // Device memory in use now, in GiB (the CUDA bench's cudaMemGetInfo); null: not measured (CPU).
    std::function<double()> memory_in_use_gib;
};

// Runs every level of the plan on `engine` (whose config() must declare no EOS ids: hide_eos below) with
// `tokenizer` for the replies' text; each level's note says what ran. Progress on stderr. Error naming
// the level and the request when one fails or ends short (see above).
std::vector<BenchMeasurement> run_serve_bench(Engine& engine, const text::Tokenizer& tokenizer,
                                              const ServeBenchPlan& plan);

// A tokenizer for a model that has none (a --geometry model): id i is spelled " t<i>" and decodes to
// those bytes, so every generated token is a non-empty ASCII text delta of its own. It encodes nothing
// (the serve bench sends token ids); its vocabulary is `n_vocab` ids.
std::unique_ptr<text::Tokenizer> placeholder_tokenizer(int64_t n_vocab);

// `engine` with an EOS-free config(): every other call goes to it unchanged (forward_batch included, so
// the CUDA engine still reads the weights once for all rows). For models that declare EOS ids.
std::unique_ptr<Engine> hide_eos(std::unique_ptr<Engine> engine);

}  // namespace deltabit::cli
