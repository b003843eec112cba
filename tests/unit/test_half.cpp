// fp16 / bf16 conversions: every rounding edge checked against values worked out by hand from the
// IEEE 754 binary16 / bfloat16 layouts, plus exhaustive bit-exact round trips.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>

#include "core/half.h"

namespace deltabit {
namespace {

float pow2(int e) { return std::ldexp(1.0f, e); }

TEST(Half, DecodesSpecialAndBoundaryPatterns) {
    EXPECT_EQ(half_to_float(0x0000), 0.0f);
    EXPECT_TRUE(std::signbit(half_to_float(0x8000)));
    EXPECT_EQ(half_to_float(0x8000), 0.0f);
    EXPECT_EQ(half_to_float(0x0001), pow2(-24));                 // smallest subnormal
    EXPECT_EQ(half_to_float(0x03ff), 1023.0f * pow2(-24));       // largest subnormal
    EXPECT_EQ(half_to_float(0x0400), pow2(-14));                 // smallest normal
    EXPECT_EQ(half_to_float(0x3c00), 1.0f);
    EXPECT_EQ(half_to_float(0xc000), -2.0f);
    EXPECT_EQ(half_to_float(0x3555), 0.333251953125f);           // 1.0101010101b · 2^-2
    EXPECT_EQ(half_to_float(0x7bff), 65504.0f);                  // largest finite
    EXPECT_EQ(half_to_float(0x7c00), INFINITY);
    EXPECT_EQ(half_to_float(0xfc00), -INFINITY);
    EXPECT_TRUE(std::isnan(half_to_float(0x7e00)));
    EXPECT_TRUE(std::isnan(half_to_float(0x7c01)));               // signalling payload stays NaN
}

TEST(Half, EncodesWithRoundToNearestEven) {
    EXPECT_EQ(float_to_half(1.0f), 0x3c00);
    EXPECT_EQ(float_to_half(-0.0f), 0x8000);
    // 1 + 2^-11 is halfway between 1 (even mantissa) and 1 + 2^-10: stays at 1.
    EXPECT_EQ(float_to_half(1.0f + pow2(-11)), 0x3c00);
    // 1 + 3·2^-11 is halfway between mantissa 1 (odd) and 2 (even): goes up.
    EXPECT_EQ(float_to_half(1.0f + 3 * pow2(-11)), 0x3c02);
    // Just above the halfway point rounds up even from an even mantissa.
    EXPECT_EQ(float_to_half(1.0f + pow2(-11) + pow2(-20)), 0x3c01);
    EXPECT_EQ(float_to_half(65504.0f), 0x7bff);
    EXPECT_EQ(float_to_half(65519.0f), 0x7bff);   // below the midpoint to 65536
    EXPECT_EQ(float_to_half(65520.0f), 0x7c00);   // the midpoint: 0x3ff is odd, so it rounds up, to inf
    EXPECT_EQ(float_to_half(1e10f), 0x7c00);
    EXPECT_EQ(float_to_half(-1e10f), 0xfc00);
    EXPECT_EQ(float_to_half(INFINITY), 0x7c00);
    EXPECT_EQ(float_to_half(-INFINITY), 0xfc00);
    const uint16_t nan = float_to_half(NAN);
    EXPECT_EQ(nan & 0x7c00, 0x7c00);
    EXPECT_NE(nan & 0x03ff, 0);
}

TEST(Half, EncodesSubnormalsWithRoundToNearestEven) {
    EXPECT_EQ(float_to_half(pow2(-24)), 0x0001);
    EXPECT_EQ(float_to_half(pow2(-25)), 0x0000);              // halfway to 0x0001: ties to even 0
    EXPECT_EQ(float_to_half(pow2(-25) * 1.0001f), 0x0001);     // just above halfway
    EXPECT_EQ(float_to_half(-pow2(-26)), 0x8000);              // underflows to −0
    EXPECT_EQ(float_to_half(3 * pow2(-25)), 0x0002);           // 1.5 ulp: ties to even 2
    EXPECT_EQ(float_to_half(5 * pow2(-25)), 0x0002);           // 2.5 ulp: ties to even 2
    EXPECT_EQ(float_to_half(1023.0f * pow2(-24)), 0x03ff);
    // Halfway between the largest subnormal and the smallest normal: carries into the exponent.
    EXPECT_EQ(float_to_half(1023.5f * pow2(-24)), 0x0400);
    EXPECT_EQ(float_to_half(pow2(-14)), 0x0400);
    EXPECT_EQ(float_to_half(1e-30f), 0x0000);
}

TEST(Half, EveryFiniteAndInfinitePatternRoundTrips) {
    for (uint32_t bits = 0; bits < 0x10000; ++bits) {
        const auto h = uint16_t(bits);
        const float f = half_to_float(h);
        if (std::isnan(f)) {
            EXPECT_EQ(h & 0x7c00, 0x7c00);
            EXPECT_TRUE(std::isnan(half_to_float(float_to_half(f))));
            continue;
        }
        ASSERT_EQ(float_to_half(f), h) << "pattern 0x" << std::hex << bits;
    }
}

TEST(Bf16, DecodesByShifting) {
    EXPECT_EQ(bf16_to_float(0x3f80), 1.0f);
    EXPECT_EQ(bf16_to_float(0xc040), -3.0f);
    EXPECT_EQ(bf16_to_float(0x7f80), INFINITY);
    EXPECT_EQ(bf16_to_float(0x0001), bits_to_float(0x00010000u));  // subnormal stays subnormal
    EXPECT_TRUE(std::isnan(bf16_to_float(0x7fc0)));
}

TEST(Bf16, EncodesWithRoundToNearestEven) {
    EXPECT_EQ(float_to_bf16(1.0f), 0x3f80);
    EXPECT_EQ(float_to_bf16(bits_to_float(0x3f808000u)), 0x3f80);   // tie, even stays
    EXPECT_EQ(float_to_bf16(bits_to_float(0x3f818000u)), 0x3f82);   // tie, odd goes up
    EXPECT_EQ(float_to_bf16(bits_to_float(0x3f808001u)), 0x3f81);   // above tie
    EXPECT_EQ(float_to_bf16(bits_to_float(0x3f807fffu)), 0x3f80);   // below tie
    EXPECT_EQ(float_to_bf16(bits_to_float(0x7f7fffffu)), 0x7f80);   // largest float rounds to inf
    EXPECT_EQ(float_to_bf16(INFINITY), 0x7f80);
    EXPECT_EQ(float_to_bf16(-INFINITY), 0xff80);
    EXPECT_EQ(float_to_bf16(bits_to_float(0x00000001u)), 0x0000);   // tiny subnormal → +0
    EXPECT_EQ(float_to_bf16(bits_to_float(0x00018000u)), 0x0002);   // subnormal tie to even
    // NaN stays NaN even when its payload lives only in the low 16 bits (plain truncation would give inf).
    const uint16_t nan = float_to_bf16(bits_to_float(0x7f800001u));
    EXPECT_TRUE(std::isnan(bf16_to_float(nan)));
}

TEST(Bf16, EveryNonNanPatternRoundTrips) {
    for (uint32_t bits = 0; bits < 0x10000; ++bits) {
        const auto b = uint16_t(bits);
        const float f = bf16_to_float(b);
        if (std::isnan(f)) continue;
        ASSERT_EQ(float_to_bf16(f), b) << "pattern 0x" << std::hex << bits;
    }
}

}  // namespace
}  // namespace deltabit
