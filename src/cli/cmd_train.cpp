// `deltabit train CONFIG.toml`: runs or resumes the training run the config describes (train/
// train_config.h; docs/train.md). Built only with toml++ (the train module).
//
//   deltabit train CONFIG.toml [--resume] [--max-steps N | --profile N [--profile-warmup W]]
//                  [--backend cpu|cuda|auto] [--quiet] [--no-history | --history FILE] [--commit HASH]
//   deltabit train --plot CURVES.csv [-o OUT.svg] [--title TEXT]
//
// Writes into run.out_dir: curves.csv (one row per optimizer step; eval_bpb on evaluation steps:
// train/curves_csv.h), curves.svg (the curves drawn, train/curves_plot.h: at every evaluation and
// where the invocation stops, from the whole file on --resume), checkpoint.bin (every checkpoint.every
// steps and at the end, atomically), and when the run reaches run.steps, model.gguf (Q1_0 for a QAT run, else F32: train/export.h); prints a progress line (step,
// tokens/s, MFU, loss, eval BPB, ETA) on a terminal, one line per evaluation otherwise; appends the
// invocation's mean tokens/s and MFU to bench/history.tsv (MFU against the bf16 tensor rate `deltabit
// bench` reads prefill against, cli/bench_gpu.h; only on a GPU whose rate is known). With --profile N it
// runs W warm-up steps, then N steps timed by kind of op (train/step_profile.h), prints that table and
// stops there with a checkpoint, as --max-steps W+N would; no history row (the timing has a cost).
#include "cli/cmd_train.h"

#include "cli/bench_report.h"
#include "cli/commands.h"
#include "cli/progress.h"
#include "cli/whole_number_floor.h"
#include "core/error.h"
#include "core/file_io.h"
#include "train/curves_csv.h"
#include "train/curves_plot.h"
#include "train/export.h"
#include "train/trainer.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <limits>
#include <memory>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

