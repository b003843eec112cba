// Central finite differences in double for the trainer's backward tests. For a function f of several
// input tensors with output y, the scalar probe L = Σ r ⊙ y with a fixed random r has ∂L/∂x equal to
// the backward's dx when given dy = r, so every input element's analytic gradient is compared with
// (L(x + h) − L(x − h)) / 2h.
//
// Step and tolerance: the error of a central difference is truncation h²/6 · f‴ plus rounding
// ≈ ε·|L|/h. On the tiny whole models (weights of std 0.5, norms around them) f‴ is large: with
// h = 1e-5 truncation reached 9e-8 relative and shrank 100× for h 10× smaller (measured), so h = 1e-6,
// where rounding is ≈ 2e-16 · 20 / 1e-6 ≈ 4e-9. Measured worst over every op, shape and seed and both
// tiny models: 3.3e-9 (printed as the tests' worst_relative_error_* properties). The check is
// |analytic − numeric| ≤ 1e-8 · (1 + |numeric|); a real mistake (a dropped term, a wrong sign, a
// transposed index) moves a gradient by a sizeable part of itself, ≥ 1e-3 here.
#pragma once

#include <fmt/format.h>
#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <random>
#include <string>
#include <vector>

namespace deltabit::train::testing {

inline constexpr double kFiniteDifferenceStep = 1e-6;
inline constexpr double kFiniteDifferenceTolerance = 1e-8;

inline std::vector<double> random_values(size_t n, std::mt19937_64& rng, double scale = 1.0) {
    std::normal_distribution<double> normal(0.0, scale);
    std::vector<double> v(n);
    for (double& x : v) x = normal(rng);
    return v;
}

inline double dot(const std::vector<double>& a, const std::vector<double>& b) {
    double s = 0.0;
    for (size_t i = 0; i < a.size(); ++i) s += a[i] * b[i];
    return s;
}

// inputs: the tensors the function reads (perturbed in place one element at a time).
// forward: computes the output from the current inputs.
// analytic: the backward's gradient of each input, for dy = probe.
inline void expect_gradients_match(const std::string& what, std::vector<std::vector<double>*> inputs,
                                   const std::vector<std::string>& names,
                                   const std::function<std::vector<double>()>& forward,
                                   const std::vector<double>& probe, const std::vector<std::vector<double>>& analytic) {
    ASSERT_EQ(inputs.size(), analytic.size());
    double worst = 0.0;
    for (size_t a = 0; a < inputs.size(); ++a) {
        std::vector<double>& x = *inputs[a];
        ASSERT_EQ(x.size(), analytic[a].size()) << what << " " << names[a];
        int reported = 0;
        for (size_t i = 0; i < x.size(); ++i) {
            const double saved = x[i];
            x[i] = saved + kFiniteDifferenceStep;
            const double plus = dot(probe, forward());
            x[i] = saved - kFiniteDifferenceStep;
            const double minus = dot(probe, forward());
            x[i] = saved;
            const double numeric = (plus - minus) / (2 * kFiniteDifferenceStep);
            const double error = std::fabs(analytic[a][i] - numeric) / (1.0 + std::fabs(numeric));
            worst = std::max(worst, error);
            if (error > kFiniteDifferenceTolerance && reported++ < 5)
                ADD_FAILURE() << what << ": d" << names[a] << "[" << i << "] analytic " << analytic[a][i]
                              << " numeric " << numeric;
        }
    }
    ::testing::Test::RecordProperty("worst_relative_error_" + what, fmt::format("{:.3g}", worst));
}

}  // namespace deltabit::train::testing
