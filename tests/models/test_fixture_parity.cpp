// Rung 2 of the correctness ladder (DESIGN.md §6): the CPU forward pass against transformers' logits
// for every fixture in tests/fixtures, every prompt, every position, in the three forward modes —
// whole prompt, prefill-then-continue, and one token at a time.
#include "fixture.h"

#include "models/model.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <span>

namespace deltabit {
namespace {

// DESIGN.md §6 rung 2: every logit within 1e-4 of the largest |logit| (fixed before the first run).
// transformers disagrees with itself between its own modes by up to ~1e-5 of max |logit|
// (meta.json tf_max_abs_diff_vs_prompt), so the bound sits one decade above that floor.
constexpr double kRelativeTolerance = 1e-4;

std::vector<float> run_mode(const Model& model, const std::string& mode, const test::FixtureCase& c) {
    SequenceState state = model.new_sequence();
    std::vector<float> logits = test::feed_in_mode(model, state, mode, c);
    EXPECT_EQ(state.position(), c.length);
    return logits;
}

int64_t argmax(const float* row, int64_t n) {
    int64_t best = 0;
    for (int64_t i = 1; i < n; ++i)
        if (row[i] > row[best]) best = i;
    return best;
}

class FixtureParity : public ::testing::TestWithParam<std::string> {};

TEST_P(FixtureParity, LogitsMatchTransformersInEveryMode) {
    const test::Fixture f = test::load_fixture(GetParam());
    const Model model = Model::load(f.dir);
    ASSERT_EQ(model.config().n_vocab, f.vocab);
    const double tolerance = kRelativeTolerance * f.max_abs_logit;

    double worst = 0.0;
    std::string worst_where;
    int64_t compared = 0;
    for (const test::FixtureCase& c : f.cases) {
        for (const auto& [mode, want] : c.logits) {
            const std::vector<float> got = run_mode(model, mode, c);
            ASSERT_EQ(got.size(), want.size()) << mode << " L=" << c.length;
            for (int64_t t = 0; t < c.length; ++t) {
                const float* g = got.data() + t * f.vocab;
                const float* w = want.data() + t * f.vocab;
                double row_worst = 0.0;
                for (int64_t i = 0; i < f.vocab; ++i) row_worst = std::max(row_worst, std::abs(double(g[i]) - w[i]));
                if (row_worst > worst) {
                    worst = row_worst;
                    worst_where = mode + " L=" + std::to_string(c.length) + " pos " + std::to_string(t);
                }
                EXPECT_LE(row_worst, tolerance) << f.name << " " << mode << " L=" << c.length << " position " << t;
                EXPECT_EQ(argmax(g, f.vocab), argmax(w, f.vocab))
                    << f.name << " " << mode << " L=" << c.length << " position " << t;
                ++compared;
            }
        }
    }
    std::printf("[ parity ] %-24s %5lld rows  max|logit| %.3f  max|dlogit| %.3g (%.2g relative) at %s\n",
                f.name.c_str(), static_cast<long long>(compared), f.max_abs_logit, worst, worst / f.max_abs_logit,
                worst_where.c_str());
    RecordProperty("max_abs_diff", std::to_string(worst));
}

INSTANTIATE_TEST_SUITE_P(Fixtures, FixtureParity, ::testing::ValuesIn(test::fixture_names()),
                         [](const ::testing::TestParamInfo<std::string>& info) { return info.param; });

// The fixtures must be able to catch the layout bug they were built for: reading Hugging Face's
// grouped value heads as if they were tiled (H_v = 4 ≠ H_k = 2) has to move the logits far outside
// the tolerance.
TEST(FixtureParity, WrongValueHeadOrderIsCaught) {
    const test::Fixture f = test::load_fixture("qwen3_5_float");
    const Model right = Model::load(f.dir);
    ModelConfig wrong_config = right.config();
    wrong_config.value_head_order = ValueHeadOrder::tiled;
    // Rebind the same tensors under the wrong order.
    ModelWeights wrong_weights(wrong_config, "qwen3_5_float (tiled on purpose)");
    for (const auto& [name, t] : right.weights().tensors()) wrong_weights.add(t);
    const Model wrong(std::move(wrong_weights));

    const test::FixtureCase& c = f.cases.at(2);
    SequenceState a = right.new_sequence(), b = wrong.new_sequence();
    const std::vector<float> good = right.forward(a, c.tokens), bad = wrong.forward(b, c.tokens);
    double worst = 0.0;
    for (size_t i = 0; i < good.size(); ++i) worst = std::max(worst, std::abs(double(good[i]) - bad[i]));
    EXPECT_GT(worst, 100 * kRelativeTolerance * f.max_abs_logit);
}

}  // namespace
}  // namespace deltabit
