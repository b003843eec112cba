// The CPU fast path (ops/cpu_fast/matmul_cpu_fast.h) inside the model and the CPU engine: that it runs (STYLE habit
// 16: counted, and the reference switch turns it off), that its results do not depend on the thread count,
// and that the engine's int8 activations on quantised weights pass DESIGN.md §6 rung 5's gates for a lossy
// feature (mean KL < 0.005, p99 KL < 0.05, top-1 ≥ 96.5%) against the exact f32 model on the binary fixtures
// stored as Q1_0. The op-level bounds of the int8 rounding are derived in tests/ops/test_matmul_fast.cpp;
// transformers parity of the fast f32 path is test_fixture_parity.cpp, which runs on it by default.
#include "fixture.h"
#include "q1_fixture.h"

#include "models/model.h"
#include "ops/cpu_fast/matmul_cpu_fast.h"
#include "runtime/engine.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>

namespace deltabit {
namespace {

// Sets an environment variable for one scope.
class ScopedEnv {
public:
    ScopedEnv(const char* name, const char* value) : name_(name) { setenv(name, value, 1); }
    ~ScopedEnv() { unsetenv(name_); }

private:
    const char* name_;
};

TEST(CpuFastModel, ModelForwardRunsTheFastPathUnlessTheReferenceIsAsked) {
    const test::Fixture f = test::load_fixture("qwen3_5_float");
    const Model model = Model::load(f.dir);
    const test::FixtureCase& c = f.cases.back();

    const cpu_fast::Counters before = cpu_fast::counters();
    SequenceState fast_state = model.new_sequence();
    const std::vector<float> fast = model.forward(fast_state, c.tokens);
    const cpu_fast::Counters after = cpu_fast::counters();
    // Every product of the forward: 3 layers × (mixer + FFN) plus the LM head, at least one each.
    EXPECT_GE(after.f32 - before.f32, 7);
    EXPECT_EQ(after.int8, before.int8) << "an f32 model forward must not round activations";

    std::vector<float> reference;
    {
        const ScopedEnv env("DELTABIT_CPU_REFERENCE", "1");
        SequenceState state = model.new_sequence();
        reference = model.forward(state, c.tokens);
    }
    EXPECT_EQ(cpu_fast::counters().f32, after.f32) << "DELTABIT_CPU_REFERENCE=1 still ran the fast path";
    // Both are within rung 2's 1e-4 of transformers; they differ only by fp32 summation.
    ASSERT_EQ(fast.size(), reference.size());
    double worst = 0;
    for (size_t i = 0; i < fast.size(); ++i) worst = std::max(worst, std::abs(double(fast[i]) - reference[i]));
    EXPECT_LE(worst, 1e-4 * f.max_abs_logit);
}

TEST(CpuFastModel, EngineLogitsDoNotDependOnTheThreadCount) {
    const test::Fixture f = test::load_fixture("qwen3_5_binary");
    const Model model = test::with_q1_matrices(Model::load(f.dir));
    const test::FixtureCase& c = f.cases.back();
    std::vector<float> first;
    for (int threads : {1, 2, 3, 4}) {
        const std::unique_ptr<Engine> engine = make_cpu_engine(model);
        engine->set_cpu_threads(threads);
        EXPECT_NE(engine->description().find(std::to_string(threads) + (threads == 1 ? " thread;" : " threads;")), std::string::npos)
            << engine->description();
        const std::unique_ptr<EngineSequence> s = engine->new_sequence({.max_positions = c.length + 1});
        const std::vector<float> logits = engine->forward_all(*s, c.tokens);
        if (first.empty())
            first = logits;
        else
            ASSERT_EQ(0, std::memcmp(first.data(), logits.data(), logits.size() * sizeof(float))) << threads << " threads";
    }
}

std::vector<double> softmax(const float* logits, int64_t n) {
    const double top = *std::max_element(logits, logits + n);
    std::vector<double> p(static_cast<size_t>(n));
    double total = 0;
    for (int64_t i = 0; i < n; ++i) total += p[size_t(i)] = std::exp(double(logits[i]) - top);
    for (double& v : p) v /= total;
    return p;
}

TEST(CpuFastModel, EngineInt8ActivationsPassTheLossyFeatureGates) {
    std::vector<double> kl;
    int64_t agree = 0;
    int fixtures = 0;
    for (const std::string& name : test::fixture_names()) {
        if (!name.ends_with("_binary")) continue;
        const test::Fixture f = test::load_fixture(name);
        const Model model = test::with_q1_matrices(Model::load(f.dir));
        const std::unique_ptr<Engine> engine = make_cpu_engine(model);
        ASSERT_NE(engine->description().find("int8"), std::string::npos) << engine->description();
        for (const test::FixtureCase& c : f.cases) {
            const cpu_fast::Counters before = cpu_fast::counters();
            const std::unique_ptr<EngineSequence> s = engine->new_sequence({.max_positions = c.length + 1});
            const std::vector<float> got = engine->forward_all(*s, c.tokens);
            EXPECT_GT(cpu_fast::counters().int8, before.int8) << name << ": the engine did not run the int8 path";
            SequenceState state = model.new_sequence();
            const std::vector<float> exact =
                model.forward(state, c.tokens, nullptr, {MatmulNumerics::f32, nullptr, true});
            ASSERT_EQ(got.size(), exact.size());
            for (int64_t t = 0; t < c.length; ++t) {
                const std::vector<double> p = softmax(exact.data() + t * f.vocab, f.vocab);
                const std::vector<double> q = softmax(got.data() + t * f.vocab, f.vocab);
                double d = 0;
                for (int64_t i = 0; i < f.vocab; ++i)
                    if (p[size_t(i)] > 0) d += p[size_t(i)] * std::log(p[size_t(i)] / std::max(q[size_t(i)], 1e-300));
                kl.push_back(d);
                agree += std::max_element(p.begin(), p.end()) - p.begin() == std::max_element(q.begin(), q.end()) - q.begin();
            }
        }
        ++fixtures;
    }
    ASSERT_GT(fixtures, 0);
    double mean = 0;
    for (double d : kl) mean += d;
    mean /= double(kl.size());
    std::vector<double> sorted = kl;
    std::sort(sorted.begin(), sorted.end());
    const double p99 = sorted[size_t(double(sorted.size() - 1) * 0.99)];
    const double top1 = double(agree) / double(kl.size());
    std::printf("[ int8 ] %zu positions of %d fixtures: mean KL %.3g, p99 KL %.3g, top-1 %.2f%%\n", kl.size(), fixtures,
                mean, p99, 100 * top1);
    EXPECT_LT(mean, 0.005);
    EXPECT_LT(p99, 0.05);
    EXPECT_GE(top1, 0.965);
}

}  // namespace
}  // namespace deltabit
