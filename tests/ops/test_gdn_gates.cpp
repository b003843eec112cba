#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "ops/gdn_gates.h"
#include "ops/moe_router.h"
#include "ops_test_util.h"

namespace deltabit {
namespace {

TEST(GdnGates, SigmoidBetaAndSoftplusDecay) {
    // Two tokens, two value heads.
    const float b[4] = {0.0f, 2.0f, -1.0f, 30.0f};
    const float a[4] = {1.0f, 24.5f, -31.0f, 0.0f};
    const float ssm_a[2] = {-2.0f, -0.5f};   // −exp(A_log)
    const float dt_bias[2] = {-1.0f, 0.5f};
    std::vector<float> beta(4), g(4);
    cpu::gdn_gates(b, a, ssm_a, dt_bias, 2, 2, beta.data(), g.data());
    test::expect_close(beta, std::vector<double>{0.5, 0.880797078, 0.268941421, 1.0}, 1e-6);
    // a + dt_bias: 0 → softplus ln 2; 25 → above the threshold, 25 itself; −32 → log1p(e^−32) ≈ e^−32;
    // 0.5 → ln(1 + e^0.5) = 0.974076984.
    test::expect_close(g, std::vector<double>{-2.0 * std::log(2.0), -12.5, -2.0 * std::exp(-32.0), -0.487038492},
                       1e-6, 1e-20);
}

TEST(MoeRouter, SoftmaxTopKAndRenormalisation) {
    // Probabilities ∝ [1, 2, 3, 1] / 7.
    const float logits[4] = {0.0f, float(std::log(2.0)), float(std::log(3.0)), 0.0f};
    int32_t ids[2];
    float w[2];
    cpu::moe_router(logits, 1, 4, 2, false, ids, w);
    EXPECT_EQ(ids[0], 2);
    EXPECT_EQ(ids[1], 1);
    EXPECT_NEAR(w[0], 3.0 / 7.0, 1e-7);
    EXPECT_NEAR(w[1], 2.0 / 7.0, 1e-7);
    cpu::moe_router(logits, 1, 4, 2, true, ids, w);
    EXPECT_NEAR(w[0], 0.6, 1e-7);
    EXPECT_NEAR(w[1], 0.4, 1e-7);
}

TEST(MoeRouter, TiesKeepTheLowerExpertFirst) {
    const float logits[8] = {1, 5, 5, 1,   // token 0: experts 1 and 2 tie
                             2, 2, 2, 2};  // token 1: all tie
    int32_t ids[6];
    float w[6];
    cpu::moe_router(logits, 2, 4, 3, true, ids, w);
    EXPECT_EQ((std::vector<int32_t>(ids, ids + 6)), (std::vector<int32_t>{1, 2, 0, 0, 1, 2}));
    EXPECT_NEAR(w[3] + w[4] + w[5], 1.0, 1e-6);
    EXPECT_NEAR(w[3], 1.0 / 3.0, 1e-7);
}

}  // namespace
}  // namespace deltabit
