// The op-parity harness's host half (STYLE habit 3, DESIGN §6 rung 1): hostile shapes, comparisons with
// derived tolerances, a one-line report per case, and the supports table. The CUDA half
// (tests/cuda/op_parity_cuda.h) adds NaN-poisoned, guard-banded device buffers; the parity tests
// themselves are tests/cuda/test_op_parity_*.cpp.
//
// Tolerances are stated in units of u = 2^-24, the fp32 unit roundoff (half an ulp), and derived per
// op from the operations the kernel performs (each correctly rounded op adds ≤ u relative; expf ≤ 2
// ulp = 4u; a sum of n same-sign terms accumulated in order ≤ n·u relative, to first order). Each case
// prints its worst |got − want| / tol ("ratio"), so a run shows how much room every bound leaves.
//
// Environment: DELTABIT_OPS_QUICK=1 drops the long shapes (for compute-sanitizer runs).
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "ops/op_support.h"

namespace deltabit::test {

inline constexpr double kU = 1.0 / 16777216.0;  // 2^-24, fp32 unit roundoff

// Lengths that straddle warp (32), block and power-of-two edges, and one past a thousand.
inline const std::vector<int64_t> kHostileLengths = {1, 63, 64, 65, 127, 129, 1000};

inline bool quick_mode() {
    const char* v = std::getenv("DELTABIT_OPS_QUICK");
    return v != nullptr && std::strcmp(v, "0") != 0;
}

inline std::vector<float> uniform(size_t n, std::mt19937& rng, float lo, float hi) {
    std::uniform_real_distribution<float> dist(lo, hi);
    std::vector<float> v(n);
    for (float& x : v) x = dist(rng);
    return v;
}

// Distance in representable floats between a and b (0 when equal, ±0 equal); huge for NaN or
// opposite signs far from zero.
inline int64_t ulp_distance(float a, float b) {
    if (std::isnan(a) || std::isnan(b)) return std::isnan(a) && std::isnan(b) ? 0 : INT64_MAX;
    auto ordered = [](float f) {
        int32_t i;
        std::memcpy(&i, &f, sizeof i);
        return i < 0 ? int64_t(INT32_MIN) - int64_t(i) : int64_t(i);  // monotone map onto the integers
    };
    return std::llabs(ordered(a) - ordered(b));
}

// got[i] against want[i] within tol(i) (an absolute amount per element). Fails at the first element
// outside, naming it; NaN in got never passes. Prints and returns the worst ratio |got − want| / tol.
inline double expect_within(const std::vector<float>& got, const std::vector<double>& want,
                            const std::function<double(size_t)>& tol, const std::string& what) {
    EXPECT_EQ(got.size(), want.size()) << what;
    double worst = 0.0;
    for (size_t i = 0; i < std::min(got.size(), want.size()); ++i) {
        const double err = std::fabs(double(got[i]) - want[i]);
        const double t = tol(i);
        if (!(err <= t)) {  // also catches NaN
            ADD_FAILURE() << what << ": element " << i << " is " << got[i] << ", want " << want[i] << " ± " << t
                          << " (error " << err << ")";
            return INFINITY;
        }
        if (t > 0) worst = std::max(worst, err / t);
        else if (err > 0) worst = INFINITY;
    }
    std::printf("[parity] %-64s ratio %.3f\n", what.c_str(), worst);
    return worst;
}

// Relative bound rel·|want| plus an absolute floor (for elements whose reference is ~0).
inline double expect_relative(const std::vector<float>& got, const std::vector<double>& want, double rel,
                              double floor_abs, const std::string& what) {
    return expect_within(got, want, [&](size_t i) { return rel * std::fabs(want[i]) + floor_abs; }, what);
}

inline std::vector<double> to_double(const std::vector<float>& v) { return {v.begin(), v.end()}; }

// At most max_ulp representable floats apart, element by element (NaN only matches NaN).
inline void expect_ulps(const std::vector<float>& got, const std::vector<float>& want, int64_t max_ulp,
                        const std::string& what) {
    ASSERT_EQ(got.size(), want.size()) << what;
    int64_t worst = 0;
    for (size_t i = 0; i < got.size(); ++i) {
        const int64_t d = ulp_distance(got[i], want[i]);
        ASSERT_LE(d, max_ulp) << what << ": element " << i << " is " << got[i] << ", want " << want[i];
        worst = std::max(worst, d);
    }
    std::printf("[parity] %-64s max %lld ulp (allowed %lld)\n", what.c_str(), (long long)worst, (long long)max_ulp);
}

// The supports table: one row per op, one column per dtype the op is asked about.
inline std::string supports_table(const char* backend, const std::function<bool(Op, DType)>& supports) {
    std::string out = std::string("supports (") + backend + ")\n";
    char cell[64];
    std::snprintf(cell, sizeof cell, "  %-16s", "op");
    out += cell;
    for (DType t : kWeightDTypes) {
        std::snprintf(cell, sizeof cell, " %-8s", std::string(dtype_name(t)).c_str());
        out += cell;
    }
    out += "\n";
    for (Op op : kAllOps) {
        std::snprintf(cell, sizeof cell, "  %-16s", std::string(op_name(op)).c_str());
        out += cell;
        for (DType t : kWeightDTypes) {
            std::snprintf(cell, sizeof cell, " %-8s", supports(op, t) ? "yes" : "-");
            out += cell;
        }
        out += "\n";
    }
    return out;
}

}  // namespace deltabit::test
