// The reference's rounding modes (models/blocks.h MatmulNumerics) on the binary fixtures with their matrices
// stored as Q1_0: the f16 prompt rounding (int8_and_f16_prompts, the CPU mirror of the CUDA engine's prompts
// on Hopper) keeps a prompt's logits closer to the exact f32 model than the int8 rounding does —
// measured here on every prompt long enough to take it, not assumed (docs/bench-notes.md states it).
#include "fixture.h"
#include "q1_fixture.h"

#include "models/blocks.h"
#include "models/model.h"
#include "ops/matmul.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>

namespace deltabit {
namespace {

std::vector<float> prompt_logits(Model& model, MatmulNumerics numerics, const test::FixtureCase& c) {
    model.set_matmul_numerics(numerics);
    SequenceState state = model.new_sequence();
    return test::feed_in_mode(model, state, "prompt", c);
}

double max_abs_diff(const std::vector<float>& a, const std::vector<float>& b) {
    double worst = 0.0;
    for (size_t i = 0; i < a.size(); ++i) worst = std::max(worst, std::abs(double(a[i]) - b[i]));
    return worst;
}

TEST(MatmulNumerics, F16PromptsStayCloserToTheExactModelThanInt8) {
    int fixtures = 0;
    for (const std::string& name : test::fixture_names()) {
        if (!name.ends_with("_binary")) continue;
        const test::Fixture f = test::load_fixture(name);
        Model model = test::with_q1_matrices(Model::load(f.dir));
        double int8_drift = 0.0, f16_drift = 0.0;
        int prompts = 0;
        for (const test::FixtureCase& c : f.cases) {
            if (c.length < cpu::kPromptGemmMinTokens) continue;  // both roundings are int8 there
            const std::vector<float> exact = prompt_logits(model, MatmulNumerics::f32, c);
            int8_drift = std::max(int8_drift, max_abs_diff(prompt_logits(model, MatmulNumerics::int8_activations, c), exact));
            f16_drift = std::max(f16_drift, max_abs_diff(prompt_logits(model, MatmulNumerics::int8_and_f16_prompts, c), exact));
            ++prompts;
        }
        ASSERT_GT(prompts, 0) << name << ": no prompt of " << cpu::kPromptGemmMinTokens << " tokens or more";
        std::printf("[ numerics ] %-22s %d prompts: max|dlogit| vs f32, int8 %.3e, f16 prompts %.3e (%.1fx closer)\n",
                    name.c_str(), prompts, int8_drift, f16_drift, int8_drift / std::max(f16_drift, 1e-30));
        EXPECT_LT(f16_drift, int8_drift) << name;
        ++fixtures;
    }
    EXPECT_GT(fixtures, 0) << "no binary fixture found";
}

}  // namespace
}  // namespace deltabit
