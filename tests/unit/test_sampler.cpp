// The sampler chain: each stage against hand-computed expectations, the draw against the softmax
// distribution with a fixed seed, DRY on a recorded loop and on a prompt quote.
#include "sampling/dry.h"
#include "sampling/sampler.h"

#include <gtest/gtest.h>

#include <cmath>
#include <map>
#include <vector>

using namespace deltabit;

namespace {

SamplingParams plain(float temperature = 1.0f) {
    SamplingParams p;
    p.temperature = temperature;
    p.top_k = 0;
    p.top_p = 1.0f;
    p.min_p = 0.0f;
    return p;
}

std::vector<int32_t> ids(const std::vector<Candidate>& c) {
    std::vector<int32_t> out;
    for (const Candidate& x : c) out.push_back(x.token);
    return out;
}

const TokenHistory kNoHistory{};

}  // namespace

TEST(Sampler, GreedyTakesArgmaxAndLowestIdOnTies) {
    const std::vector<float> logits = {0.5f, 2.0f, -1.0f, 2.0f};
    Sampler sampler(plain(0.0f));
    EXPECT_EQ(sampler.sample(logits, kNoHistory), 1);
}

TEST(Sampler, TopKKeepsTheKHighest) {
    SamplingParams p = plain();
    p.top_k = 2;
    const std::vector<float> logits = {0.1f, 3.0f, 2.0f, -4.0f, 2.5f};
    EXPECT_EQ(ids(Sampler(p).candidates(logits, kNoHistory)), (std::vector<int32_t>{1, 4}));
}

TEST(Sampler, TopPKeepsSmallestPrefixReachingMass) {
    // Probabilities of logits ln(0.5), ln(0.3), ln(0.15), ln(0.05) are exactly 0.5, 0.3, 0.15, 0.05.
    const std::vector<float> logits = {std::log(0.15f), std::log(0.5f), std::log(0.05f), std::log(0.3f)};
    SamplingParams p = plain();
    p.top_p = 0.79f;  // 0.5 + 0.3 = 0.8 ≥ 0.79: two tokens
    EXPECT_EQ(ids(Sampler(p).candidates(logits, kNoHistory)), (std::vector<int32_t>{1, 3}));
    p.top_p = 0.81f;  // needs the third
    EXPECT_EQ(ids(Sampler(p).candidates(logits, kNoHistory)), (std::vector<int32_t>{1, 3, 0}));
}

TEST(Sampler, MinPIsALogitThresholdAfterTemperature) {
    SamplingParams p = plain(2.0f);
    p.min_p = 0.25f;  // keep logit/T ≥ max/T + ln 0.25 = 2 − 1.386 = 0.614
    const std::vector<float> logits = {4.0f, 1.3f, 1.2f, 2.0f};  // /T: 2.0, 0.65, 0.6, 1.0
    EXPECT_EQ(ids(Sampler(p).candidates(logits, kNoHistory)), (std::vector<int32_t>{0, 3, 1}));
}

TEST(Sampler, PenaltiesFollowTheirFormulas) {
    SamplingParams p = plain();
    p.repeat_penalty = 2.0f;
    p.presence_penalty = 0.5f;
    p.frequency_penalty = 0.25f;
    p.penalty_last_n = 3;  // sees only the last three tokens: 1, 2, 2
    std::vector<float> logits = {1.0f, 3.0f, -2.0f, 4.0f};
    const std::vector<int32_t> tokens = {3, 1, 2, 2};
    const std::vector<uint8_t> generated(tokens.size(), 1);
    apply_penalties(logits, {tokens, generated}, p);
    EXPECT_FLOAT_EQ(logits[0], 1.0f);
    EXPECT_FLOAT_EQ(logits[1], 3.0f / 2.0f - 0.5f - 0.25f);
    EXPECT_FLOAT_EQ(logits[2], -2.0f * 2.0f - 0.5f - 0.5f);
    EXPECT_FLOAT_EQ(logits[3], 4.0f);  // token 3 is outside the last three
}

TEST(Sampler, SameSeedSameTokensDifferentSeedDifferentTokens) {
    std::vector<float> logits(50);
    for (size_t i = 0; i < logits.size(); ++i) logits[i] = float(i % 7) * 0.3f;
    SamplingParams p = plain();
    p.seed = 1234;
    Sampler a(p), b(p);
    p.seed = 1235;
    Sampler c(p);
    int differ = 0;
    for (int i = 0; i < 200; ++i) {
        const int32_t ta = a.sample(logits, kNoHistory);
        ASSERT_EQ(ta, b.sample(logits, kNoHistory));
        differ += ta != c.sample(logits, kNoHistory);
    }
    EXPECT_GT(differ, 50);
}

