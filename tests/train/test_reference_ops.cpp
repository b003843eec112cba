// Every backward of the trainer's CPU reference (train/reference_ops.h) against central finite
// differences in double (finite_difference.h gives the tolerance and why), on small hostile shapes
// (odd sizes, one token, GQA and Hv ≠ Hk groupings, dk ≠ dv) and several seeds.
#include "finite_difference.h"
#include "train/reference_ops.h"

#include <gtest/gtest.h>

#include <random>

namespace deltabit::train {
namespace {

using testing::expect_gradients_match;
using testing::random_values;
using Vec = std::vector<double>;

constexpr uint64_t kSeeds[] = {1, 2, 3};

Vec zeros(size_t n) { return Vec(n, 0.0); }

TEST(ReferenceOps, LinearBackward) {
    for (uint64_t seed : kSeeds)
        for (auto [n, in, out] : {std::tuple{1, 1, 1}, {3, 5, 7}, {4, 9, 2}}) {
            std::mt19937_64 rng(seed);
            Vec x = random_values(size_t(n * in), rng), w = random_values(size_t(out * in), rng);
            const Vec probe = random_values(size_t(n * out), rng);
            auto forward = [&] {
                Vec y(size_t(n * out));
                ref::linear_forward(x.data(), w.data(), n, in, out, y.data());
                return y;
            };
            Vec dx = zeros(x.size()), dw = zeros(w.size());
            ref::linear_backward(x.data(), w.data(), probe.data(), n, in, out, dx.data(), dw.data());
            expect_gradients_match("linear", {&x, &w}, {"x", "w"}, forward, probe, {dx, dw});
        }
}

TEST(ReferenceOps, RmsNormBackwardPlainAndOnePlus) {
    for (uint64_t seed : kSeeds)
        for (bool one_plus : {false, true})
            for (auto [rows, dim] : {std::pair{1, 1}, {3, 7}, {2, 16}}) {
                std::mt19937_64 rng(seed);
                Vec x = random_values(size_t(rows * dim), rng), w = random_values(size_t(dim), rng, 0.3);
                const Vec probe = random_values(x.size(), rng);
                const double eps = 1e-6;
                auto forward = [&] {
                    Vec y(x.size());
                    ref::rms_norm_forward(x.data(), w.data(), rows, dim, eps, one_plus, y.data());
                    return y;
                };
                Vec dx = zeros(x.size()), dw = zeros(w.size());
                ref::rms_norm_backward(x.data(), w.data(), probe.data(), rows, dim, eps, one_plus, dx.data(),
                                       dw.data());
                expect_gradients_match(one_plus ? "rms_norm_1p" : "rms_norm", {&x, &w}, {"x", "w"}, forward, probe,
                                       {dx, dw});
            }
}

TEST(ReferenceOps, SwigluBackward) {
    for (uint64_t seed : kSeeds) {
        std::mt19937_64 rng(seed);
        const int64_t n = 13;
        Vec gate = random_values(n, rng, 2.0), up = random_values(n, rng);
        const Vec probe = random_values(n, rng);
        auto forward = [&] {
            Vec y(n);
            ref::swiglu_forward(gate.data(), up.data(), n, y.data());
            return y;
        };
        Vec dg = zeros(n), du = zeros(n);
        ref::swiglu_backward(gate.data(), up.data(), probe.data(), n, dg.data(), du.data());
        expect_gradients_match("swiglu", {&gate, &up}, {"gate", "up"}, forward, probe, {dg, du});
    }
}

TEST(ReferenceOps, RopeBackwardIsTheTranspose) {
    for (uint64_t seed : kSeeds)
        for (auto [T, heads, head_dim, rope_dim] : {std::tuple{1, 1, 4, 4}, {5, 3, 12, 4}, {7, 2, 16, 16}}) {
            std::mt19937_64 rng(seed);
            Vec x = random_values(size_t(T * heads * head_dim), rng);
            const Vec probe = random_values(x.size(), rng);
            const float theta = 1.0e4f;
            auto forward = [&] {
                Vec y = x;
                ref::rope_forward(y.data(), T, heads, head_dim, rope_dim, theta);
                return y;
            };
            Vec dx = probe;
            ref::rope_backward(dx.data(), T, heads, head_dim, rope_dim, theta);
            expect_gradients_match("rope", {&x}, {"x"}, forward, probe, {dx});
        }
}

TEST(ReferenceOps, AttentionBackwardCausalGqa) {
    for (uint64_t seed : kSeeds)
        for (auto [T, Hq, Hkv, dh] : {std::tuple{1, 1, 1, 3}, {5, 4, 2, 6}, {6, 3, 1, 5}}) {
            std::mt19937_64 rng(seed);
            Vec q = random_values(size_t(T * Hq * dh), rng), k = random_values(size_t(T * Hkv * dh), rng),
                v = random_values(size_t(T * Hkv * dh), rng);
            const ref::AttentionShape shape{T, Hq, Hkv, dh, 1.0 / std::sqrt(double(dh))};
            const Vec probe = random_values(q.size(), rng);
            auto forward = [&] {
                Vec o(q.size());
                ref::attention_forward(q.data(), k.data(), v.data(), shape, o.data());
                return o;
            };
            Vec dq = zeros(q.size()), dk = zeros(k.size()), dv = zeros(v.size());
            ref::attention_backward(q.data(), k.data(), v.data(), probe.data(), shape, dq.data(), dk.data(),
                                    dv.data());
            expect_gradients_match("attention", {&q, &k, &v}, {"q", "k", "v"}, forward, probe, {dq, dk, dv});
        }
}

TEST(ReferenceOps, AttentionIsCausal) {
    // The output at token t must not move when a later key or value does.
    std::mt19937_64 rng(7);
    const int64_t T = 4, H = 2, dh = 3;
    Vec q = random_values(size_t(T * H * dh), rng), k = random_values(q.size(), rng), v = random_values(q.size(), rng);
    const ref::AttentionShape shape{T, H, H, dh, 0.5};
    Vec before(q.size()), after(q.size());
    ref::attention_forward(q.data(), k.data(), v.data(), shape, before.data());
    for (int64_t i = (T - 1) * H * dh; i < T * H * dh; ++i) k[size_t(i)] += 1.0, v[size_t(i)] -= 2.0;
    ref::attention_forward(q.data(), k.data(), v.data(), shape, after.data());
    for (int64_t i = 0; i < (T - 1) * H * dh; ++i) EXPECT_EQ(before[size_t(i)], after[size_t(i)]) << i;
    EXPECT_NE(before.back(), after.back());
}

TEST(ReferenceOps, ConvSiluBackward) {
    for (uint64_t seed : kSeeds)
        for (auto [T, C, K] : {std::tuple{1, 1, 4}, {3, 5, 4}, {9, 2, 3}}) {
            std::mt19937_64 rng(seed);
            Vec x = random_values(size_t(T * C), rng), w = random_values(size_t(C * K), rng, 0.7);
            const Vec probe = random_values(x.size(), rng);
            auto forward = [&] {
                Vec y(x.size());
                ref::conv_silu_forward(x.data(), w.data(), T, C, K, y.data());
                return y;
            };
            Vec dx = zeros(x.size()), dw = zeros(w.size());
            ref::conv_silu_backward(x.data(), w.data(), probe.data(), T, C, K, dx.data(), dw.data());
            expect_gradients_match("conv_silu", {&x, &w}, {"x", "w"}, forward, probe, {dx, dw});
        }
}

TEST(ReferenceOps, L2NormBackward) {
    for (uint64_t seed : kSeeds)
        for (auto [rows, dim] : {std::pair{1, 1}, {3, 8}, {2, 5}}) {
            std::mt19937_64 rng(seed);
            Vec x = random_values(size_t(rows * dim), rng);
            const Vec probe = random_values(x.size(), rng);
            const double eps = 1e-6, scale = 1.0 / std::sqrt(double(dim));
            auto forward = [&] {
                Vec y(x.size());
                ref::l2_norm_forward(x.data(), rows, dim, eps, scale, y.data());
                return y;
            };
            Vec dx = zeros(x.size());
            ref::l2_norm_backward(x.data(), probe.data(), rows, dim, eps, scale, dx.data());
            expect_gradients_match("l2_norm", {&x}, {"x"}, forward, probe, {dx});
        }
}

TEST(ReferenceOps, GdnGatesBackward) {
    for (uint64_t seed : kSeeds) {
        std::mt19937_64 rng(seed);
        const int64_t T = 4, Hv = 3;
        Vec b = random_values(T * Hv, rng, 2.0), a = random_values(T * Hv, rng, 2.0),
            a_log = random_values(Hv, rng, 0.5), dt_bias = random_values(Hv, rng);
        const Vec probe = random_values(2 * T * Hv, rng);
        auto forward = [&] {
            Vec out(size_t(2 * T * Hv));
            ref::gdn_gates_forward(b.data(), a.data(), a_log.data(), dt_bias.data(), T, Hv, out.data(),
                                   out.data() + T * Hv);
            return out;
        };
        Vec db = zeros(b.size()), da = zeros(a.size()), dalog = zeros(Hv), ddt = zeros(Hv);
        ref::gdn_gates_backward(b.data(), a.data(), a_log.data(), dt_bias.data(), probe.data(), probe.data() + T * Hv,
                                T, Hv, db.data(), da.data(), dalog.data(), ddt.data());
        expect_gradients_match("gdn_gates", {&b, &a, &a_log, &dt_bias}, {"b", "a", "A_log", "dt_bias"}, forward,
                               probe, {db, da, dalog, ddt});
    }
}

TEST(ReferenceOps, DeltaRuleBackward) {
    for (uint64_t seed : kSeeds)
        for (auto [T, Hk, Hv, dk, dv] : {std::tuple{1, 1, 1, 2, 3}, {5, 2, 4, 3, 5}, {7, 1, 2, 4, 2}}) {
            std::mt19937_64 rng(seed);
            const ref::DeltaRuleShape shape{T, Hk, Hv, dk, dv};
            // Unit-norm-ish keys and β in (0, 1), g < 0, as the layer feeds them.
            Vec q = random_values(size_t(T * Hk * dk), rng, 0.5), k = random_values(size_t(T * Hk * dk), rng, 0.5),
                v = random_values(size_t(T * Hv * dv), rng), g = random_values(size_t(T * Hv), rng, 0.3),
                beta = random_values(size_t(T * Hv), rng, 0.3);
            for (double& x : g) x = -std::fabs(x);
            for (double& x : beta) x = 0.5 + x * 0.5;
            const Vec probe = random_values(size_t(T * Hv * dv), rng);
            auto forward = [&] {
                Vec o(size_t(T * Hv * dv));
                ref::delta_rule_forward(q.data(), k.data(), v.data(), g.data(), beta.data(), shape, o.data());
                return o;
            };
            Vec dq = zeros(q.size()), dk_ = zeros(k.size()), dv_ = zeros(v.size()), dg = zeros(g.size()),
                db = zeros(beta.size());
            ref::delta_rule_backward(q.data(), k.data(), v.data(), g.data(), beta.data(), probe.data(), shape,
                                     dq.data(), dk_.data(), dv_.data(), dg.data(), db.data());
            expect_gradients_match("delta_rule", {&q, &k, &v, &g, &beta}, {"q", "k", "v", "g", "beta"}, forward,
                                   probe, {dq, dk_, dv_, dg, db});
        }
}

TEST(ReferenceOps, GatedRmsNormBackward) {
    for (uint64_t seed : kSeeds)
        for (auto [rows, dim] : {std::pair{1, 1}, {4, 6}, {3, 9}}) {
            std::mt19937_64 rng(seed);
            Vec x = random_values(size_t(rows * dim), rng), z = random_values(x.size(), rng, 2.0),
                w = random_values(size_t(dim), rng);
            const Vec probe = random_values(x.size(), rng);
            const double eps = 1e-6;
            auto forward = [&] {
                Vec y(x.size());
                ref::gated_rms_norm_forward(x.data(), z.data(), w.data(), rows, dim, eps, y.data());
                return y;
            };
            Vec dx = zeros(x.size()), dz = zeros(z.size()), dw = zeros(w.size());
            ref::gated_rms_norm_backward(x.data(), z.data(), w.data(), probe.data(), rows, dim, eps, dx.data(),
                                         dz.data(), dw.data());
            expect_gradients_match("gated_rms_norm", {&x, &z, &w}, {"x", "z", "w"}, forward, probe, {dx, dz, dw});
        }
}

TEST(ReferenceOps, LmHeadCrossEntropyBackwardAndChunking) {
    for (uint64_t seed : kSeeds)
        for (auto [n, D, V, chunk] : {std::tuple{1, 3, 5, 1}, {7, 4, 11, 3}, {5, 6, 9, 16}}) {
            std::mt19937_64 rng(seed);
            Vec x = random_values(size_t(n * D), rng), w = random_values(size_t(V * D), rng);
            std::vector<int32_t> targets(static_cast<size_t>(n));
            for (int64_t t = 0; t < n; ++t) targets[size_t(t)] = int32_t(rng() % uint64_t(V));
            if (n > 2) targets[1] = -1;  // an ignored position
            int64_t counted = 0;
            auto forward = [&] {
                return Vec{ref::lm_head_cross_entropy_forward(x.data(), w.data(), targets.data(), n, D, V, chunk,
                                                              &counted)};
            };
            // Chunking changes nothing but the grouping of the sum.
            int64_t counted_whole = 0;
            const double whole = ref::lm_head_cross_entropy_forward(x.data(), w.data(), targets.data(), n, D, V, n,
                                                                    &counted_whole);
            EXPECT_NEAR(forward()[0], whole, 1e-12 * std::fabs(whole));
            EXPECT_EQ(counted, counted_whole);
            EXPECT_EQ(counted, n > 2 ? n - 1 : n);
            const Vec probe{1.0};
            Vec dx = zeros(x.size()), dw = zeros(w.size());
            ref::lm_head_cross_entropy_backward(x.data(), w.data(), targets.data(), n, D, V, chunk, 1.0, dx.data(),
                                                dw.data());
            expect_gradients_match("lm_head_ce", {&x, &w}, {"x", "w"}, forward, probe, {dx, dw});
        }
}

TEST(ReferenceOps, CrossEntropyOfUniformLogitsIsLogV) {
    // Zero weights give uniform probabilities: the loss per position is exactly ln V.
    const int64_t n = 3, D = 2, V = 7;
    const Vec x(size_t(n * D), 1.0), w(size_t(V * D), 0.0);
    const std::vector<int32_t> targets{0, 3, 6};
    int64_t counted = 0;
    EXPECT_NEAR(ref::lm_head_cross_entropy_forward(x.data(), w.data(), targets.data(), n, D, V, 2, &counted),
                3 * std::log(7.0), 1e-12);
}

}  // namespace
}  // namespace deltabit::train