namespace deltabit::cli {
namespace {

// Dense bf16 tensor rate (TFLOP/s) of the GPU the run is on, as `deltabit bench` reads prefill against
// (cli/bench_gpu.h: measured on this workplace's H200s); 0 when unknown (no MFU printed).
constexpr double kH200Bf16Tflops = 790.0;
double bf16_peak_tflops(const std::string& backend) {
    return backend.find("H200") != std::string::npos ? kH200Bf16Tflops : 0.0;
}
// The ceilings --profile reads each kind of op against (train/step_profile.h): the bf16 rate above and
// the memory bandwidth of NVIDIA's datasheets (H200 HBM3e 4.8 TB/s; H100 SXM HBM3 3.35 TB/s). An H100
// SXM has the H200's GH100 die at the same clocks (both datasheets: 989 TFLOP/s dense bf16), so the
// H200's measured 790 stands for it too; the PCIe card (lower clocks, 2 TB/s) has none. Only for the
// profile's percentages: the MFU and the history keep bf16_peak_tflops's H200-only rate.
train::ProfileCeilings profile_ceilings(const std::string& backend) {
    if (backend.find("H200") != std::string::npos) return {.tflops = kH200Bf16Tflops, .gbytes_s = 4800.0};
    if (backend.find("H100") != std::string::npos && backend.find("PCIe") == std::string::npos)
        return {.tflops = kH200Bf16Tflops, .gbytes_s = 3350.0};
    return {};
}

// One history row for the invocation (columns: bench/history.tsv's header, cli/bench_report.h).
void append_train_history(const std::string& path, const std::string& commit, const train::Trainer& trainer,
                          const std::string& run_name, int64_t steps, double seconds, double tokens_per_s,
                          double tflop_s, double peak, double loss, double bpb) {
    const bool fresh = !std::filesystem::exists(path);
    std::ofstream out(path, std::ios::app);
    if (!out) fail("train: {}: cannot open for appending (--no-history skips it)", path);
    if (fresh) out << history_header() << "\n";
    const train::TrainConfig& c = trainer.config();
    const std::string note = fmt::format("{} steps to step {}, {} parameters, loss {:.4f}, held-out {:.4f} bpb, {}",
                                         steps, trainer.step(), trainer.layout().total(), loss, bpb,
                                         trainer.backend_description());
    const double memory = trainer.device_memory_gib();
    out << fmt::format("{}\t{}\t{}\tdeltabit train\t{}\t{}\t{}\ttrain b{}x{}x{}\t{:.0f}\t\t\t{}\t{:.0f}\t{:.2f}\t{}\t\t{}\n",
                       utc_date(), commit, trainer.backend_description(), run_name, c.run.seq_len,
                       c.qat.enabled ? "q1_0-qat" : "f32-master", c.run.batch, c.run.seq_len, c.run.grad_accum,
                       1e6 * seconds / double(std::max<int64_t>(steps, 1)), note, tokens_per_s, tflop_s,
                       peak > 0 ? fmt::format("{:.2f}", 100.0 * tflop_s / peak) : std::string(),
                       memory > 0 ? fmt::format("{:.2f}", memory) : std::string());
    if (!out.flush()) fail("train: {}: write failed", path);
}

std::string format_duration(double seconds) {
    const int64_t s = int64_t(seconds + 0.5);
    return s >= 3600 ? fmt::format("{}h{:02}m", s / 3600, s / 60 % 60) : fmt::format("{}m{:02}s", s / 60, s % 60);
}

// The run's name for a curves file: runs/NAME/curves.csv → NAME, models/NAME.curves.csv → NAME.
std::string run_name_of_curves(const std::filesystem::path& csv) {
    std::string stem = csv.stem().string();
    if (stem == "curves" && !csv.parent_path().filename().empty()) return csv.parent_path().filename().string();
    if (stem.ends_with(".curves")) stem.resize(stem.size() - 7);
    return stem;
}

void run_plot(const TrainArgs& args) {
    const std::filesystem::path csv = args.plot;
    const std::string text = read_regular_file(csv, "train --plot");
    const std::vector<train::CurveRow> rows = train::parse_curves_csv(text, "train --plot: " + csv.string());
    if (rows.empty())
        fail("train --plot: {}: only the header, no steps yet: nothing to plot (the trainer writes a row per step)",
             csv.string());
    const std::string title = args.title.empty() ? run_name_of_curves(csv) : args.title;
    const std::string svg = train::plot_curves_svg(rows, title, "from " + csv.string());
    if (args.plot_output == "-") {
        fmt::print("{}", svg);
        return;
    }
    std::filesystem::path out = args.plot_output;
    if (out.empty()) out = std::filesystem::path(csv).replace_extension(".svg");
    if (out == csv)
        fail("train --plot: {}: the output would overwrite the curves file; name another with -o", csv.string());
    write_file_atomically(out, svg, "train --plot");
    if (!args.quiet)
        fmt::print("train --plot: {} step{} from {} → {}\n", rows.back().step, rows.back().step == 1 ? "" : "s",
                   csv.string(), out.string());
}

}  // namespace

void run_train(const TrainArgs& args) {
    if (!args.plot.empty()) return run_plot(args);
    if (args.config.empty())
        fail("train: give the run's CONFIG.toml (or --plot CURVES.csv to draw a curves file; see deltabit train "
             "--help)");
    std::ifstream in(args.config, std::ios::binary);
    if (!in) fail("train: {}: cannot open the config file", args.config);
    std::ostringstream text;
    text << in.rdbuf();
    train::TrainConfig config = train::load_train_config(args.config);
    if (!args.backend.empty()) config.run.backend = args.backend;
    const std::filesystem::path out_dir =
        std::filesystem::path(config.run.out_dir).is_relative()
            ? (std::filesystem::path(args.config).parent_path() / config.run.out_dir).lexically_normal()
            : std::filesystem::path(config.run.out_dir);
    std::filesystem::create_directories(out_dir);
    const std::filesystem::path checkpoint = out_dir / "checkpoint.bin", curves = out_dir / "curves.csv",
                                curves_svg = out_dir / "curves.svg";
    check_replaceable(curves_svg, "train");

    train::Trainer trainer(config, text.str());
    if (args.resume) {
        if (!std::filesystem::exists(checkpoint))
            fail("train: --resume: {} does not exist (run without --resume to start)", checkpoint.string());
        trainer.load_checkpoint(checkpoint);
    } else if (std::filesystem::exists(checkpoint)) {
        fail("train: {} exists: pass --resume to continue that run, or remove it to start over", checkpoint.string());
    }
    // Before anything is written: a profile needs a step after its warm-up.
    const bool profiling = args.profile_steps > 0;
    const int64_t profile_from = trainer.step() + args.profile_warmup;
    if (profiling && profile_from >= config.run.steps)
        fail("train: --profile: the run is at step {} of {}: no step is left after {} warm-up step{}", trainer.step(),
             config.run.steps, args.profile_warmup, args.profile_warmup == 1 ? "" : "s");
    // On --resume the curves file is read whole (the plot draws the run, not this invocation) and
    // rewritten up to the checkpoint's step: rows a stopped run wrote after its last checkpoint, and a
    // last line cut off mid-write, would otherwise sit before the steps this run writes again.
    std::vector<train::CurveRow> rows;
    const bool fresh_curves = !args.resume || !std::filesystem::exists(curves);
    if (!fresh_curves) {
        try {
            rows = train::parse_curves_csv(read_regular_file(curves, "train"), curves.string());
        } catch (const Error& e) {
            fail("train: --resume: {} (fix or move the file: the resumed run appends to it)", e.what());
        }
        std::erase_if(rows, [&](const train::CurveRow& r) { return r.step > trainer.step(); });
        std::string text = train::curves_csv_header();
        for (const train::CurveRow& r : rows) text += train::format_curve_row(r);
        write_file_atomically(curves, text, "train");
    }
    std::ofstream csv(curves, fresh_curves ? std::ios::trunc : std::ios::app);
    if (!csv) fail("train: {}: cannot open for writing", curves.string());
    if (fresh_curves) csv << train::curves_csv_header();
    const std::string run_name = std::filesystem::path(args.config).stem().string();
    auto draw_curves = [&] {
        write_file_atomically(curves_svg, train::plot_curves_svg(rows, run_name, "config " + args.config), "train");
    };

    const bool live = !args.quiet && stderr_is_terminal();
    const int64_t total = config.run.steps, tokens_per_step = config.tokens_per_step();
    const std::string backend = trainer.backend_description();
    const double flops_per_token = train::train_flops_per_token(trainer.layout().config(), config.run.seq_len);
    const double peak = bf16_peak_tflops(backend);
    fmt::print(stderr, "train: {} parameters, {} tokens per step, {} steps from step {} on {} → {}\n",
               trainer.layout().total(), tokens_per_step, total, trainer.step(), backend, out_dir.string());
    if (!trainer.activations_summary().empty()) fmt::print(stderr, "train: {}\n", trainer.activations_summary());
    if (config.optimizer.kind == "muon") {  // say which tensors Muon took, so a run shows that it did
        int64_t matrices = 0, weights = 0;
        for (const train::ParameterInfo& p : trainer.layout().all())
            if (p.hidden_matrix) ++matrices, weights += p.size;
        fmt::print(stderr, "train: optimizer muon: {} hidden matrices ({} parameters) on Muon, {} parameters on AdamW\n",
                   matrices, weights, trainer.layout().total() - weights);
    }
    double last_bpb = NAN, seconds_sum = 0.0, last_loss = NAN;
    int64_t steps_timed = 0;
    const int64_t stop_at = profiling          ? std::min(total, profile_from + args.profile_steps)
                            : args.max_steps > 0 ? std::min(total, trainer.step() + args.max_steps)
                                                 : total;
    while (trainer.step() < stop_at) {
        if (profiling && trainer.step() == profile_from) trainer.enable_profile();
        const train::StepReport r = trainer.train_step();
        seconds_sum += r.seconds;
        ++steps_timed;
        last_loss = r.loss;
        const bool eval_now = (config.eval.every > 0 && r.step % config.eval.every == 0) || r.step == total;
        if (eval_now) last_bpb = trainer.evaluate_bpb();
        const double tokens_per_s = double(tokens_per_step) / r.seconds;
        rows.push_back({.step = r.step,
                        .tokens = r.step * tokens_per_step,
                        .lr = r.lr,
                        .loss = r.loss,
                        .grad_norm = r.grad_norm,
                        .tokens_per_s = tokens_per_s,
                        .eval_bpb = eval_now ? std::optional<double>(last_bpb) : std::nullopt});
        csv << train::format_curve_row(rows.back());
        csv.flush();
        if (eval_now) draw_curves();
        if ((config.checkpoint.every > 0 && r.step % config.checkpoint.every == 0) || r.step == stop_at)
            trainer.save_checkpoint(checkpoint);
        const double eta = seconds_sum / double(steps_timed) * double(total - r.step);
        const std::string mfu =
            peak > 0 ? fmt::format("  MFU {:.1f}%", 100.0 * tokens_per_s * flops_per_token / (peak * 1e12)) : "";
        const std::string line =
            fmt::format("step {}/{}  {:.0f} tok/s{}  loss {:.4f}  eval {} bpb  lr {:.3g}  ETA {}", r.step, total,
                        tokens_per_s, mfu, r.loss, std::isnan(last_bpb) ? "-" : fmt::format("{:.4f}", last_bpb), r.lr,
                        format_duration(eta));
        if (live)
            fmt::print(stderr, "\r\033[K{}", line);
        else if (!args.quiet && eval_now)
            fmt::print(stderr, "{}\n", line);
    }
    if (live) fmt::print(stderr, "\n");
    draw_curves();  // where this invocation stopped, evaluation step or not
    if (std::isnan(last_bpb)) last_bpb = trainer.evaluate_bpb();  // nothing ran, or no evaluation step yet
    fmt::print("train: done at step {}: held-out {:.5f} bits per byte; checkpoint {}, curves {} and {}\n",
               trainer.step(), last_bpb, checkpoint.string(), curves.string(), curves_svg.filename().string());
    if (const train::StepProfile* profile = trainer.profile()) {
        const train::TrainConfig& c = trainer.config();
        const std::string title = fmt::format(
            "train --profile: {} step{} of {} × {} tokens{} after {} warm-up step{} on {}; timed by {}", profile->steps(),
            profile->steps() == 1 ? "" : "s", c.run.batch, c.run.seq_len,
            c.run.grad_accum > 1 ? fmt::format(" × {} micro-batches", c.run.grad_accum) : std::string(),
            args.profile_warmup, args.profile_warmup == 1 ? "" : "s", backend,
            !trainer.on_gpu()             ? "the wall clock (the CPU reference's forward and backward are one call, "
                                            "not split by op)"
            : trainer.keeps_activations() ? "CUDA events; activations kept (no recompute pass)"
                                          : "CUDA events; activations recomputed in the backward");
        fmt::print("{}", profile->report(title, profile_ceilings(backend), flops_per_token * double(tokens_per_step)));
    }
    if (steps_timed > 0) {
        const double tokens_per_s = double(tokens_per_step * steps_timed) / seconds_sum;
        const double tflop_s = tokens_per_s * flops_per_token / 1e12;
        fmt::print("train: {} steps in {:.1f} s: {:.0f} tokens/s, {:.2f} TFLOP/s{}\n", steps_timed, seconds_sum,
                   tokens_per_s, tflop_s,
                   peak > 0 ? fmt::format(", MFU {:.1f}% of {:.0f} TFLOP/s bf16", 100.0 * tflop_s / peak, peak) : "");
        if (!args.no_history && !profiling)
            append_train_history(args.history, args.commit.empty() ? source_commit() : args.commit, trainer,
                                 std::filesystem::path(args.config).stem().string(), steps_timed, seconds_sum,
                                 tokens_per_s, tflop_s, peak, last_loss, last_bpb);
    }
    if (trainer.finished()) {
        const std::filesystem::path model = out_dir / "model.gguf";
        const DType type = config.qat.enabled ? DType::Q1_0 : DType::F32;
        const ConvertReport report = train::export_gguf(trainer.layout(), trainer.forward_weights(), model, type,
                                                        std::filesystem::path(args.config).stem().string());
        fmt::print("train: exported {} ({}, {} bytes)\n", model.string(), dtype_name(type), report.bytes);
    }
}

void add_train_command(CLI::App& app) {
    auto args = std::make_shared<TrainArgs>();
    CLI::App* cmd = app.add_subcommand(
        "train", "Train a model as CONFIG.toml describes (on the GPU or the CPU reference), or draw a curves file");
    CLI::Option* config = cmd->add_option("config", args->config,
                                          "the run's TOML config (see configs/bytelm-hybrid.toml, docs/train.md)");
    std::vector<CLI::Option*> training = {
        cmd->add_flag("--resume", args->resume,
                      "continue from run.out_dir/checkpoint.bin (default: start fresh; refused if one exists)"),
        cmd->add_option("--max-steps", args->max_steps,
                        "stop after this many optimizer steps of this invocation, with a checkpoint (default: run "
                        "to run.steps); continue later with --resume")
            ->check(whole_number_at_least(1)),
        cmd->add_option("--profile", args->profile_steps,
                        "after --profile-warmup steps, time N steps by kind of op (GEMMs, attention, delta rule, "
                        "norms, optimizer, host waits...), print the table and stop there with a checkpoint; no "
                        "history row. CUDA events on --backend cuda, the wall clock around four phases on cpu")
            ->type_name("N")
            ->check(whole_number_at_least(1)),
        cmd->add_option("--profile-warmup", args->profile_warmup,
                        "steps run before --profile starts timing (cuBLAS's choices, buffers grown)")
            ->type_name("W")
            ->default_str("2")
            ->check(whole_number_at_least(0)),
        cmd->add_option("--backend", args->backend,
                        "cpu (the double reference), cuda (the GPU trainer) or auto (cuda when a GPU is present) "
                        "(default: the config's run.backend)")
            ->check(CLI::IsMember({"cpu", "cuda", "auto"})),
        cmd->add_option("--history", args->history, "the TSV this run's tokens/s and MFU are appended to")
            ->default_str("bench/history.tsv"),
        cmd->add_flag("--no-history", args->no_history, "do not append to the history file"),
        cmd->add_option("--commit", args->commit, "commit hash for the history row (default: git's, where present)"),
    };
    CLI::Option* profile = cmd->get_option("--profile");
    profile->excludes(cmd->get_option("--max-steps"));
    cmd->get_option("--profile-warmup")->needs(profile);
    cmd->add_flag("-q,--quiet", args->quiet, "no progress output (default: a live line on a terminal)");
    // --plot's options in a group of their own; its conflicts with training are checked in the callback
    // (CLI11's excludes() would print "Excludes: --plot" beside every training option).
    const std::string drawing = "Drawing a curves file instead of training";
    CLI::Option* plot =
        cmd->add_option("--plot", args->plot,
                        "draw CURVES.csv (a run's curves.csv; a run draws its own curves.svg as it goes) as an SVG "
                        "image: training loss and held-out eval in bits per byte against the step")
            ->type_name("CURVES.csv")
            ->group(drawing);
    cmd->add_option("-o,--output", args->plot_output,
                    "the SVG to write, - for standard output (default: CURVES.csv with .svg for .csv)")
        ->type_name("OUT.svg")
        ->needs(plot)
        ->group(drawing);
    cmd->add_option("--title", args->title, "the image's title (default: the run's name, from the file's folder or name)")
        ->type_name("TEXT")
        ->needs(plot)
        ->group(drawing);
    config->type_name("CONFIG.toml");
    training.push_back(config);
    cmd->footer("A run writes run.out_dir/curves.csv (a row per step) and curves.svg (redrawn at every evaluation "
                "and where the run stops).\nRedraw any curves file: deltabit train --plot runs/NAME/curves.csv");
    cmd->callback([args, plot, training] {
        if (plot->count() > 0)
            for (const CLI::Option* option : training)
                if (option->count() > 0)
                    fail("train: --plot draws a curves file and trains nothing: {} does not go with it",
                         option->get_name().empty() ? option->get_name(true, true) : option->get_name());
        run_train(*args);
    });
}

}  // namespace deltabit::cli