TEST(Sampler, DrawFollowsSoftmaxDistribution) {
    // Pearson chi-square over 4 outcomes (3 degrees of freedom): 16.27 is the 0.999 quantile, so a
    // correct sampler fails this with probability 0.001 for a random seed, and never for this one.
    const std::vector<float> logits = {0.0f, 1.0f, 2.0f, -1.0f};
    SamplingParams p = plain(1.0f);
    p.seed = 42;
    Sampler sampler(p);
    const int draws = 40000;
    std::map<int32_t, int> counts;
    for (int i = 0; i < draws; ++i) ++counts[sampler.sample(logits, kNoHistory)];
    double z = 0.0;
    for (float l : logits) z += std::exp(double(l));
    double chi2 = 0.0;
    for (int32_t t = 0; t < 4; ++t) {
        const double expected = draws * std::exp(double(logits[size_t(t)])) / z;
        chi2 += (counts[t] - expected) * (counts[t] - expected) / expected;
    }
    EXPECT_LT(chi2, 16.27);
}

TEST(Sampler, TemperatureSharpensTheDistribution) {
    const std::vector<float> logits = {0.0f, 1.0f};
    SamplingParams p = plain(0.25f);  // p(1) = 1/(1+e^-4) = 0.982
    p.seed = 7;
    Sampler sampler(p);
    int ones = 0;
    for (int i = 0; i < 10000; ++i) ones += sampler.sample(logits, kNoHistory) == 1;
    EXPECT_NEAR(ones / 10000.0, 0.982, 0.006);  // ±4.7 standard deviations (σ = 0.0013)
}

TEST(Dry, PenalisesTheTokenThatContinuesAGeneratedLoop) {
    // A generated loop "1 2 3 4", the context ending inside its third copy after "1 2 3": the token
    // that continues the loop is 4, and it would extend a repeat of 7 ("1 2 3 4 1 2 3").
    const std::vector<int32_t> tokens = {9, 1, 2, 3, 4, 1, 2, 3, 4, 1, 2, 3};
    std::vector<uint8_t> generated(tokens.size(), 1);
    generated[0] = 0;  // only the first token was prompt
    const auto matches = dry_find_repeats(tokens, generated, 256, 2);
    ASSERT_EQ(matches.size(), 1u);
    EXPECT_EQ(matches[0].token, 4);
    EXPECT_EQ(matches[0].length, 7);  // "1 2 3 4 1 2 3" precedes the second 4 and ends the context

    SamplingParams p = plain();
    p.dry_multiplier = 0.8f;
    p.dry_base = 1.75f;
    p.dry_allowed_length = 2;
    std::vector<float> logits(10, 0.0f);
    apply_dry(logits, {tokens, generated}, p);
    EXPECT_FLOAT_EQ(logits[4], -0.8f * std::pow(1.75f, 5.0f));
    for (int t = 0; t < 10; ++t) {
        if (t != 4) EXPECT_EQ(logits[size_t(t)], 0.0f) << t;
    }
}

TEST(Dry, QuotingThePromptIsNotFined) {
    // The model repeats a span of the prompt word for word; the earlier occurrence is all prompt.
    const std::vector<int32_t> prompt = {5, 6, 7, 8, 9, 10, 11, 12, 20};
    std::vector<int32_t> tokens = prompt;
    for (int t : {5, 6, 7, 8, 9, 10, 11}) tokens.push_back(t);
    std::vector<uint8_t> generated(tokens.size(), 1);
    for (size_t i = 0; i < prompt.size(); ++i) generated[i] = 0;
    EXPECT_TRUE(dry_find_repeats(tokens, generated, 256, 6).empty());
    // The same tokens, had the first copy been generated, would be fined (token 12 continues it).
    std::vector<uint8_t> all_generated(tokens.size(), 1);
    const auto matches = dry_find_repeats(tokens, all_generated, 256, 6);
    ASSERT_EQ(matches.size(), 1u);
    EXPECT_EQ(matches[0].token, 12);
    EXPECT_EQ(matches[0].length, 7);
}

TEST(Dry, WindowLimitsHowFarBackRepeatsAreSought) {
    std::vector<int32_t> tokens = {1, 2, 3, 4, 5, 6, 7, 8};
    for (int i = 0; i < 300; ++i) tokens.push_back(100 + i);
    for (int t : {1, 2, 3, 4, 5, 6, 7}) tokens.push_back(t);
    const std::vector<uint8_t> generated(tokens.size(), 1);
    EXPECT_TRUE(dry_find_repeats(tokens, generated, 256, 6).empty());
    EXPECT_EQ(dry_find_repeats(tokens, generated, 400, 6).size(), 1u);
}
