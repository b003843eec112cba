#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "ops/rope.h"
#include "ops/rope_proportional.h"
#include "ops_test_util.h"

namespace deltabit {
namespace {

TEST(Rope, PartialNeoxAgainstExplicitCosSin) {
    // head_dim 6, rope_dim 4, theta 10000: inv_freq = [1, 10000^(−2/4) = 0.01]; pairs (0,2) and (1,3);
    // dims 4 and 5 pass through.
    const int64_t heads = 2, dim = 6;
    std::vector<float> x = {1, 2, 3, 4, 5, 6, -1, 0.5f, 2, -3, 7, 8,      // token 0 (two heads)
                            1, 2, 3, 4, 5, 6, -1, 0.5f, 2, -3, 7, 8};     // token 1
    const int32_t pos[2] = {0, 3};
    cpu::rope_neox(x.data(), pos, 2, heads, dim, 4, 10000.0f);

    std::vector<double> want;
    const double in[2][6] = {{1, 2, 3, 4, 5, 6}, {-1, 0.5, 2, -3, 7, 8}};
    for (const int p : {0, 3}) {
        const double a0 = p * 1.0, a1 = p * 0.01;
        for (const auto& h : in) {
            want.push_back(h[0] * std::cos(a0) - h[2] * std::sin(a0));
            want.push_back(h[1] * std::cos(a1) - h[3] * std::sin(a1));
            want.push_back(h[2] * std::cos(a0) + h[0] * std::sin(a0));
            want.push_back(h[3] * std::cos(a1) + h[1] * std::sin(a1));
            want.push_back(h[4]);
            want.push_back(h[5]);
        }
    }
    // 0.01 and 3·0.01 are not exact in fp32; the fp32 angle differs by < 1e-9 rad here.
    test::expect_close(x, want, 1e-6);
}

TEST(Rope, FullRotaryAndNormPreserved) {
    const int64_t dim = 8;
    std::vector<float> x = test::random_vector(dim, 5);
    const std::vector<float> before = x;
    const int32_t pos[1] = {17};
    cpu::rope_neox(x.data(), pos, 1, 1, dim, dim, 1e6f);
    for (int j = 0; j < dim / 2; ++j) {
        const double n0 = std::hypot(before[j], before[j + dim / 2]);
        const double n1 = std::hypot(x[j], x[j + dim / 2]);
        EXPECT_NEAR(n1, n0, 1e-6 * std::max(n0, 1.0)) << "pair " << j;
    }
    // Pair 0 has inv_freq 1: angle 17 rad exactly.
    EXPECT_NEAR(x[0], before[0] * std::cos(17.0) - before[4] * std::sin(17.0), 1e-6);
}

TEST(Rope, AngleIsFormedInFp32LikeTransformers) {
    // At position 100000 the fp32 product pos · inv_freq differs from the exact product by up to half
    // an fp32 ulp of 1e5 (~0.004 rad); the op must follow the fp32 path transformers takes.
    const int64_t dim = 4;
    const float theta = 1e7f;
    std::vector<float> x = {1, 0, 0, 0};
    const int32_t pos[1] = {100003};
    cpu::rope_neox(x.data(), pos, 1, 1, dim, dim, theta);
    // pair (1,3) has inv_freq = 1 / theta^(2/4) in fp32
    std::vector<float> y = {0, 1, 0, 0};
    cpu::rope_neox(y.data(), pos, 1, 1, dim, dim, theta);
    const float inv_freq = 1.0f / float(std::pow(double(theta), double(2.0f / 4.0f)));
    const float angle = float(pos[0]) * inv_freq;
    EXPECT_NEAR(y[1], std::cos(double(angle)), 1e-6);
    EXPECT_NEAR(y[3], std::sin(double(angle)), 1e-6);
    EXPECT_NEAR(x[0], std::cos(100003.0), 1e-6);  // inv_freq 1: the fp32 angle is exact
}

TEST(RopeProportional, OnlyTheFirstPairsRotateWithTheWholeHeadInTheExponent) {
    // head_dim 8, 1 rotated pair of 4 (DiffusionGemma's full layers: 64 of 256): pair (0, 4) rotates by
    // pos·theta^0 = pos; dims 1, 2, 3, 5, 6, 7 pass through untouched.
    const int64_t dim = 8;
    std::vector<float> x = test::random_vector(2 * dim, 11);
    const std::vector<float> before = x;
    const int32_t pos[2] = {0, 5};
    cpu::rope_proportional(x.data(), pos, 2, 1, dim, 1, 1e6f);
    for (int t = 0; t < 2; ++t) {
        const float* b = before.data() + t * dim;
        const float* a = x.data() + t * dim;
        EXPECT_NEAR(a[0], b[0] * std::cos(pos[t]) - b[4] * std::sin(pos[t]), 1e-6);
        EXPECT_NEAR(a[4], b[4] * std::cos(pos[t]) + b[0] * std::sin(pos[t]), 1e-6);
        for (int i : {1, 2, 3, 5, 6, 7}) EXPECT_EQ(a[i], b[i]) << "token " << t << " dim " << i;
    }
    // Two rotated pairs: pair 1's frequency is theta^(−2/8) (over head_dim), not theta^(−2/4) as a
    // partial rope_neox over the first 4 dims would use.
    std::vector<float> y = {0, 1, 0, 0, 0, 0, 0, 0};
    const int32_t p7[1] = {7};
    cpu::rope_proportional(y.data(), p7, 1, 1, dim, 2, 10000.0f);
    const float inv_freq = 1.0f / float(std::pow(10000.0, double(2.0f / 8.0f)));
    EXPECT_NEAR(y[1], std::cos(double(7.0f * inv_freq)), 1e-6);
    EXPECT_NEAR(y[5], std::sin(double(7.0f * inv_freq)), 1e-6);
}

TEST(RopeProportional, AllPairsIsFullNeoxRope) {
    const int64_t dim = 16, heads = 3, T = 4;
    std::vector<float> a = test::random_vector(T * heads * dim, 12), b = a;
    const int32_t pos[T] = {0, 1, 77, 4096};
    cpu::rope_proportional(a.data(), pos, T, heads, dim, dim / 2, 10000.0f);
    cpu::rope_neox(b.data(), pos, T, heads, dim, dim, 10000.0f);
    EXPECT_EQ(a, b);  // the same formula in the same order
}

}  // namespace
}  // namespace deltabit
