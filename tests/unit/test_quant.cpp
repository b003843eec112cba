// Quantised block layouts and the reference (de)quantisers. Blocks are written byte by byte here from
// the format descriptions (DESIGN.md §5, reference/llamacpp-formats-and-qwen35.md §1), and every
// decoded value is checked against a value worked out by hand.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <random>
#include <vector>

#include "core/dtype.h"
#include "core/error.h"
#include "core/half.h"
#include "core/quant.h"
#include "core/quant_blocks.h"
#include "core/tensor.h"

namespace deltabit {
namespace {

constexpr DType kAllWeightTypes[] = {DType::F32,  DType::F16,  DType::BF16, DType::Q8_0,
                                     DType::Q4_0, DType::Q1_0, DType::Q2_0, DType::Q2_0_G64};

std::vector<float> dequantized(DType t, const void* row, int64_t k) {
    std::vector<float> out(static_cast<size_t>(k), NAN);
    dequantize_row(t, row, out.data(), k);
    return out;
}

std::vector<float> random_row(int64_t k, uint32_t seed, float scale = 1.0f) {
    std::mt19937 rng(seed);
    std::normal_distribution<float> normal(0.0f, scale);
    std::vector<float> x(static_cast<size_t>(k));
    for (float& v : x) v = normal(rng);
    return x;
}

TEST(QuantBlocks, SizesAgreeWithDtypeTable) {
    EXPECT_EQ(dtype_info(DType::Q8_0).block_bytes, sizeof(BlockQ8_0));
    EXPECT_EQ(dtype_info(DType::Q8_0).block_elems, uint32_t(kQ8_0BlockElems));
    EXPECT_EQ(dtype_info(DType::Q4_0).block_bytes, sizeof(BlockQ4_0));
    EXPECT_EQ(dtype_info(DType::Q4_0).block_elems, uint32_t(kQ4_0BlockElems));
    EXPECT_EQ(dtype_info(DType::Q1_0).block_bytes, sizeof(BlockQ1_0));
    EXPECT_EQ(dtype_info(DType::Q1_0).block_elems, uint32_t(kQ1_0BlockElems));
    EXPECT_EQ(dtype_info(DType::Q2_0).block_bytes, sizeof(BlockQ2_0));
    EXPECT_EQ(dtype_info(DType::Q2_0).block_elems, uint32_t(kQ2_0BlockElems));
    EXPECT_EQ(dtype_info(DType::Q2_0_G64).block_bytes, sizeof(BlockQ2_0G64));
    EXPECT_EQ(dtype_info(DType::Q2_0_G64).block_elems, uint32_t(kQ2_0G64BlockElems));
}

// ---- hand-written blocks ----------------------------------------------------------------------

TEST(Dequantize, Q1_0HandBlock) {
    uint8_t bytes[18] = {};
    bytes[0] = 0x00;  // d = 0.5 = fp16 0x3800, little-endian
    bytes[1] = 0x38;
    bytes[2] = 0b10110001;  // weights 0..7, LSB first: + − − − + + − +
    bytes[3] = 0xff;        // weights 8..15 all +
    // bytes 4..16 zero: weights 16..119 all −
    bytes[17] = 0x80;       // weights 120..126 −, weight 127 +
    const std::vector<float> w = dequantized(DType::Q1_0, bytes, 128);
    const float first8[8] = {+0.5f, -0.5f, -0.5f, -0.5f, +0.5f, +0.5f, -0.5f, +0.5f};
    for (int j = 0; j < 8; ++j) EXPECT_EQ(w[j], first8[j]) << "weight " << j;
    for (int j = 8; j < 16; ++j) EXPECT_EQ(w[j], 0.5f) << "weight " << j;
    for (int j = 16; j < 127; ++j) EXPECT_EQ(w[j], -0.5f) << "weight " << j;
    EXPECT_EQ(w[127], 0.5f);
}

TEST(Dequantize, Q2_0HandBlockEveryCode) {
    // Both variants share the codec; only the number of code bytes differs (32 vs 16).
    for (const DType t : {DType::Q2_0, DType::Q2_0_G64}) {
        const int elems = int(dtype_info(t).block_elems);
        std::vector<uint8_t> bytes(dtype_info(t).block_bytes, 0x55);  // 01 01 01 01: every level 0
        bytes[0] = 0x00;  // d = 2.0 = fp16 0x4000
        bytes[1] = 0x40;
        bytes[2] = 0b11100100;  // weights 0..3, lowest pair first: codes 00 01 10 11 → −2 0 +2 +4
        bytes[3] = 0b00011011;  // weights 4..7: codes 11 10 01 00 → +4 +2 0 −2
        bytes.back() = 0x00;    // last four weights: code 00 → −2
        const std::vector<float> w = dequantized(t, bytes.data(), elems);
        const float first8[8] = {-2.0f, 0.0f, 2.0f, 4.0f, 4.0f, 2.0f, 0.0f, -2.0f};
        for (int j = 0; j < 8; ++j) EXPECT_EQ(w[j], first8[j]) << dtype_name(t) << " weight " << j;
        for (int j = 8; j < elems - 4; ++j) EXPECT_EQ(w[j], 0.0f) << dtype_name(t) << " weight " << j;
        for (int j = elems - 4; j < elems; ++j) EXPECT_EQ(w[j], -2.0f) << dtype_name(t) << " weight " << j;
    }
}

TEST(Dequantize, Q8_0HandBlock) {
    uint8_t bytes[34];
    bytes[0] = 0x00;  // d = 0.25 = fp16 0x3400
    bytes[1] = 0x34;
    for (int j = 0; j < 32; ++j) bytes[2 + j] = uint8_t(int8_t(j - 16));
    bytes[2 + 31] = 0x80;  // −128
    const std::vector<float> w = dequantized(DType::Q8_0, bytes, 32);
    for (int j = 0; j < 31; ++j) EXPECT_EQ(w[j], 0.25f * float(j - 16)) << "weight " << j;
    EXPECT_EQ(w[31], -32.0f);
}

TEST(Dequantize, Q4_0HandBlockNibbleOrder) {
    uint8_t bytes[18];
    bytes[0] = 0x00;  // d = −1.5 = fp16 0xbe00
    bytes[1] = 0xbe;
    // byte j holds weight j in its low nibble (value j) and weight j+16 in its high nibble (value 15−j)
    for (int j = 0; j < 16; ++j) bytes[2 + j] = uint8_t(j | ((15 - j) << 4));
    const std::vector<float> w = dequantized(DType::Q4_0, bytes, 32);
    for (int j = 0; j < 16; ++j) {
        EXPECT_EQ(w[j], -1.5f * float(j - 8)) << "weight " << j;
        EXPECT_EQ(w[j + 16], -1.5f * float(7 - j)) << "weight " << j + 16;
    }
    EXPECT_EQ(w[0], 12.0f);    // level −8
    EXPECT_EQ(w[16], -10.5f);  // level +7
}

TEST(Dequantize, PlainTypes) {
    const uint16_t f16[4] = {0x3c00, 0xc000, 0x0001, 0x7bff};
    const std::vector<float> h = dequantized(DType::F16, f16, 4);
    EXPECT_EQ(h[0], 1.0f);
    EXPECT_EQ(h[1], -2.0f);
    EXPECT_EQ(h[2], std::ldexp(1.0f, -24));
    EXPECT_EQ(h[3], 65504.0f);
    const uint16_t bf16[2] = {0x3f80, 0xc0a0};
    const std::vector<float> b = dequantized(DType::BF16, bf16, 2);
    EXPECT_EQ(b[0], 1.0f);
    EXPECT_EQ(b[1], -5.0f);
}

// ---- quantisers on hand-chosen inputs -------------------------------------------------------------

TEST(Quantize, Q1_0ScaleIsMeanAbsAndZeroCountsAsPositive) {
    std::vector<float> x(128);
    for (int j = 0; j < 128; ++j) x[j] = (j % 3 == 0) ? -0.75f : 0.25f;  // 43 negatives, 85 positives
    x[1] = 0.0f;
    x[2] = -0.0f;
    BlockQ1_0 b;
    quantize_row(DType::Q1_0, x.data(), &b, 128);
    // Σ|x| = 43·0.75 + 83·0.25 (two 0.25s replaced by zeros) = 32.25 + 20.75 = 53; d = 53/128.
    EXPECT_EQ(b.d, float_to_half(53.0f / 128.0f));
    EXPECT_EQ(b.qs[0], 0b10110110);  // j0 −, j1 +0, j2 −0 (>= 0 holds), j3 −, j4 +, j5 +, j6 −, j7 +
}

TEST(Quantize, Q1_0ExactOnBinaryBlocks) {
    std::mt19937 rng(7);
    std::vector<float> x(256);
    for (int j = 0; j < 256; ++j) x[j] = ((rng() & 1) ? 1.0f : -1.0f) * (j < 128 ? 0.375f : 3.0f);
    std::vector<uint8_t> row(dtype_bytes(DType::Q1_0, 256));
    quantize_row(DType::Q1_0, x.data(), row.data(), 256);
    EXPECT_EQ(dequantized(DType::Q1_0, row.data(), 256), x);
}

// The scale is the least-squared-error one (quant.cpp), not llama.cpp's d = amax: on this block the
// +2 level pays. Codes: x / d rounded to the nearest of −1, 0, 1, 2, plus 1.
TEST(Quantize, Q2_0PicksTheScaleWithTheLeastError) {
    for (const DType t : {DType::Q2_0, DType::Q2_0_G64}) {
        const int elems = int(dtype_info(t).block_elems);
        std::vector<float> x(static_cast<size_t>(elems), 0.0f);
        for (int j = 0; j < elems; ++j) x[j] = j % 4 == 0 ? 2.0f : j % 4 == 1 ? 1.0f : j % 4 == 2 ? -1.0f : 0.0f;
        std::vector<uint8_t> row(dtype_info(t).block_bytes);
        quantize_row(t, x.data(), row.data(), elems);
        uint16_t d;
        std::memcpy(&d, row.data(), 2);
        EXPECT_EQ(d, 0x3C00) << dtype_name(t);  // 1.0: every value is a level, exact
        EXPECT_EQ(dequantized(t, row.data(), elems), x) << dtype_name(t);
        EXPECT_EQ(row[2], 0b01001011) << dtype_name(t);  // weights 3,2,1,0 = codes 01 00 10 11

        // The mirror image needs a negative d: {−2, −1, 1, 0} is exact with d = −1.
        for (float& v : x) v = -v;
        quantize_row(t, x.data(), row.data(), elems);
        std::memcpy(&d, row.data(), 2);
        EXPECT_EQ(d, 0xBC00) << dtype_name(t);  // −1.0
        EXPECT_EQ(dequantized(t, row.data(), elems), x) << dtype_name(t);
    }
}

TEST(QuantizeError, Q2_0BeatsQ1_0AndTheAmaxScaleOnGaussianRows) {
    const int64_t k = 128 * 64;
    const std::vector<float> x = random_row(k, 31);
    auto rms = [&](DType t) {
        std::vector<uint8_t> row(dtype_bytes(t, k));
        quantize_row(t, x.data(), row.data(), k);
        const std::vector<float> w = dequantized(t, row.data(), k);
        double e = 0.0, n = 0.0;
        for (int64_t j = 0; j < k; ++j) e += double(w[j] - x[j]) * double(w[j] - x[j]), n += double(x[j]) * x[j];
        return std::sqrt(e / n);
    };
    // llama.cpp's reference scale for the same rows: d = amax, codes round(x / d) + 1.
    double ref_e = 0.0, ref_n = 0.0;
    for (int64_t b = 0; b < k / 128; ++b) {
        float amax = 0.0f;
        for (int j = 0; j < 128; ++j) amax = std::max(amax, std::fabs(x[b * 128 + j]));
        const float d = half_to_float(float_to_half(amax));
        for (int j = 0; j < 128; ++j) {
            const float v = x[b * 128 + j], w = float(std::clamp(int(std::roundf(v / amax)), -1, 1)) * d;
            ref_e += double(w - v) * double(w - v), ref_n += double(v) * v;
        }
    }
    const double q2 = rms(DType::Q2_0), q1 = rms(DType::Q1_0), reference = std::sqrt(ref_e / ref_n);
    std::printf("[ quant ] gaussian rows rms rel: q2_0 %.3f, q2_0 with d = amax %.3f, q1_0 %.3f\n", q2, reference, q1);
    EXPECT_LT(q2, q1);
    EXPECT_LT(q2, reference);
}

TEST(Quantize, Q2_0ExactOnTernaryBlocks) {
    for (const DType t : {DType::Q2_0, DType::Q2_0_G64}) {
        const int64_t k = 512;
        std::mt19937 rng(11);
        std::vector<float> x(static_cast<size_t>(k));
        for (int64_t j = 0; j < k; ++j) x[j] = float(int(rng() % 3) - 1) * 0.625f;
        // Every block must hold ±scale at least once; blocks start at multiples of 64 (or 128).
        for (int64_t j = 0; j < k; j += 64) x[j] = (j / 64) % 3 == 1 ? -0.625f : 0.625f;
        std::vector<uint8_t> row(dtype_bytes(t, k));
        quantize_row(t, x.data(), row.data(), k);
        EXPECT_EQ(dequantized(t, row.data(), k), x) << dtype_name(t);
    }
}

TEST(Quantize, Q4_0HandBlockTruncatesAfterAddingEightAndAHalf) {
    std::vector<float> x(32, 0.0f);
    x[0] = -4.0f;    // largest magnitude, negative: d = −4 / −8 = 0.5, level −8
    x[1] = 3.9f;     // 7.8 + 8.5 = 16.3 → 16 → clamped to 15: level +7 → 3.5
    x[2] = 1.25f;    // 2.5 + 8.5 = 11 → level +3 (a half rounds up)
    x[3] = -1.25f;   // −2.5 + 8.5 = 6 → level −2 (a half rounds up, toward +∞)
    x[17] = 0.74f;   // 1.48 + 8.5 = 9.98 → 9 → level +1
    BlockQ4_0 b;
    quantize_row(DType::Q4_0, x.data(), &b, 32);
    EXPECT_EQ(b.d, 0x3800);          // 0.5
    EXPECT_EQ(b.qs[0], 0x80);        // weight 0 code 0, weight 16 (0.0) code 8
    EXPECT_EQ(b.qs[1], 0x9f);        // weight 1 code 15, weight 17 code 9
    EXPECT_EQ(b.qs[2], 0x8b);        // code 11
    EXPECT_EQ(b.qs[3], 0x86);        // code 6
    const std::vector<float> w = dequantized(DType::Q4_0, &b, 32);
    EXPECT_EQ(w[0], -4.0f);
    EXPECT_EQ(w[1], 3.5f);
    EXPECT_EQ(w[2], 1.5f);
    EXPECT_EQ(w[3], -1.0f);
    EXPECT_EQ(w[17], 0.5f);
}

TEST(Quantize, Q8_0HandBlockRoundsHalvesAwayFromZero) {
    std::vector<float> x(32, 0.0f);
    x[0] = 127.0f;  // d = 1
    x[1] = 2.5f;
    x[2] = -2.5f;
    x[3] = -126.4f;
    BlockQ8_0 b;
    quantize_row(DType::Q8_0, x.data(), &b, 32);
    EXPECT_EQ(b.d, 0x3c00);
    EXPECT_EQ(b.qs[0], 127);
    EXPECT_EQ(b.qs[1], 3);
    EXPECT_EQ(b.qs[2], -3);
    EXPECT_EQ(b.qs[3], -126);
    EXPECT_EQ(b.qs[4], 0);
}

TEST(Quantize, AllZeroBlocksGiveZeroScale) {
    for (const DType t : kAllWeightTypes) {
        const int64_t k = 256;
        std::vector<float> x(static_cast<size_t>(k), 0.0f);
        std::vector<uint8_t> row(dtype_bytes(t, k));
        quantize_row(t, x.data(), row.data(), k);
        for (const float w : dequantized(t, row.data(), k)) EXPECT_EQ(std::fabs(w), 0.0f) << dtype_name(t);
    }
}

// ---- error bounds on random rows ------------------------------------------------------------------

// Per-block scale as stored (fp16), for the error bounds below.
float block_scale(const uint8_t* block) {
    uint16_t d;
    std::memcpy(&d, block, 2);
    return half_to_float(d);
}

// The quantisers divide by the fp32 scale but the file stores it rounded to fp16, which moves each
// reconstructed value by up to |level|·|d|·2^-11 on top of the rounding error of half a step.
constexpr float kHalfRel = 1.0f / 2048.0f;

TEST(QuantizeError, Q8_0WithinHalfAStep) {
    const int64_t k = 32 * 64;
    const std::vector<float> x = random_row(k, 21, 3.0f);
    std::vector<uint8_t> row(dtype_bytes(DType::Q8_0, k));
    quantize_row(DType::Q8_0, x.data(), row.data(), k);
    const std::vector<float> w = dequantized(DType::Q8_0, row.data(), k);
    for (int64_t j = 0; j < k; ++j) {
        const float d = block_scale(row.data() + (j / 32) * 34);
        EXPECT_LE(std::fabs(w[j] - x[j]), d * (0.5f + 127.0f * kHalfRel)) << "element " << j;
    }
}

TEST(QuantizeError, Q4_0WithinHalfAStepExceptTheClampedTop) {
    const int64_t k = 32 * 64;
    const std::vector<float> x = random_row(k, 22, 3.0f);
    std::vector<uint8_t> row(dtype_bytes(DType::Q4_0, k));
    quantize_row(DType::Q4_0, x.data(), row.data(), k);
    const std::vector<float> w = dequantized(DType::Q4_0, row.data(), k);
    for (int64_t j = 0; j < k; ++j) {
        const float d = std::fabs(block_scale(row.data() + (j / 32) * 18));
        // Levels run −8..+7 and the extreme sits at −8, so values on the other side beyond 7.5 steps
        // clamp to +7 and may be off by up to a whole step.
        const bool clamped = std::fabs(x[j]) > 7.5f * d;
        const float steps = clamped ? 1.0f : 0.5f;
        EXPECT_LE(std::fabs(w[j] - x[j]), d * (steps + 8.0f * kHalfRel)) << "element " << j;
    }
}

// Each value lands on its nearest level of {−d, 0, d, 2d}: within half a step inside the levels' span,
// and off by its distance to the end level outside it.
TEST(QuantizeError, Q2_0NearestLevel) {
    for (const DType t : {DType::Q2_0, DType::Q2_0_G64}) {
        const int64_t k = 128 * 16;
        const std::vector<float> x = random_row(k, 23);
        std::vector<uint8_t> row(dtype_bytes(t, k));
        quantize_row(t, x.data(), row.data(), k);
        const std::vector<float> w = dequantized(t, row.data(), k);
        const int64_t be = dtype_info(t).block_elems, bb = dtype_info(t).block_bytes;
        for (int64_t j = 0; j < k; ++j) {
            const float d = block_scale(row.data() + (j / be) * bb);
            float nearest = INFINITY;
            for (int level = -1; level <= 2; ++level) nearest = std::min(nearest, std::fabs(x[j] - float(level) * d));
            EXPECT_LE(std::fabs(w[j] - x[j]), nearest + std::fabs(d) * 2.0f * kHalfRel) << dtype_name(t) << " element " << j;
        }
    }
}

TEST(QuantizeError, Q1_0KeepsSignsAndMeanMagnitude) {
    const int64_t k = 128 * 8;
    const std::vector<float> x = random_row(k, 24);
    std::vector<uint8_t> row(dtype_bytes(DType::Q1_0, k));
    quantize_row(DType::Q1_0, x.data(), row.data(), k);
    const std::vector<float> w = dequantized(DType::Q1_0, row.data(), k);
    for (int64_t b = 0; b < k / 128; ++b) {
        float sum_abs = 0.0f;  // sequential fp32, as quantize_row_q1_0_ref sums
        for (int j = 0; j < 128; ++j) sum_abs += std::fabs(x[b * 128 + j]);
        const float d = half_to_float(float_to_half(sum_abs / 128.0f));
        for (int j = 0; j < 128; ++j) {
            const int64_t i = b * 128 + j;
            EXPECT_EQ(w[i], x[i] >= 0.0f ? d : -d) << "element " << i;
        }
    }
}

TEST(QuantizeError, HalfAndBf16AreCorrectlyRounded) {
    const int64_t k = 1000;
    const std::vector<float> x = random_row(k, 25, 100.0f);
    for (const DType t : {DType::F16, DType::BF16}) {
        std::vector<uint8_t> row(dtype_bytes(t, k));
        quantize_row(t, x.data(), row.data(), k);
        const std::vector<float> w = dequantized(t, row.data(), k);
        const float rel = t == DType::F16 ? 1.0f / 2048.0f : 1.0f / 256.0f;  // half an ulp
        for (int64_t j = 0; j < k; ++j) EXPECT_LE(std::fabs(w[j] - x[j]), std::fabs(x[j]) * rel) << j;
    }
}

// ---- dot_row --------------------------------------------------------------------------------------

TEST(DotRow, EqualsDequantizeThenDoubleDot) {
    for (const DType t : kAllWeightTypes) {
        const int64_t k = 128 * 5;
        const std::vector<float> w = random_row(k, 31);
        const std::vector<float> x = random_row(k, 32);
        std::vector<uint8_t> row(dtype_bytes(t, k));
        quantize_row(t, w.data(), row.data(), k);
        const std::vector<float> deq = dequantized(t, row.data(), k);
        double expect = 0.0;
        for (int64_t j = 0; j < k; ++j) expect += double(deq[j]) * double(x[j]);
        EXPECT_EQ(dot_row(t, row.data(), x.data(), k), float(expect)) << dtype_name(t);
    }
}

TEST(DotRow, Q1_0HandBlock) {
    uint8_t bytes[18] = {};
    bytes[1] = 0x38;        // d = 0.5
    bytes[2] = 0b10110001;  // 4 of weights 0..7 positive
    bytes[3] = 0xff;        // 8 positive
    std::vector<float> x(128, 1.0f);
    x[0] = 3.0f;            // weight 0 (+0.5) sees 3
    // 12 positives, 116 negatives: 0.5·(12 − 116) = −52, plus 0.5·(3 − 1) for x[0] = −51
    EXPECT_EQ(dot_row(DType::Q1_0, bytes, x.data(), 128), -51.0f);
}

TEST(DotRow, Q2_0G64HandBlock) {
    uint8_t bytes[18];
    std::memset(bytes, 0x55, sizeof bytes);
    bytes[0] = 0x00, bytes[1] = 0x3c;  // d = 1
    bytes[2] = 0b11100100;             // levels −1 0 +1 +2
    std::vector<float> x(64, 5.0f);
    x[0] = 1.0f, x[1] = 2.0f, x[2] = 3.0f, x[3] = 4.0f;
    EXPECT_EQ(dot_row(DType::Q2_0_G64, bytes, x.data(), 64), -1.0f + 3.0f + 8.0f);
}

TEST(QuantRow, RefusesPartialBlocksAndI32) {
    std::vector<float> x(200, 0.0f);
    std::vector<uint8_t> row(1024);
    EXPECT_THROW(quantize_row(DType::Q1_0, x.data(), row.data(), 100), Error);
    EXPECT_THROW(dequantize_row(DType::Q8_0, row.data(), x.data(), 33), Error);
    EXPECT_THROW(dot_row(DType::Q2_0, row.data(), x.data(), 64), Error);  // 64 fits Q2_0_G64, not Q2_0
    EXPECT_NO_THROW(dot_row(DType::Q2_0_G64, row.data(), x.data(), 64));
    EXPECT_THROW(dot_row(DType::I32, row.data(), x.data(), 4), Error);
}

TEST(WeightView, RowsAndSlices) {
    std::vector<uint8_t> data(dtype_bytes(DType::Q1_0, 256) * 6);
    const WeightView w{data.data(), DType::Q1_0, 6, 256};
    EXPECT_EQ(w.row_bytes(), 36u);
    EXPECT_EQ(w.row(2), data.data() + 72);
    const WeightView expert = w.slice_rows(3, 2);
    EXPECT_EQ(expert.data, data.data() + 108);
    EXPECT_EQ(expert.rows, 2);
    EXPECT_EQ(expert.cols, 256);
}

}  // namespace
}  // namespace deltabit
