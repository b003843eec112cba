// Muon's CPU reference (train/muon.h): the Newton–Schulz iteration lands singular values in the band its
// polynomial predicts, orthogonality improves step by step, one update step matches a case worked by
// hand, the hidden matrices (and only they) take Muon while the rest take exactly AdamW's step.
#include "train/muon.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <random>

namespace deltabit::train {
namespace {

using Matrix = std::vector<double>;  // row-major

Matrix random_matrix(int64_t rows, int64_t cols, uint64_t seed) {
    std::mt19937_64 rng(seed);
    std::normal_distribution<double> normal(0.0, 1.0);
    Matrix m(size_t(rows * cols));
    for (double& x : m) x = normal(rng);
    return m;
}

// Eigenvalues of a symmetric n × n matrix by cyclic Jacobi rotations (double; to ~1e-14 here).
std::vector<double> symmetric_eigenvalues(Matrix a, int64_t n) {
    auto at = [&](int64_t i, int64_t j) -> double& { return a[size_t(i * n + j)]; };
    for (int sweep = 0; sweep < 100; ++sweep) {
        double off = 0.0;
        for (int64_t i = 0; i < n; ++i)
            for (int64_t j = 0; j < n; ++j)
                if (i != j) off += at(i, j) * at(i, j);
        if (off < 1e-30) break;
        for (int64_t p = 0; p < n; ++p)
            for (int64_t q = p + 1; q < n; ++q) {
                if (at(p, q) == 0.0) continue;
                const double theta = (at(q, q) - at(p, p)) / (2.0 * at(p, q));
                const double t = (theta >= 0 ? 1.0 : -1.0) / (std::fabs(theta) + std::sqrt(theta * theta + 1.0));
                const double c = 1.0 / std::sqrt(t * t + 1.0), s = t * c;
                for (int64_t k = 0; k < n; ++k) {  // A ← A·J
                    const double akp = at(k, p), akq = at(k, q);
                    at(k, p) = c * akp - s * akq;
                    at(k, q) = s * akp + c * akq;
                }
                for (int64_t k = 0; k < n; ++k) {  // A ← Jᵀ·A
                    const double apk = at(p, k), aqk = at(q, k);
                    at(p, k) = c * apk - s * aqk;
                    at(q, k) = s * apk + c * aqk;
                }
            }
    }
    std::vector<double> eigen(static_cast<size_t>(n));
    for (int64_t i = 0; i < n; ++i) eigen[size_t(i)] = at(i, i);
    std::sort(eigen.begin(), eigen.end());
    return eigen;
}

// The small side's Gram matrix (X·Xᵀ or Xᵀ·X, whichever is min(rows, cols) square).
Matrix small_gram(const Matrix& x, int64_t rows, int64_t cols) {
    const bool by_rows = rows <= cols;
    const int64_t n = by_rows ? rows : cols, k = by_rows ? cols : rows;
    Matrix g(size_t(n * n), 0.0);
    for (int64_t i = 0; i < n; ++i)
        for (int64_t j = 0; j < n; ++j)
            for (int64_t t = 0; t < k; ++t)
                g[size_t(i * n + j)] += by_rows ? x[size_t(i * cols + t)] * x[size_t(j * cols + t)]
                                                : x[size_t(t * cols + i)] * x[size_t(t * cols + j)];
    return g;
}

// The min(rows, cols) singular values, ascending, from the Gram matrix's eigenvalues.
std::vector<double> singular_values(const Matrix& x, int64_t rows, int64_t cols) {
    std::vector<double> s = symmetric_eigenvalues(small_gram(x, rows, cols), std::min(rows, cols));
    for (double& v : s) v = std::sqrt(std::max(v, 0.0));
    return s;
}

// ‖G − I‖_F with G the small side's Gram matrix: 0 for an exactly orthogonal (semi-orthogonal) X.
double distance_from_orthogonal(const Matrix& x, int64_t rows, int64_t cols) {
    const Matrix g = small_gram(x, rows, cols);
    const int64_t n = std::min(rows, cols);
    double sum = 0.0;
    for (int64_t i = 0; i < n; ++i)
        for (int64_t j = 0; j < n; ++j) {
            const double d = g[size_t(i * n + j)] - (i == j ? 1.0 : 0.0);
            sum += d * d;
        }
    return std::sqrt(sum);
}

double quintic(double s) {
    return kNewtonSchulzA * s + kNewtonSchulzB * s * s * s + kNewtonSchulzC * s * s * s * s * s;
}

struct Shape {
    int64_t rows, cols;
};
// Square, wide, tall, very wide and a single row: the shapes of the trainer's matrices and their edges.
const std::vector<Shape> kShapes = {{24, 24}, {16, 40}, {40, 16}, {7, 130}, {130, 7}, {1, 9}};

// The band: each step maps a singular value σ by the scalar quintic p. Iterated over σ₀ ∈ [3e-3, 1]
// (normalised by ‖U‖_F, so σ₀ ≤ 1), p⁵ stays in [0.6818, 1.2024] (the polynomial's own range: its
// minimum on the band is p(1) ≈ 0.7015 reached from below, its maximum 1.2024 at σ ≈ 0.68). Below
// 3e-3 five steps are not enough to reach it (p⁵(1e-3) = 0.47), so each input states its smallest σ₀.
constexpr double kBandLow = 0.68, kBandHigh = 1.21, kSmallestReachable = 3e-3;

TEST(NewtonSchulz, ScalarPolynomialBand) {
    double low = 1e9, high = 0.0;
    for (int k = 0; k <= 20000; ++k) {
        double s = kSmallestReachable * std::pow(1.0 / kSmallestReachable, k / 20000.0);
        for (int step = 0; step < 5; ++step) s = quintic(s);
        low = std::min(low, s);
        high = std::max(high, s);
    }
    std::printf("[ muon ] p^5 over sigma0 in [3e-3, 1]: [%.4f, %.4f]\n", low, high);
    EXPECT_GE(low, kBandLow);
    EXPECT_LE(high, kBandHigh);
    EXPECT_LT(low, 0.69);  // the band is tight: not a tolerance picked loose
    EXPECT_GT(high, 1.20);
}

TEST(NewtonSchulz, FiveStepsLandEverySingularValueInTheBand) {
    uint64_t seed = 1;
    for (const Shape& s : kShapes) {
        const Matrix u = random_matrix(s.rows, s.cols, seed++);
        double frobenius = 0.0;
        for (double x : u) frobenius += x * x;
        frobenius = std::sqrt(frobenius);
        const std::vector<double> before = singular_values(u, s.rows, s.cols);
        ASSERT_GE(before.front() / frobenius, kSmallestReachable) << s.rows << "x" << s.cols << ": premise";
        const Matrix x = newton_schulz(u, s.rows, s.cols, 5);
        const std::vector<double> after = singular_values(x, s.rows, s.cols);
        std::printf("[ muon ] %3lldx%-3lld sigma0/|U| in [%.4f, %.4f] -> NS5 sigma in [%.4f, %.4f]\n",
                    (long long)s.rows, (long long)s.cols, before.front() / frobenius, before.back() / frobenius,
                    after.front(), after.back());
        EXPECT_GE(after.front(), kBandLow) << s.rows << "x" << s.cols;
        EXPECT_LE(after.back(), kBandHigh) << s.rows << "x" << s.cols;
        // Each singular value is p⁵ of its own σ₀ (the iteration acts on them one by one): the largest
        // σ₀ need not give the largest result, so compare the sorted sets.
        std::vector<double> predicted;
        for (double v : before) {
            double p = v / (frobenius + kNewtonSchulzEps);
            for (int step = 0; step < 5; ++step) p = quintic(p);
            predicted.push_back(p);
        }
        std::sort(predicted.begin(), predicted.end());
        for (size_t i = 0; i < after.size(); ++i) EXPECT_NEAR(after[i], predicted[i], 1e-9) << s.rows << "x" << s.cols;
    }
}

// The iteration does not converge: it lifts small singular values (p(σ) > σ below the band, slope 3.4 at
// 0) until they enter the band, then moves them around inside it (p maps [0.68, 1.21] into itself). So
// what improves step by step is the smallest singular value, up to the band, and with it the distance
// from orthogonal measured against X₀; ‖X·Xᵀ − I‖_F itself may rise again once inside the band
// (measured for 7×130: 2.27, 0.42, 1.32, 0.60, 1.29, 0.54 over steps 0..5).
TEST(NewtonSchulz, OrthogonalityImprovesWithSteps) {
    uint64_t seed = 11;
    for (const Shape& s : kShapes) {
        if (std::min(s.rows, s.cols) == 1) continue;  // one singular value: covered by the hand case
        const Matrix u = random_matrix(s.rows, s.cols, seed++);
        std::vector<double> distance, smallest;
        for (int64_t steps = 0; steps <= 5; ++steps) {
            const Matrix x = newton_schulz(u, s.rows, s.cols, steps);
            distance.push_back(distance_from_orthogonal(x, s.rows, s.cols));
            smallest.push_back(singular_values(x, s.rows, s.cols).front());
        }
        std::printf("[ muon ] %3lldx%-3lld by step: |XX^T - I|_F", (long long)s.rows, (long long)s.cols);
        for (double d : distance) std::printf(" %.3f", d);
        std::printf("; min sigma");
        for (double d : smallest) std::printf(" %.3f", d);
        std::printf("\n");
        for (size_t k = 1; k < distance.size(); ++k) {
            if (smallest[k - 1] < kBandLow)
                EXPECT_GT(smallest[k], smallest[k - 1]) << s.rows << "x" << s.cols << " step " << k;
            else
                EXPECT_GE(smallest[k], kBandLow) << s.rows << "x" << s.cols << " step " << k;
            EXPECT_LT(distance[k], distance[0]) << s.rows << "x" << s.cols << " step " << k;
        }
        // Within the band each of the n singular values is at most max(1 − 0.68², 1.21² − 1) = 0.54
        // from 1 in σ², against nearly 1 each at X₀ (σ₀ ≤ 1 with Σσ₀² = 1).
        EXPECT_LT(distance.back(), 0.54 * std::sqrt(double(std::min(s.rows, s.cols))));
        EXPECT_GT(distance.front(), 0.9 * std::sqrt(double(std::min(s.rows, s.cols)) - 1.0));
    }
}

TEST(NewtonSchulz, ZeroStaysZeroAndRankIsKept) {
    const Matrix zero(12, 0.0);
    for (double x : newton_schulz(zero, 3, 4, 5)) EXPECT_EQ(x, 0.0);
    // Rank 1 (u·vᵀ): one singular value p⁵(1 − ε) along u·vᵀ, the others stay 0.
    Matrix u(size_t(4 * 3));
    const double left[4] = {1, -2, 0.5, 3}, right[3] = {2, 1, -1};
    for (int i = 0; i < 4; ++i)
        for (int j = 0; j < 3; ++j) u[size_t(i * 3 + j)] = left[i] * right[j];
    const std::vector<double> s = singular_values(newton_schulz(u, 4, 3, 5), 4, 3);
    const double norm = std::sqrt(1 + 4 + 0.25 + 9) * std::sqrt(4 + 1 + 1);  // ‖u·vᵀ‖_F = ‖u‖·‖v‖
    double one = norm / (norm + kNewtonSchulzEps);
    for (int step = 0; step < 5; ++step) one = quintic(one);
    EXPECT_NEAR(s[2], one, 1e-9);
    EXPECT_NEAR(s[0], 0.0, 1e-6);
    EXPECT_NEAR(s[1], 0.0, 1e-6);
}

// A 3 × 2 (tall: the transposed path) U = P·diag(3, 1)·Qᵀ with P's columns and Q orthonormal: NS maps it
// to P·diag(p⁵(3/√10), p⁵(1/√10))·Qᵀ, which the test writes out. Then one Muon step and a second one,
// the momentum and Nesterov arithmetic written out by hand.
TEST(Muon, UpdateStepByHand) {
    const double c = std::cos(0.3), s = std::sin(0.3);
    const double p[3][2] = {{c, 0.0}, {s, 0.0}, {0.0, 1.0}};  // orthonormal columns
    const double q[2][2] = {{0.6, -0.8}, {0.8, 0.6}};          // a rotation
    auto compose = [&](double s1, double s2) {
        Matrix m(6);
        for (int i = 0; i < 3; ++i)
            for (int j = 0; j < 2; ++j) m[size_t(i * 2 + j)] = p[i][0] * s1 * q[j][0] + p[i][1] * s2 * q[j][1];
        return m;
    };
    const Matrix g = compose(3.0, 1.0);
    auto p5 = [](double v) {
        for (int step = 0; step < 5; ++step) v = quintic(v);
        return v;
    };
    const double norm = std::sqrt(10.0) + kNewtonSchulzEps;
    const Matrix want_ns = compose(p5(3.0 / norm), p5(1.0 / norm));
    const Matrix got_ns = newton_schulz(g, 3, 2, 5);
    for (size_t i = 0; i < 6; ++i) EXPECT_NEAR(got_ns[i], want_ns[i], 1e-12) << i;

    // Step 1 from M = 0: M = G; Nesterov U = G + μM = (1 + μ)·G, whose NS is that of G up to the
    // ε in the normalisation; θ ← θ − η(s·O + λθ), s = 0.2·√3.
    OptimizerSection o;
    o.muon_momentum = 0.5;  // exact in binary: the fp32 momentum arithmetic is exact here too
    o.muon_weight_decay = 0.25;
    const double eta = 0.125, scale = 0.2 * std::sqrt(3.0);
    EXPECT_DOUBLE_EQ(muon_update_scale(3, 2), scale);
    EXPECT_DOUBLE_EQ(muon_update_scale(2, 3), scale);
    std::vector<float> w = {1, 2, 3, 4, 5, 6}, gf(g.begin(), g.end()), m(6, 0.0f);
    const std::vector<float> w0 = w;
    muon_update_matrix(w, gf, m, 3, 2, o, eta);
    const double norm1 = 1.5 * std::sqrt(10.0) + kNewtonSchulzEps;
    const Matrix o1 = compose(p5(4.5 / norm1), p5(1.5 / norm1));
    for (size_t i = 0; i < 6; ++i) {
        EXPECT_EQ(m[i], gf[i]);
        EXPECT_NEAR(w[i], w0[i] - eta * (scale * o1[i] + 0.25 * w0[i]), 1e-6) << i;
    }
    // Step 2 with G₂ = −G: M = μ·G − G = −0.5·G; U = G₂ + μM = −1.25·G → NS(U) = −NS(G) (to ε).
    std::vector<float> g2(6);
    for (size_t i = 0; i < 6; ++i) g2[i] = -gf[i];
    const std::vector<float> w1 = w;
    muon_update_matrix(w, g2, m, 3, 2, o, eta);
    const double norm2 = 1.25 * std::sqrt(10.0) + kNewtonSchulzEps;
    const Matrix o2 = compose(p5(3.75 / norm2), p5(1.25 / norm2));
    for (size_t i = 0; i < 6; ++i) {
        EXPECT_FLOAT_EQ(m[i], -0.5f * gf[i]);
        EXPECT_NEAR(w[i], w1[i] - eta * (-scale * o2[i] + 0.25 * w1[i]), 1e-6) << i;
    }
    // Without Nesterov the direction is M itself: U = −0.5·G after the same two gradients.
    o.muon_nesterov = false;
    std::vector<float> w_plain = w0, m_plain(6, 0.0f);
    muon_update_matrix(w_plain, gf, m_plain, 3, 2, o, eta);
    const std::vector<float> w_plain1 = w_plain;
    muon_update_matrix(w_plain, g2, m_plain, 3, 2, o, eta);
    const double norm3 = 0.5 * std::sqrt(10.0) + kNewtonSchulzEps;
    const Matrix o3 = compose(p5(1.5 / norm3), p5(0.5 / norm3));
    for (size_t i = 0; i < 6; ++i)
        EXPECT_NEAR(w_plain[i], w_plain1[i] - eta * (-scale * o3[i] + 0.25 * w_plain1[i]), 1e-6) << i;
}

ModelConfig tiny_hybrid() {
    ModelConfig c;
    c.arch = Arch::qwen35;
    c.n_vocab = 11;
    c.n_embd = 8;
    c.n_ff = 12;
    c.n_head = 2;
    c.n_head_kv = 1;
    c.head_dim = 4;
    c.rope_dim = 2;
    c.attn_output_gate = true;
    c.ssm_n_key_heads = 1;
    c.ssm_n_value_heads = 2;
    c.ssm_key_dim = 4;
    c.ssm_value_dim = 4;
    c.ssm_conv_kernel = 3;
    c.layers = {LayerKind::linear_attention, LayerKind::full_attention};
    c.layer_is_moe = {false, false};
    return c;
}

TEST(Muon, RoutesExactlyTheHiddenMatrices) {
    const ParameterLayout layout(tiny_hybrid());
    std::vector<std::string> muon;
    for (const ParameterInfo& p : layout.all())
        if (p.hidden_matrix) {
            muon.push_back(p.name);
            EXPECT_EQ(p.shape.size(), 2u) << p.name;
            EXPECT_EQ(p.role, ParameterRole::matrix) << p.name;
        }
    const std::vector<std::string> want = {
        "model.layers.0.linear_attn.in_proj_qkv.weight", "model.layers.0.linear_attn.in_proj_z.weight",
        "model.layers.0.linear_attn.out_proj.weight",    "model.layers.0.mlp.gate_proj.weight",
        "model.layers.0.mlp.up_proj.weight",             "model.layers.0.mlp.down_proj.weight",
        "model.layers.1.self_attn.q_proj.weight",        "model.layers.1.self_attn.k_proj.weight",
        "model.layers.1.self_attn.v_proj.weight",        "model.layers.1.self_attn.o_proj.weight",
        "model.layers.1.mlp.gate_proj.weight",           "model.layers.1.mlp.up_proj.weight",
        "model.layers.1.mlp.down_proj.weight",
    };
    EXPECT_EQ(muon, want);
    // Among the tensors that stay on AdamW: the embeddings, the LM head and DeltaNet's gate projections.
    for (const char* name :
         {"model.embed_tokens.weight", "lm_head.weight", "model.layers.0.linear_attn.in_proj_a.weight",
          "model.layers.0.linear_attn.in_proj_b.weight", "model.layers.0.linear_attn.conv1d.weight",
          "model.layers.0.linear_attn.A_log", "model.norm.weight"})
        EXPECT_FALSE(layout.get(name).hidden_matrix) << name;
}

// muon_step = clipping, then AdamW's exact step on every non-hidden tensor and Muon on the hidden ones.
TEST(Muon, StepIsAdamWOffTheHiddenMatricesAndMuonOnThem) {
    const ParameterLayout layout(tiny_hybrid());
    std::vector<float> params(size_t(layout.total())), grads(params.size());
    std::mt19937_64 rng(3);
    std::normal_distribution<float> normal(0.0f, 1.0f);
    for (float& x : params) x = 0.1f * normal(rng);
    for (float& x : grads) x = normal(rng);
    OptimizerSection o;
    o.kind = "muon";
    o.clip = 1.0;
    o.lr = 1e-2;
    o.muon_lr = 2e-2;
    std::vector<float> adam_params = params, adam_grads = grads, muon_params = params, muon_grads = grads;
    AdamState adam_state, muon_state;
    for (int step = 0; step < 2; ++step) {  // twice: the second reads the moments and momentum of the first
        const double adam_norm = adamw_step(layout, o, 1e-2, adam_params, adam_grads, adam_state);
        const double muon_norm = optimizer_step(layout, o, 1e-2, muon_params, muon_grads, muon_state);
        EXPECT_EQ(adam_norm, muon_norm);
        adam_grads = grads;
        muon_grads = grads;
    }
    EXPECT_EQ(muon_state.step, 2);
    std::vector<float> clipped = grads;
    clip_by_global_norm(o, clipped);
    for (const ParameterInfo& p : layout.all()) {
        const auto slots = [&](const std::vector<float>& v) {
            return std::vector<float>(v.begin() + p.offset, v.begin() + p.offset + p.size);
        };
        if (!p.hidden_matrix) {
            EXPECT_EQ(slots(muon_params), slots(adam_params)) << p.name;
            EXPECT_EQ(slots(muon_state.m), slots(adam_state.m)) << p.name;
            continue;
        }
        // Momentum after two equal clipped gradients: μ·g + g, in fp32 as the update does it.
        for (int64_t i = p.offset; i < p.offset + p.size; ++i) {
            const float g = clipped[size_t(i)], mu = float(o.muon_momentum);
            EXPECT_EQ(muon_state.m[size_t(i)], mu * (0.0f * mu + g) + g) << p.name;
            EXPECT_EQ(muon_state.v[size_t(i)], 0.0f) << p.name;
        }
        // The update's RMS: s·RMS(O) ≈ 0.2 (the scale rule), O's singular values within the band.
        double sum = 0.0;
        std::vector<float> w = slots(params), m(size_t(p.size), 0.0f);
        const std::vector<float> g = slots(clipped);
        muon_update_matrix(w, g, m, p.shape[0], p.shape[1], o, 1.0);
        for (int64_t i = 0; i < p.size; ++i) {
            const double decayed = double(params[size_t(p.offset + i)]) * (1.0 - o.muon_weight_decay);
            const double step = double(w[size_t(i)]) - decayed;
            sum += step * step;
        }
        const double rms = std::sqrt(sum / double(p.size));
        EXPECT_GT(rms, 0.2 * kBandLow) << p.name;
        EXPECT_LT(rms, 0.2 * kBandHigh) << p.name;
        EXPECT_NE(slots(muon_params), slots(adam_params)) << p.name;
    }
}

TEST(Muon, RateFollowsTheSchedule) {
    OptimizerSection o;
    o.lr = 4e-3;
    o.muon_lr = 2e-2;
    o.min_lr = 4e-4;
    o.warmup_steps = 10;
    EXPECT_NEAR(muon_learning_rate(o, learning_rate(o, 0, 100)), 2e-3, 1e-17);  // warmup: 1/10 of muon_lr
    EXPECT_NEAR(muon_learning_rate(o, learning_rate(o, 9, 100)), 2e-2, 1e-16);  // peak
    EXPECT_NEAR(muon_learning_rate(o, learning_rate(o, 99, 100)), 2e-3, 1e-15);  // min_lr / lr of it at the end
}

}  // namespace
}  // namespace deltabit::train
