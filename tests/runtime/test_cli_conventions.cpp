// The command line's conventions, through the real `deltabit` binary: usage errors are one line
// "deltabit: error: ..." with exit code 1 (README), every sampling flag is range-checked naming its
// range, the default seed is random and reported, the model is named the same way on every command,
// and prompts come from -p, -f or --ids with empty or malformed ones refused.
#include "byte_tokenizer_model.h"
#include "cli_command.h"
#include "formats/gguf.h"
#include "non_finite_logits_model.h"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <regex>
#include <set>
#include <string>
#include <vector>

namespace deltabit {
namespace {

namespace fs = std::filesystem;
using test::CommandResult;

size_t line_count(const std::string& s) { return size_t(std::count(s.begin(), s.end(), '\n')); }

// One line on stderr, "deltabit: error: ", exit 1, mentioning every piece of `expected`.
void expect_usage_error(const std::string& args, const std::vector<std::string>& expected) {
    const CommandResult r = test::run_deltabit(args);
    EXPECT_EQ(r.exit_code, 1) << args << "\n" << r.output;
    EXPECT_EQ(line_count(r.output), 1u) << args << "\n" << r.output;
    EXPECT_TRUE(r.output.starts_with("deltabit: error: ")) << args << "\n" << r.output;
    for (const std::string& piece : expected) EXPECT_NE(r.output.find(piece), std::string::npos) << args << "\n" << r.output;
}

const std::string kModel = test::kBinaryFixture.string();

// `deltabit` alone (a new user's first try) prints the help with every command, and exits 1: nothing ran.
TEST(CliConventions, NoCommandPrintsTheHelp) {
    const CommandResult r = test::run_deltabit("", test::Stderr::discard);
    EXPECT_EQ(r.exit_code, 1) << r.output;
    EXPECT_NE(r.output.find("Usage: deltabit [OPTIONS] SUBCOMMAND"), std::string::npos) << r.output;
    for (const char* command : {"info", "convert", "bench", "eval", "logits"})
        EXPECT_NE(r.output.find(std::string("\n  ") + command + " "), std::string::npos) << command << "\n" << r.output;
}

TEST(CliConventions, ParseErrorsAreOneLineWithExitCodeOne) {
    expect_usage_error("info", {"no model given"});
    expect_usage_error("info --frobnicate " + kModel, {"--frobnicate", "deltabit info --help"});
    expect_usage_error("logits -m " + kModel + " --ids 1", {"--output", "required"});
    expect_usage_error("convert " + kModel, {"--output", "required"});
    expect_usage_error("bench --kv", {"--kv"});
    expect_usage_error("info " + kModel + " -m " + kModel, {"excludes"});
    expect_usage_error("frobnicate", {"unknown command"});
    // A value the flag's type cannot hold names the flag, the value and what it takes (CLI11 alone says
    // "Could not convert: --steps = 1.5"); a whole-number floor names the floor, in the same words on
    // every CLI11 release (CLI::Range's changed between Debian 12's and Ubuntu 24.04's).
    expect_usage_error("bench --steps 1.5", {"--steps: \"1.5\" is not a whole number"});
    expect_usage_error("eval -m " + kModel + " text.txt --bytes 0", {"--bytes: 0 is less than 1"});
}

#ifdef DELTABIT_HAVE_TEXT

TEST(CliConventions, EverySamplingFlagIsRangeChecked) {
    const std::string run = "run -m " + kModel + " --ids 1,2 --max-tokens 1 ";
    struct Case {
        std::string flag, value, range;
    };
    const std::vector<Case> cases = {
        {"--temperature", "nan", "at least 0"},        {"--temperature", "inf", "at least 0"},
        {"--temperature", "-0.5", "at least 0"},       {"--temperature", "warm", "not a number"},
        {"--top-p", "0", "in (0, 1]"},                 {"--top-p", "1.5", "in (0, 1]"},
        {"--min-p", "1", "in [0, 1)"},                 {"--min-p", "-0.1", "in [0, 1)"},
        {"--top-k", "-1", "at least 0"},               {"--repeat-penalty", "0", "greater than 0"},
        {"--repeat-penalty", "-1", "greater than 0"},  {"--dry-multiplier", "-1", "at least 0"},
        {"--dry-base", "0.5", "at least 1"},           {"--dry-allowed-length", "0", "at least 1"},
        {"--dry-window", "-3", "at least 0"},          {"--penalty-last-n", "-2", "at least -1"},
        {"--presence-penalty", "nan", "a finite number"}, {"--frequency-penalty", "inf", "a finite number"},
        {"--seed", "-1", "0 .. 18446744073709551615"}, {"--seed", "18446744073709551616", "0 .. 18446744073709551615"},
        {"--threads", "0", "1 .. 1024"},
    };
    for (const Case& c : cases) expect_usage_error(run + c.flag + " " + c.value, {c.flag, c.value, c.range});
    // The same table serves chat.
    expect_usage_error("chat -m " + kModel + " --top-p 2", {"--top-p", "in (0, 1]"});
}

TEST(CliConventions, ValidSamplingFlagsAreAccepted) {
    const CommandResult r = test::run_deltabit(
        "run -m " + kModel +
            " --ids 1,2 --max-tokens 2 --backend cpu --temperature 0.7 --top-k 0 --top-p 1 --min-p 0 --repeat-penalty 1.1"
            " --presence-penalty -0.5 --frequency-penalty 0.5 --penalty-last-n -1 --dry-multiplier 0.8 --dry-base 1.75"
            " --dry-allowed-length 2 --dry-window 0 --seed 18446744073709551615 --threads 2 --json",
        test::Stderr::discard);
    ASSERT_EQ(r.exit_code, 0) << r.output;
    EXPECT_EQ(nlohmann::json::parse(r.output).at("seed").get<uint64_t>(), 18446744073709551615ull);
}

// Without --seed every run draws a new seed and reports it; giving it back repeats the run.
TEST(CliConventions, DefaultSeedIsRandomAndReported) {
    const std::string args = "run -m " + kModel + " --ids 5,61,200,7 --max-tokens 24 --backend cpu --json";
    std::set<uint64_t> seeds;
    std::set<std::vector<int32_t>> outputs;
    nlohmann::json first;
    for (int i = 0; i < 3; ++i) {
        const CommandResult r = test::run_deltabit(args, test::Stderr::discard);
        ASSERT_EQ(r.exit_code, 0) << r.output;
        const nlohmann::json j = nlohmann::json::parse(r.output);
        if (i == 0) first = j;
        seeds.insert(j.at("seed").get<uint64_t>());
        outputs.insert(j.at("tokens").get<std::vector<int32_t>>());
    }
    EXPECT_EQ(seeds.size(), 3u);
    // 24 tokens at temperature 0.8 from a random model's wide distribution: three equal runs would
    // mean the seed did not reach the sampler.
    EXPECT_GT(outputs.size(), 1u);
    const CommandResult again =
        test::run_deltabit(args + " --seed " + std::to_string(first.at("seed").get<uint64_t>()), test::Stderr::discard);
    ASSERT_EQ(again.exit_code, 0) << again.output;
    EXPECT_EQ(nlohmann::json::parse(again.output).at("tokens"), first.at("tokens"));
}

TEST(CliConventions, PromptsEmptyMalformedAndFromAFile) {
    const fs::path dir = test::test_scratch_dir("deltabit_test_cli_conventions");
    const std::string model =
        test::byte_tokenizer_model(dir / "hf", "{% for m in messages %}<{{ m['content'] }}>{% endfor %}").string();
    const std::string run = "run -m " + model + " --max-tokens 2 --temperature 0 --backend cpu ";

    expect_usage_error(run + "-p ''", {"-p", "the prompt is empty"});
    expect_usage_error(run + "--ids 1,,2", {"--ids", "no id before the comma at character 3"});
    expect_usage_error(run + "--ids 1,2,", {"--ids", "no id after the comma"});
    expect_usage_error(run + "--ids ,1", {"--ids", "no id before the comma at character 1"});
    expect_usage_error(run, {"exactly one of -p TEXT, -f FILE or --ids"});
    const fs::path empty = dir / "empty.txt";
    std::ofstream(empty).close();
    expect_usage_error(run + "-f " + empty.string(), {empty.string(), "the file is empty"});
    expect_usage_error(run + "-f " + dir.string(), {dir.string(), "is a folder"});
    expect_usage_error(run + "-f " + (dir / "missing.txt").string(), {"missing.txt: no such file"});

    const fs::path prompt = dir / "prompt.txt";
    std::ofstream(prompt) << "ab\ncd";
    const CommandResult from_file = test::run_deltabit(run + "-f " + prompt.string() + " --json", test::Stderr::discard);
    const CommandResult inline_text = test::run_deltabit(run + "-p \"$(printf 'ab\\ncd')\" --json", test::Stderr::discard);
    ASSERT_EQ(from_file.exit_code, 0) << from_file.output;
    ASSERT_EQ(inline_text.exit_code, 0) << inline_text.output;
    EXPECT_EQ(nlohmann::json::parse(from_file.output).at("prompt_tokens"), 7);  // "<ab\ncd>"
    EXPECT_EQ(nlohmann::json::parse(from_file.output).at("tokens"), nlohmann::json::parse(inline_text.output).at("tokens"));
}

TEST(CliConventions, HelpStatesTheDefaults) {
    for (const std::string& command : {"run", "chat"}) {
        const CommandResult r = test::run_deltabit(command + " --help");
        ASSERT_EQ(r.exit_code, 0) << r.output;
        // CLI11 prints a default after the flag as TYPE=VALUE (Debian 12's 2.3) or TYPE [VALUE] (2.4, as on
        // Ubuntu 24.04): both are brought to the first form. The rest say "default: ..." in words.
        const std::string help = std::regex_replace(r.output, std::regex(R"((\S) \[([^\]\s]*)\])"), "$1=$2");
        for (const std::string& piece : {"--temperature FLOAT=0.8", "--top-k INT=40", "--top-p FLOAT=0.95",
                                         "--min-p FLOAT=0.05", "--repeat-penalty FLOAT=1", "--dry-multiplier FLOAT=0",
                                         "--dry-base FLOAT=1.75", "--dry-allowed-length INT=6", "--dry-window INT=256",
                                         "--penalty-last-n INT=64", "--presence-penalty FLOAT=0",
                                         "--frequency-penalty FLOAT=0", "default: a random one", "--threads",
                                         "default: every core", "{cpu,cuda,auto}=auto", "{f32,f16,kivi4}=f32",
                                         "--ctx INT", "default: the model's training context"})
            EXPECT_NE(help.find(piece), std::string::npos) << command << " --help lacks " << piece << "\n" << r.output;
    }
}

#endif

// A GGUF with one NaN weight (an f32 file, a q1_0 file with a NaN block scale) is refused at load,
// naming the tensor and element, instead of generating tokens with exit code 0.
TEST(CliConventions, NonFiniteWeightsAreRefusedAtLoad) {
    const fs::path dir = test::test_scratch_dir("deltabit_test_cli_nan_weights");
    for (const std::string type : {"f32", "q1_0"}) {
        const fs::path file = test::nan_weight_model(dir, type);
        const std::string element = type == "f32" ? "element 3 " : "element 0 ";
        expect_usage_error("run -m " + file.string() + " --ids 1,2 --max-tokens 2 --backend cpu",
                           {"tensor blk.1.ffn_down.weight: " + element + "is not finite"});
    }
}

// Finite weights whose logits overflow a few tokens in (runtime/non_finite_logits_model.h): generation
// stops with one line naming the token, its position and the value, exit code 1, greedy or sampled —
// not tokens and exit code 0. tests/cuda/test_non_finite_cuda.cpp holds the GPU its twin.
TEST(CliConventions, NonFiniteLogitsStopGeneration) {
    const fs::path file = test::non_finite_logits_model(test::test_scratch_dir("deltabit_test_cli_nan_logits"));
    for (const std::string sampling : {"--temperature 0", "--temperature 0.8 --seed 5"}) {
        const std::string args =
            "run -m " + file.string() + " --ids 1,2 --max-tokens 200 --json --quiet --backend cpu " + sampling;
        const CommandResult r = test::run_deltabit(args);
        EXPECT_EQ(r.exit_code, 1) << args << "\n" << r.output;
        EXPECT_EQ(line_count(r.output), 1u) << args << "\n" << r.output;
        std::smatch m;
        ASSERT_TRUE(std::regex_search(r.output, m, std::regex(std::string("^deltabit: error: ") +
                                                              test::kNonFiniteLogitPattern + "\n$")))
            << args << "\n" << r.output;
        EXPECT_GT(std::stoll(m[2]), 4) << "the logits broke on the prompt, not in generation: " << r.output;
    }
}

TEST(CliConventions, ModelByFlagOnEveryCommand) {
    const CommandResult positional = test::run_deltabit("info " + kModel + " --json", test::Stderr::discard);
    const CommandResult flag = test::run_deltabit("info -m " + kModel + " --json", test::Stderr::discard);
    ASSERT_EQ(positional.exit_code, 0) << positional.output;
    ASSERT_EQ(flag.exit_code, 0) << flag.output;
    EXPECT_EQ(positional.output, flag.output);

    const fs::path dir = test::test_scratch_dir("deltabit_test_cli_model_flag");
    const CommandResult convert =
        test::run_deltabit("convert -m " + kModel + " -o " + (dir / "m.gguf").string() + " --type q1_0 --quiet");
    ASSERT_EQ(convert.exit_code, 0) << convert.output;
    EXPECT_TRUE(fs::is_regular_file(dir / "m.gguf"));
}

}  // namespace
}  // namespace deltabit
