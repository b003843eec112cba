// The gated delta rule: a hand-computed two-token case, the recurrent form against the matrix form
// S_t = e^{g_t} (I − β_t k_t k_tᵀ) S_{t−1} + β_t k_t v_tᵀ written here independently, the chunked form
// against the recurrent form on awkward lengths, split calls, and the two key-head mappings.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "ops/delta_rule.h"
#include "ops/l2_norm.h"
#include "ops_test_util.h"

namespace deltabit {
namespace {

using cpu::DeltaRuleDims;
using cpu::KeyHeadMap;

TEST(DeltaRule, TwoTokensByHand) {
    // d_k = 2, d_v = 1, one head. Token 0: k = q = e0, v = 2, β = 0.5, g = 0 → δ = 1, S = [1; 0],
    // o = q·S / √2 = 1/√2. Token 1: g = ln 0.5 → S = [0.5; 0]; k = e1, v = 4, β = 1 → δ = 4,
    // S = [0.5; 4]; q = [0.6, 0.8] → o = (0.3 + 3.2) / √2.
    const float q[4] = {1, 0, 0.6f, 0.8f};
    const float k[4] = {1, 0, 0, 1};
    const float v[2] = {2, 4};
    const float g[2] = {0.0f, float(std::log(0.5))};
    const float beta[2] = {0.5f, 1.0f};
    const DeltaRuleDims dims{.n_tokens = 2, .n_key_heads = 1, .n_value_heads = 1, .key_dim = 2, .value_dim = 1};
    for (const bool chunked : {false, true}) {
        std::vector<float> state(2, 0.0f), out(2);
        if (chunked)
            cpu::gated_delta_rule_chunked(q, k, v, g, beta, dims, state.data(), out.data());
        else
            cpu::gated_delta_rule_recurrent(q, k, v, g, beta, dims, state.data(), out.data());
        test::expect_close(out, std::vector<double>{1 / std::sqrt(2.0), 3.5 / std::sqrt(2.0)}, 1e-6, 1.0,
                           chunked ? "chunked" : "recurrent");
        test::expect_close(state, std::vector<double>{0.5, 4.0}, 1e-6, 1.0, chunked ? "chunked" : "recurrent");
    }
}

struct Inputs {
    DeltaRuleDims dims;
    std::vector<float> q, k, v, g, beta, state;
};

// Random inputs shaped like the model's: q, k L2-normalised, g a log-decay in [−2, 0) with some
// near-zero values (slow decay), β in (0, 1), a non-zero initial state.
Inputs make_inputs(int64_t n_tokens, KeyHeadMap map, uint32_t seed) {
    Inputs in;
    in.dims = {.n_tokens = n_tokens, .n_key_heads = 2, .n_value_heads = 6, .key_dim = 8, .value_dim = 5,
               .key_head_map = map};
    const auto& d = in.dims;
    in.q = test::random_vector(size_t(n_tokens * d.n_key_heads * d.key_dim), seed);
    in.k = test::random_vector(in.q.size(), seed + 1);
    cpu::l2_norm(in.q.data(), n_tokens * d.n_key_heads, d.key_dim, 1e-6f, in.q.data());
    cpu::l2_norm(in.k.data(), n_tokens * d.n_key_heads, d.key_dim, 1e-6f, in.k.data());
    in.v = test::random_vector(size_t(n_tokens * d.n_value_heads * d.value_dim), seed + 2, -2, 2);
    in.g = test::random_vector(size_t(n_tokens * d.n_value_heads), seed + 3, -2.0f, -1e-3f);
    in.beta = test::random_vector(in.g.size(), seed + 4, 0.05f, 0.95f);
    in.state = test::random_vector(size_t(d.n_value_heads * d.key_dim * d.value_dim), seed + 5);
    return in;
}

TEST(DeltaRule, RecurrentMatchesTheMatrixForm) {
    const Inputs in = make_inputs(20, KeyHeadMap::grouped, 100);
    const auto& d = in.dims;
    std::vector<float> state = in.state, out(in.v.size());
    cpu::gated_delta_rule_recurrent(in.q.data(), in.k.data(), in.v.data(), in.g.data(), in.beta.data(), d,
                                    state.data(), out.data());

    const int64_t dk = d.key_dim, dv = d.value_dim, r = d.n_value_heads / d.n_key_heads;
    std::vector<double> want_out(out.size()), want_state(state.size());
    for (int64_t h = 0; h < d.n_value_heads; ++h) {
        const int64_t kh = h / r;  // grouped
        std::vector<double> s(in.state.begin() + h * dk * dv, in.state.begin() + (h + 1) * dk * dv);
        for (int64_t t = 0; t < d.n_tokens; ++t) {
            const float* k = &in.k[(t * d.n_key_heads + kh) * dk];
            const float* q = &in.q[(t * d.n_key_heads + kh) * dk];
            const float* v = &in.v[(t * d.n_value_heads + h) * dv];
            const double b = in.beta[t * d.n_value_heads + h], decay = std::exp(in.g[t * d.n_value_heads + h]);
            // (I − β k kᵀ) S, then scale and add β k vᵀ
            std::vector<double> next(s.size());
            for (int64_t i = 0; i < dk; ++i)
                for (int64_t j = 0; j < dv; ++j) {
                    double proj = 0;
                    for (int64_t m = 0; m < dk; ++m) proj += k[i] * double(k[m]) * s[m * dv + j];
                    next[i * dv + j] = decay * (s[i * dv + j] - b * proj) + b * k[i] * double(v[j]);
                }
            s = next;
            for (int64_t j = 0; j < dv; ++j) {
                double o = 0;
                for (int64_t i = 0; i < dk; ++i) o += q[i] * s[i * dv + j];
                want_out[(t * d.n_value_heads + h) * dv + j] = o / std::sqrt(double(dk));
            }
        }
        std::copy(s.begin(), s.end(), want_state.begin() + h * dk * dv);
    }
    // The op rounds its state to fp32 each token (~6e-8 relative), the matrix form does not; over 20
    // decaying steps that stays below 1e-6 of the unit-scale values.
    test::expect_close(out, want_out, 1e-6);
    test::expect_close(state, want_state, 1e-6);
}

TEST(DeltaRule, ChunkedEqualsRecurrentOnAwkwardLengths) {
    for (const KeyHeadMap map : {KeyHeadMap::tiled, KeyHeadMap::grouped}) {
        for (const int64_t n : {1, 63, 64, 65, 130}) {
            const Inputs in = make_inputs(n, map, uint32_t(200 + n));
            std::vector<float> s_rec = in.state, o_rec(in.v.size());
            std::vector<float> s_chk = in.state, o_chk(in.v.size());
            cpu::gated_delta_rule_recurrent(in.q.data(), in.k.data(), in.v.data(), in.g.data(), in.beta.data(),
                                            in.dims, s_rec.data(), o_rec.data());
            cpu::gated_delta_rule_chunked(in.q.data(), in.k.data(), in.v.data(), in.g.data(), in.beta.data(),
                                          in.dims, s_chk.data(), o_chk.data());
            const std::string what = "T=" + std::to_string(n) + (map == KeyHeadMap::tiled ? " tiled" : " grouped");
            // Both compute in double and differ only in when the state is rounded to fp32 (every token
            // vs every chunk). Measured: at most 6e-8 (one ulp) for T up to 1000; 1e-6 leaves room
            // for other seeds without hiding a wrong term (a dropped diagonal costs ~1e-1).
            test::expect_close(o_chk, o_rec, 1e-6, 1.0, what + " output");
            test::expect_close(s_chk, s_rec, 1e-6, 1.0, what + " state");
        }
    }
}

TEST(DeltaRule, SmallChunksEqualRecurrent) {
    const Inputs in = make_inputs(23, KeyHeadMap::tiled, 300);
    std::vector<float> s_rec = in.state, o_rec(in.v.size()), s_chk = in.state, o_chk(in.v.size());
    cpu::gated_delta_rule_recurrent(in.q.data(), in.k.data(), in.v.data(), in.g.data(), in.beta.data(), in.dims,
                                    s_rec.data(), o_rec.data());
    cpu::gated_delta_rule_chunked(in.q.data(), in.k.data(), in.v.data(), in.g.data(), in.beta.data(), in.dims,
                                  s_chk.data(), o_chk.data(), 4);
    test::expect_close(o_chk, o_rec, 1e-6);  // as above
    test::expect_close(s_chk, s_rec, 1e-6);
}

TEST(DeltaRule, PrefillThenContinueEqualsOneCall) {
    const int64_t total = 70, first = 41;
    const Inputs in = make_inputs(total, KeyHeadMap::tiled, 400);
    const auto& d = in.dims;
    const int64_t qk_row = d.n_key_heads * d.key_dim, v_row = d.n_value_heads * d.value_dim, gh = d.n_value_heads;
    for (const bool chunked : {false, true}) {
        auto run = [&](int64_t t0, int64_t n, float* state, float* out) {
            DeltaRuleDims part = d;
            part.n_tokens = n;
            auto* fn = chunked ? +[](const float* q, const float* k, const float* v, const float* g, const float* b,
                                     const DeltaRuleDims& dd, float* s, float* o) {
                cpu::gated_delta_rule_chunked(q, k, v, g, b, dd, s, o);
            }
                               : +[](const float* q, const float* k, const float* v, const float* g, const float* b,
                                     const DeltaRuleDims& dd, float* s, float* o) {
                                     cpu::gated_delta_rule_recurrent(q, k, v, g, b, dd, s, o);
                                 };
            fn(in.q.data() + t0 * qk_row, in.k.data() + t0 * qk_row, in.v.data() + t0 * v_row, in.g.data() + t0 * gh,
               in.beta.data() + t0 * gh, part, state, out + t0 * v_row);
        };
        std::vector<float> s_one = in.state, o_one(in.v.size()), s_two = in.state, o_two(in.v.size());
        run(0, total, s_one.data(), o_one.data());
        run(0, first, s_two.data(), o_two.data());
        run(first, total - first, s_two.data(), o_two.data());
        // Recurrent: identical arithmetic, so bit-equal. Chunked: the chunk boundaries move, which
        // changes only where the state is rounded to fp32 (see ChunkedEqualsRecurrentOnAwkwardLengths).
        const double rel = chunked ? 1e-6 : 0.0;
        test::expect_close(o_two, o_one, rel, 1.0, chunked ? "chunked output" : "recurrent output");
        test::expect_close(s_two, s_one, rel, 1.0, chunked ? "chunked state" : "recurrent state");
    }
}

TEST(DeltaRule, KeyHeadMappings) {
    const DeltaRuleDims tiled{.n_tokens = 1, .n_key_heads = 2, .n_value_heads = 6, .key_dim = 1, .value_dim = 1,
                              .key_head_map = KeyHeadMap::tiled};
    DeltaRuleDims grouped = tiled;
    grouped.key_head_map = KeyHeadMap::grouped;
    std::vector<int64_t> t, g;
    for (int64_t h = 0; h < 6; ++h) t.push_back(cpu::key_head_of(h, tiled)), g.push_back(cpu::key_head_of(h, grouped));
    EXPECT_EQ(t, (std::vector<int64_t>{0, 1, 0, 1, 0, 1}));
    EXPECT_EQ(g, (std::vector<int64_t>{0, 0, 0, 1, 1, 1}));
}

TEST(DeltaRule, GroupedEqualsTiledWithValueHeadsReordered) {
    // The qwen35 converter moves grouped value head (kh·r + j) to tiled position (j·H_k + kh); running
    // the tiled op on reordered inputs must give the grouped op's outputs, reordered the same way.
    const Inputs in = make_inputs(9, KeyHeadMap::grouped, 500);
    const auto& d = in.dims;
    const int64_t hk = d.n_key_heads, hv = d.n_value_heads, r = hv / hk, dv = d.value_dim, dk = d.key_dim;
    auto tiled_of = [&](int64_t grouped_h) { return (grouped_h % r) * hk + grouped_h / r; };
    auto permute = [&](const std::vector<float>& x, int64_t per_head, int64_t rows) {
        std::vector<float> y(x.size());
        for (int64_t t = 0; t < rows; ++t)
            for (int64_t h = 0; h < hv; ++h)
                std::copy_n(x.begin() + (t * hv + h) * per_head, per_head, y.begin() + (t * hv + tiled_of(h)) * per_head);
        return y;
    };
    std::vector<float> s_g = in.state, o_g(in.v.size());
    cpu::gated_delta_rule_recurrent(in.q.data(), in.k.data(), in.v.data(), in.g.data(), in.beta.data(), d, s_g.data(),
                                    o_g.data());
    DeltaRuleDims td = d;
    td.key_head_map = KeyHeadMap::tiled;
    const auto v = permute(in.v, dv, d.n_tokens), g = permute(in.g, 1, d.n_tokens), b = permute(in.beta, 1, d.n_tokens);
    std::vector<float> s_t = permute(in.state, dk * dv, 1), o_t(in.v.size());
    cpu::gated_delta_rule_recurrent(in.q.data(), in.k.data(), v.data(), g.data(), b.data(), td, s_t.data(), o_t.data());
    EXPECT_EQ(o_t, permute(o_g, dv, d.n_tokens));
    EXPECT_EQ(s_t, permute(s_g, dk * dv, 1));
}

}  // namespace
}  // namespace deltabit
