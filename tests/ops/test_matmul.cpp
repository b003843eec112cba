#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstring>
#include <vector>

#include "core/error.h"
#include "core/half.h"
#include "core/quant.h"
#include "ops/embedding.h"
#include "ops/matmul/f16_activations.h"
#include "ops/matmul.h"
#include "ops_test_util.h"
#include "models/blocks.h"

namespace deltabit {
namespace {

using test::expect_close;
using test::random_vector;

TEST(Matmul, F32HandExample) {
    // W[2][3] rows are outputs; x[2][3].
    const float w[6] = {1, 2, 3, -1, 0, 0.5f};
    const float x[6] = {1, 1, 1, 2, -1, 4};
    float y[4];
    cpu::matmul(x, WeightView{w, DType::F32, 2, 3}, 2, y);
    EXPECT_EQ(y[0], 6.0f);    // 1+2+3
    EXPECT_EQ(y[1], -0.5f);   // −1 + 0.5
    EXPECT_EQ(y[2], 12.0f);   // 2 − 2 + 12
    EXPECT_EQ(y[3], 0.0f);    // −2 + 2
}

TEST(Matmul, Q1_0HandExample) {
    // Two rows of one block each: row 0 all +d (d = 0.25), row 1 alternating −,+ (bits 0b10101010).
    uint8_t w[2 * 18] = {};
    w[1] = 0x34;  // 0.25
    std::memset(w + 2, 0xff, 16);
    w[18 + 1] = 0x3c;  // 1.0
    std::memset(w + 18 + 2, 0xaa, 16);
    std::vector<float> x(128);
    for (int j = 0; j < 128; ++j) x[j] = float(j);
    float y[2];
    cpu::matmul(x.data(), WeightView{w, DType::Q1_0, 2, 128}, 1, y);
    EXPECT_EQ(y[0], 0.25f * 127.0f * 128.0f / 2.0f);  // 0.25 · Σj
    EXPECT_EQ(y[1], 64.0f);                            // Σ_odd j − Σ_even j = 64 pairs of +1
}

TEST(Matmul, EveryDtypeEqualsDequantizedProduct) {
    const int64_t n = 5, k = 256, t = 3;
    for (const DType dt : {DType::F32, DType::F16, DType::BF16, DType::Q8_0, DType::Q4_0, DType::Q1_0, DType::Q2_0,
                           DType::Q2_0_G64}) {
        const std::vector<float> wf = random_vector(size_t(n * k), 1);
        std::vector<uint8_t> w(dtype_bytes(dt, uint64_t(n * k)));
        const size_t row_bytes = dtype_bytes(dt, k);
        for (int64_t r = 0; r < n; ++r) quantize_row(dt, wf.data() + r * k, w.data() + r * row_bytes, k);
        const std::vector<float> x = random_vector(size_t(t * k), 2);
        std::vector<float> y(size_t(t * n));
        cpu::matmul(x.data(), WeightView{w.data(), dt, n, k}, t, y.data());

        std::vector<float> deq(static_cast<size_t>(k));
        std::vector<double> want(size_t(t * n));
        for (int64_t r = 0; r < n; ++r) {
            dequantize_row(dt, w.data() + r * row_bytes, deq.data(), k);
            for (int64_t tt = 0; tt < t; ++tt) {
                double sum = 0.0;
                for (int64_t j = 0; j < k; ++j) sum += double(deq[j]) * double(x[tt * k + j]);
                want[tt * n + r] = sum;
            }
        }
        expect_close(y, want, 1e-6, 1.0, std::string(dtype_name(dt)));  // one fp32 rounding of a double sum
    }
}

TEST(Matmul, Int8ActivationsRoundPerGroupOf128) {
    // One Q8_0 row of 256 equal weights c (1 stored as q = 127, d = fp16(1/127), so c is 1 within
    // fp16 rounding), so y = c · Σ x̂ where x̂ is x rounded per 128 to int8: group 0 has max |x| = 127 → scale 1, and its other
    // values 0.4 and 0.6 round to 0 and 1; group 1 has max |x| = 254 → scale 2, 3.0 → 2·round(1.5) = 2·2
    // (half to even) and 5.0 → 2·round(2.5) = 2·2.
    std::vector<float> row(256, 1.0f);
    std::vector<uint8_t> q8(dtype_bytes(DType::Q8_0, 256));
    quantize_row(DType::Q8_0, row.data(), q8.data(), 256);
    std::vector<float> x(256, 0.0f);
    x[0] = 127.0f;
    x[1] = 0.4f;
    x[2] = 0.6f;
    x[128] = -254.0f;
    x[129] = 3.0f;
    x[130] = 5.0f;
    std::vector<float> decoded(256);
    dequantize_row(DType::Q8_0, q8.data(), decoded.data(), 256);
    const float c = decoded[0];
    ASSERT_NEAR(c, 1.0f, 1e-3f);
    float y = 0.0f;
    cpu::matmul_int8_activations(x.data(), WeightView{q8.data(), DType::Q8_0, 1, 256}, 1, &y);
    EXPECT_FLOAT_EQ(y, c * (127.0f + 0.0f + 1.0f - 254.0f + 4.0f + 4.0f));
    // The f32 reference keeps the exact values.
    float exact = 0.0f;
    cpu::matmul(x.data(), WeightView{q8.data(), DType::Q8_0, 1, 256}, 1, &exact);
    EXPECT_FLOAT_EQ(exact, c * (127.0f + 0.4f + 0.6f - 254.0f + 3.0f + 5.0f));
    // Plain-float weights are not rounded (the GPU runs them in f32).
    float plain = 0.0f;
    cpu::matmul_int8_activations(x.data(), WeightView{row.data(), DType::F32, 1, 256}, 1, &plain);
    EXPECT_FLOAT_EQ(plain, 127.0f + 0.4f + 0.6f - 254.0f + 3.0f + 5.0f);
}

TEST(Matmul, F16ActivationExponentPutsTheRowMaxInOneOctave) {
    auto e_of = [](float amax) { return f16_activation_exponent(std::bit_cast<uint32_t>(amax)); };
    EXPECT_EQ(e_of(1.0f), 14);        // 1 · 2^14 = 16384
    EXPECT_EQ(e_of(1.99f), 14);
    EXPECT_EQ(e_of(3.0f), 13);        // 3 · 2^13 = 24576
    EXPECT_EQ(e_of(65504.0f), -1);    // f16's max → 32752
    EXPECT_EQ(e_of(3e5f), -4);        // past f16's range (2^18 ≤ 3e5 < 2^19): scaled into it
    EXPECT_EQ(e_of(-3.0f), 13);       // the sign is ignored
    EXPECT_EQ(e_of(0.0f), 0);
    EXPECT_EQ(e_of(INFINITY), 0);
    EXPECT_EQ(e_of(NAN), 0);
    EXPECT_EQ(e_of(1e-30f), 114);     // 2^−100 ≤ 1e-30 < 2^−99
    EXPECT_EQ(e_of(2e-38f), 126);     // 14 + 126 = 140, kept to ±126 so that 2^e and 2^−e are normal floats
    EXPECT_EQ(e_of(1e-40f), 126);     // an fp32 subnormal
    for (float amax : {1e-20f, 0.001f, 0.7f, 1.0f, 123.0f, 65504.0f, 1e9f, 3e38f}) {
        const float scaled = amax * std::bit_cast<float>(power_of_two_bits(e_of(amax)));
        EXPECT_GE(scaled, 16384.0f) << amax;
        EXPECT_LT(scaled, 32768.0f) << amax;
    }
}

TEST(Matmul, F16ActivationsRoundEachRowAtItsOwnScale) {
    // A row past f16's range and a row below its normals both keep ~11 significant bits.
    for (float magnitude : {1e6f, 1.0f, 1e-7f}) {
        std::vector<float> x(256), out(256);
        for (size_t i = 0; i < x.size(); ++i) x[i] = magnitude * (float(i) / 37.0f - 3.1f);
        cpu::round_activations_f16(x.data(), 256, out.data());
        for (size_t i = 0; i < x.size(); ++i) {
            EXPECT_NEAR(out[i], x[i], std::ldexp(std::fabs(x[i]), -11) + 1e-30f) << magnitude << " " << i;
            EXPECT_TRUE(std::isfinite(out[i]));
        }
    }
    // Exactly f16's rounding of x · 2^e: 1 + 2^−11 is a tie between 1 and 1 + 2^−10 (even: 1), at scale 2^14.
    std::vector<float> x = {1.0f + std::ldexp(1.0f, -11), 1.0f, 0.0f, -1.5f}, out(4);
    cpu::round_activations_f16(x.data(), 4, out.data());
    EXPECT_EQ(out[0], 1.0f);
    EXPECT_EQ(out[1], 1.0f);
    EXPECT_EQ(out[2], 0.0f);
    EXPECT_EQ(out[3], -1.5f);
}

TEST(Matmul, NumericsMirrorTheCudaPromptPaths) {
    // int8_and_f16_prompts: Q1_0 products of ≥ kPromptGemmMinTokens tokens on f16 activations, others int8.
    const int64_t K = 256, T = cpu::kPromptGemmMinTokens;
    const std::vector<float> w_dense = random_vector(size_t(K), 5);
    std::vector<uint8_t> q1(dtype_bytes(DType::Q1_0, uint64_t(K)));
    quantize_row(DType::Q1_0, w_dense.data(), q1.data(), K);
    const WeightView w{q1.data(), DType::Q1_0, 1, K};
    const std::vector<float> x = random_vector(size_t(T * K), 6);
    std::vector<float> got(static_cast<size_t>(T)), f16(static_cast<size_t>(T)), int8(static_cast<size_t>(T));
    matmul_with(MatmulNumerics::int8_and_f16_prompts, x.data(), w, T, got.data());
    cpu::matmul_f16_activations(x.data(), w, T, f16.data());
    cpu::matmul_int8_activations(x.data(), w, T, int8.data());
    EXPECT_EQ(got, f16);
    EXPECT_NE(f16, int8);  // the two roundings differ, so the line above says which one ran
    matmul_with(MatmulNumerics::int8_and_f16_prompts, x.data(), w, T - 1, got.data());
    cpu::matmul_int8_activations(x.data(), w, T - 1, int8.data());
    EXPECT_TRUE(std::equal(int8.begin(), int8.begin() + (T - 1), got.begin()));
}

TEST(Embedding, LooksUpRowsOfAnyDtypeAndRefusesBadIds) {
    const int64_t vocab = 4, d = 64;
    const std::vector<float> table = random_vector(size_t(vocab * d), 3);
    std::vector<uint8_t> q(dtype_bytes(DType::Q8_0, uint64_t(vocab * d)));
    for (int64_t r = 0; r < vocab; ++r)
        quantize_row(DType::Q8_0, table.data() + r * d, q.data() + r * dtype_bytes(DType::Q8_0, d), d);
    const WeightView view{q.data(), DType::Q8_0, vocab, d};
    const int32_t ids[3] = {2, 0, 2};
    std::vector<float> out(size_t(3 * d));
    cpu::embedding_lookup(view, ids, 3, out.data());
    std::vector<float> row(static_cast<size_t>(d));
    for (int t = 0; t < 3; ++t) {
        dequantize_row(DType::Q8_0, view.row(ids[t]), row.data(), d);
        EXPECT_EQ(std::vector<float>(out.begin() + t * d, out.begin() + (t + 1) * d), row) << "token " << t;
    }
    const int32_t bad[1] = {4};
    EXPECT_THROW(cpu::embedding_lookup(view, bad, 1, out.data()), Error);
    const int32_t negative[1] = {-1};
    EXPECT_THROW(cpu::embedding_lookup(view, negative, 1, out.data()), Error);
}

}  // namespace
}  // namespace deltabit
