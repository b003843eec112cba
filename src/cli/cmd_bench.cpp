// `deltabit bench`: prefill, first-token and decode speed on the GPU, read against the card's measured
// copy bandwidth and tensor-core peak — or with --backend cpu, prompt and decode speed of the CPU engine read
// against the machine's copy bandwidth (cli/bench_cpu.h) — appended to bench/history.tsv (docs/bench.md).
//
//   deltabit bench (-m MODEL | --geometry NAME) [--backend cuda|cpu] [--threads N] [--type q1_0] [--json]
//                  [--depths 0,4096,32768]
//                  [--prompts 512,4096,131072] [--prompt-depths 32768] [--first-tokens 2,16,64] [--batch 8,32] [--kv f32|f16]
//                  [--fill auto|prefill|synthetic]
//                  [--prompt-budget S] [--fill-budget S] [--max-seconds S]
//                  [--no-history | --history FILE] [--commit HASH] [--seed N]
//   deltabit bench --serve (-m MODEL | --geometry NAME) [--backend cuda|cpu] [--streams 1,8,32,64]
//                  [--requests N] [--prompts N] [--decode-tokens N] [--kv f32|f16|kivi4] [--json] ...
//   deltabit bench (-m DIFFUSION_MODEL | --geometry diffusiongemma-26b-a4b) [--type bf16|q4_0] [--prompts N]
//                  [--decode-tokens N] [--steps N] [--backend cuda|cpu] [--json] ...
//
// --serve measures the OpenAI server instead of the engine alone: the real HTTP server started in this
// process on a loopback port, driven by concurrent streaming clients (cli/bench_serve.h).
//
// --geometry builds a random-bit model of a real shape in memory (bench/synthetic_model.h), so the
// flagship shapes are measured without downloading them. A block-diffusion model (DiffusionGemma) has no
// decode step: it is measured by its prompt encoding and its block loop instead (cli/bench_diffusion.h).
// Without a usable GPU a CUDA bench says so and exits non-zero. Progress goes to stderr; the table (or JSON)
// to stdout.
#include "cli/bench_cpu.h"
#include "cli/bench_diffusion.h"
#include "cli/bench_gpu.h"
#include "cli/bench_report.h"
#include "cli/commands.h"
#include "core/error.h"
#include "models/diffusion_cost.h"
#include "models/inference_cost.h"
#include "models/model.h"
#include "bench/synthetic_model.h"
#include "ops/cpu_fast/matmul_cpu_fast.h"
#include "runtime/diffusion_generation_config.h"
#include "runtime/engine.h"

#if DELTABIT_HAVE_CUDA
#include "models/model_cuda.h"

#include <cuda_runtime.h>
#endif

#if DELTABIT_HAVE_SERVER
#include "cli/bench_serve.h"
#include "cli/cmd_text_prompt.h"
#endif

#include <fmt/format.h>

#include <chrono>
#include <cstdio>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <unistd.h>  // environ

