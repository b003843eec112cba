// The chunked (WY) gated delta rule of train/reference_delta_chunked.h against its oracle, the
// recurrent form of reference_ops.h, forward and backward, and its backward against central finite
// differences. Shapes: T below the chunk, T not a multiple of it, chunks of one token, Hv > Hk,
// dk ≠ dv; decays weak, strong and so strong that e^γ underflows inside a chunk.
//
// Tolerance of the two forms' agreement: both are double with sums of at most a few hundred terms of
// magnitude ≤ max|result| (normalised keys, β < 1, decays ≤ 1), so each result carries ≈ 1e-14 of the
// largest magnitude at worst (measured worst over these cases: 5.1e-14, dg at T 150 with strong
// decays); 1e-12 relative to the largest magnitude of each output leaves a margin and still fails on
// any dropped term or wrong decay (≥ 1e-3 of a value).
#include "finite_difference.h"
#include "train/reference_delta_chunked.h"
#include "train/reference_ops.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <random>

namespace deltabit::train {
namespace {

using testing::expect_gradients_match;
using testing::random_values;
using Vec = std::vector<double>;

constexpr double kFormsAgree = 1e-12;

Vec zeros(size_t n) { return Vec(n, 0.0); }

struct Inputs {
    Vec q, k, v, g, beta, dout;
};

// Keys and queries L2-normalised (queries also scaled by 1/sqrt(dk)) as the layer feeds them;
// g = −decay_scale·|N(0,1)|, β in (0, 1).
Inputs make_inputs(const ref::DeltaRuleShape& s, uint64_t seed, double decay_scale) {
    std::mt19937_64 rng(seed);
    Inputs x{random_values(size_t(s.T * s.n_key_heads * s.key_dim), rng),
             random_values(size_t(s.T * s.n_key_heads * s.key_dim), rng),
             random_values(size_t(s.T * s.n_value_heads * s.value_dim), rng),
             random_values(size_t(s.T * s.n_value_heads), rng),
             random_values(size_t(s.T * s.n_value_heads), rng),
             random_values(size_t(s.T * s.n_value_heads * s.value_dim), rng)};
    for (Vec* m : {&x.q, &x.k})
        for (size_t r = 0; r < m->size(); r += size_t(s.key_dim)) {
            double sum = 0.0;
            for (int64_t i = 0; i < s.key_dim; ++i) sum += (*m)[r + size_t(i)] * (*m)[r + size_t(i)];
            const double scale = (m == &x.q ? 1.0 / std::sqrt(double(s.key_dim)) : 1.0) / std::sqrt(sum + 1e-6);
            for (int64_t i = 0; i < s.key_dim; ++i) (*m)[r + size_t(i)] *= scale;
        }
    for (double& y : x.g) y = -decay_scale * std::fabs(y);
    for (double& y : x.beta) y = ref::sigmoid(y);
    return x;
}

// max|a − b| / max|b|, printed beside the bound.
double relative_difference(const std::string& what, const Vec& got, const Vec& want) {
    double worst = 0.0, scale = 0.0;
    for (size_t i = 0; i < want.size(); ++i) {
        worst = std::max(worst, std::fabs(got[i] - want[i]));
        scale = std::max(scale, std::fabs(want[i]));
    }
    const double rel = scale > 0 ? worst / scale : worst;
    std::printf("[ chunked ] %-44s rel %.3g (max|ref| %.3g)\n", what.c_str(), rel, scale);
    return rel;
}

struct Gradients {
    Vec o, dq, dk, dv, dg, dbeta;
};

Gradients run(const ref::DeltaRuleShape& s, const Inputs& x, int64_t chunk) {
    Gradients r{zeros(x.v.size()), zeros(x.q.size()), zeros(x.k.size()),
                zeros(x.v.size()), zeros(x.g.size()), zeros(x.g.size())};
    if (chunk == 0) {
        ref::delta_rule_forward(x.q.data(), x.k.data(), x.v.data(), x.g.data(), x.beta.data(), s, r.o.data());
        ref::delta_rule_backward(x.q.data(), x.k.data(), x.v.data(), x.g.data(), x.beta.data(), x.dout.data(), s,
                                 r.dq.data(), r.dk.data(), r.dv.data(), r.dg.data(), r.dbeta.data());
    } else {
        ref::delta_rule_chunked_forward(x.q.data(), x.k.data(), x.v.data(), x.g.data(), x.beta.data(), s, chunk,
                                        r.o.data());
        ref::delta_rule_chunked_backward(x.q.data(), x.k.data(), x.v.data(), x.g.data(), x.beta.data(),
                                         x.dout.data(), s, chunk, r.dq.data(), r.dk.data(), r.dv.data(), r.dg.data(),
                                         r.dbeta.data());
    }
    return r;
}

TEST(ReferenceDeltaChunked, EqualsRecurrentForwardAndBackward) {
    struct Case {
        int64_t T, Hk, Hv, dk, dv, chunk;
    };
    const Case cases[] = {
        {1, 1, 1, 3, 4, 64},     // one token
        {40, 1, 2, 5, 3, 64},    // T below the chunk; grouped value heads
        {150, 2, 4, 6, 9, 64},   // two whole chunks and a partial one; Hv > Hk, dk < dv
        {10, 1, 1, 7, 2, 4},     // small chunks, the last partial; dk > dv
        {12, 2, 2, 4, 4, 3},     // whole small chunks only
        {9, 1, 3, 3, 5, 1},      // chunks of one token: the chunked form is the recurrence itself
    };
    // Decays per token: weak; strong (e^γ ≈ 1e-90 at the end of a 64-token chunk); so strong that
    // e^γ underflows to 0 inside a chunk (and states entering chunks are forgotten).
    for (double decay : {0.02, 3.0, 40.0})
        for (const Case& c : cases)
            for (uint64_t seed : {1, 2}) {
                const ref::DeltaRuleShape s{c.T, c.Hk, c.Hv, c.dk, c.dv};
                const Inputs x = make_inputs(s, seed, decay);
                const Gradients want = run(s, x, 0), got = run(s, x, c.chunk);
                const std::string tag = fmt::format("T{} {}/{} {}x{} C{} decay {} seed {}", c.T, c.Hk, c.Hv, c.dk,
                                                    c.dv, c.chunk, decay, seed);
                EXPECT_LE(relative_difference(tag + " o", got.o, want.o), kFormsAgree) << tag;
                EXPECT_LE(relative_difference(tag + " dq", got.dq, want.dq), kFormsAgree) << tag;
                EXPECT_LE(relative_difference(tag + " dk", got.dk, want.dk), kFormsAgree) << tag;
                EXPECT_LE(relative_difference(tag + " dv", got.dv, want.dv), kFormsAgree) << tag;
                EXPECT_LE(relative_difference(tag + " dg", got.dg, want.dg), kFormsAgree) << tag;
                EXPECT_LE(relative_difference(tag + " dbeta", got.dbeta, want.dbeta), kFormsAgree) << tag;
            }
}

TEST(ReferenceDeltaChunked, BackwardMatchesFiniteDifferences) {
    for (uint64_t seed : {1, 2, 3})
        for (auto [T, Hk, Hv, dk, dv, chunk] :
             {std::tuple{7, 1, 2, 3, 4, 3}, {2, 1, 1, 2, 3, 4}, {5, 2, 4, 3, 5, 2}, {8, 1, 1, 4, 2, 8}}) {
            const ref::DeltaRuleShape s{T, Hk, Hv, dk, dv};
            Inputs x = make_inputs(s, seed, 0.5);
            auto forward = [&] {
                Vec o(x.v.size());
                ref::delta_rule_chunked_forward(x.q.data(), x.k.data(), x.v.data(), x.g.data(), x.beta.data(), s,
                                                chunk, o.data());
                return o;
            };
            Vec dq = zeros(x.q.size()), dk_ = zeros(x.k.size()), dv_ = zeros(x.v.size()), dg = zeros(x.g.size()),
                db = zeros(x.beta.size());
            ref::delta_rule_chunked_backward(x.q.data(), x.k.data(), x.v.data(), x.g.data(), x.beta.data(),
                                             x.dout.data(), s, chunk, dq.data(), dk_.data(), dv_.data(), dg.data(),
                                             db.data());
            expect_gradients_match("delta_rule_chunked", {&x.q, &x.k, &x.v, &x.g, &x.beta},
                                   {"q", "k", "v", "g", "beta"}, forward, x.dout, {dq, dk_, dv_, dg, db});
        }
}

}  // namespace
}  // namespace deltabit::train
