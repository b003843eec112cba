// `deltabit bench` from the command line, on any machine: argument errors name what is wrong, and
// without a GPU the command says so and fails (there is no CPU bench). The GPU run itself is tested in
// tests/cuda/test_cmd_bench_cuda.cpp.
#include "cli_command.h"

#include <gtest/gtest.h>

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

TEST(BenchCli, BadListsAndFormatsAreRefusedBeforeAnyWork) {
    const auto depths = run_deltabit("bench --geometry tiny-qwen3 --depths 0,,8 --no-history");
    EXPECT_EQ(depths.exit_code, 1);
    EXPECT_NE(depths.output.find("--depths \"0,,8\""), std::string::npos) << depths.output;
    const auto prompts = run_deltabit("bench --geometry tiny-qwen3 --prompts 1 --no-history");
    EXPECT_EQ(prompts.exit_code, 1);
    EXPECT_NE(prompts.output.find("below the minimum 2"), std::string::npos) << prompts.output;
    const auto budget = run_deltabit("bench --geometry tiny-qwen3 --max-seconds 0 --no-history");
    EXPECT_EQ(budget.exit_code, 1);
    EXPECT_NE(budget.output.find("--max-seconds 0: must be a positive number of seconds"), std::string::npos)
        << budget.output;
    const auto kv = run_deltabit("bench --geometry tiny-qwen3 --kv q8 --no-history");
    EXPECT_EQ(kv.exit_code, 1);
    EXPECT_NE(kv.output.find("expected f32, f16 or kivi4"), std::string::npos) << kv.output;
}

TEST(BenchCli, ListsMayBeSpaceSeparated) {
    // Several values after the option are one list, as the comma-separated form is: a bad one is named
    // within the whole list, and a good list gets past the checks (without a GPU, to the GPU check).
    const auto bad = run_deltabit("bench --geometry tiny-qwen3 --depths 0 x 8 --no-history");
    EXPECT_EQ(bad.exit_code, 1);
    EXPECT_NE(bad.output.find("--depths \"0,x,8\""), std::string::npos) << bad.output;
    const auto below = run_deltabit("bench --geometry tiny-qwen3 --prompts 512 1 --no-history");
    EXPECT_EQ(below.exit_code, 1);
    EXPECT_NE(below.output.find("--prompts \"512,1\": 1 is below the minimum 2"), std::string::npos) << below.output;
    if (gpu_present()) return;  // the bench would run
    const auto good = run_deltabit("bench --geometry tiny-qwen3 --depths 0 8 --prompts 2,16 64 --no-history");
    EXPECT_EQ(good.exit_code, 1);
    EXPECT_NE(good.output.find("there is no CPU bench"), std::string::npos) << good.output;
}

TEST(BenchCli, WithoutAGpuItSaysSoAndFails) {
    if (gpu_present()) GTEST_SKIP() << "this machine has a GPU: the bench would run";
    const auto r = run_deltabit("bench --geometry tiny-qwen3 --no-history");
    EXPECT_EQ(r.exit_code, 1);
    EXPECT_NE(r.output.find("there is no CPU bench"), std::string::npos) << r.output;
}

}  // namespace
}  // namespace deltabit
