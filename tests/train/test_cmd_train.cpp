// `deltabit train` as a user runs it: a real process on real files. A run stopped with --max-steps and
// continued with --resume ends with the same checkpoint, byte for byte, as the run made in one go; the
// curves file has every step and its plot every point; `train --plot` redraws any curves file; misuse
// is refused with one line.
#include "cli_command.h"
#include "tiny_model_section.h"
#include "svg_check.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <algorithm>
#include <iterator>
#include <sstream>

namespace deltabit {
namespace {

namespace fs = std::filesystem;

std::string read_file(const fs::path& path) {
    std::ifstream in(path, std::ios::binary);
    return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

fs::path make_run_dir(const std::string& name, const std::string& out_dir, const std::string& optimizer = "adamw") {
    const fs::path dir = fs::temp_directory_path() / ("deltabit_test_cmd_train_" + name);
    fs::remove_all(dir);
    fs::create_directories(dir);
    std::string text;
    for (int i = 0; i < 30; ++i) text += "a rose is a rose is a rose.\n";
    std::ofstream(dir / "train.txt") << text;
    std::ofstream(dir / "heldout.txt") << text.substr(0, 80);
    std::ofstream(dir / "run.toml") << std::string(test::kTinyModelSection) + R"([data]
train = "train.txt"
heldout = "heldout.txt"
[run]
seq_len = 16
batch = 2
grad_accum = 2
steps = 8
out_dir = ")" + out_dir + R"("
[optimizer]
kind = ")" + optimizer + R"("
lr = 1e-2
min_lr = 1e-3
warmup_steps = 2
[eval]
every = 4
bytes = 64
[checkpoint]
every = 3
)";
    return dir;
}

// A Muon run says which tensors Muon took (2 layers: DeltaNet's 3 projections and attention's 4, plus
// 3 FFN matrices each), and its stop-and-resume equals the straight run as AdamW's does.
TEST(CmdTrain, MuonRunSaysWhatItTrainsAndResumes) {
    const fs::path dir = make_run_dir("muon", "straight", "muon");
    const test::CommandResult straight = test::run_deltabit("train --no-history '" + (dir / "run.toml").string() + "'");
    ASSERT_EQ(straight.exit_code, 0) << straight.output;
    EXPECT_NE(straight.output.find("train: optimizer muon: 13 hidden matrices ("), std::string::npos) << straight.output;
    const fs::path split_dir = make_run_dir("muon_split", "straight", "muon");
    const std::string cfg = "'" + (split_dir / "run.toml").string() + "'";
    ASSERT_EQ(test::run_deltabit("train -q --no-history --max-steps 5 " + cfg).exit_code, 0);
    const test::CommandResult rest = test::run_deltabit("train -q --no-history --resume " + cfg);
    ASSERT_EQ(rest.exit_code, 0) << rest.output;
    EXPECT_EQ(read_file(dir / "straight" / "checkpoint.bin"), read_file(split_dir / "straight" / "checkpoint.bin"));
    // The AdamW run's start line names no optimizer.
    const fs::path adamw = make_run_dir("muon_adamw", "straight");
    const test::CommandResult plain = test::run_deltabit("train --no-history --max-steps 1 '" + (adamw / "run.toml").string() + "'");
    EXPECT_EQ(plain.output.find("optimizer muon"), std::string::npos) << plain.output;
}

TEST(CmdTrain, StopAndResumeEqualsOneRun) {
    const fs::path dir = make_run_dir("resume", "straight");
    const test::CommandResult straight = test::run_deltabit("train -q --no-history '" + (dir / "run.toml").string() + "'");
    ASSERT_EQ(straight.exit_code, 0) << straight.output;
    EXPECT_NE(straight.output.find("done at step 8"), std::string::npos) << straight.output;
    EXPECT_NE(straight.output.find("exported"), std::string::npos) << straight.output;
    EXPECT_TRUE(fs::exists(dir / "straight" / "model.gguf"));

    // The same config text with another out_dir would be a different config: run the split run in a copy.
    const fs::path split_dir = make_run_dir("resume_split", "straight");
    const std::string cfg = "'" + (split_dir / "run.toml").string() + "'";
    const test::CommandResult first = test::run_deltabit("train -q --no-history --max-steps 5 " + cfg);
    ASSERT_EQ(first.exit_code, 0) << first.output;
    EXPECT_NE(first.output.find("done at step 5"), std::string::npos) << first.output;
    EXPECT_FALSE(fs::exists(split_dir / "straight" / "model.gguf"));  // not finished: no export yet
    const test::CommandResult again = test::run_deltabit("train -q --no-history " + cfg);
    EXPECT_EQ(again.exit_code, 1);
    EXPECT_NE(again.output.find("pass --resume"), std::string::npos) << again.output;
    const test::CommandResult second = test::run_deltabit("train -q --no-history --resume " + cfg);
    ASSERT_EQ(second.exit_code, 0) << second.output;

    const std::string a = read_file(dir / "straight" / "checkpoint.bin");
    const std::string b = read_file(split_dir / "straight" / "checkpoint.bin");
    ASSERT_GT(a.size(), 12780u * 12);  // parameters and both moments
    EXPECT_TRUE(a == b) << "checkpoints differ after stop and resume";
    // Both curves files have steps 1..8; the loss and BPB columns agree (tokens/s does not).
    auto columns = [](const std::string& csv) {
        std::istringstream in(csv);
        std::string line, out;
        while (std::getline(in, line)) {
            const size_t first_comma = line.find(','), tps = line.rfind(',', line.rfind(',') - 1);
            out += line.substr(0, tps) + line.substr(line.rfind(',')) + "\n";
            (void)first_comma;
        }
        return out;
    };
    const std::string curves_a = read_file(dir / "straight" / "curves.csv");
    EXPECT_EQ(std::count(curves_a.begin(), curves_a.end(), '\n'), 9);  // header + 8 steps
    EXPECT_EQ(columns(curves_a), columns(read_file(split_dir / "straight" / "curves.csv")));
    // Each run's curves.svg has all 8 steps and both evaluations (steps 4 and 8); the resumed run's
    // image was drawn from the whole file, not from its own 3 steps.
    for (const fs::path& run : {dir / "straight", split_dir / "straight"}) {
        const test::SvgDocument svg = test::parse_svg(read_file(run / "curves.svg"));
        ASSERT_EQ(svg.error, "") << run;
        ASSERT_EQ(svg.with_class("train-loss").size(), 1u);
        ASSERT_EQ(svg.with_class("eval-bpb").size(), 1u);
        EXPECT_EQ(test::polyline_points(svg.with_class("train-loss")[0]).size(), 8u) << run;
        EXPECT_EQ(test::polyline_points(svg.with_class("eval-bpb")[0]).size(), 2u) << run;
        EXPECT_EQ(svg.with_class("title")[0].text, "run");  // the config's name
    }
}

// A run stopped between checkpoints left rows after its last one: --resume drops them from the file
// (the resumed run writes those steps again) and draws the plot from what remains plus its own steps.
TEST(CmdTrain, ResumeRewritesTheCurvesToTheCheckpoint) {
    const fs::path dir = make_run_dir("resume_rows", "out");
    const std::string cfg = "'" + (dir / "run.toml").string() + "'";
    const test::CommandResult first = test::run_deltabit("train -q --no-history --max-steps 3 " + cfg);
    ASSERT_EQ(first.exit_code, 0) << first.output;
    std::string curves = read_file(dir / "out" / "curves.csv");
    const size_t row3 = curves.find("\n3,");
    ASSERT_NE(row3, std::string::npos) << curves;
    // Steps 4 and 5 as if written by a run killed before its next checkpoint, the second cut mid-line.
    std::ofstream(dir / "out" / "curves.csv", std::ios::app) << "4,256,0.001,9.0,1,5,\n5,320,0.0";
    const test::CommandResult second = test::run_deltabit("train -q --no-history --resume " + cfg);
    ASSERT_EQ(second.exit_code, 0) << second.output;
    curves = read_file(dir / "out" / "curves.csv");
    EXPECT_EQ(std::count(curves.begin(), curves.end(), '\n'), 9) << curves;  // header + steps 1..8, once each
    EXPECT_EQ(curves.find("9.000000"), std::string::npos) << curves;
    const test::SvgDocument svg = test::parse_svg(read_file(dir / "out" / "curves.svg"));
    ASSERT_EQ(svg.error, "");
    EXPECT_EQ(test::polyline_points(svg.with_class("train-loss")[0]).size(), 8u);

    // A curves file that is not one is refused before any step, naming it and the line.
    std::ofstream(dir / "out" / "curves.csv") << "step,tokens,lr,loss,grad_norm,tokens_per_s,eval_bpb\n1,64,x,2,1,5,\n";
    const test::CommandResult bad = test::run_deltabit("train -q --no-history --resume " + cfg);
    EXPECT_EQ(bad.exit_code, 1);
    EXPECT_EQ(bad.output, "deltabit: error: train: --resume: " + (dir / "out" / "curves.csv").string() +
                              ": line 2: lr 'x' is not a number (fix or move the file: the resumed run appends to "
                              "it)\n");
}

// `deltabit train --plot` draws the shipped model's record: all 857 steps and its 5 evaluations.
TEST(CmdTrain, PlotDrawsACurvesFile) {
    const fs::path dir = fs::temp_directory_path() / "deltabit_test_cmd_train_plot";
    fs::remove_all(dir);
    fs::create_directories(dir);
    const std::string shipped = std::string(DELTABIT_SOURCE_DIR) + "/models/bytelm-hybrid-14m.curves.csv";
    const test::CommandResult run =
        test::run_deltabit("train --plot '" + shipped + "' -o '" + (dir / "out.svg").string() + "'");
    ASSERT_EQ(run.exit_code, 0) << run.output;
    EXPECT_NE(run.output.find("857 steps"), std::string::npos) << run.output;
    const test::SvgDocument svg = test::parse_svg(read_file(dir / "out.svg"));
    ASSERT_EQ(svg.error, "");
    EXPECT_EQ(test::polyline_points(svg.with_class("train-loss")[0]).size(), 857u);
    EXPECT_EQ(test::polyline_points(svg.with_class("eval-bpb")[0]).size(), 5u);
    EXPECT_EQ(svg.with_class("title")[0].text, "bytelm-hybrid-14m");
    // The committed image is this command's output for the committed record (drawn from the source
    // folder, so its subtitle names the file as models/...).
    std::string drawn = read_file(dir / "out.svg");
    drawn.replace(drawn.find(shipped), shipped.size(), "models/bytelm-hybrid-14m.curves.csv");
    EXPECT_EQ(drawn,
              read_file(fs::path(DELTABIT_SOURCE_DIR) / "models" / "bytelm-hybrid-14m.curves.svg"))
        << "models/bytelm-hybrid-14m.curves.svg is stale: redraw it with deltabit train --plot "
           "models/bytelm-hybrid-14m.curves.csv";

    // Default output: beside the CSV, .svg for .csv; the title from the run's folder.
    fs::create_directories(dir / "myrun");
    fs::copy_file(shipped, dir / "myrun" / "curves.csv");
    const test::CommandResult beside =
        test::run_deltabit("train -q --plot '" + (dir / "myrun" / "curves.csv").string() + "'");
    ASSERT_EQ(beside.exit_code, 0) << beside.output;
    EXPECT_EQ(beside.output, "");
    EXPECT_EQ(test::parse_svg(read_file(dir / "myrun" / "curves.svg")).with_class("title")[0].text, "myrun");
    const test::CommandResult to_stdout = test::run_deltabit("train --plot '" + shipped + "' -o - --title 'a & b'");
    ASSERT_EQ(to_stdout.exit_code, 0);
    EXPECT_EQ(test::parse_svg(to_stdout.output).with_class("title")[0].text, "a &amp; b");
}

TEST(CmdTrain, PlotErrorsNameTheFileAndTheProblem) {
    const fs::path dir = fs::temp_directory_path() / "deltabit_test_cmd_train_plot_bad";
    fs::remove_all(dir);
    fs::create_directories(dir);
    const test::CommandResult missing = test::run_deltabit("train --plot /nonexistent/curves.csv");
    EXPECT_EQ(missing.exit_code, 1);
    EXPECT_EQ(missing.output, "deltabit: error: train --plot: /nonexistent/curves.csv: no such file\n");
    const std::string header = "step,tokens,lr,loss,grad_norm,tokens_per_s,eval_bpb\n";
    std::ofstream(dir / "corrupt.csv") << header << "1,64,0.001,2.5,1,5,\n2,128,0.001,2.4,1,5\n";
    const test::CommandResult corrupt = test::run_deltabit("train --plot '" + (dir / "corrupt.csv").string() + "'");
    EXPECT_EQ(corrupt.exit_code, 1);
    EXPECT_EQ(corrupt.output, "deltabit: error: train --plot: " + (dir / "corrupt.csv").string() +
                                  ": line 3: 6 fields, the header has 7\n");
    std::ofstream(dir / "other.csv") << "a,b,c\n1,2,3\n";
    const test::CommandResult other = test::run_deltabit("train --plot '" + (dir / "other.csv").string() + "'");
    EXPECT_EQ(other.exit_code, 1);
    EXPECT_NE(other.output.find("other.csv: line 1: the header has no 'step' column"), std::string::npos)
        << other.output;
    std::ofstream(dir / "header.csv") << header;
    const test::CommandResult empty = test::run_deltabit("train --plot '" + (dir / "header.csv").string() + "'");
    EXPECT_EQ(empty.exit_code, 1);
    EXPECT_EQ(empty.output, "deltabit: error: train --plot: " + (dir / "header.csv").string() +
                                ": only the header, no steps yet: nothing to plot (the trainer writes a row per "
                                "step)\n");
    EXPECT_FALSE(fs::exists(dir / "header.svg"));
    std::ofstream(dir / "ok.csv") << header << "1,64,0.001,2.5,1,5,\n";
    fs::create_directories(dir / "folder.svg");
    const test::CommandResult folder = test::run_deltabit("train --plot '" + (dir / "ok.csv").string() + "' -o '" +
                                                          (dir / "folder.svg").string() + "'");
    EXPECT_EQ(folder.exit_code, 1);
    EXPECT_NE(folder.output.find("folder.svg is a folder, not a regular file"), std::string::npos) << folder.output;
    // Misuse: --plot with a config, -o without --plot, nothing at all.
    const test::CommandResult both = test::run_deltabit("train run.toml --plot '" + (dir / "ok.csv").string() + "'");
    EXPECT_EQ(both.exit_code, 1);
    EXPECT_EQ(both.output, "deltabit: error: train: --plot draws a curves file and trains nothing: config does not "
                           "go with it\n");
    const test::CommandResult resume = test::run_deltabit("train --resume --plot '" + (dir / "ok.csv").string() + "'");
    EXPECT_EQ(resume.output, "deltabit: error: train: --plot draws a curves file and trains nothing: --resume does "
                             "not go with it\n");
    const test::CommandResult stray = test::run_deltabit("train run.toml -o x.svg");
    EXPECT_EQ(stray.exit_code, 1);
    EXPECT_NE(stray.output.find("requires --plot"), std::string::npos) << stray.output;
    const test::CommandResult nothing = test::run_deltabit("train");
    EXPECT_EQ(nothing.exit_code, 1);
    EXPECT_NE(nothing.output.find("give the run's CONFIG.toml (or --plot CURVES.csv"), std::string::npos)
        << nothing.output;
}

// `deltabit eval` on the exported model gives the BPB the trainer printed for the same window.
TEST(CmdTrain, EvalOfTheExportEqualsTheTrainersNumber) {
    const fs::path dir = make_run_dir("eval", "out");
    const test::CommandResult run = test::run_deltabit("train -q --no-history '" + (dir / "run.toml").string() + "'");
    ASSERT_EQ(run.exit_code, 0) << run.output;
    const size_t at = run.output.find("held-out ");
    ASSERT_NE(at, std::string::npos) << run.output;
    const double trainer_bpb = std::stod(run.output.substr(at + 9));
    const test::CommandResult eval = test::run_deltabit("eval -q -m '" + (dir / "out" / "model.gguf").string() + "' '" +
                                                        (dir / "heldout.txt").string() + "' --seq-len 16 --bytes 64");
    ASSERT_EQ(eval.exit_code, 0) << eval.output;
    const double eval_bpb = std::stod(eval.output);
    // The engine's f32 forward against the trainer's double one on an F32 export: ~1e-6 (5 digits printed).
    EXPECT_NEAR(eval_bpb, trainer_bpb, 2e-5) << run.output << eval.output;
    EXPECT_NE(eval.output.find("over 63 predicted bytes"), std::string::npos) << eval.output;
}

// Each invocation appends one row of bench/history.tsv's 17 columns (a fresh file gets the header), and
// --backend overrides the config (cpu here; `cuda` is refused where there is no GPU or no CUDA build).
TEST(CmdTrain, AppendsItsThroughputToTheHistory) {
    const fs::path dir = make_run_dir("history", "out");
    const fs::path history = dir / "history.tsv";
    const test::CommandResult run = test::run_deltabit("train -q --backend cpu --commit abc1234 --history '" +
                                                       history.string() + "' '" + (dir / "run.toml").string() + "'");
    ASSERT_EQ(run.exit_code, 0) << run.output;
    EXPECT_NE(run.output.find("tokens/s"), std::string::npos) << run.output;
    const std::string text = read_file(history);
    ASSERT_EQ(std::count(text.begin(), text.end(), '\n'), 2) << text;
    EXPECT_EQ(text.rfind("date\tcommit\tgpu\tbench\t", 0), 0u) << text;
    const std::string row = text.substr(text.find('\n') + 1);
    EXPECT_EQ(std::count(row.begin(), row.end(), '\t'), 16) << row;
    EXPECT_NE(row.find("\tabc1234\tcpu reference\tdeltabit train\trun\t16\tf32-master\ttrain b2x16x2\t"),
              std::string::npos)
        << row;
}

// --profile N: W warm-up steps, then N steps timed (on the CPU backend, the wall clock around its
// phases), the table printed, the run stopped there with a checkpoint and no history row; misuse refused
// before anything is written.
TEST(CmdTrain, ProfilePrintsItsTableAndStops) {
    const fs::path dir = make_run_dir("profile", "out");
    const fs::path history = dir / "history.tsv";
    const std::string config = "'" + (dir / "run.toml").string() + "'";
    const test::CommandResult run = test::run_deltabit("train -q --backend cpu --profile 2 --profile-warmup 1 --history '" +
                                                       history.string() + "' " + config);
    ASSERT_EQ(run.exit_code, 0) << run.output;
    EXPECT_NE(run.output.find("train --profile: 2 steps of 2 × 16 tokens × 2 micro-batches after 1 warm-up step on cpu "
                              "reference; timed by the wall clock"),
              std::string::npos)
        << run.output;
    for (const char* row : {"\ncpu reference fwd+bwd ", "\noptimizer ", "\ntimed total ", "\nhost: data ",
                            "\nstep wall time (host) ", "\nnot in any span ",
                            "\nMFU's count "})
        EXPECT_NE(run.output.find(row), std::string::npos) << row << " in\n" << run.output;
    // The reference's call counts MFU's FLOPs and nothing else.
    EXPECT_NE(run.output.find("the spans executed 1.00× that\n"), std::string::npos) << run.output;
    EXPECT_NE(run.output.find("done at step 3:"), std::string::npos) << run.output;
    EXPECT_TRUE(fs::exists(dir / "out" / "checkpoint.bin"));
    EXPECT_FALSE(fs::exists(history)) << "a profiled run's throughput carries the timers' cost: no history row";

    const fs::path fresh = make_run_dir("profile_bad", "out");
    const std::string fresh_config = "'" + (fresh / "run.toml").string() + "'";
    const test::CommandResult both = test::run_deltabit("train --backend cpu --profile 2 --max-steps 3 " + fresh_config);
    EXPECT_EQ(both.exit_code, 1);
    EXPECT_EQ(std::count(both.output.begin(), both.output.end(), '\n'), 1) << both.output;
    EXPECT_NE(both.output.find("excludes"), std::string::npos) << both.output;
    const test::CommandResult too_late =
        test::run_deltabit("train -q --backend cpu --profile 1 --profile-warmup 8 " + fresh_config);
    EXPECT_EQ(too_late.exit_code, 1);
    EXPECT_EQ(too_late.output,
              "deltabit: error: train: --profile: the run is at step 0 of 8: no step is left after 8 warm-up steps\n");
    EXPECT_FALSE(fs::exists(fresh / "out" / "curves.csv"));
}

TEST(CmdTrain, BadUseIsOneLine) {
    const fs::path dir = make_run_dir("bad", "out");
    const test::CommandResult missing = test::run_deltabit("train /nonexistent/run.toml");
    EXPECT_EQ(missing.exit_code, 1);
    EXPECT_EQ(missing.output, "deltabit: error: train: /nonexistent/run.toml: cannot open the config file\n");
    const test::CommandResult no_checkpoint =
        test::run_deltabit("train --resume '" + (dir / "run.toml").string() + "'");
    EXPECT_EQ(no_checkpoint.exit_code, 1);
    EXPECT_NE(no_checkpoint.output.find("--resume: "), std::string::npos) << no_checkpoint.output;
    EXPECT_NE(no_checkpoint.output.find("does not exist"), std::string::npos) << no_checkpoint.output;
    std::ofstream(dir / "bad.toml") << "[run]\nsteps = 0\n[data]\ntrain = \"a\"\nheldout = \"b\"\n";
    const test::CommandResult bad = test::run_deltabit("train '" + (dir / "bad.toml").string() + "'");
    EXPECT_EQ(bad.exit_code, 1);
    EXPECT_NE(bad.output.find("run.steps: must be ≥ 1, got 0"), std::string::npos) << bad.output;
}

}  // namespace
}  // namespace deltabit
