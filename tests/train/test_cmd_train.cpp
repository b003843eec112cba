// `deltabit train` as a user runs it: a real process on real files. A run stopped with --max-steps and
// continued with --resume ends with the same checkpoint, byte for byte, as the run made in one go; the
// curves file has every step; misuse is refused with one line.
#include "cli_command.h"

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

fs::path make_run_dir(const std::string& name, const std::string& out_dir) {
    const fs::path dir = fs::temp_directory_path() / ("deltabit_test_cmd_train_" + name);
    fs::remove_all(dir);
    fs::create_directories(dir);
    std::string text;
    for (int i = 0; i < 30; ++i) text += "a rose is a rose is a rose.\n";
    std::ofstream(dir / "train.txt") << text;
    std::ofstream(dir / "heldout.txt") << text.substr(0, 80);
    std::ofstream(dir / "run.toml") << R"([model]
hidden = 16
layers = 2
full_attention_interval = 2
heads = 2
kv_heads = 1
head_dim = 8
ffn = 24
deltanet_key_heads = 1
deltanet_value_heads = 2
deltanet_key_dim = 4
deltanet_value_dim = 8
[data]
train = "train.txt"
heldout = "heldout.txt"
[run]
seq_len = 16
batch = 2
grad_accum = 2
steps = 8
out_dir = ")" + out_dir + R"("
[optimizer]
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
