// The CUDA engine refuses logits that are not finite as the CPU engine does (runtime/engine_checks.h
// fail_non_finite_logit): one line naming the lowest non-finite token, the position and the value, on each
// way it chooses a token — plain greedy (the argmax kernel, running one step ahead from a captured graph),
// greedy with penalties (the sampler chain's argmax pass) and sampling (the chain) — with the sequence left
// where it was, run-ahead step undone. Through the engine, on a model whose logits overflow a few tokens
// into generation (runtime/non_finite_logits_model.h), next to the CPU engine on the same model; and
// through `deltabit run --backend cuda`, which exits 1 with that line, as it does for a NaN weight.
// Skips without a GPU.
#include "cli_command.h"
#include "core/error.h"
#include "models/model.h"
#include "runtime/engine.h"
#include "runtime/non_finite_logits_model.h"

#if DELTABIT_HAVE_CUDA

#include "backend/cuda_probe.h"

#include <fmt/format.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <memory>
#include <regex>
#include <string>
#include <vector>

namespace deltabit {
namespace {

namespace fs = std::filesystem;

const std::vector<int32_t> kPrompt = {1, 2};

// Where an engine refused to choose a token.
struct Refusal {
    std::string message;             // empty: it never refused
    int64_t position = 0;            // the sequence's, after the refusal
    std::vector<float> logits;       // its last logits, after the refusal
    EngineCounters before, after;    // around the refused next_token
    int64_t tokens = 0;              // chosen before it
};

// Decodes from kPrompt until next_token refuses (at most 200 tokens); then feeds one more token, which
// must work: a refusal leaves the sequence usable.
Refusal decode_until_refused(Engine& engine, const SamplingParams& params) {
    auto seq = engine.new_sequence({.max_positions = 512});
    engine.forward(*seq, kPrompt);
    Sampler sampler(params);
    std::vector<int32_t> history = kPrompt;
    std::vector<uint8_t> generated(kPrompt.size(), 0);
    Refusal r;
    for (; r.tokens < 200; ++r.tokens) {
        r.before = engine.counters();
        int32_t t = 0;
        try {
            t = engine.next_token(*seq, sampler, {history, generated});
        } catch (const Error& e) {
            r.message = e.what();
            r.after = engine.counters();
            r.position = seq->position();
            r.logits = engine.last_logits(*seq);
            const int32_t next[1] = {7};
            engine.forward(*seq, next);
            EXPECT_EQ(seq->position(), r.position + 1) << "the sequence did not take a token after the refusal";
            return r;
        }
        history.push_back(t);
        generated.push_back(1);
        engine.forward(*seq, std::span(&t, 1));
    }
    return r;
}

// The message names the lowest non-finite logit of the sequence's last logits, by token, position and
// value, in the CPU engine's words.
void expect_names_the_first_non_finite_logit(const Refusal& r, const std::string& what) {
    ASSERT_FALSE(r.message.empty()) << what << ": generated " << r.tokens << " tokens without a refusal";
    std::smatch m;
    ASSERT_TRUE(std::regex_match(r.message, m, std::regex(test::kNonFiniteLogitPattern))) << what << ": " << r.message;
    const int64_t token = std::stoll(m[1]), position = std::stoll(m[2]);
    EXPECT_EQ(position, r.position) << what << ": " << r.message;
    EXPECT_GT(position, int64_t(kPrompt.size()) + 2) << what << ": the logits broke before generation got going";
    ASSERT_LT(token, int64_t(r.logits.size())) << what;
    EXPECT_FALSE(std::isfinite(r.logits[size_t(token)])) << what << ": " << r.message;
    EXPECT_EQ(fmt::format("{}", r.logits[size_t(token)]), m[3].str()) << what << ": the value is not the logit's";
    for (int64_t i = 0; i < token; ++i)
        ASSERT_TRUE(std::isfinite(r.logits[size_t(i)])) << what << ": token " << i << " comes first and is not finite";
}

struct Mode {
    const char* name;
    SamplingParams params;
};

std::vector<Mode> modes() {
    std::vector<Mode> m(3);
    m[0] = {"plain greedy", {}};
    m[0].params.temperature = 0.0f;
    m[1] = {"greedy with a repeat penalty", {}};
    m[1].params.temperature = 0.0f;
    m[1].params.repeat_penalty = 1.3f;
    m[2] = {"sampled", {}};
    m[2].params.seed = 5;
    return m;
}

TEST(NonFiniteCuda, EngineRefusesLogitsThatAreNotFiniteOnEveryChooser) {
    if (cuda::device_count() == 0) GTEST_SKIP() << "no CUDA device";
    const fs::path file = test::non_finite_logits_model(test::test_scratch_dir("deltabit_test_cuda_nan_logits"));
    const auto model = std::make_shared<const Model>(Model::load(file));
    const std::unique_ptr<Engine> gpu = make_cuda_engine(model), cpu = make_cpu_engine(model);
    for (const Mode& mode : modes()) {
        const Refusal on_cpu = decode_until_refused(*cpu, mode.params);
        expect_names_the_first_non_finite_logit(on_cpu, std::string("cpu, ") + mode.name);
        const Refusal on_gpu = decode_until_refused(*gpu, mode.params);
        expect_names_the_first_non_finite_logit(on_gpu, std::string("cuda, ") + mode.name);
        std::printf("[ non-finite ] %-30s cpu: %s\n%-45s cuda: %s\n", mode.name, on_cpu.message.c_str(), "",
                    on_gpu.message.c_str());
        if (mode.params.temperature == 0.0f && mode.params.repeat_penalty == 1.0f) {
            // The refusal came from the run-ahead argmax (a graph replay had started on the report), and
            // that step was undone: the position above is the consumed tokens'.
            EXPECT_GT(on_gpu.before.run_ahead_steps, 0) << "greedy never ran ahead before the logits broke";
            EXPECT_EQ(on_gpu.after.run_ahead_steps, on_gpu.before.run_ahead_steps + 1);
            EXPECT_EQ(on_gpu.after.run_ahead_undone, on_gpu.before.run_ahead_undone + 1);
        } else {
            EXPECT_EQ(on_gpu.after.run_ahead_steps, on_gpu.before.run_ahead_steps) << mode.name << " ran ahead";
        }
    }
}

// One line, "deltabit: error: ...", exit code 1, as on the CPU (tests/runtime/test_cli_conventions.cpp).
void expect_one_line_error(const std::string& args, const std::string& pattern) {
    const test::CommandResult r = test::run_deltabit(args);
    EXPECT_EQ(r.exit_code, 1) << args << "\n" << r.output;
    EXPECT_EQ(std::count(r.output.begin(), r.output.end(), '\n'), 1) << args << "\n" << r.output;
    EXPECT_TRUE(std::regex_match(r.output, std::regex("deltabit: error: " + pattern + "\n"))) << args << "\n" << r.output;
}

TEST(NonFiniteCuda, RunExitsWithOneLine) {
    if (cuda::device_count() == 0) GTEST_SKIP() << "no CUDA device";
    const fs::path dir = test::test_scratch_dir("deltabit_test_cuda_run_non_finite");
    // A NaN weight: refused at load, before anything reaches the GPU.
    for (const std::string type : {"f32", "q1_0"})
        expect_one_line_error("run -m " + test::nan_weight_model(dir, type).string() +
                                  " --ids 1,2 --max-tokens 2 --backend cuda",
                              ".*tensor blk\\.1\\.ffn_down\\.weight: element " + std::string(type == "f32" ? "3" : "0") +
                                  " is not finite.*");
    // Finite weights, logits that overflow in generation: greedy (run-ahead argmax) and sampled.
    const fs::path file = test::non_finite_logits_model(dir);
    for (const std::string sampling : {"--temperature 0", "--temperature 0.8 --seed 5"})
        expect_one_line_error("run -m " + file.string() + " --ids 1,2 --max-tokens 200 --json --quiet --backend cuda " +
                                  sampling,
                              test::kNonFiniteLogitPattern);
}

}  // namespace
}  // namespace deltabit

#else
#include <gtest/gtest.h>
TEST(NonFiniteCuda, SkippedWithoutCuda) { GTEST_SKIP() << "built without CUDA"; }
#endif  // DELTABIT_HAVE_CUDA
