// `deltabit bench` end to end on the GPU, on a tiny geometry so it takes seconds: every test reports,
// the decode steps ran as CUDA-graph replays (STYLE habit 16), both ways of reaching a depth work, and
// the bytes per token are the cost model's (models/inference_cost.h). Skips without CUDA or a GPU.
#include "cli_command.h"
#include "models/inference_cost.h"
#include "bench/synthetic_model.h"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#ifdef DELTABIT_HAVE_CUDA
#include "backend/cuda_probe.h"
#endif

namespace deltabit {
namespace {

TEST(BenchCliCuda, TinyGeometryReportsEveryTestFromTheFastPath) {
#ifndef DELTABIT_HAVE_CUDA
    GTEST_SKIP() << "built without CUDA";
#else
    if (cuda::device_count() == 0) GTEST_SKIP() << "no CUDA device on this machine";
    const InferenceCost cost(synthetic_weights(find_geometry("tiny-qwen35").config, "tiny-qwen35"), KvFormat::f16);
    for (const char* fill : {"prefill", "synthetic"}) {
        // The synthetic run also names its own first-token lengths.
        const bool synthetic = std::string(fill) == "synthetic";
        const auto r = test::run_deltabit(std::string("bench --geometry tiny-qwen35 --prompts 16,64 --depths 0,300 "
                                                      "--prompt-depths 300 --kv f16 --no-history --json --fill ") + fill +
                                              (synthetic ? " --first-tokens 1,3" : ""),
                                          test::Stderr::discard);
        ASSERT_EQ(r.exit_code, 0) << r.output;
        const nlohmann::json report = nlohmann::json::parse(r.output);
        EXPECT_GT(report["copy_gb_s"].get<double>(), 100.0);
        EXPECT_GT(report["stream_floor"]["us"].get<double>(), 0.0);
        EXPECT_EQ(report["stream_floor"]["bytes"].get<double>(), double(12 << 20));
        EXPECT_GT(report["dependent_launch_us"].get<double>(), 0.0);
        const std::string path = report["decode_path"].get<std::string>();
        EXPECT_NE(path.find("kernels a step"), std::string::npos) << path;
        std::vector<std::string> tests;
        for (const auto& m : report["measurements"]) {
            tests.push_back(m["test"].get<std::string>());
            EXPECT_GT(m["seconds"].get<double>(), 0.0);
            EXPECT_GT(m["peak_memory_gib"].get<double>(), 0.0);
            if (m["test"] == "tg128b8") {
                // Batched decode: 8 rows a step, the weights read once a step and every row's KV and state.
                const DecodeTraffic t = cost.decode_traffic(3 + 64);  // three warm-up steps
                EXPECT_NE(m["note"].get<std::string>().find("graph replays 128/128"), std::string::npos) << m["note"];
                EXPECT_EQ(m["tokens"].get<int64_t>(), 8 * 128);
                EXPECT_NEAR(m["bytes_per_token"].get<double>(),
                            (double(t.weight_bytes) + 8.0 * double(t.kv_bytes + t.state_bytes)) / 8.0, 1.0);
            }
            if (m["test"] != "tg128") continue;
            const int64_t depth = m["depth"].get<int64_t>();
            const std::string note = m["note"].get<std::string>();
            EXPECT_NE(note.find("graph replays 128/128"), std::string::npos) << note;
            // Two warm-up steps, then 128 timed: counted at the middle of the timed steps.
            EXPECT_EQ(m["bytes_per_token"].get<double>(), double(cost.decode_traffic(depth + 2 + 64).total()));
            if (depth > 0)
                EXPECT_NE(note.find(std::string(fill) == "prefill" ? "depth by prefill" : "filled synthetically"),
                          std::string::npos)
                    << note;
        }
        const std::vector<std::string> first = synthetic ? std::vector<std::string>{"ttft1", "ttft3"}
                                                         : std::vector<std::string>{"ttft2", "ttft16", "ttft64"};
        // The prompt at depth 300 after the pp rows; a depth reached by prefill reports that fill's rate too.
        std::vector<std::string> want{"pp16", "pp64"};
        if (!synthetic) want.push_back("fill");
        want.push_back("pp16");
        want.insert(want.end(), first.begin(), first.end());
        want.insert(want.end(), {"tg128", "tg128", "tg128b8", "tg128b32"});
        EXPECT_EQ(tests, want);
    }
#endif
}

// A diffusion geometry on the GPU: the device block loop, every block at the --steps given (random weights
// never stop early), a step time from the two runs, and the floor read against the card's bf16 peak too.
TEST(BenchCliCuda, TinyDiffusionGeometryRunsTheDeviceLoop) {
#ifndef DELTABIT_HAVE_CUDA
    GTEST_SKIP() << "built without CUDA";
#else
    if (cuda::device_count() == 0) GTEST_SKIP() << "no CUDA device on this machine";
    const auto r = test::run_deltabit("bench --geometry tiny-diffusiongemma --prompts 12 --steps 3 --no-history --json",
                                      test::Stderr::discard);
    ASSERT_EQ(r.exit_code, 0) << r.output;
    const nlohmann::json report = nlohmann::json::parse(r.output);
    EXPECT_NE(report["decode_path"].get<std::string>().find("diffusion_generate_cuda"), std::string::npos)
        << report["decode_path"];
    ASSERT_EQ(report["measurements"].size(), 2u) << r.output;
    const nlohmann::json& loop = report["measurements"][1];
    EXPECT_EQ(loop["test"], "dg32");
    EXPECT_EQ(loop["diffusion"]["steps_per_block"], nlohmann::json::array({3, 3}));
    EXPECT_GT(loop["unit_us"].get<double>(), 0.0);
    EXPECT_GT(loop["pct_of_bf16_peak"].get<double>(), 0.0);
    EXPECT_GT(loop["diffusion"]["pct_of_floor"].get<double>(), 0.0);
#endif
}

}  // namespace
}  // namespace deltabit
