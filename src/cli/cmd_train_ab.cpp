// `deltabit train-ab A.toml B.toml [--seeds 1,2,3] [-o DIR]`: the trainer's A/B protocol (docs/train.md).
// A change to the recipe (B against A) is kept only if it wins on held-out bits per byte on every one of
// at least three seeds. Each (config, seed) is one ordinary training run in DIR/<a|b>-<name>-seed<S>/,
// with its own copy of the config (run.seed and run.out_dir set, data paths absolute: train/
// train_config.h config_text_for_run), so any run can be inspected, redrawn or continued alone with
// `deltabit train DIR/.../config.toml --resume`. Runs already finished are not trained again and runs
// with a checkpoint are resumed: an A/B too long for one sitting is the same command run again. The
// table and the verdict go to stdout and DIR/ab.tsv.
#include "cli/cmd_train.h"
#include "cli/commands.h"
#include "core/error.h"
#include "core/file_io.h"
#include "train/curves_csv.h"
#include "train/train_config.h"

#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace deltabit::cli {
namespace {

namespace fs = std::filesystem;

// The protocol's minimum: fewer seeds can show a difference but never decide one.
constexpr size_t kMinimumSeeds = 3;

struct AbArgs {
    std::string a, b;
    std::vector<uint64_t> seeds = {1, 2, 3};
    std::string out;       // "": runs/ab-<a>-vs-<b>
    std::string backend;   // "": each config's run.backend
    std::string history;   // "": no history rows (an A/B's runs are not throughput measurements)
    bool quiet = false;
};

struct Side {
    std::string label;  // "a" or "b"
    fs::path config;
    std::string name;   // the config's file stem
    std::string text;
};

// Held-out BPB of a run that reached `steps` (its curves' last row, an evaluation at that step); nothing
// when the run has not finished.
std::optional<double> finished_bpb(const fs::path& curves, int64_t steps) {
    if (!fs::exists(curves)) return std::nullopt;
    const std::vector<train::CurveRow> rows =
        train::parse_curves_csv(read_regular_file(curves, "train-ab"), curves.string());
    if (rows.empty() || rows.back().step != steps || !rows.back().eval_bpb) return std::nullopt;
    return *rows.back().eval_bpb;
}

// Trains (or resumes, or only reads) one (config, seed) run; returns its final held-out BPB.
double run_one(const AbArgs& args, const Side& side, uint64_t seed, const fs::path& dir) {
    const fs::path run_dir = dir / fmt::format("{}-{}-seed{}", side.label, side.name, seed);
    const std::string text = train::config_text_for_run(side.text, side.config.string(),
                                                        fs::absolute(side.config).parent_path(), seed,
                                                        fs::absolute(run_dir).string());
    const fs::path config = run_dir / "config.toml";
    if (fs::exists(config)) {
        if (read_regular_file(config, "train-ab") != text)
            fail("train-ab: {} holds a run of another config or seed than {} with seed {}; give another -o DIR or "
                 "remove that folder",
                 config.string(), side.config.string(), seed);
    } else {
        fs::create_directories(run_dir);
        write_file_atomically(config, text, "train-ab");
    }
    const train::TrainConfig parsed = train::load_train_config(config);
    const fs::path curves = run_dir / "curves.csv";
    if (const std::optional<double> done = finished_bpb(curves, parsed.run.steps)) {
        fmt::print(stderr, "train-ab: {} seed {}: finished earlier, {:.5f} bpb ({})\n", side.name, seed, *done,
                   run_dir.string());
        return *done;
    }
    TrainArgs train;
    train.config = config.string();
    train.resume = fs::exists(run_dir / "checkpoint.bin");
    train.quiet = args.quiet;
    train.backend = args.backend;
    train.no_history = args.history.empty();
    if (!args.history.empty()) train.history = args.history;
    fmt::print(stderr, "train-ab: {} seed {}: {} ({})\n", side.name, seed, train.resume ? "resuming" : "training",
               run_dir.string());
    run_train(train);
    const std::optional<double> bpb = finished_bpb(curves, parsed.run.steps);
    if (!bpb) fail("train-ab: {}: the run stopped before step {} (no final evaluation in its curves)", curves.string(),
                   parsed.run.steps);
    return *bpb;
}

void run_ab(const AbArgs& args) {
    if (args.seeds.empty()) fail("train-ab: --seeds: give at least one seed (the protocol decides on {} or more)",
                                 kMinimumSeeds);
    std::vector<uint64_t> seeds = args.seeds;
    std::sort(seeds.begin(), seeds.end());
    if (std::adjacent_find(seeds.begin(), seeds.end()) != seeds.end())
        fail("train-ab: --seeds: a seed is given twice; each must be a run of its own");
    std::vector<Side> sides = {{"a", args.a, fs::path(args.a).stem().string(), ""},
                               {"b", args.b, fs::path(args.b).stem().string(), ""}};
    for (Side& s : sides) {
        s.text = read_regular_file(s.config, "train-ab", "give the path of a training config (docs/train.md)");
        (void)train::load_train_config(s.config);  // refused here, before any run starts
    }
    if (sides[0].text == sides[1].text)
        fail("train-ab: {} and {} are the same config: nothing to compare", args.a, args.b);
    const fs::path dir = args.out.empty() ? fs::path("runs") / fmt::format("ab-{}-vs-{}", sides[0].name, sides[1].name)
                                          : fs::path(args.out);
    fs::create_directories(dir);

    struct Row {
        uint64_t seed;
        double a, b;
    };
    std::vector<Row> rows;
    for (uint64_t seed : args.seeds) {
        const double a = run_one(args, sides[0], seed, dir);
        const double b = run_one(args, sides[1], seed, dir);
        rows.push_back({seed, a, b});
    }

    std::string tsv = fmt::format("seed\t{}_bpb\t{}_bpb\tb_minus_a\n", sides[0].name, sides[1].name);
    std::string table = fmt::format("{:>6}  {:>12}  {:>12}  {:>10}\n", "seed", sides[0].name.substr(0, 12),
                                    sides[1].name.substr(0, 12), "B − A");
    size_t b_wins = 0, a_wins = 0;
    double sum = 0.0;
    for (const Row& r : rows) {
        const double d = r.b - r.a;
        b_wins += d < 0.0;
        a_wins += d > 0.0;
        sum += d;
        table += fmt::format("{:>6}  {:>12.5f}  {:>12.5f}  {:>+10.5f}\n", r.seed, r.a, r.b, d);
        tsv += fmt::format("{}\t{:.6f}\t{:.6f}\t{:+.6f}\n", r.seed, r.a, r.b, d);
    }
    const double mean = sum / double(rows.size());
    double spread = 0.0;
    for (const Row& r : rows) spread += (r.b - r.a - mean) * (r.b - r.a - mean);
    spread = rows.size() > 1 ? std::sqrt(spread / double(rows.size() - 1)) : 0.0;
    const size_t n = rows.size();
    std::string verdict;
    if (n < kMinimumSeeds)
        verdict = fmt::format("no decision: {} seed{} (the protocol needs {} or more)", n, n == 1 ? "" : "s",
                              kMinimumSeeds);
    else if (b_wins == n)
        verdict = fmt::format("keep B ({}): lower held-out bpb on all {} seeds", sides[1].name, n);
    else if (a_wins == n)
        verdict = fmt::format("keep A ({}): B is worse on all {} seeds", sides[0].name, n);
    else
        verdict = fmt::format("keep A ({}): B wins on {} of {} seeds, not all", sides[0].name, b_wins, n);
    table += fmt::format("mean B − A {:+.5f} bpb (sd {:.5f} over seeds)\nverdict: {}\n", mean, spread, verdict);
    tsv += fmt::format("# mean {:+.6f} sd {:.6f}; verdict: {}\n", mean, spread, verdict);
    write_file_atomically(dir / "ab.tsv", tsv, "train-ab");
    fmt::print("train-ab: A = {}, B = {}, held-out bits per byte at the last step\n{}(runs and ab.tsv in {})\n",
               args.a, args.b, table, dir.string());
}

// "1,2,3" or "1 2 3" as CLI11 gives them (several values, each maybe comma-separated).
std::vector<uint64_t> parse_seeds(const std::vector<std::string>& given) {
    std::vector<uint64_t> seeds;
    for (const std::string& g : given) {
        size_t start = 0;
        while (start <= g.size()) {
            const size_t comma = std::min(g.find(',', start), g.size());
            const std::string item = g.substr(start, comma - start);
            if (item.empty() || item.size() > 18 || item.find_first_not_of("0123456789") != std::string::npos)
                fail("train-ab: --seeds {:?}: expected whole numbers (comma- or space-separated)", g);
            seeds.push_back(std::stoull(item));
            start = comma + 1;
        }
    }
    return seeds;
}

}  // namespace

