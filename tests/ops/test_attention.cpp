#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "ops/attention.h"
#include "ops/attention_spans.h"
#include "ops_test_util.h"

namespace deltabit {
namespace {

TEST(Attention, HandExampleWithHistoryAndGate) {
    // One head, head_dim 2, one new query at position 1 attending keys 0 and 1.
    // q·k0 / sqrt(2) = ln 3, q·k1 = 0 → weights 3/4, 1/4.
    const float q[2] = {float(std::log(3.0) * std::sqrt(2.0)), 0.0f};
    const float k[4] = {1, 0, 0, 1};
    const float v[4] = {4, 0, 0, 8};
    cpu::AttentionDims dims{.n_tokens = 1, .n_past = 1, .n_head = 1, .n_kv_head = 1, .head_dim = 2};
    std::vector<float> out(2);
    cpu::attention(q, k, v, nullptr, dims, out.data());
    test::expect_close(out, std::vector<double>{3.0, 2.0}, 1e-6);

    const float gate[2] = {0.0f, float(std::log(3.0))};  // sigmoid: 1/2 and 3/4
    cpu::attention(q, k, v, gate, dims, out.data());
    test::expect_close(out, std::vector<double>{1.5, 1.5}, 1e-6);
}

TEST(Attention, CausalMaskHidesLaterKeys) {
    // Two new tokens, no history: token 0 sees only itself, so its output is v0 whatever the scores.
    const float q[4] = {5, -3, 1, 1};
    const float k[4] = {1, 2, 3, 4};
    const float v[4] = {7, -7, 100, 200};
    cpu::AttentionDims dims{.n_tokens = 2, .n_past = 0, .n_head = 1, .n_kv_head = 1, .head_dim = 2};
    std::vector<float> out(4);
    cpu::attention(q, k, v, nullptr, dims, out.data());
    EXPECT_EQ(out[0], 7.0f);
    EXPECT_EQ(out[1], -7.0f);
    // token 1: scores (1+2)/√2 and (3+4)/√2 → weight of key 1 = 1/(1+e^{−4/√2})
    const double w1 = 1.0 / (1.0 + std::exp(-4.0 / std::sqrt(2.0)));
    EXPECT_NEAR(out[2], (1 - w1) * 7 + w1 * 100, 1e-5);
    EXPECT_NEAR(out[3], (1 - w1) * -7 + w1 * 200, 1e-5);
}

TEST(Attention, QueryHeadsShareKvHeadsInConsecutiveGroups) {
    // 4 query heads, 2 kv heads: heads 0,1 read kv head 0, heads 2,3 read kv head 1. With q = 0 the
    // weights are uniform, so each head outputs the mean of its kv head's values.
    const int64_t d = 1, past = 2;
    const std::vector<float> q(4, 0.0f);
    const std::vector<float> k(size_t((past + 1) * 2), 0.5f);
    const std::vector<float> v = {1, 10, 2, 20, 3, 30};  // [pos][kv_head]
    cpu::AttentionDims dims{.n_tokens = 1, .n_past = past, .n_head = 4, .n_kv_head = 2, .head_dim = d};
    std::vector<float> out(4);
    cpu::attention(q.data(), k.data(), v.data(), nullptr, dims, out.data());
    test::expect_close(out, std::vector<double>{2, 2, 20, 20}, 1e-6);
}

// A straightforward softmax attention written independently here, in the [head][pos] loop order.
std::vector<double> expected_attention(const std::vector<float>& q, const std::vector<float>& k,
                                       const std::vector<float>& v, const cpu::AttentionDims& d) {
    std::vector<double> out(size_t(d.n_tokens * d.n_head * d.head_dim), 0.0);
    for (int64_t h = 0; h < d.n_head; ++h) {
        const int64_t g = h * d.n_kv_head / d.n_head;
        for (int64_t t = 0; t < d.n_tokens; ++t) {
            std::vector<double> p;
            for (int64_t s = 0; s <= d.n_past + t; ++s) {
                double dot = 0;
                for (int64_t i = 0; i < d.head_dim; ++i)
                    dot += double(q[(t * d.n_head + h) * d.head_dim + i]) * k[(s * d.n_kv_head + g) * d.head_dim + i];
                p.push_back(std::exp(dot / std::sqrt(double(d.head_dim))));
            }
            double z = 0;
            for (double x : p) z += x;
            for (int64_t s = 0; s <= d.n_past + t; ++s)
                for (int64_t i = 0; i < d.head_dim; ++i)
                    out[(t * d.n_head + h) * d.head_dim + i] += p[s] / z * v[(s * d.n_kv_head + g) * d.head_dim + i];
        }
    }
    return out;
}

TEST(Attention, PrefillThenContinueEqualsOneCall) {
    const int64_t h = 6, hkv = 2, d = 16, total = 13, first = 8;
    const auto q = test::random_vector(size_t(total * h * d), 11, -2, 2);
    const auto k = test::random_vector(size_t(total * hkv * d), 12, -2, 2);
    const auto v = test::random_vector(size_t(total * hkv * d), 13);
    cpu::AttentionDims all{.n_tokens = total, .n_past = 0, .n_head = h, .n_kv_head = hkv, .head_dim = d};
    std::vector<float> whole(q.size());
    cpu::attention(q.data(), k.data(), v.data(), nullptr, all, whole.data());
    test::expect_close(whole, expected_attention(q, k, v, all), 1e-6);

    std::vector<float> split(q.size());
    cpu::AttentionDims a = all, b = all;
    a.n_tokens = first;
    b.n_tokens = total - first;
    b.n_past = first;
    cpu::attention(q.data(), k.data(), v.data(), nullptr, a, split.data());
    cpu::attention(q.data() + first * h * d, k.data(), v.data(), nullptr, b, split.data() + first * h * d);
    EXPECT_EQ(split, whole);  // same arithmetic in the same order: bit-identical
}

TEST(AttentionSpans, CausalSpansWithInverseSqrtScaleAreCausalAttention) {
    const int64_t T = 7, past = 3, h = 4, kvh = 2, d = 5;
    const std::vector<float> q = test::random_vector(T * h * d, 21);
    const std::vector<float> k = test::random_vector((past + T) * kvh * d, 22);
    const std::vector<float> v = test::random_vector((past + T) * kvh * d, 23);
    std::vector<float> want(T * h * d), got(T * h * d);
    cpu::attention(q.data(), k.data(), v.data(), nullptr, {T, past, h, kvh, d}, want.data());
    std::vector<int64_t> begin(T, 0), end(T);
    for (int64_t t = 0; t < T; ++t) end[size_t(t)] = past + t + 1;
    cpu::attention_spans(q.data(), k.data(), v.data(), {T, past + T, h, kvh, d}, 1.0 / std::sqrt(double(d)),
                         begin.data(), end.data(), got.data());
    EXPECT_EQ(got, want);
}

TEST(AttentionSpans, ScaleOneAndAWindowedSpan) {
    // One head, head_dim 2, scale 1 (no 1/√d). Query 0 sees keys 1..2 only: q·k1 = ln 3, q·k2 = 0 →
    // weights 3/4 and 1/4 of v1 = (4, 0) and v2 = (0, 8). Key 0 (huge score, value 1000) is outside the span.
    // Query 1 sees all three keys equally (q = 0): the mean of the values.
    const float q[4] = {float(std::log(3.0)), 0.0f, 0.0f, 0.0f};
    const float k[6] = {100, 0, 1, 0, 0, 1};
    const float v[6] = {1000, 1000, 4, 0, 0, 8};
    const int64_t begin[2] = {1, 0}, end[2] = {3, 3};
    std::vector<float> out(4);
    cpu::attention_spans(q, k, v, {2, 3, 1, 1, 2}, 1.0, begin, end, out.data());
    test::expect_close(out, std::vector<double>{3.0, 2.0, 1004.0 / 3.0, 1008.0 / 3.0}, 1e-6);
}

TEST(AttentionSpans, DiffusionSpansByRule) {
    // Encoder over a cache of 3 with window 2: query t sees itself (key 3 + t) and the key before it.
    std::vector<int64_t> begin(3), end(3);
    cpu::diffusion_key_spans(3, 3, true, 2, begin.data(), end.data());
    EXPECT_EQ(begin, (std::vector<int64_t>{2, 3, 4}));
    EXPECT_EQ(end, (std::vector<int64_t>{4, 5, 6}));
    // A window wider than the history clips at key 0; no window is plain causal.
    cpu::diffusion_key_spans(3, 1, true, 10, begin.data(), end.data());
    EXPECT_EQ(begin, (std::vector<int64_t>{0, 0, 0}));
    EXPECT_EQ(end, (std::vector<int64_t>{2, 3, 4}));
    cpu::diffusion_key_spans(3, 0, true, 0, begin.data(), end.data());
    EXPECT_EQ(end, (std::vector<int64_t>{1, 2, 3}));
    // The decoder: every query sees the cache and the whole canvas, the window notwithstanding (a sliding
    // layer's cache already holds only W − 1 tokens).
    cpu::diffusion_key_spans(3, 5, false, 2, begin.data(), end.data());
    EXPECT_EQ(begin, (std::vector<int64_t>{0, 0, 0}));
    EXPECT_EQ(end, (std::vector<int64_t>{8, 8, 8}));
}

}  // namespace
}  // namespace deltabit
