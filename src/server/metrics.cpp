#include "server/metrics.h"

#include <fmt/format.h>

namespace deltabit::server {

std::string prometheus_text(const SchedulerStats& s, const HttpCounters& http) {
    std::string out;
    auto metric = [&](std::string_view name, std::string_view type, std::string_view help) {
        out += fmt::format("# HELP deltabit_{} {}\n# TYPE deltabit_{} {}\n", name, help, name, type);
    };
    metric("requests_total", "counter", "HTTP requests answered, by endpoint and status");
    for (const auto& [key, n] : http.snapshot())
        out += fmt::format("deltabit_requests_total{{endpoint=\"{}\",status=\"{}\"}} {}\n", key.first, key.second, n);
    metric("jobs_finished_total", "counter", "generation jobs finished, by finish reason");
    for (const auto& [reason, n] : s.finished) out += fmt::format("deltabit_jobs_finished_total{{reason=\"{}\"}} {}\n", reason, n);
    metric("prompt_tokens_total", "counter", "prompt tokens of finished jobs");
    out += fmt::format("deltabit_prompt_tokens_total {}\n", s.prompt_tokens);
    metric("cached_tokens_total", "counter", "prompt tokens reused from a held session instead of read");
    out += fmt::format("deltabit_cached_tokens_total {}\n", s.cached_tokens);
    metric("generated_tokens_total", "counter", "tokens generated");
    out += fmt::format("deltabit_generated_tokens_total {}\n", s.generated_tokens);
    metric("reuse_ratio", "gauge", "cached_tokens_total / prompt_tokens_total");
    out += fmt::format("deltabit_reuse_ratio {:.6f}\n", s.prompt_tokens > 0 ? double(s.cached_tokens) / double(s.prompt_tokens) : 0.0);
    metric("queue_depth", "gauge", "jobs waiting for a session");
    out += fmt::format("deltabit_queue_depth {}\n", s.queued);
    metric("requests_in_flight", "gauge", "requests the HTTP side is serving");
    out += fmt::format("deltabit_requests_in_flight {}\n", http.in_flight.load());
    metric("active_sessions", "gauge", "jobs generating now");
    out += fmt::format("deltabit_active_sessions {}\n", s.active);
    metric("live_sessions", "gauge", "sessions held in the engine");
    out += fmt::format("deltabit_live_sessions {}\n", s.pool.live);
    metric("parked_sessions", "gauge", "sessions parked as snapshots (in host memory or spilled to disk)");
    out += fmt::format("deltabit_parked_sessions {}\n", s.pool.parked);
    metric("parked_bytes", "gauge", "bytes of parked snapshots in host memory");
    out += fmt::format("deltabit_parked_bytes {}\n", s.pool.parked_bytes);
    metric("spilled_sessions", "gauge", "parked sessions spilled to the --spill-dir disk");
    out += fmt::format("deltabit_spilled_sessions {}\n", s.pool.spilled);
    metric("spilled_bytes", "gauge", "bytes of snapshots on the --spill-dir disk");
    out += fmt::format("deltabit_spilled_bytes {}\n", s.pool.spilled_bytes);
    metric("session_parks_total", "counter", "sessions parked");
    out += fmt::format("deltabit_session_parks_total {}\n", s.pool.parks);
    metric("session_spills_total", "counter", "parked sessions moved from host memory to the spill disk");
    out += fmt::format("deltabit_session_spills_total {}\n", s.pool.spills);
    metric("session_resumes_total", "counter", "parked sessions resumed");
    out += fmt::format("deltabit_session_resumes_total {}\n", s.pool.resumes);
    metric("session_evictions_total", "counter", "parked sessions dropped (over the budgets, or unsaveable)");
    out += fmt::format("deltabit_session_evictions_total {}\n", s.pool.evictions);
    metric("session_failed_resumes_total", "counter", "parked sessions that could not be read back (ran fresh)");
    out += fmt::format("deltabit_session_failed_resumes_total {}\n", s.pool.failed_resumes);
    metric("scheduler_steps_total", "counter", "scheduler iterations (one step of every active job)");
    out += fmt::format("deltabit_scheduler_steps_total {}\n", s.steps);
    metric("batched_steps_total", "counter", "decode steps that fed several jobs in one forward call");
    out += fmt::format("deltabit_batched_steps_total {}\n", s.batched_steps);
    metric("batched_rows_total", "counter", "jobs fed by batched decode steps (÷ batched_steps_total: mean batch)");
    out += fmt::format("deltabit_batched_rows_total {}\n", s.batched_rows);
    metric("prefill_tokens_per_second", "gauge", "prompt tokens read per second of prefill steps");
    out += fmt::format("deltabit_prefill_tokens_per_second {:.3f}\n", s.prefill_seconds > 0 ? s.prefill_tokens / s.prefill_seconds : 0.0);
    metric("decode_tokens_per_second", "gauge", "tokens one job generates per second of its decode steps");
    out += fmt::format("deltabit_decode_tokens_per_second {:.3f}\n", s.decode_seconds > 0 ? s.decode_tokens / s.decode_seconds : 0.0);
    if (s.block_diffusion) {
        metric("diffusion_blocks_total", "counter", "blocks a block-diffusion model committed");
        out += fmt::format("deltabit_diffusion_blocks_total {}\n", s.diffusion_blocks);
        metric("denoising_steps_total", "counter", "decoder passes a block-diffusion model ran (÷ blocks: steps per block)");
        out += fmt::format("deltabit_denoising_steps_total {}\n", s.denoising_steps);
    }
    return out;
}

}  // namespace deltabit::server