void add_train_ab_command(CLI::App& app) {
    auto args = std::make_shared<AbArgs>();
    auto seeds = std::make_shared<std::vector<std::string>>();
    CLI::App* cmd = app.add_subcommand(
        "train-ab", "Compare two training configs over several seeds: keep B only if it wins on held-out bpb on all");
    cmd->add_option("A", args->a, "the baseline config")->type_name("A.toml");
    cmd->add_option("B", args->b, "the changed config")->type_name("B.toml");
    cmd->add_option("--seeds", *seeds, "seeds of the runs, each config trained once per seed (default 1,2,3)");
    cmd->add_option("-o,--out", args->out, "folder of the runs and ab.tsv (default runs/ab-A-vs-B)")
        ->type_name("DIR");
    cmd->add_option("--backend", args->backend, "cpu, cuda or auto for every run (default: each config's run.backend)")
        ->check(CLI::IsMember({"cpu", "cuda", "auto"}));
    cmd->add_option("--history", args->history, "append each run's tokens/s and MFU to this TSV (default: none)");
    cmd->add_flag("-q,--quiet", args->quiet, "no progress line from the runs");
    cmd->footer("Runs that finished are read, not trained again; a run with a checkpoint is resumed. Each run's "
                "folder holds its config.toml, curves.csv, curves.svg, checkpoint.bin and model.gguf.");
    cmd->callback([args, seeds] {
        if (args->a.empty() || args->b.empty())
            fail("train-ab: give two training configs, the baseline and the changed one: deltabit train-ab A.toml "
                 "B.toml [--seeds 1,2,3] (docs/train.md)");
        if (!seeds->empty()) args->seeds = parse_seeds(*seeds);
        run_ab(*args);
    });
}

}  // namespace deltabit::cli
