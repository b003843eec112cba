// Small helpers shared by the op tests: seeded random buffers and element-wise closeness checks.
#pragma once

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <random>
#include <string>
#include <vector>

namespace deltabit::test {

inline std::vector<float> random_vector(size_t n, uint32_t seed, float lo = -1.0f, float hi = 1.0f) {
    std::mt19937 rng(seed);
    std::uniform_real_distribution<float> dist(lo, hi);
    std::vector<float> v(n);
    for (float& x : v) x = dist(rng);
    return v;
}

// |got − want| <= rel · max(|want|, floor) for every element; `floor` keeps near-zero elements from
// demanding an impossible relative accuracy.
inline void expect_close(const std::vector<float>& got, const std::vector<double>& want, double rel,
                         double floor = 1.0, const std::string& what = "") {
    ASSERT_EQ(got.size(), want.size()) << what;
    for (size_t i = 0; i < got.size(); ++i) {
        const double tol = rel * std::max(std::fabs(want[i]), floor);
        ASSERT_NEAR(got[i], want[i], tol) << what << " element " << i;
    }
}

inline void expect_close(const std::vector<float>& got, const std::vector<float>& want, double rel,
                         double floor = 1.0, const std::string& what = "") {
    expect_close(got, std::vector<double>(want.begin(), want.end()), rel, floor, what);
}

}  // namespace deltabit::test
