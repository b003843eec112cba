// What `deltabit bench` measured, and the three ways it is reported: a text table (stdout), one JSON
// object (--json) and rows appended to bench/history.tsv.
//
// history.tsv keeps the columns the micro-benchmarks started it with (date … note) and extends them on
// the right (tok_s … peak_mem_GiB); rows written before the extension simply end early. A file whose
// header is the older 12-column one gets the extended header line on the first append (every other
// line untouched). Fields that do not apply to a row (GB/s of a prefill) are left empty.
#pragma once

#include <nlohmann/json.hpp>

#include <chrono>
#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

namespace deltabit::cli {

// What a serving level (`deltabit bench --serve`, cli/bench_serve.h) measured beyond tok/s: its row's
// tokens_per_s is the aggregate of every stream, unit_us the median time between two tokens of a stream.
struct ServeFigures {
    int streams = 0;                // clients sending at once
    int64_t requests = 0;           // completed, all of them (a failed request fails the bench)
    int64_t prompt_tokens = 0;      // of every request
    int64_t max_tokens = 0;         // every request's max_tokens: what each must generate
    int64_t completion_tokens_min = 0, completion_tokens_max = 0;  // as the server's usage reported them
    double requests_per_s = 0;
    double stream_tok_s_median = 0;  // one request's (tokens − 1) / (last token − first token), median
    double ttft_p50_ms = 0, ttft_p99_ms = 0;  // request written → first token's chunk read
    std::optional<double> vs_one_stream;      // aggregate tok/s / the 1-stream level's of the same run
    // What vs_one_stream could be if decode were bound by bytes alone (cli/bench_serve.h, "Ceiling").
    std::optional<double> ceiling_vs_one_stream;
    // The scheduler's decode steps during the level, and the rows they stepped: rows / steps is the batch
    // the engine really ran (habit 16: a server that stepped streams one by one shows ~1 here).
    int64_t decode_steps = 0, decode_rows = 0;
};

// What a block-diffusion run measured beyond tok/s (cli/bench_diffusion.h): its row's unit_us is the
// median denoising step, its tokens_per_s the committed tokens a second.
struct DiffusionFigures {
    int64_t canvas = 0;                    // tokens a block commits
    std::vector<int64_t> steps_per_block;  // decoder passes of each block
    int64_t max_steps = 0;                 // max_denoising_steps: the worst case a block can take
    double step_bytes = 0, step_flops = 0;  // a self-conditioned step at the middle block's depth
    double step_floor_us = 0;  // the larger of its bytes at the copy bandwidth and its FLOPs at the bf16 peak
    double pct_of_floor = 0;   // floor / the median step's time
    double tokens_per_s_at_max_steps = 0;  // committed tok/s if every block took max_steps of the median step
};

// One figure: a prefill (pp512), a decode run (tg128 at a depth), a time to first token (ttft16), or a
// serving level (serve8: `serve` set).
struct BenchMeasurement {
    std::string test;        // "pp512", "tg128", "ttft16"
    int64_t depth = 0;       // tokens already in the sequence before the measured ones
    int64_t tokens = 0;      // tokens the measured operation consumed (pp: the prompt; tg: decode steps)
    double seconds = 0;      // the measured operation: the whole prompt, all decode steps, or to first token
    double unit_us = 0;      // history's `us`: pp the prompt, tg one decode step, ttft the first token
    std::optional<double> tokens_per_s;
    std::optional<double> tflop_s, pct_of_bf16_peak;                    // prefill
    std::optional<double> bytes_per_token, gb_s, pct_of_copy_bandwidth;  // decode
    // Decode at a depth > 0 of a run that also measured depth 0: tok/s as % of depth 0's (relate_decode_depths).
    std::optional<double> pct_of_depth0;
    double peak_memory_gib = 0;  // device-wide, during this measurement (and the filling before it)
    std::string note;
    std::optional<ServeFigures> serve;
    std::optional<DiffusionFigures> diffusion;
};

struct BenchReport {
    std::string date;    // UTC, YYYY-MM-DD
    std::string commit;  // git short hash, or "unknown"
    std::string gpu;     // "NVIDIA H200"
    std::string device_summary;
    double copy_gb_s = 0;
    double bf16_peak_tflop_s = 0;  // 0 when unknown for this GPU
    // The decode floors (bench/decode_floor_cuda.h); 0 when not measured.
    double stream_floor_bytes = 0, stream_floor_us = 0;
    double dependent_launch_us = 0;
    std::string model;             // geometry name or model file name
    std::string model_description;
    std::string weight_type;       // "q1_0" (the type of most matrix bytes)
    std::string kv_format;         // "f32", "f16", "kivi4" (history rows start their note with it)
    // The DELTABIT_* switches set in the environment ("DELTABIT_GEMM_F16=1"), space-separated, "" when none:
    // they choose kernels (docs/bench.md), so a history row measured with one set must say so.
    std::string environment;
    double parameters = 0;
    uint64_t stored_bytes = 0;
    std::string decode_path;       // what the decode steps ran as (graph replays / eager), for habit 16
    double build_seconds = 0, upload_seconds = 0;
    std::vector<BenchMeasurement> measurements;
    std::vector<std::string> notes;  // tests skipped and why (printed and in JSON; not history rows)
};

// Sets pct_of_depth0 of every decode row at a depth > 0 whose test (tg128) was also measured at depth 0,
// and starts its note with it ("82.3% of depth 0's tok/s"): how much a deep context costs, read in one
// place (issue 5 asks for 80% at 32K). Rows without a depth-0 partner are left as they are.
void relate_decode_depths(std::vector<BenchMeasurement>& measurements);

void print_report(const BenchReport& report);
// The DELTABIT_* entries of an environment block (as `environ`), sorted, space-separated.
std::string deltabit_switches(const char* const* environment);
nlohmann::json report_to_json(const BenchReport& report);

// Appends one row per measurement to the TSV at `path` (created with its header when absent).
// Error naming the file when it cannot be written or its header is neither form above.
void append_history(const std::filesystem::path& path, const BenchReport& report);

// The header line, without its newline.
std::string history_header();

// What both benches (bench_gpu.cpp, bench_cpu.cpp) time and print with.
using BenchClock = std::chrono::steady_clock;
double seconds_since(BenchClock::time_point start);
// The lower median: of two runs, the faster (the slower one is the one that paid a first-use cost).
double lower_median(std::vector<double> v);
// One progress line on stderr ("bench: ..."), flushed at once.
void bench_progress(const std::string& line);
// Today's date in UTC (YYYY-MM-DD), the history's `date` column.
std::string utc_date();
// A shell command's standard output without its trailing newline; "" when it cannot run.
std::string command_output(const std::string& command);
// The source tree's commit, "+dirty" when tracked files differ from it; "unknown" without git (the
// GPU machines get a copy of the tree without its history: pass --commit there).
std::string source_commit();

}  // namespace deltabit::cli
