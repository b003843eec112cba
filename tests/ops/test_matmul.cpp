#include <gtest/gtest.h>

#include <cstring>
#include <vector>

#include "core/error.h"
#include "core/quant.h"
#include "ops/embedding.h"
#include "ops/matmul.h"
#include "ops_test_util.h"

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