namespace deltabit::cli {
namespace {

struct BenchArgs {
    std::string model;
    std::string geometry;
    std::string backend = "cuda";
    int threads = 0;  // CPU bench: 0 = all hardware threads
    std::string type;  // empty: the geometry's own (Geometry::default_type)
    bool json = false;
    // Each as given: one comma-separated list or several values (`--depths 0 32768`), joined before parsing;
    // empty: the backend's default (kGpuDefaults or kCpuDefaults).
    std::vector<std::string> depths;
    std::vector<std::string> prompts;
    std::vector<std::string> prompt_depths;
    std::vector<std::string> first_tokens;
    std::optional<int64_t> decode_tokens;
    std::vector<std::string> batches;
    std::string kv;  // empty: the backend's default (PlanDefaults::kv)
    std::string fill = "auto";
    bool no_history = false;
    std::string history = std::string(DELTABIT_SOURCE_DIR) + "/bench/history.tsv";
    std::string commit;
    uint64_t seed = 1;
    double prompt_budget = 60.0, fill_budget = 45.0, max_seconds = 240.0;
    // --serve (cli/bench_serve.h): the server under concurrent streaming clients instead of the engine alone.
    bool serve = false;
    std::vector<std::string> streams;
    std::optional<int64_t> requests;
    // A block-diffusion model (cli/bench_diffusion.h): its max_denoising_steps, when given.
    std::optional<int64_t> denoising_steps;
};

// The lists a bench runs when not given. The CPU's fit in about a minute on a 2-core machine with
// qwen35-0.8b: a CPU reads a prompt at tens to hundreds of tokens a second, not tens of thousands.
struct PlanDefaults {
    const char* depths;
    const char* prompts;
    const char* prompt_depths;
    const char* first_tokens;
    int64_t decode_tokens;
    const char* batches;
    // llama-bench's f16 cache on the GPU, so that figures compare with its; the CPU engine's exact f32.
    const char* kv;
};
constexpr PlanDefaults kGpuDefaults{"0,4096,32768", "512,4096,131072", "32768", "2,16,64", 128, "8,32", "f16"};
constexpr PlanDefaults kCpuDefaults{"0", "64", "", "", 32, "", "f32"};

// What --serve runs when not told: the stream counts on the GPU (#35: 1, 8, 32 and 64 streams), a
// short run on the CPU (a test's size: seconds with a tiny model).
struct ServeDefaults {
    const char* streams;
    int64_t requests_per_stream;
    int64_t prompt_tokens;
    int64_t max_tokens;
};
constexpr ServeDefaults kGpuServeDefaults{"1,8,32,64", 4, 64, 128};
constexpr ServeDefaults kCpuServeDefaults{"1,4", 2, 16, 16};

// What a block-diffusion bench runs when not told: issue 37's 1K prompt on the GPU (a test's size on the
// CPU, whose reference runs one thread), and two blocks, so that one block is encoded and chained.
constexpr int64_t kGpuDiffusionPrompt = 1024, kCpuDiffusionPrompt = 64, kDiffusionBlocks = 2;

// {"0,4096", "32768"} → {0, 4096, 32768}; every value ≥ `minimum`.
std::vector<int64_t> parse_counts(const std::vector<std::string>& given, const char* option, int64_t minimum) {
    std::string text;
    for (const std::string& g : given) text += (text.empty() ? "" : ",") + g;
    std::vector<int64_t> values;
    if (text.empty()) return values;
    size_t start = 0;
    while (start <= text.size()) {
        const size_t comma = std::min(text.find(',', start), text.size());
        const std::string item = text.substr(start, comma - start);
        if (item.empty() || item.size() > 9 || item.find_first_not_of("0123456789") != std::string::npos)
            fail("bench: {} {:?}: expected whole numbers (comma- or space-separated), found {:?}", option, text,
                 item);
        values.push_back(std::stoll(item));
        if (values.back() < minimum) fail("bench: {} {:?}: {} is below the minimum {}", option, text, item, minimum);
        start = comma + 1;
    }
    return values;
}

DepthFill parse_fill(const std::string& s) {
    if (s == "auto") return DepthFill::automatic;
    if (s == "prefill") return DepthFill::prefill;
    if (s == "synthetic") return DepthFill::synthetic;
    fail("bench: --fill {:?}: expected auto, prefill or synthetic", s);
}

// What every mode checks first: the model, the backend, the threads.
void check_common(const BenchArgs& args) {
    if (args.model.empty() == args.geometry.empty()) {
        std::string names;
        for (const Geometry& g : known_geometries()) names += (names.empty() ? "" : ", ") + g.name;
        fail("bench: give exactly one of -m MODEL or --geometry NAME (geometries: {})", names);
    }
    if (!args.geometry.empty()) find_geometry(args.geometry);
    if (args.backend != "cuda" && args.backend != "cpu")
        fail("bench: --backend {:?}: expected cuda or cpu", args.backend);
    if (args.threads < 0) fail("bench: --threads {}: expected 0 (all hardware threads) or more", args.threads);
}

// Whether MODEL (or the geometry) is a block-diffusion model, known before any weight is built or read.
bool diffusion_target(const BenchArgs& args) {
    return args.geometry.empty() ? is_diffusion_model(args.model)
                                 : find_geometry(args.geometry).config.arch == Arch::diffusion_gemma;
}

// The arguments of a block-diffusion bench, checked before the model is built. new_tokens is left 0 when not
// given: two blocks of the model's canvas, known once it is built (run_diffusion_bench_command).
DiffusionBenchPlan diffusion_plan_from(const BenchArgs& args) {
    check_common(args);
    for (const auto& [given, option] : {std::pair{!args.depths.empty(), "--depths"},
                                        std::pair{!args.first_tokens.empty(), "--first-tokens"},
                                        std::pair{!args.batches.empty(), "--batch"},
                                        std::pair{args.fill != "auto", "--fill"},
                                        std::pair{!args.kv.empty() && args.kv != "f32", "--kv"},
                                        std::pair{args.serve, "--serve"},
                                        std::pair{!args.streams.empty() || args.requests.has_value(),
                                                  "--streams/--requests"}})
        if (given)
            fail("bench: {} does not apply to a block-diffusion model, which has no decode step (it is measured by its "
                 "prompt encoding, --prompts N, and its block loop, --decode-tokens N and --steps N; docs/bench.md)",
                 option);
    DiffusionBenchPlan plan;
    const std::vector<int64_t> prompts = parse_counts(args.prompts, "--prompts", 1);
    if (prompts.size() > 1)
        fail("bench: --prompts with a block-diffusion model: give one prompt length, not {}", prompts.size());
    plan.prompt_tokens = prompts.empty() ? (args.backend == "cpu" ? kCpuDiffusionPrompt : kGpuDiffusionPrompt)
                                         : prompts.front();
    if (args.decode_tokens && *args.decode_tokens < 1)
        fail("bench: --decode-tokens {}: expected 1 or more", *args.decode_tokens);
    plan.new_tokens = args.decode_tokens.value_or(0);
    if (args.denoising_steps && *args.denoising_steps < 1)
        fail("bench: --steps {}: expected 1 or more denoising steps a block", *args.denoising_steps);
    plan.seed = args.seed;
    return plan;
}

// The arguments, checked on any machine before a GPU is looked for.
BenchPlan plan_from(const BenchArgs& args) {
    check_common(args);
    if (!args.streams.empty() || args.requests)
        fail("bench: --streams and --requests belong to --serve; add --serve to measure the server");
    if (args.denoising_steps)
        fail("bench: --steps is a block-diffusion model's (denoising steps a block); this model decodes token by "
             "token");
    const bool cpu = args.backend == "cpu";
    const PlanDefaults& defaults = cpu ? kCpuDefaults : kGpuDefaults;
    const auto or_default = [](const std::vector<std::string>& given, const char* fallback) {
        return given.empty() ? std::vector<std::string>{fallback} : given;
    };
    BenchPlan plan;
    plan.depths = parse_counts(or_default(args.depths, defaults.depths), "--depths", 0);
    plan.prompt_lengths = parse_counts(or_default(args.prompts, defaults.prompts), "--prompts", 2);
    plan.prompt_depths = parse_counts(or_default(args.prompt_depths, defaults.prompt_depths), "--prompt-depths", 0);
    std::erase(plan.prompt_depths, 0);  // --prompt-depths 0: none (depth 0 is the pp rows themselves)
    if (cpu && !plan.prompt_depths.empty())
        fail("bench: --prompt-depths: the CPU bench has no prompt-at-depth test; leave it out with --backend cpu");
    plan.first_token_lengths = parse_counts(or_default(args.first_tokens, defaults.first_tokens), "--first-tokens", 1);
    if (cpu && !plan.first_token_lengths.empty())
        fail("bench: --first-tokens: the CPU bench has no time-to-first-token test (a CPU prompt test is its prefill)");
    plan.batch_sizes = parse_counts(or_default(args.batches, defaults.batches), "--batch", 0);
    std::erase(plan.batch_sizes, 0);  // --batch 0: no batched test
    if (cpu && !plan.batch_sizes.empty())
        fail("bench: --batch: the CPU bench has no batched decode test (the CPU engine steps sequences in turn); "
             "leave --batch out with --backend cpu");
    plan.decode_tokens = args.decode_tokens.value_or(defaults.decode_tokens);
    if (plan.decode_tokens < 1) fail("bench: --decode-tokens {}: expected 1 or more", plan.decode_tokens);
    const std::string kv_name = args.kv.empty() ? defaults.kv : args.kv;
    const std::optional<KvFormat> kv = parse_kv_format(kv_name);
    if (!kv) fail("bench: --kv {:?}: expected f32, f16 or kivi4", kv_name);
    plan.kv = *kv;
    plan.fill = parse_fill(args.fill);
    plan.seed = args.seed;
    for (const auto& [value, option] : {std::pair{args.prompt_budget, "--prompt-budget"},
                                        std::pair{args.fill_budget, "--fill-budget"},
                                        std::pair{args.max_seconds, "--max-seconds"}})
        if (!(value > 0)) fail("bench: {} {}: must be a positive number of seconds", option, value);
    plan.prompt_budget_s = args.prompt_budget;
    plan.fill_budget_s = args.fill_budget;
    plan.max_seconds = args.max_seconds;
    return plan;
}

#if DELTABIT_HAVE_SERVER

// The --serve arguments, checked before a model is built. --prompts and --decode-tokens keep their
// meaning: the length of every request's prompt (one value) and its max_tokens.
ServeBenchPlan serve_plan_from(const BenchArgs& args) {
    check_common(args);
    for (const auto& [given, option] : {std::pair{!args.depths.empty(), "--depths"},
                                        std::pair{!args.prompt_depths.empty(), "--prompt-depths"},
                                        std::pair{!args.first_tokens.empty(), "--first-tokens"},
                                        std::pair{!args.batches.empty(), "--batch"},
                                        std::pair{args.fill != "auto", "--fill"}})
        if (given)
            fail("bench: {} does not apply to --serve (a serve level sets its streams with --streams, its prompt with "
                 "--prompts N and its reply length with --decode-tokens N)", option);
    const ServeDefaults& defaults = args.backend == "cpu" ? kCpuServeDefaults : kGpuServeDefaults;
    ServeBenchPlan plan;
    plan.streams = parse_counts(args.streams.empty() ? std::vector<std::string>{defaults.streams} : args.streams,
                                "--streams", 1);
    for (int64_t n : plan.streams)
        if (n > 1024) fail("bench: --streams: {} is over 1024, the most sessions a server runs at once", n);
    plan.requests_per_stream = args.requests.value_or(defaults.requests_per_stream);
    if (plan.requests_per_stream < 1) fail("bench: --requests {}: expected 1 or more", plan.requests_per_stream);
    const std::vector<int64_t> prompts = parse_counts(args.prompts, "--prompts", 1);
    if (prompts.size() > 1)
        fail("bench: --prompts with --serve: give one prompt length (every request's), not {}", prompts.size());
    plan.prompt_tokens = prompts.empty() ? defaults.prompt_tokens : prompts.front();
    plan.max_tokens = args.decode_tokens.value_or(defaults.max_tokens);
    if (plan.max_tokens < 2)
        fail("bench: --decode-tokens {} with --serve: expected 2 or more (a stream's rate is read between its first and "
             "last token)", plan.max_tokens);
    const std::string kv_name = args.kv.empty() ? (args.backend == "cpu" ? kCpuDefaults.kv : kGpuDefaults.kv) : args.kv;
    const std::optional<KvFormat> kv = parse_kv_format(kv_name);
    if (!kv) fail("bench: --kv {:?}: expected f32, f16 or kivi4", kv_name);
    plan.kv = *kv;
    plan.seed = args.seed;
    return plan;
}

#endif

void progress(const std::string& line) {
    std::fputs(("bench: " + line + "\n").c_str(), stderr);
    std::fflush(stderr);
}

double seconds_since(std::chrono::steady_clock::time_point start) {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}




// The dtype holding most of the matrix bytes: the history's `type` column.
std::string main_weight_type(const ModelWeights& weights) {
    std::map<DType, uint64_t> bytes;
    for (const auto& [name, t] : weights.tensors())
        if (t.shape.size() >= 2) bytes[t.dtype] += t.bytes;
    DType best = DType::F32;
    uint64_t most = 0;
    for (const auto& [dtype, n] : bytes)
        if (n > most) most = n, best = dtype;
    return std::string(dtype_name(best));
}

// The memory the kernel says could be given to a process now (MemAvailable), in bytes; 0 when unknown.
double available_memory_bytes() {
    std::ifstream meminfo("/proc/meminfo");
    std::string line;
    while (std::getline(meminfo, line))
        if (line.starts_with("MemAvailable:")) return std::stod(line.substr(13)) * 1024.0;  // kB
    return 0;
}

// A geometry's weights are built in host memory first: refuse one that cannot fit before allocating it.
void check_geometry_fits(const Geometry& g, DType type) {
    std::vector<TensorSpec> specs;
    try {
        specs = geometry_tensors(g.config, type);
    } catch (const Error& e) {
        fail("bench: --type {} does not fit {}: {}; choose a type with smaller blocks (q4_0, q8_0, bf16)",
             dtype_name(type), g.name, e.what());
    }
    double bytes = 0;
    for (const TensorSpec& spec : specs) {
        uint64_t n = 1;
        for (int64_t d : spec.shape) n *= uint64_t(d);
        bytes += double(dtype_bytes(spec.dtype, n));
    }
    const double available = available_memory_bytes();
    if (available > 0 && bytes > available)
        fail("bench: {} in {} needs {:.1f} GB of host memory for its weights; this machine has {:.1f} GB available "
             "(choose a smaller --type or geometry)",
             g.name, dtype_name(type), bytes / 1e9, available / 1e9);
}

// The model to measure, and what the report says about it.
std::unique_ptr<Model> build_model(const BenchArgs& args, BenchReport& report) {
    const auto start = std::chrono::steady_clock::now();
    std::unique_ptr<Model> model;
    if (!args.geometry.empty()) {
        const Geometry& g = find_geometry(args.geometry);
        const std::optional<DType> type = args.type.empty() ? g.default_type : parse_dtype(args.type);
        if (!type) fail("bench: --type {:?}: not a type name (q1_0, q2_0, q4_0, q8_0, bf16, f16, f32)", args.type);
        check_geometry_fits(g, *type);
        progress(fmt::format("building {} with random {} weights in memory", g.name, dtype_name(*type)));
        model = std::make_unique<Model>(synthetic_weights(g.config, g.name, {.matrix_dtype = *type, .seed = args.seed}));
        report.model = g.name;
        report.model_description = g.description;
    } else {
        progress(fmt::format("loading {}", args.model));
        model = std::make_unique<Model>(Model::load(args.model));
        report.model = std::filesystem::path(args.model).filename().string();
        report.model_description = args.model;
    }
    report.build_seconds = seconds_since(start);
    report.weight_type = main_weight_type(model->weights());
    progress(fmt::format("  {:.1f} s", report.build_seconds));
    return model;
}

void finish(const BenchArgs& args, BenchReport& report) {
    relate_decode_depths(report.measurements);
    if (args.json)
        fmt::print("{}\n", report_to_json(report).dump(2));
    else
        print_report(report);
    if (!args.no_history) {
        append_history(args.history, report);
        progress(fmt::format("appended {} rows to {}", report.measurements.size(), args.history));
    }
}

// What every report starts with: the date, the commit, the KV format and the DELTABIT_* switches.
BenchReport new_report(const BenchArgs& args, std::string_view kv_format) {
    BenchReport report;
    report.date = utc_date();
    report.commit = args.commit.empty() ? source_commit() : args.commit;
    report.kv_format = std::string(kv_format);
    report.environment = deltabit_switches(environ);
    return report;
}

// The CPU as the report's device: its copy bandwidth, probed with the bench's threads.
CpuProbe describe_cpu(const BenchArgs& args, BenchReport& report) {
    const CpuProbe probe = probe_cpu(args.threads);
    progress(fmt::format("  {}: copy {:.1f} GB/s", probe.summary, probe.copy_gb_s));
    report.gpu = fmt::format("cpu {} x{}", probe.name, probe.threads);
    report.device_summary = probe.summary;
    report.copy_gb_s = probe.copy_gb_s;
    return probe;
}

void run_cpu_bench_command(const BenchArgs& args, const BenchPlan& plan) {
    BenchReport report = new_report(args, kv_format_name(plan.kv));
    const CpuProbe cpu = describe_cpu(args, report);

    std::shared_ptr<const Model> model = build_model(args, report);
    const InferenceCost cost(model->weights(), plan.kv);
    report.parameters = cost.parameters();
    report.stored_bytes = cost.stored_weight_bytes();
    const std::unique_ptr<Engine> engine = make_cpu_engine(model);
    engine->set_cpu_threads(cpu.threads);
    const cpu_fast::Counters before = cpu_fast::counters();
    report.measurements = run_cpu_bench(*engine, cost, plan, cpu, report.notes);
    const cpu_fast::Counters after = cpu_fast::counters();
    // Habit 16: the products the measured steps ran, by path, so a reference run cannot pass for a fast one.
    report.decode_path = fmt::format("{}; fast-path products: {} int8, {} f32", engine->description(),
                                     after.int8 - before.int8, after.f32 - before.f32);
    finish(args, report);
}

#if DELTABIT_HAVE_CUDA

// The GPU as the report's device: its copy bandwidth, bf16 peak and decode floors.
GpuProbe describe_gpu(BenchReport& report) {
    const GpuProbe gpu = probe_gpu();
    progress(fmt::format("  {}: {:.0f} GB/s", gpu.summary, gpu.copy_gb_s));
    report.gpu = gpu.name;
    report.device_summary = gpu.summary;
    report.copy_gb_s = gpu.copy_gb_s;
    report.bf16_peak_tflop_s = gpu.bf16_peak_tflop_s;
    report.stream_floor_bytes = double(gpu.stream_floor.bytes);
    report.stream_floor_us = gpu.stream_floor.microseconds;
    report.dependent_launch_us = gpu.dependent_launch_us;
    return gpu;
}

void run_gpu_bench_command(const BenchArgs& args, const BenchPlan& plan) {
    BenchReport report = new_report(args, kv_format_name(plan.kv));
    const GpuProbe gpu = describe_gpu(report);

    std::unique_ptr<Model> model = build_model(args, report);
    const InferenceCost cost(model->weights(), plan.kv);
    report.parameters = cost.parameters();
    report.stored_bytes = cost.stored_weight_bytes();
    progress(fmt::format("uploading {:.2f} GB to the GPU (GEMV repack, checked)", double(report.stored_bytes) / 1e9));
    const auto upload_start = std::chrono::steady_clock::now();
    CudaModel cuda_model(*model);
    report.upload_seconds = seconds_since(upload_start);
    model.reset();  // the GPU copy is all the bench needs; release the host weights
    progress(fmt::format("  {:.1f} s", report.upload_seconds));

    report.measurements = run_gpu_bench(cuda_model, cost, plan, gpu, report.notes, report.decode_path);
    finish(args, report);
}

#endif

// A block-diffusion model: its prompt encoding and block loop (cli/bench_diffusion.h).
void run_diffusion_bench_command(const BenchArgs& args) {
    const bool cpu = args.backend == "cpu";
    DiffusionBenchPlan plan = diffusion_plan_from(args);
#if !DELTABIT_HAVE_CUDA
    if (!cpu)
        fail("bench: this build has no CUDA backend; give --backend cpu to measure the CPU reference, or rebuild "
             "with nvcc present and -DDELTABIT_CUDA=ON");
#endif
    BenchReport report = new_report(args, "f32");
    DiffusionFloors floors;
    if (cpu) {
        floors.copy_gb_s = describe_cpu(args, report).copy_gb_s;
    } else {
#if DELTABIT_HAVE_CUDA
        const GpuProbe gpu = describe_gpu(report);
        floors = {.copy_gb_s = gpu.copy_gb_s, .bf16_peak_tflop_s = gpu.bf16_peak_tflop_s};
#endif
    }

    std::unique_ptr<Model> model = build_model(args, report);
    if (plan.new_tokens == 0) plan.new_tokens = kDiffusionBlocks * model->config().canvas_length;
    plan.settings = args.geometry.empty() ? load_diffusion_generation_config(args.model, model->config())
                                          : DiffusionGenerationConfig{};
    if (args.denoising_steps) plan.settings.max_denoising_steps = *args.denoising_steps;
    const DiffusionCost cost(model->weights());
    report.parameters = cost.parameters();
    report.stored_bytes = cost.stored_weight_bytes();
    std::unique_ptr<DiffusionBenchTarget> target;
    if (cpu) {
        target = cpu_diffusion_target(*model);
    } else {
#if DELTABIT_HAVE_CUDA
        progress(fmt::format("uploading {:.2f} GB to the GPU", double(report.stored_bytes) / 1e9));
        const auto upload_start = std::chrono::steady_clock::now();
        target = cuda_diffusion_target(*model);
        report.upload_seconds = seconds_since(upload_start);
        progress(fmt::format("  {:.1f} s", report.upload_seconds));
#endif
    }
    report.decode_path = target->description() + (cpu ? "; block loop of runtime/diffusion_generate.h"
                                                       : "; block loop of runtime/diffusion_generate_cuda.h");
    report.measurements = run_diffusion_bench(*target, cost, plan, floors);
    finish(args, report);
}

#if DELTABIT_HAVE_SERVER

void run_serve_bench_command(const BenchArgs& args) {
    ServeBenchPlan plan = serve_plan_from(args);
    const bool cpu = args.backend == "cpu";
    BenchReport report = new_report(args, kv_format_name(plan.kv));
    if (cpu) {
        describe_cpu(args, report);
    } else {
#if DELTABIT_HAVE_CUDA
        describe_gpu(report);
        plan.memory_in_use_gib = [] {
            size_t free = 0, total = 0;
            return cudaMemGetInfo(&free, &total) == cudaSuccess ? double(total - free) / (1024.0 * 1024.0 * 1024.0) : 0.0;
        };
#else
        fail("bench: this build has no CUDA backend; give --backend cpu to measure the CPU, or rebuild with nvcc "
             "present and -DDELTABIT_CUDA=ON");
#endif
    }

    std::shared_ptr<const Model> model = build_model(args, report);
    const InferenceCost cost(model->weights(), plan.kv);
    report.parameters = cost.parameters();
    report.stored_bytes = cost.stored_weight_bytes();
    plan.traffic = cost.decode_traffic(plan.prompt_tokens + plan.max_tokens / 2);
    // A geometry has no tokenizer: the replies are spelled by a placeholder one (bench_serve.h).
    std::unique_ptr<text::Tokenizer> tokenizer;
    if (args.geometry.empty())
        tokenizer = std::move(load_text_front_end(args.model, model->config(), /*need_chat_template=*/false).tokenizer);
    else
        tokenizer = placeholder_tokenizer(model->config().n_vocab);
    std::unique_ptr<Engine> engine;
    if (cpu) {
        engine = make_cpu_engine(model);
        engine->set_cpu_threads(args.threads);
    } else {
        progress(fmt::format("uploading {:.2f} GB to the GPU", double(report.stored_bytes) / 1e9));
        const auto upload_start = std::chrono::steady_clock::now();
        engine = make_cuda_engine(model);
        report.upload_seconds = seconds_since(upload_start);
        progress(fmt::format("  {:.1f} s", report.upload_seconds));
    }
    model.reset();  // the engine holds what it needs
    report.decode_path = engine->description() + "; served by the scheduler's batched decode (Engine::forward_batch)";
    if (!engine->config().eos_ids.empty()) {
        engine = hide_eos(std::move(engine));
        report.notes.push_back("the model's EOS ids were hidden from the server, so every reply runs to max_tokens");
    }
    report.measurements = run_serve_bench(*engine, *tokenizer, plan);
    finish(args, report);
}

#endif

void run_bench(const BenchArgs& args) {
    check_common(args);
    if (diffusion_target(args)) return run_diffusion_bench_command(args);
    if (args.serve) {
#if DELTABIT_HAVE_SERVER
        return run_serve_bench_command(args);
#else
        fail("bench: --serve: this build has no server (cpp-httplib was not found when it was configured; "
             "docs/server.md says how to provide it)");
#endif
    }
    const BenchPlan plan = plan_from(args);
    if (args.backend == "cpu") return run_cpu_bench_command(args, plan);
#if DELTABIT_HAVE_CUDA
    run_gpu_bench_command(args, plan);
#else
    fail("bench: this build has no CUDA backend; give --backend cpu to measure the CPU, or rebuild with nvcc "
         "present and -DDELTABIT_CUDA=ON");
#endif
}

}  // namespace

void add_bench_command(CLI::App& app) {
    auto args = std::make_shared<BenchArgs>();
    CLI::App* cmd = app.add_subcommand("bench", "Measure prefill, first-token and decode speed on the GPU (or the CPU: --backend cpu); "
                                                     "a block-diffusion model: its prompt encoding and block loop");
    cmd->add_option("-m,--model", args->model, "GGUF file or Hugging Face folder");
    cmd->add_option("--geometry", args->geometry,
                    "Random-weight model of a real shape: bonsai-27b, bonsai-8b, bonsai-4b, qwen35-0.8b, "
                    "diffusiongemma-26b-a4b (tiny-qwen35, tiny-qwen3, tiny-diffusiongemma for smoke tests)");
    cmd->add_option("--backend", args->backend, "What to measure: cuda (the GPU) or cpu (the CPU engine)")
        ->check(CLI::IsMember({"cuda", "cpu"}))
        ->capture_default_str();
    cmd->add_option("--threads", args->threads, "CPU bench: threads of the CPU engine (0: all hardware threads)")
        ->capture_default_str();
    cmd->add_option("--type", args->type,
                    "Matrix type of a --geometry model: q1_0, q2_0, q4_0, q8_0, bf16, f16, f32 (default q1_0; a "
                    "diffusion geometry: its experts' type, the other matrices bf16, default bf16)");
    cmd->add_flag("--json", args->json, "Print one JSON object instead of the table");
    cmd->add_option("--depths", args->depths,
                    fmt::format("Context depths of the decode tests (0,4096 or 0 4096; default {} on cuda, {} on cpu)",
                                kGpuDefaults.depths, kCpuDefaults.depths));
    cmd->add_option("--prompts", args->prompts,
                    fmt::format("Prompt lengths of the prefill tests (512,4096 or 512 4096; default {} on cuda, {} on cpu); "
                                "--serve: one length, every request's (default {} on cuda, {} on cpu)",
                                kGpuDefaults.prompts, kCpuDefaults.prompts, kGpuServeDefaults.prompt_tokens,
                                kCpuServeDefaults.prompt_tokens));
    cmd->add_option("--prompt-depths", args->prompt_depths,
                    fmt::format("The first prompt length again at these depths, and the fill rate to each (0: none; "
                                "default {} on cuda, none on cpu)",
                                kGpuDefaults.prompt_depths));
    cmd->add_option("--first-tokens", args->first_tokens,
                    fmt::format("Prompt lengths of the time-to-first-token tests (2,16,64 or 2 16 64; default {} on "
                                "cuda, none on cpu)",
                                kGpuDefaults.first_tokens));
    cmd->add_option("--decode-tokens", args->decode_tokens,
                    fmt::format("Greedy steps a decode test times (default {} on cuda, {} on cpu); --serve: every "
                                "request's max_tokens (default {} on cuda, {} on cpu)",
                                kGpuDefaults.decode_tokens, kCpuDefaults.decode_tokens, kGpuServeDefaults.max_tokens,
                                kCpuServeDefaults.max_tokens));
    cmd->add_option("--batch", args->batches,
                    fmt::format("Sequences stepped together in the batched decode tests (8,32 or 8 32; 0: none; "
                                "default {} on cuda, none on cpu)",
                                kGpuDefaults.batches));
    cmd->add_option("--kv", args->kv,
                    fmt::format("KV cache format: f32, f16 or kivi4 (default {} on cuda, {} on cpu)", kGpuDefaults.kv,
                                kCpuDefaults.kv));
    cmd->add_option("--fill", args->fill,
                    "How a decode test reaches its depth: prefill, synthetic (random KV, no model run), or auto "
                    "(prefill unless projected over --fill-budget)")
        ->default_str("auto");
    cmd->add_option("--prompt-budget", args->prompt_budget,
                    "Skip a prefill test projected (from the previous one) to take longer, in seconds")
        ->default_str("60");
    cmd->add_option("--fill-budget", args->fill_budget,
                    "With --fill auto, fill a depth synthetically when its prefill is projected to take longer")
        ->default_str("45");
    cmd->add_option("--max-seconds", args->max_seconds, "Skip the tests that would start after this long measuring")
        ->default_str("240");
    cmd->add_flag("--serve", args->serve,
                  "Measure the OpenAI server instead: the real HTTP server in this process, driven by concurrent "
                  "streaming clients (docs/bench.md)");
    cmd->add_option("--streams", args->streams,
                    fmt::format("--serve: concurrent streaming clients of each level (1,8,32,64 or 1 8 32 64; default "
                                "{} on cuda, {} on cpu)",
                                kGpuServeDefaults.streams, kCpuServeDefaults.streams));
    cmd->add_option("--requests", args->requests,
                    fmt::format("--serve: requests each client sends in turn (default {} on cuda, {} on cpu)",
                                kGpuServeDefaults.requests_per_stream, kCpuServeDefaults.requests_per_stream));
    cmd->add_option("--steps", args->denoising_steps,
                    "Block-diffusion model: the most denoising steps a block takes (default: the model's "
                    "max_denoising_steps, 48)");
    cmd->add_flag("--no-history", args->no_history, "Do not append to the history file");
    cmd->add_option("--history", args->history, "History file to append to")->default_str("bench/history.tsv");
    cmd->add_option("--commit", args->commit, "Commit recorded in the history (default: git rev-parse --short HEAD)");
    cmd->add_option("--seed", args->seed, "Seed of the random weights and prompts")->default_str("1");
    cmd->footer("Kernel switches are read from the environment, e.g. DELTABIT_GEMM_F16=0 (the int8 prompt GEMM\n"
                "instead of the one on f16 activations), DELTABIT_GEMM_WS=0, DELTABIT_SEAM_FOLD=0 — most 0 or 1, a few\n"
                "a number (DELTABIT_GEMV_LOADS_IN_FLIGHT=16, 8 or 4), all listed in docs/switches.md. A history row\n"
                "measured with any DELTABIT_* variable set names it in its note. On the CPU,\n"
                "DELTABIT_CPU_REFERENCE=1 measures the naive reference products instead of the fast path.");
    cmd->callback([args] { run_bench(*args); });
}

}  // namespace deltabit::cli
