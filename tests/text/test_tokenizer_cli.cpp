// `deltabit tokenize` / `deltabit detokenize` as a user runs them, on a hand-made tokenizer.json.
#include "cli_command.h"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <random>

#include <sys/wait.h>

namespace {

namespace fs = std::filesystem;

struct Result {
    int status;
    std::string out;
};

// Runs `deltabit ARGS`, with `stdin_file` as its input when given; stdout and stderr together.
Result run(const std::string& args, const fs::path& stdin_file = "/dev/null") {
    const deltabit::test::CommandResult r =
        deltabit::test::run_deltabit(args, deltabit::test::Stderr::merge, stdin_file.string());
    return {r.exit_code, r.output};
}

class TokenizeCli : public ::testing::Test {
protected:
    void SetUp() override {
        dir_ = fs::temp_directory_path() / ("deltabit-cli-" + std::to_string(std::random_device{}()));
        fs::create_directories(dir_);
        // Byte-level: ids h0 i1 Ġ2 hi3 Ġhi4; merges (h,i) then (Ġ,hi); added <|end|> = 5 (special).
        const nlohmann::json j = {
            {"pre_tokenizer", {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"use_regex", true}}},
            {"decoder", {{"type", "ByteLevel"}}},
            {"model", {{"type", "BPE"},
                       {"vocab", {{"h", 0}, {"i", 1}, {"\xC4\xA0", 2}, {"hi", 3}, {"\xC4\xA0hi", 4}}},
                       {"merges", {"h i", "\xC4\xA0 hi"}}}},
            {"added_tokens", {{{"id", 5}, {"content", "<|end|>"}, {"special", true}, {"normalized", false}}}},
        };
        std::ofstream(dir_ / "tokenizer.json") << j.dump();
    }
    void TearDown() override { fs::remove_all(dir_); }
    fs::path dir_;
};

TEST_F(TokenizeCli, TokenizeFolderPrintsIds) {
    const Result r = run("tokenize -m " + dir_.string() + " 'hi hi<|end|>'");
    EXPECT_EQ(r.status, 0) << r.out;
    EXPECT_EQ(r.out, "3 4 5\n");
}

TEST_F(TokenizeCli, TokenizeStdinPrintsPieces) {
    std::ofstream(dir_ / "input.txt") << " hi";
    const Result r = run("tokenize --pieces -m " + (dir_ / "tokenizer.json").string(), dir_ / "input.txt");
    EXPECT_EQ(r.status, 0) << r.out;
    EXPECT_EQ(r.out, "4\t\"\xC4\xA0hi\"\n");  // id, tab, the vocabulary spelling as JSON
}

TEST_F(TokenizeCli, DetokenizeRoundTrips) {
    EXPECT_EQ(run("detokenize -m " + dir_.string() + " 3 4 5").out, "hi hi<|end|>");
    EXPECT_EQ(run("detokenize --skip-special -m " + dir_.string() + " 3 4 5").out, "hi hi");
    std::ofstream(dir_ / "ids.txt") << "[3, 4,\n5]\n";
    EXPECT_EQ(run("detokenize -m " + dir_.string(), dir_ / "ids.txt").out, "hi hi<|end|>");
}

TEST_F(TokenizeCli, BadIdIsAnErrorNamingIt) {
    const Result r = run("detokenize -m " + dir_.string() + " 3 99");
    EXPECT_EQ(r.status, 1);
    EXPECT_NE(r.out.find("token id 99 is outside the vocabulary (size 6)"), std::string::npos) << r.out;
}

}  // namespace
