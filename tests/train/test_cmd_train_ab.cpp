// `deltabit train-ab` as a user runs it: two real configs, three seeds, six real training runs on the CPU
// reference. The table holds each run's own final held-out bpb, the seed reaches each run (different seeds,
// different results), the verdict follows the numbers, a second invocation trains nothing and prints the
// same table, and misuse is refused with one line.
#include "cli_command.h"
#include "tiny_model_section.h"

#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>
#include <sstream>
#include <string>
#include <vector>

namespace deltabit {
namespace {

namespace fs = std::filesystem;

std::string read_file(const fs::path& path) {
    std::ifstream in(path, std::ios::binary);
    return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

std::string config(double lr) {
    return std::string(test::kTinyModelSection) + R"([data]
train = "train.txt"
heldout = "heldout.txt"
[run]
seq_len = 16
batch = 2
steps = 6
out_dir = "unused"
[optimizer]
lr = )" + std::to_string(lr) +
           R"(
min_lr = 1e-4
warmup_steps = 1
[eval]
every = 3
bytes = 64
[checkpoint]
every = 3
)";
}

fs::path make_dir(const std::string& name) {
    const fs::path dir = fs::temp_directory_path() / ("deltabit_test_train_ab_" + name);
    fs::remove_all(dir);
    fs::create_directories(dir);
    std::string text;
    for (int i = 0; i < 30; ++i) text += "the cat sat on the mat, the dog sat on the log.\n";
    std::ofstream(dir / "train.txt") << text;
    std::ofstream(dir / "heldout.txt") << text.substr(0, 100);
    std::ofstream(dir / "slow.toml") << config(1e-3);
    std::ofstream(dir / "fast.toml") << config(2e-2);
    return dir;
}

// The last eval_bpb of a curves.csv (its header names the column).
double last_eval_bpb(const fs::path& curves) {
    std::istringstream in(read_file(curves));
    std::string line, last;
    std::getline(in, line);
    std::vector<std::string> header;
    {
        std::istringstream h(line);
        for (std::string cell; std::getline(h, cell, ',');) header.push_back(cell);
    }
    while (std::getline(in, line))
        if (!line.empty()) last = line;
    std::istringstream row(last);
    std::vector<std::string> cells;
    for (std::string cell; std::getline(row, cell, ',');) cells.push_back(cell);
    for (size_t i = 0; i < header.size() && i < cells.size(); ++i)
        if (header[i] == "eval_bpb") return std::stod(cells[i]);
    ADD_FAILURE() << curves << " has no eval_bpb in its last row: " << last;
    return NAN;
}

struct TsvRow {
    double a, b, d;
};

std::map<int, TsvRow> read_tsv(const fs::path& path, std::string& verdict) {
    std::map<int, TsvRow> rows;
    std::istringstream in(read_file(path));
    std::string line;
    std::getline(in, line);  // header
    while (std::getline(in, line)) {
        if (line.rfind("#", 0) == 0) {
            verdict = line;
            continue;
        }
        std::istringstream cells(line);
        int seed;
        TsvRow r;
        cells >> seed >> r.a >> r.b >> r.d;
        rows[seed] = r;
    }
    return rows;
}

TEST(CmdTrainAb, SixRunsTheirOwnNumbersAndAVerdictThatFollowsThem) {
    const fs::path dir = make_dir("six");
    const std::string cmd = "train-ab -q '" + (dir / "slow.toml").string() + "' '" + (dir / "fast.toml").string() +
                            "' --seeds 1,2,3 --backend cpu -o '" + (dir / "ab").string() + "'";
    const test::CommandResult r = test::run_deltabit(cmd);
    ASSERT_EQ(r.exit_code, 0) << r.output;

    std::string verdict;
    const std::map<int, TsvRow> rows = read_tsv(dir / "ab" / "ab.tsv", verdict);
    ASSERT_EQ(rows.size(), 3u) << read_file(dir / "ab" / "ab.tsv");
    int b_wins = 0;
    for (const auto& [seed, row] : rows) {
        SCOPED_TRACE("seed " + std::to_string(seed));
        const fs::path a_run = dir / "ab" / ("a-slow-seed" + std::to_string(seed));
        const fs::path b_run = dir / "ab" / ("b-fast-seed" + std::to_string(seed));
        // Each figure is that run's own last evaluation, and each run is a whole run with its export.
        EXPECT_NEAR(row.a, last_eval_bpb(a_run / "curves.csv"), 1e-6);
        EXPECT_NEAR(row.b, last_eval_bpb(b_run / "curves.csv"), 1e-6);
        EXPECT_NEAR(row.d, row.b - row.a, 2e-6);
        EXPECT_TRUE(fs::exists(a_run / "model.gguf"));
        EXPECT_TRUE(fs::exists(b_run / "model.gguf"));
        // The run's own config names its seed and absolute data paths.
        const std::string text = read_file(a_run / "config.toml");
        EXPECT_NE(text.find("seed = " + std::to_string(seed)), std::string::npos) << text;
        EXPECT_NE(text.find((dir / "train.txt").string()), std::string::npos) << text;
        b_wins += row.d < 0;
    }
    // The seed reaches the run: another initialisation, another result.
    EXPECT_NE(rows.at(1).a, rows.at(2).a);
    EXPECT_NE(rows.at(2).a, rows.at(3).a);
    const std::string expected = b_wins == 3 ? "keep B (fast)" : "keep A (slow)";
    EXPECT_NE(verdict.find(expected), std::string::npos) << verdict;
    EXPECT_NE(r.output.find("verdict: " + expected), std::string::npos) << r.output;

    // Again: nothing is trained, the same table comes out.
    const test::CommandResult again = test::run_deltabit(cmd);
    ASSERT_EQ(again.exit_code, 0) << again.output;
    size_t finished = 0;
    for (size_t at = again.output.find("finished earlier"); at != std::string::npos;
         at = again.output.find("finished earlier", at + 1))
        ++finished;
    EXPECT_EQ(finished, 6u) << again.output;
    std::string verdict_again;
    const std::map<int, TsvRow> rows_again = read_tsv(dir / "ab" / "ab.tsv", verdict_again);
    for (const auto& [seed, row] : rows) EXPECT_EQ(rows_again.at(seed).a, row.a);
    EXPECT_EQ(verdict_again, verdict);
    fs::remove_all(dir);
}

TEST(CmdTrainAb, FewerThanThreeSeedsDecideNothing) {
    const fs::path dir = make_dir("one");
    const test::CommandResult r = test::run_deltabit("train-ab -q '" + (dir / "slow.toml").string() + "' '" +
                                                     (dir / "fast.toml").string() + "' --seeds 5 --backend cpu -o '" +
                                                     (dir / "ab").string() + "'");
    ASSERT_EQ(r.exit_code, 0) << r.output;
    EXPECT_NE(r.output.find("no decision: 1 seed (the protocol needs 3 or more)"), std::string::npos) << r.output;
    fs::remove_all(dir);
}

TEST(CmdTrainAb, MisuseIsRefusedInOneLine) {
    const fs::path dir = make_dir("misuse");
    const std::string a = "'" + (dir / "slow.toml").string() + "'", b = "'" + (dir / "fast.toml").string() + "'";
    const std::string out = " -o '" + (dir / "ab").string() + "'";
    auto refused = [&](const std::string& args, const std::string& message) {
        const test::CommandResult r = test::run_deltabit("train-ab " + args);
        EXPECT_NE(r.exit_code, 0) << args;
        EXPECT_NE(r.output.find(message), std::string::npos) << args << "\n" << r.output;
    };
    refused(a + " " + a + out, "are the same config: nothing to compare");
    refused(a + " " + b + " --seeds 1,x" + out, "--seeds \"1,x\": expected whole numbers");
    refused(a + " " + b + " --seeds 2,2" + out, "a seed is given twice");
    refused(a + " '" + (dir / "missing.toml").string() + "'" + out, "missing.toml");
    // A folder that holds a run of another config is not overwritten.
    fs::create_directories(dir / "ab" / "a-slow-seed1");
    std::ofstream(dir / "ab" / "a-slow-seed1" / "config.toml") << "something else\n";
    refused(a + " " + b + " --seeds 1,2,3 --backend cpu" + out, "holds a run of another config or seed");
    EXPECT_EQ(read_file(dir / "ab" / "a-slow-seed1" / "config.toml"), "something else\n");
    fs::remove_all(dir);
}

}  // namespace
}  // namespace deltabit
