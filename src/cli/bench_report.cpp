#include "cli/bench_report.h"

#include "core/error.h"

#include <fmt/format.h>

#include <algorithm>
#include <cstdio>
#include <ctime>
#include <fstream>
#include <sstream>
#include <string_view>
#include <vector>

namespace deltabit::cli {

namespace {

// The columns bench_gemv_cuda's rows started the file with, then the ones `deltabit bench` adds.
constexpr const char* kBaseColumns = "date\tcommit\tgpu\tbench\tgeometry\tdepth\ttype\tshape\tus\tGB_s\tpct_of_copy_bw\tnote";
constexpr const char* kAddedColumns = "tok_s\ttflop_s\tpct_of_bf16_peak\tbytes_per_token\tpeak_mem_GiB";

std::string optional_text(const std::optional<double>& v, const char* format_spec) {
    return v ? fmt::format(fmt::runtime(format_spec), *v) : std::string();
}

// A note must stay one TSV field.
std::string field(std::string s) {
    for (char& c : s)
        if (c == '\t' || c == '\n' || c == '\r') c = ' ';
    return s;
}

std::string history_row(const BenchReport& r, const BenchMeasurement& m) {
    const std::string gpu = fmt::format("{} (copy {:.0f} GB/s)", r.gpu, r.copy_gb_s);
    return fmt::format("{}\t{}\t{}\tdeltabit bench\t{}\t{}\t{}\t{}\t{:.2f}\t{}\t{}\t{}\t{}\t{}\t{}\t{}\t{:.2f}", r.date,
                       r.commit, field(gpu), field(r.model), m.depth, r.weight_type, m.test, m.unit_us,
                       optional_text(m.gb_s, "{:.0f}"), optional_text(m.pct_of_copy_bandwidth, "{:.1f}"),
                       field("KV " + r.kv_format + "; " + (r.environment.empty() ? "" : "env " + r.environment + "; ") +
                             m.note),
                       optional_text(m.tokens_per_s, "{:.1f}"),
                       optional_text(m.tflop_s, "{:.2f}"),
                       optional_text(m.pct_of_bf16_peak, "{:.2f}"), optional_text(m.bytes_per_token, "{:.0f}"),
                       m.peak_memory_gib);
}

std::string read_all(const std::filesystem::path& path) {
    std::ifstream in(path, std::ios::binary);
    if (!in) fail("bench: {}: cannot open for reading", path.string());
    std::ostringstream s;
    s << in.rdbuf();
    return s.str();
}

void write_all(const std::filesystem::path& path, const std::string& text, std::ios::openmode mode) {
    std::ofstream out(path, std::ios::binary | mode);
    if (!out) fail("bench: {}: cannot open for writing", path.string());
    out << text;
    if (!out.flush()) fail("bench: {}: write failed", path.string());
}

std::string cell(const std::optional<double>& v, const char* format_spec) {
    return v ? fmt::format(fmt::runtime(format_spec), *v) : "-";
}

std::string duration_text(double seconds) {
    return seconds < 1.0 ? fmt::format("{:.2f} ms", seconds * 1e3) : fmt::format("{:.2f} s", seconds);
}

// The serving levels (rows with `serve`), one line each, before any other table; nothing when there are none.
void print_serve_table(const std::vector<BenchMeasurement>& measurements) {
    bool header = false;
    for (const BenchMeasurement& m : measurements) {
        if (!m.serve) continue;
        const ServeFigures& s = *m.serve;
        if (!header) {
            fmt::print("{:<8} {:>7} {:>8} {:>7} {:>9} {:>7} {:>10} {:>11} {:>9} {:>9} {:>7} {:>6} {:>6} {:>8}\n",
                       "test", "streams", "requests", "tokens", "time", "req/s", "agg tok/s", "stream tok/s",
                       "TTFT p50", "TTFT p99", "x 1-str", "ceil x", "batch", "peak GiB");
            header = true;
        }
        const double batch = s.decode_steps > 0 ? double(s.decode_rows) / double(s.decode_steps) : 0.0;
        fmt::print("{:<8} {:>7} {:>8} {:>7} {:>9} {:>7.2f} {:>10} {:>11.1f} {:>9} {:>9} {:>7} {:>6} {:>6.1f} {:>8.2f}\n",
                   m.test, s.streams, s.requests, m.tokens, duration_text(m.seconds), s.requests_per_s,
                   cell(m.tokens_per_s, "{:.1f}"), s.stream_tok_s_median, duration_text(s.ttft_p50_ms / 1e3),
                   duration_text(s.ttft_p99_ms / 1e3), cell(s.vs_one_stream, "{:.2f}"),
                   cell(s.ceiling_vs_one_stream, "{:.1f}"), batch, m.peak_memory_gib);
    }
    if (header) fmt::print("\n");
}

}  // namespace

std::string history_header() { return std::string(kBaseColumns) + "\t" + kAddedColumns; }

void append_history(const std::filesystem::path& path, const BenchReport& report) {
    std::string rows;
    for (const BenchMeasurement& m : report.measurements) rows += history_row(report, m) + "\n";
    if (!std::filesystem::exists(path)) {
        write_all(path, history_header() + "\n" + rows, std::ios::trunc);
        return;
    }
    const std::string text = read_all(path);
    const size_t eol = text.find('\n');
    const std::string header = text.substr(0, eol);
    if (header == history_header()) {
        write_all(path, (text.empty() || text.back() == '\n' ? "" : "\n") + rows, std::ios::app);
        return;
    }
    if (header != kBaseColumns)
        fail("bench: {}: the header is neither the bench history's nor its older 12-column form; not appending "
             "(expected: {})", path.string(), history_header());
    // Older header: extend it in a copy, then replace the file, so a crash leaves one or the other whole.
    std::string upgraded = history_header() + (eol == std::string::npos ? "\n" : text.substr(eol));
    if (upgraded.back() != '\n') upgraded += '\n';
    const std::filesystem::path temporary = path.string() + ".tmp";
    write_all(temporary, upgraded + rows, std::ios::trunc);
    std::filesystem::rename(temporary, path);
}

std::string deltabit_switches(const char* const* environment) {
    std::vector<std::string> set;
    for (const char* const* e = environment; e != nullptr && *e != nullptr; ++e)
        if (std::string_view(*e).starts_with("DELTABIT_")) set.emplace_back(*e);
    std::sort(set.begin(), set.end());
    std::string text;
    for (const std::string& s : set) text += (text.empty() ? "" : " ") + s;
    return text;
}

void print_report(const BenchReport& r) {
    fmt::print("deltabit bench: {} ({}, {:.2f} B parameters, {:.2f} GB stored, KV cache {})\n", r.model, r.weight_type,
               r.parameters / 1e9, double(r.stored_bytes) / 1e9, r.kv_format);
    if (!r.environment.empty()) fmt::print("  environment: {}\n", r.environment);
    if (!r.model_description.empty()) fmt::print("  {}\n", r.model_description);
    fmt::print("device: {}; copy bandwidth {:.0f} GB/s (read + write)", r.device_summary, r.copy_gb_s);
    if (r.bf16_peak_tflop_s > 0) fmt::print("; bf16 tensor peak {:.0f} TFLOP/s", r.bf16_peak_tflop_s);
    if (r.stream_floor_us > 0) {
        const double gb_s = r.stream_floor_bytes / (r.stream_floor_us * 1e3);
        fmt::print("\nfloors: one kernel alone streams {:.0f} MiB from HBM in {:.2f} µs ({:.0f} GB/s, {:.0f}% of copy); "
                   "a dependent launch in a graph takes {:.2f} µs",
                   r.stream_floor_bytes / 1048576.0, r.stream_floor_us, gb_s, 100.0 * gb_s / r.copy_gb_s,
                   r.dependent_launch_us);
    }
    fmt::print("\nbuilt in {:.1f} s, uploaded in {:.1f} s; decode path: {}\n\n", r.build_seconds, r.upload_seconds,
               r.decode_path);
    print_serve_table(r.measurements);
    if (std::all_of(r.measurements.begin(), r.measurements.end(), [](const BenchMeasurement& m) { return m.serve; })) {
        for (const std::string& note : r.notes) fmt::print("note: {}\n", note);
        return;
    }
    fmt::print("{:<7} {:>6} {:>6} {:>10} {:>9} {:>8} {:>6} {:>9} {:>6} {:>6} {:>8}  {}\n", "test", "depth", "tokens",
               "time", "tok/s", "TFLOP/s", "%bf16", "MB/token", "GB/s", "%copy", "peak GiB", "note");
    for (const BenchMeasurement& m : r.measurements) {
        if (m.serve) continue;
        fmt::print("{:<7} {:>6} {:>6} {:>10} {:>9} {:>8} {:>6} {:>9} {:>6} {:>6} {:>8.2f}  {}\n", m.test, m.depth,
                   m.tokens, duration_text(m.seconds), cell(m.tokens_per_s, "{:.1f}"), cell(m.tflop_s, "{:.2f}"),
                   cell(m.pct_of_bf16_peak, "{:.2f}"),
                   cell(m.bytes_per_token ? std::optional<double>(*m.bytes_per_token / 1e6) : std::nullopt, "{:.1f}"),
                   cell(m.gb_s, "{:.0f}"), cell(m.pct_of_copy_bandwidth, "{:.1f}"), m.peak_memory_gib, m.note);
    }
    for (const std::string& note : r.notes) fmt::print("note: {}\n", note);
}

void relate_decode_depths(std::vector<BenchMeasurement>& measurements) {
    for (BenchMeasurement& m : measurements) {
        if (m.depth <= 0 || !m.tokens_per_s || m.pct_of_depth0) continue;
        for (const BenchMeasurement& base : measurements) {
            if (base.depth != 0 || base.test != m.test || !base.tokens_per_s || *base.tokens_per_s <= 0) continue;
            m.pct_of_depth0 = 100.0 * *m.tokens_per_s / *base.tokens_per_s;
            const std::string ratio = fmt::format("{:.1f}% of depth 0's tok/s", *m.pct_of_depth0);
            m.note = m.note.empty() ? ratio : ratio + "; " + m.note;
            break;
        }
    }
}

nlohmann::json report_to_json(const BenchReport& r) {
    using nlohmann::json;
    auto optional = [](const std::optional<double>& v) { return v ? json(*v) : json(); };
    json measurements = json::array();
    for (const BenchMeasurement& m : r.measurements) {
        measurements.push_back({{"test", m.test},
                                {"depth", m.depth},
                                {"tokens", m.tokens},
                                {"seconds", m.seconds},
                                {"unit_us", m.unit_us},
                                {"tokens_per_s", optional(m.tokens_per_s)},
                                {"tflop_s", optional(m.tflop_s)},
                                {"pct_of_bf16_peak", optional(m.pct_of_bf16_peak)},
                                {"bytes_per_token", optional(m.bytes_per_token)},
                                {"gb_s", optional(m.gb_s)},
                                {"pct_of_copy_bandwidth", optional(m.pct_of_copy_bandwidth)},
                                {"pct_of_depth0", optional(m.pct_of_depth0)},
                                {"peak_memory_gib", m.peak_memory_gib},
                                {"note", m.note}});
        if (m.serve) {
            const ServeFigures& s = *m.serve;
            measurements.back()["serve"] = {{"streams", s.streams},
                                            {"requests", s.requests},
                                            {"prompt_tokens", s.prompt_tokens},
                                            {"max_tokens", s.max_tokens},
                                            {"completion_tokens_min", s.completion_tokens_min},
                                            {"completion_tokens_max", s.completion_tokens_max},
                                            {"requests_per_s", s.requests_per_s},
                                            {"aggregate_tokens_per_s", optional(m.tokens_per_s)},
                                            {"stream_tokens_per_s_median", s.stream_tok_s_median},
                                            {"ttft_p50_ms", s.ttft_p50_ms},
                                            {"ttft_p99_ms", s.ttft_p99_ms},
                                            {"vs_one_stream", optional(s.vs_one_stream)},
                                            {"ceiling_vs_one_stream", optional(s.ceiling_vs_one_stream)},
                                            {"decode_steps", s.decode_steps},
                                            {"decode_rows", s.decode_rows}};
        }
        if (m.diffusion) {
            const DiffusionFigures& d = *m.diffusion;
            measurements.back()["diffusion"] = {{"canvas", d.canvas},
                                                {"steps_per_block", d.steps_per_block},
                                                {"max_steps", d.max_steps},
                                                {"step_bytes", d.step_bytes},
                                                {"step_flops", d.step_flops},
                                                {"step_floor_us", d.step_floor_us},
                                                {"pct_of_floor", d.pct_of_floor},
                                                {"tokens_per_s_at_max_steps", d.tokens_per_s_at_max_steps}};
        }
    }
    return {{"date", r.date},
            {"commit", r.commit},
            {"gpu", r.gpu},
            {"device", r.device_summary},
            {"copy_gb_s", r.copy_gb_s},
            {"bf16_peak_tflop_s", r.bf16_peak_tflop_s > 0 ? json(r.bf16_peak_tflop_s) : json()},
            {"stream_floor", r.stream_floor_us > 0 ? json{{"bytes", r.stream_floor_bytes}, {"us", r.stream_floor_us}}
                                                   : json()},
            {"dependent_launch_us", r.dependent_launch_us > 0 ? json(r.dependent_launch_us) : json()},
            {"model", r.model},
            {"model_description", r.model_description},
            {"weight_type", r.weight_type},
            {"kv_format", r.kv_format},
            {"environment", r.environment},
            {"parameters", r.parameters},
            {"stored_bytes", r.stored_bytes},
            {"decode_path", r.decode_path},
            {"build_seconds", r.build_seconds},
            {"upload_seconds", r.upload_seconds},
            {"measurements", std::move(measurements)},
            {"notes", r.notes}};
}

double seconds_since(BenchClock::time_point start) {
    return std::chrono::duration<double>(BenchClock::now() - start).count();
}

double lower_median(std::vector<double> v) {
    std::sort(v.begin(), v.end());
    return v[(v.size() - 1) / 2];
}

void bench_progress(const std::string& line) {
    std::fputs(("bench: " + line + "\n").c_str(), stderr);
    std::fflush(stderr);
}

std::string utc_date() {
    const std::time_t now = std::time(nullptr);
    std::tm utc{};
    gmtime_r(&now, &utc);
    char text[16];
    std::strftime(text, sizeof text, "%Y-%m-%d", &utc);
    return text;
}

std::string command_output(const std::string& command) {
    FILE* pipe = popen(command.c_str(), "r");
    if (pipe == nullptr) return "";
    std::string out;
    char buffer[256];
    while (fgets(buffer, sizeof buffer, pipe) != nullptr) out += buffer;
    pclose(pipe);
    while (!out.empty() && (out.back() == '\n' || out.back() == '\r')) out.pop_back();
    return out;
}

std::string source_commit() {
    const std::string dir = DELTABIT_SOURCE_DIR;
    const std::string hash = command_output("git -C '" + dir + "' rev-parse --short HEAD 2>/dev/null");
    if (hash.empty()) return "unknown";
    const bool dirty = !command_output("git -C '" + dir + "' status --porcelain --untracked-files=no 2>/dev/null").empty();
    return dirty ? hash + "+dirty" : hash;
}

}  // namespace deltabit::cli
