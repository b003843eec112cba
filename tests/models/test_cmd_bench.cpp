// `deltabit bench` from the command line, on any machine: argument errors name what is wrong, without a
// GPU a CUDA bench says so and fails (pointing at --backend cpu), and the CPU bench runs and appends its
// rows. The GPU run itself is tested in tests/cuda/test_cmd_bench_cuda.cpp.
#include "cli_command.h"
#include "fixture.h"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

#ifdef DELTABIT_HAVE_CUDA
#include "backend/cuda_probe.h"
#endif

namespace deltabit {
namespace {

using test::run_deltabit;

bool gpu_present() {
#ifdef DELTABIT_HAVE_CUDA
    return cuda::device_count() > 0;
#else
    return false;
#endif
}

TEST(BenchCli, UnknownGeometryIsNamedWithTheKnownOnes) {
    const auto r = run_deltabit("bench --geometry bonsai-5b --no-history");
    EXPECT_EQ(r.exit_code, 1);
    EXPECT_NE(r.output.find("unknown geometry 'bonsai-5b'"), std::string::npos) << r.output;
    EXPECT_NE(r.output.find("bonsai-27b, bonsai-8b, bonsai-4b, qwen35-0.8b"), std::string::npos) << r.output;
}

TEST(BenchCli, NeedsExactlyOneOfModelAndGeometry) {
    for (const char* args : {"bench --no-history", "bench -m x.gguf --geometry bonsai-4b --no-history"}) {
        const auto r = run_deltabit(args);
        EXPECT_EQ(r.exit_code, 1) << args;
        EXPECT_NE(r.output.find("exactly one of -m MODEL or --geometry NAME"), std::string::npos) << r.output;
    }
}

// `deltabit <args>` exits 1 with `message` in its output.
void expect_refused(const std::string& args, const std::string& message) {
    const auto r = run_deltabit(args);
    EXPECT_EQ(r.exit_code, 1) << args;
    EXPECT_NE(r.output.find(message), std::string::npos) << args << "\n" << r.output;
}

TEST(BenchCli, BadListsAndFormatsAreRefusedBeforeAnyWork) {
    expect_refused("bench --geometry tiny-qwen3 --depths 0,,8 --no-history", "--depths \"0,,8\"");
    expect_refused("bench --geometry tiny-qwen3 --prompts 1 --no-history", "below the minimum 2");
    expect_refused("bench --geometry tiny-qwen3 --first-tokens 2,0 --no-history",
                   "--first-tokens \"2,0\": 0 is below the minimum 1");
    expect_refused("bench --geometry tiny-qwen3 --max-seconds 0 --no-history",
                   "--max-seconds 0: must be a positive number of seconds");
    expect_refused("bench --geometry tiny-qwen3 --kv q8 --no-history", "expected f32, f16 or kivi4");
}

TEST(BenchCli, ListsMayBeSpaceSeparated) {
    // Several values after the option are one list, as the comma-separated form is: a bad one is named
    // within the whole list, and a good list gets past the checks (without a GPU, to the GPU check).
    expect_refused("bench --geometry tiny-qwen3 --depths 0 x 8 --no-history", "--depths \"0,x,8\"");
    expect_refused("bench --geometry tiny-qwen3 --prompts 512 1 --no-history",
                   "--prompts \"512,1\": 1 is below the minimum 2");
    if (gpu_present()) return;  // the bench would run
    expect_refused("bench --geometry tiny-qwen3 --depths 0 8 --prompts 2,16 64 --no-history", "give --backend cpu");
}

TEST(BenchCli, WithoutAGpuItSaysSoAndFails) {
    if (gpu_present()) GTEST_SKIP() << "this machine has a GPU: the bench would run";
    expect_refused("bench --geometry tiny-qwen3 --no-history", "give --backend cpu");
    expect_refused("bench --geometry tiny-diffusiongemma --no-history", "give --backend cpu");
}

TEST(BenchCli, CpuArgumentsAreChecked) {
    expect_refused("bench --geometry tiny-qwen3 --backend cpu --first-tokens 2 --no-history",
                   "the CPU bench has no time-to-first-token test");
    expect_refused("bench --geometry tiny-qwen3 --backend cpu --threads -1 --no-history", "--threads -1");
    expect_refused("bench --geometry tiny-qwen3 --backend cpu --decode-tokens 0 --no-history", "--decode-tokens 0");
    expect_refused("bench --geometry tiny-qwen3 --backend cpu --prompt-depths 4096 --no-history",
                   "the CPU bench has no prompt-at-depth test");
    expect_refused("bench --geometry tiny-qwen3 --prompt-depths 4k --no-history", "--prompt-depths \"4k\"");
}

// The CPU bench on a tiny geometry: both tests measured, decode read against the copy bandwidth, the fast
// path counted (STYLE habit 16), one history row per test saying backend cpu and the threads.
TEST(BenchCli, CpuBenchMeasuresAndAppendsRows) {
    const std::filesystem::path history = std::filesystem::temp_directory_path() / "deltabit_test_cpu_bench.tsv";
    std::filesystem::remove(history);
    const auto r = run_deltabit("bench --geometry tiny-qwen3 --backend cpu --threads 2 --prompts 16 --decode-tokens 8 "
                                "--json --commit test --history " + history.string(),
                                test::Stderr::discard);
    ASSERT_EQ(r.exit_code, 0) << r.output;
    const nlohmann::json report = nlohmann::json::parse(r.output);
    ASSERT_EQ(report["measurements"].size(), 2u) << r.output;
    EXPECT_EQ(report["measurements"][0]["test"], "pp16");
    EXPECT_EQ(report["measurements"][1]["test"], "tg8");
    for (const auto& m : report["measurements"]) EXPECT_GT(m["tokens_per_s"].get<double>(), 0.0) << m.dump();
    EXPECT_GT(report["measurements"][1]["pct_of_copy_bandwidth"].get<double>(), 0.0);
    const std::string path = report["decode_path"].get<std::string>();
    EXPECT_NE(path.find("2 threads"), std::string::npos) << path;
    EXPECT_EQ(path.find("products: 0 int8"), std::string::npos) << "the int8 fast path did not run: " << path;

    std::ifstream in(history);
    std::stringstream text;
    text << in.rdbuf();
    const std::string rows = text.str();
    EXPECT_NE(rows.find("\tcpu "), std::string::npos) << rows;
    EXPECT_NE(rows.find("backend cpu, threads 2"), std::string::npos) << rows;
    EXPECT_NE(rows.find("\ttg8\t"), std::string::npos) << rows;
    std::filesystem::remove(history);
}

TEST(BenchCli, DiffusionArgumentsAreChecked) {
    expect_refused("bench --geometry tiny-diffusiongemma --backend cpu --depths 0 --no-history",
                   "--depths does not apply to a block-diffusion model");
    expect_refused("bench --geometry tiny-diffusiongemma --backend cpu --kv f16 --no-history",
                   "--kv does not apply to a block-diffusion model");
    expect_refused("bench --geometry tiny-diffusiongemma --backend cpu --serve --no-history",
                   "--serve does not apply to a block-diffusion model");
    expect_refused("bench --geometry tiny-diffusiongemma --backend cpu --prompts 8,16 --no-history",
                   "give one prompt length");
    expect_refused("bench --geometry tiny-diffusiongemma --backend cpu --steps 0 --no-history", "--steps 0");
    expect_refused("bench --geometry tiny-qwen3 --backend cpu --steps 3 --no-history", "--steps is a block-diffusion");
    expect_refused("bench --geometry tiny-diffusiongemma --backend cpu --type q1_0 --no-history",
                   "choose a type with smaller blocks");
}

// A diffusion geometry on the CPU: the prompt's encoding and the block loop measured, every block at the
// --steps given (random weights never reach the confidence threshold), each step read against its floor,
// one history row per test.
TEST(BenchCli, DiffusionBenchMeasuresTheBlockLoop) {
    const std::filesystem::path history = std::filesystem::temp_directory_path() / "deltabit_test_diffusion_bench.tsv";
    std::filesystem::remove(history);
    const auto r = run_deltabit("bench --geometry tiny-diffusiongemma --backend cpu --prompts 12 --steps 3 --json "
                                "--commit test --history " + history.string(),
                                test::Stderr::discard);
    ASSERT_EQ(r.exit_code, 0) << r.output;
    const nlohmann::json report = nlohmann::json::parse(r.output);
    ASSERT_EQ(report["measurements"].size(), 2u) << r.output;
    const nlohmann::json& encode = report["measurements"][0];
    const nlohmann::json& loop = report["measurements"][1];
    EXPECT_EQ(encode["test"], "enc12");
    EXPECT_GT(encode["tokens_per_s"].get<double>(), 0.0);
    EXPECT_GT(encode["tflop_s"].get<double>(), 0.0);
    EXPECT_EQ(loop["test"], "dg32");  // two blocks of the canvas, 16
    EXPECT_EQ(loop["depth"], 12);
    EXPECT_GT(loop["tokens_per_s"].get<double>(), 0.0);
    EXPECT_GT(loop["unit_us"].get<double>(), 0.0);
    const nlohmann::json& d = loop["diffusion"];
    EXPECT_EQ(d["canvas"], 16);
    EXPECT_EQ(d["max_steps"], 3);
    EXPECT_EQ(d["steps_per_block"], nlohmann::json::array({3, 3})) << "a block stopped early on random weights";
    EXPECT_GT(d["step_floor_us"].get<double>(), 0.0);
    EXPECT_GT(d["pct_of_floor"].get<double>(), 0.0);
    EXPECT_GT(d["tokens_per_s_at_max_steps"].get<double>(), 0.0);
    EXPECT_NE(report["decode_path"].get<std::string>().find("block loop"), std::string::npos);

    std::ifstream in(history);
    std::stringstream text;
    text << in.rdbuf();
    const std::string rows = text.str();
    EXPECT_NE(rows.find("\tenc12\t"), std::string::npos) << rows;
    EXPECT_NE(rows.find("\tdg32\t"), std::string::npos) << rows;
    EXPECT_NE(rows.find("steps per block 3,3 (max 3)"), std::string::npos) << rows;
    std::filesystem::remove(history);
}

// A diffusion model from a folder (not a geometry): its canvas is known only once it is loaded, and the
// default new tokens are two of its blocks.
TEST(BenchCli, DiffusionModelFileTakesTwoOfItsBlocks) {
    const std::filesystem::path folder = test::fixtures_dir() / "diffusion_gemma";
    if (!std::filesystem::exists(folder / "config.json")) GTEST_SKIP() << "no DiffusionGemma fixture";
    const auto r = run_deltabit("bench -m " + folder.string() + " --backend cpu --prompts 6 --steps 2 --json --no-history",
                                test::Stderr::discard);
    ASSERT_EQ(r.exit_code, 0) << r.output;
    const nlohmann::json report = nlohmann::json::parse(r.output);
    ASSERT_EQ(report["measurements"].size(), 2u) << r.output;
    EXPECT_EQ(report["measurements"][1]["test"], "dg16");  // the fixture's canvas is 8
    EXPECT_EQ(report["measurements"][1]["diffusion"]["steps_per_block"], nlohmann::json::array({2, 2}));
}

}  // namespace
}  // namespace deltabit
