// The pieces of a denoising step (runtime/diffusion_step.h) on hand-made inputs whose answers follow
// from the rules, not from running the code: the CUDA step is tested against these functions, so they
// must be right on their own.
#include "runtime/diffusion_step.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <vector>

namespace deltabit {
namespace {

TEST(DiffusionStep, ArgmaxIsTheFirstOfEqualMaxima) {
    // Row 0: maxima at 1 and 3; row 1: every logit equal; row 2: the maximum last.
    const std::vector<float> logits = {0.0f, 2.0f, 1.0f, 2.0f, 5.0f, 5.0f, 5.0f, 5.0f, -1.0f, -3.0f, -2.0f, 0.5f};
    const DiffusionStepStats s = scale_and_measure(logits, 3, 4, 0.5f);
    EXPECT_EQ(s.argmax, (std::vector<int32_t>{1, 0, 3}));
}

TEST(DiffusionStep, ScaledIsOneFloatDivision) {
    const std::vector<float> logits = {1.0f, -7.25f, 3.3f};
    const float t = 0.7f;  // not a power of two: the division rounds
    const DiffusionStepStats s = scale_and_measure(logits, 1, 3, t);
    for (size_t i = 0; i < logits.size(); ++i) EXPECT_EQ(s.scaled[i], logits[i] / t);
}

TEST(DiffusionStep, EntropyOfOneHotUniformAndTwoPoint) {
    // A one-hot row (the others at −200, scaled to −400: p = e^-400 ≈ 2e-174 each, positive, so the
    // entropy is ~5e-171, not exactly 0); a uniform row (entropy log 8); a two-point row (p = 1/2, 1/2,
    // the rest scaled to −2000, whose exp underflows to 0: entropy log 2). Bound for the last two: each
    // term p·log p is within 5 u of the exact one (exp 1 ulp, its argument 1/2 ulp, the product 1/2 ulp)
    // and the sum of 8 adds at most 7 u more: 12 u relative, u = 2^-53.
    const int64_t V = 8;
    std::vector<float> logits(3 * V, 0.0f);
    for (int64_t v = 0; v < V; ++v) logits[size_t(v)] = v == 5 ? 0.0f : -200.0f;
    for (int64_t v = 0; v < V; ++v) logits[size_t(2 * V + v)] = v < 2 ? 0.0f : -1000.0f;
    const DiffusionStepStats s = scale_and_measure(logits, 3, V, 0.5f);
    EXPECT_GE(s.entropy[0], 0.0);
    EXPECT_LT(s.entropy[0], 1e-150);
    EXPECT_EQ(s.probs[5], 1.0f);
    const double u = std::ldexp(1.0, -53);
    EXPECT_NEAR(s.entropy[1], std::log(8.0), 12 * u * std::log(8.0));
    for (int64_t v = 0; v < V; ++v) EXPECT_EQ(s.probs[size_t(V + v)], 0.125f);
    EXPECT_NEAR(s.entropy[2], std::log(2.0), 12 * u * std::log(2.0));
    EXPECT_EQ(s.probs[size_t(2 * V + 7)], 0.0f);  // e^-2000 underflows: p = 0 adds nothing to the entropy
}

TEST(DiffusionStep, TheLowestEntropyIsAlwaysAccepted) {
    // Every entropy above the bound: only the lowest (position 2) has a sum before it ≤ bound.
    const std::vector<double> entropy = {3.0, 2.0, 1.5, 4.0};
    EXPECT_EQ(accepted_positions(entropy, 0.1), (std::vector<uint8_t>{0, 0, 1, 0}));
    EXPECT_EQ(accepted_positions(entropy, 0.0), (std::vector<uint8_t>{0, 0, 1, 0}));
}

TEST(DiffusionStep, BoundZeroAcceptsThroughTheZeroEntropies) {
    // Ranked: 0 (pos 1), 0 (pos 3), 0.5 (pos 0), 0.7 (pos 2). Sums before: 0, 0, 0, 0.5 → the first
    // three accepted with bound 0: the third's sum is exactly 0 ≤ 0.
    const std::vector<double> entropy = {0.5, 0.0, 0.7, 0.0};
    EXPECT_EQ(accepted_positions(entropy, 0.0), (std::vector<uint8_t>{1, 1, 0, 1}));
}

TEST(DiffusionStep, TiesInEntropyKeepPositionOrder) {
    // Positions 0, 2, 4 tie at 0.25, position 1 is lowest (0.1), position 3 highest. Ranked (stable):
    // 1, 0, 2, 4, 3; sums before: 0, 0.1, 0.35, 0.6, 0.85. With bound 0.35 the tied position 4 is
    // refused while the tied 0 and 2 before it are accepted: the order among ties decides.
    const std::vector<double> entropy = {0.25, 0.1, 0.25, 0.9, 0.25};
    EXPECT_EQ(accepted_positions(entropy, 0.35), (std::vector<uint8_t>{1, 1, 1, 0, 0}));
    // Only the earlier of the tied pair fits when the bound admits one more than the lowest.
    EXPECT_EQ(accepted_positions(entropy, 0.1), (std::vector<uint8_t>{1, 1, 0, 0, 0}));
}

TEST(DiffusionStep, AllEqualEntropiesAcceptAPrefixOfPositions) {
    // L equal entropies h: position j has sum j·h before it; accepted while j·h ≤ bound. With h = 0.25
    // (exact in binary) and bound 0.5: positions 0, 1, 2.
    const std::vector<double> entropy(7, 0.25);
    EXPECT_EQ(accepted_positions(entropy, 0.5), (std::vector<uint8_t>{1, 1, 1, 0, 0, 0, 0}));
    const std::vector<double> zeros(5, 0.0);
    EXPECT_EQ(accepted_positions(zeros, 0.0), (std::vector<uint8_t>(5, 1)));
}

TEST(DiffusionStep, CategoricalPickFollowsTheRunningSum) {
    const std::vector<float> p = {0.0f, 0.25f, 0.0f, 0.5f, 0.25f};  // running sums 0, .25, .25, .75, 1
    EXPECT_EQ(categorical_pick(p, 0.0), 1);      // u = 0 < 0.25 at v = 1 (v = 0 has p = 0)
    EXPECT_EQ(categorical_pick(p, 0.2499), 1);
    EXPECT_EQ(categorical_pick(p, 0.25), 3);     // u = 0.25 is not < 0.25: the zero at v = 2 is skipped
    EXPECT_EQ(categorical_pick(p, 0.74), 3);
    EXPECT_EQ(categorical_pick(p, 0.75), 4);
    EXPECT_EQ(categorical_pick(p, std::nextafter(1.0, 0.0)), 4);
    // A trailing zero: a u past every sum (only by rounding in real use) backs off to the last p > 0.
    const std::vector<float> q = {0.5f, 0.5f, 0.0f};
    EXPECT_EQ(categorical_pick(q, 1.0), 1);
    const std::vector<float> none = {0.0f, 0.0f};
    EXPECT_EQ(categorical_pick(none, 0.5), 0);
}

TEST(DiffusionStep, UniformTokenIsFloorOfUnitTimesVocabulary) {
    EXPECT_EQ(uniform_token(0.0, 10), 0);
    EXPECT_EQ(uniform_token(0.0999, 10), 0);
    EXPECT_EQ(uniform_token(0.1, 10), 1);  // 0.1·10 rounds to exactly 1.0
    EXPECT_EQ(uniform_token(std::nextafter(1.0, 0.0), 262144), 262143);
    EXPECT_EQ(uniform_token(1.0, 7), 6);  // clamped
}

TEST(DiffusionStep, StopRuleNeedsStabilityAndConfidence) {
    const std::vector<int32_t> a = {3, 1, 4}, b = {3, 1, 5};
    const std::vector<double> sure = {0.0, 0.001, 0.002}, unsure = {0.0, 0.001, 0.02};  // means 0.001, 0.007
    DiffusionStopRule rule(2, 3, 0.005);
    EXPECT_FALSE(rule.finished(a, sure));  // the history is −1
    rule.record(a);
    EXPECT_FALSE(rule.finished(a, sure));  // one of the two is still −1
    rule.record(a);
    EXPECT_TRUE(rule.finished(a, sure));
    EXPECT_FALSE(rule.finished(a, unsure));
    EXPECT_FALSE(rule.finished(b, sure));
    rule.record(b);
    EXPECT_FALSE(rule.finished(b, sure));  // a is still in the history
    // Threshold 0: always stable; only confidence decides (strictly below).
    DiffusionStopRule no_history(0, 3, 0.001);
    EXPECT_FALSE(no_history.finished(a, sure));  // mean 0.001 is not < 0.001
    EXPECT_TRUE(no_history.finished(b, std::vector<double>{0.0, 0.0, 0.0}));
}

TEST(DiffusionStep, EosPadsEverythingAfterTheFirstEos) {
    std::vector<int32_t> block = {7, 2, 9, 2, 4};
    const std::vector<int64_t> eos = {2};
    EXPECT_TRUE(apply_eos_and_pad(block, eos, 0));
    EXPECT_EQ(block, (std::vector<int32_t>{7, 2, 0, 0, 0}));
    std::vector<int32_t> no_pad = {7, 2, 9};
    EXPECT_TRUE(apply_eos_and_pad(no_pad, eos, -1));
    EXPECT_EQ(no_pad, (std::vector<int32_t>{7, 2, 9}));
    std::vector<int32_t> none = {7, 9};
    EXPECT_FALSE(apply_eos_and_pad(none, {}, 0));
    EXPECT_EQ(none, (std::vector<int32_t>{7, 9}));
}

}  // namespace
}  // namespace deltabit
