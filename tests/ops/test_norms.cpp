// rms_norm, l2_norm, gated_rms_norm, swiglu, gelu_glu, softcap, add_scale and scale_columns against values worked out by hand.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "ops/add_scale.h"
#include "ops/gated_rms_norm.h"
#include "ops/gelu_glu.h"
#include "ops/l2_norm.h"
#include "ops/rms_norm.h"
#include "ops/scale_columns.h"
#include "ops/softcap.h"
#include "ops/swiglu.h"
#include "ops_test_util.h"

namespace deltabit {
namespace {

// The references compute in double and round once, so results sit within an fp32 ulp or two of the
// exact value: 1e-6 relative.
constexpr double kRel = 1e-6;

TEST(RmsNorm, PlainAndOnePlusWeights) {
    // Row [3, 4]: mean of squares 12.5, so x / rms = [3, 4] / sqrt(12.5) = [0.848528137, 1.131370850].
    const float x[4] = {3, 4, -6, 8};  // second row: mean square 50, x/rms = [−0.848528, 1.131371]
    const float w[2] = {0.5f, -2.0f};
    std::vector<float> y(4);
    cpu::rms_norm(x, w, 2, 2, 0.0f, cpu::NormWeight::plain, y.data());
    test::expect_close(y, std::vector<double>{0.424264069, -2.262741700, -0.424264069, -2.262741700}, kRel);
    cpu::rms_norm(x, w, 2, 2, 0.0f, cpu::NormWeight::one_plus, y.data());
    test::expect_close(y, std::vector<double>{1.272792206, -1.131370850, -1.272792206, -1.131370850}, kRel);
}

TEST(RmsNorm, EpsIsAddedToTheMeanSquareAndInPlaceWorks) {
    std::vector<float> x = {1e-3f, 0.0f};  // mean square 5e-7; with eps 1e-6: rms = sqrt(1.5e-6)
    const float w[2] = {1, 1};
    cpu::rms_norm(x.data(), w, 1, 2, 1e-6f, cpu::NormWeight::plain, x.data());
    test::expect_close(x, std::vector<double>{1e-3 / std::sqrt(1.5e-6), 0.0}, kRel);
}

TEST(L2Norm, UnitLengthWithEpsInsideTheRoot) {
    const float x[4] = {3, 4, 1e-4f, 0};
    std::vector<float> y(4);
    cpu::l2_norm(x, 2, 2, 1e-6f, y.data());
    // Row 1: 3/sqrt(25 + 1e-6) ≈ 0.6; row 2: 1e-4 / sqrt(1e-8 + 1e-6) = 0.0995037190.
    test::expect_close(y, std::vector<double>{3 / std::sqrt(25.000001), 4 / std::sqrt(25.000001), 0.0995037190, 0},
                       kRel, 1e-3);
}

TEST(GatedRmsNorm, NormThenSiluGate) {
    const float x[2] = {3, 4};
    const float z[2] = {0.0f, 1.0f};  // silu(0) = 0, silu(1) = 1/(1+e^−1) = 0.731058579
    const float w[2] = {2.0f, -1.0f};
    std::vector<float> y(2);
    cpu::gated_rms_norm(x, z, w, 1, 2, 0.0f, y.data());
    test::expect_close(y, std::vector<double>{0.0, -1.131370850 * 0.731058579}, kRel);
}

TEST(Swiglu, SiluOfGateTimesUp) {
    const float gate[4] = {0.0f, 1.0f, -1.0f, -200.0f};
    const float up[4] = {5.0f, 2.0f, 3.0f, 7.0f};
    std::vector<float> out(4);
    cpu::swiglu(gate, up, 4, out.data());
    // silu(−1) = −1/(1+e) = −0.268941421; silu(−200) underflows to −0 (e^200 ≈ 7e86 is finite in double)
    test::expect_close(out, std::vector<double>{0.0, 1.462117157, -0.806824262, 0.0}, kRel, 1e-6);
    EXPECT_FALSE(std::isnan(out[3]));
}

TEST(RmsNorm, ScaleFreeIgnoresTheWeight) {
    // DiffusionGemma's value, router and input norms have no weight: w may be null.
    const float x[4] = {3, 4, -6, 8};
    std::vector<float> y(4);
    cpu::rms_norm(x, nullptr, 2, 2, 0.0f, cpu::NormWeight::none, y.data());
    test::expect_close(y, std::vector<double>{0.848528137, 1.131370850, -0.848528137, 1.131370850}, kRel);
}

TEST(GeluGlu, TanhGeluOfGateTimesUp) {
    // gelu_tanh(x) = 0.5·x·(1 + tanh(√(2/π)(x + 0.044715x³))), evaluated with Python's math module:
    // gelu_tanh(1) = 0.8411919906082768, gelu_tanh(−1) = −0.15880800939172324, gelu_tanh(3) = 2.996362607918227.
    // Exact GELU would give 0.8413447, −0.1586553, 2.9959502: the tanh form is told apart at 1e-4.
    const float gate[5] = {0.0f, 1.0f, -1.0f, 3.0f, -200.0f};
    const float up[5] = {5.0f, 2.0f, 3.0f, -1.0f, 7.0f};
    std::vector<float> out(5);
    cpu::gelu_glu(gate, up, 5, out.data());
    test::expect_close(out, std::vector<double>{0.0, 2 * 0.8411919906082768, 3 * -0.15880800939172324,
                                                -2.996362607918227, 0.0},
                       kRel, 1e-6);
    EXPECT_FALSE(std::isnan(out[4]));
}

TEST(Softcap, TanhBoundedAndNearIdentityForSmallLogits) {
    const float x[4] = {45.0f, -0.3f, 1e6f, 0.0f};
    std::vector<float> y(4);
    cpu::softcap(x, 4, 30.0f, y.data());
    // 30·tanh(1.5) = 27.154447609345993; 30·tanh(−0.01) = −0.2999900003999838 (Python math)
    test::expect_close(y, std::vector<double>{27.154447609345993, -0.2999900003999838, 30.0, 0.0}, kRel);
}

TEST(AddScale, AddRoundedBeforeTheProduct) {
    // 1 + 2^-24 rounds to 1 in fp32 before the product: (x + r)·s gives exactly s, where the sum kept
    // in double would give s·(1 + 2^-24), a different float for s = 3.
    const float x[3] = {1.0f, -2.5f, 0.0f};
    const float r[3] = {0x1p-24f, 0.5f, -0.0f};
    std::vector<float> y(3);
    cpu::add_scale(x, r, 3, 3.0f, y.data());
    EXPECT_EQ(y[0], 3.0f);
    EXPECT_EQ(y[1], -6.0f);
    EXPECT_EQ(y[2], 0.0f);
    // Without r, in place: the embedding scale.
    std::vector<float> z = {2.0f, -0.25f};
    cpu::add_scale(z.data(), nullptr, 2, 53.0f, z.data());
    EXPECT_EQ(z, (std::vector<float>{106.0f, -13.25f}));
}

TEST(ScaleColumns, EachColumnByItsWeightTimesTheConstant) {
    // Two rows of three: column i times w[i] times 1/4 (exact in binary).
    const float x[6] = {1.0f, 2.0f, -3.0f, 4.0f, 0.5f, 0.0f};
    const float w[3] = {2.0f, -1.0f, 8.0f};
    std::vector<float> y(6);
    cpu::scale_columns(x, w, 2, 3, 0.25, y.data());
    EXPECT_EQ(y, (std::vector<float>{0.5f, -0.5f, -6.0f, 2.0f, -0.125f, 0.0f}));
    // One rounding: x·w·c = (1 + 2^-23)²·(1 − 2^-24) is 1 + 1.5·2^-23 in double, halfway between two
    // floats, and rounds to the even one, 1 + 2^-22; rounding x·w to fp32 first (1 + 2^-22) and then the
    // product gives 1 + 2^-23.
    const float a = 1.0f + 0x1p-23f;
    std::vector<float> z(1);
    cpu::scale_columns(&a, &a, 1, 1, 1.0 - 0x1p-24, z.data());
    EXPECT_EQ(z[0], 1.0f + 0x1p-22f);
}

}  // namespace
}  // namespace deltabit
