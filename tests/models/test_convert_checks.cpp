// The per-tensor proofs of `deltabit convert` (convert/convert_check.h) on hand-made rows: they accept
// what the quantisers write and reject each kind of damage a buggy writer could do.
#include "core/error.h"
#include "core/half.h"
#include "core/quant.h"
#include "core/quant_blocks.h"
#include "convert/convert_check.h"
#include "convert/convert_plan.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <vector>

namespace deltabit {
namespace {

std::vector<uint8_t> stored(DType type, const std::vector<float>& x) {
    std::vector<uint8_t> bytes(dtype_bytes(type, x.size()));
    quantize_row(type, x.data(), bytes.data(), int64_t(x.size()));
    return bytes;
}

std::vector<float> ramp(int n, float scale) {
    std::vector<float> x(static_cast<size_t>(n));
    for (int i = 0; i < n; ++i) x[size_t(i)] = scale * std::sin(0.37f * float(i) + 0.1f);
    return x;
}

TEST(ConvertChecks, F32IsExactAndOneUlpIsCaught) {
    const std::vector<float> x = ramp(64, 3.0f);
    std::vector<uint8_t> bytes = stored(DType::F32, x);
    const TensorErrorStats s = check_round_trip("t", DType::F32, 64, bytes, x);
    EXPECT_TRUE(s.lossless);
    EXPECT_EQ(s.max_abs, 0.0);
    bytes[4 * 10] ^= 1;  // one ulp of element 10
    EXPECT_THROW(check_round_trip("t", DType::F32, 64, bytes, x), Error);
}

TEST(ConvertChecks, F16ReportsTheRoundingOfOneThird) {
    // fp16 nearest to 1/3 is 0x3555 = 0.333251953125 (hand: 1365/4096); the error is 1/3 − that.
    const std::vector<float> x = {1.0f / 3.0f, 0.5f};
    const std::vector<uint8_t> bytes = stored(DType::F16, x);
    const TensorErrorStats s = check_round_trip("t", DType::F16, 2, bytes, x);
    EXPECT_FALSE(s.lossless);
    EXPECT_EQ(s.changed, 1);
    EXPECT_NEAR(s.max_abs, double(1.0f / 3.0f) - 1365.0 / 4096.0, 1e-12);
    // rms rel = err / sqrt((1/3)² + 0.5²)
    EXPECT_NEAR(s.rms_rel, s.max_abs / std::sqrt(1.0 / 9.0 + 0.25), 1e-9);
}

TEST(ConvertChecks, Q8_0WithinHalfAStepAndAWrongCodeIsCaught) {
    const std::vector<float> x = ramp(64, 0.8f);
    std::vector<uint8_t> bytes = stored(DType::Q8_0, x);
    const TensorErrorStats s = check_round_trip("t", DType::Q8_0, 64, bytes, x);
    EXPECT_FALSE(s.lossless);
    const double d = double(half_to_float(uint16_t(bytes[0] | bytes[1] << 8)));
    EXPECT_LE(s.max_abs, 0.5 * d * 1.01 + 0.8 / 1024);
    EXPECT_EQ(check_block_scales("t", DType::Q8_0, 64, bytes, x), 2);
    // A code off by two steps is beyond d/2.
    std::vector<uint8_t> bad = bytes;
    bad[2 + 5] = uint8_t(int8_t(bad[2 + 5]) + 2);
    EXPECT_THROW(check_round_trip("t", DType::Q8_0, 64, bad, x), Error);
    // A scale that is not amax/127 is caught by the scale check even when the codes are consistent.
    bad = bytes;
    const uint16_t other = float_to_half(float(d * 1.01));
    std::memcpy(bad.data(), &other, 2);
    EXPECT_THROW(check_block_scales("t", DType::Q8_0, 64, bad, x), Error);
}

TEST(ConvertChecks, Q1_0ScaleIsMeanAbsAndSignsMatch) {
    // ±0.25 / ±0.75 alternating: mean|x| = 0.5, exactly representable, so the block is lossless
    // only if every |x| equals d — here it is not (lossy), but scale and signs must still be right.
    std::vector<float> x(256);
    for (size_t i = 0; i < x.size(); ++i) x[i] = (i % 3 == 0 ? -1.0f : 1.0f) * (i % 2 ? 0.75f : 0.25f);
    std::vector<uint8_t> bytes = stored(DType::Q1_0, x);
    EXPECT_EQ(half_to_float(uint16_t(bytes[0] | bytes[1] << 8)), 0.5f);
    EXPECT_EQ(check_block_scales("t", DType::Q1_0, 256, bytes, x), 2);
    const TensorErrorStats s = check_round_trip("t", DType::Q1_0, 256, bytes, x);
    EXPECT_FALSE(s.lossless);
    EXPECT_EQ(s.max_abs, 0.25);

    std::vector<uint8_t> bad = bytes;
    bad[18 + 2 + 3] ^= 0x10;  // block 1, weight 3·8 + 4 = 28: a flipped sign
    EXPECT_THROW(check_block_scales("t", DType::Q1_0, 256, bad, x), Error);
    EXPECT_THROW(check_round_trip("t", DType::Q1_0, 256, bad, x), Error);  // |x| + d > max(|x|, d)

    bad = bytes;
    const uint16_t inf = 0x7c00;
    std::memcpy(bad.data() + 18, &inf, 2);
    EXPECT_THROW(check_block_scales("t", DType::Q1_0, 256, bad, x), Error);
}

TEST(ConvertChecks, BinaryBlockIsLosslessInQ1_0) {
    std::vector<float> x(128);
    for (size_t i = 0; i < x.size(); ++i) x[i] = (i * 7 % 5 < 2) ? -0.375f : 0.375f;
    const std::vector<uint8_t> bytes = stored(DType::Q1_0, x);
    EXPECT_TRUE(check_round_trip("t", DType::Q1_0, 128, bytes, x).lossless);
}

TEST(ConvertChecks, TiledOrderMatchesTheReference) {
    // Reference §2.3: file head h' = r_idx·H_k + g holds HF head g·r + r_idx. H_k 2, H_v 6 (r 3):
    // h' 0..5 → (g, r_idx) = (0,0) (1,0) (0,1) (1,1) (0,2) (1,2) → HF 0, 3, 1, 4, 2, 5.
    EXPECT_EQ(tiled_value_head_order(2, 6), (std::vector<int64_t>{0, 3, 1, 4, 2, 5}));
    EXPECT_EQ(tiled_value_head_order(4, 4), (std::vector<int64_t>{0, 1, 2, 3}));
}

TEST(ConvertChecks, FileTypeIdsAreLlamaCpps) {
    // include/llama.h enum llama_ftype.
    EXPECT_EQ(llama_file_type(DType::F32), 0u);
    EXPECT_EQ(llama_file_type(DType::F16), 1u);
    EXPECT_EQ(llama_file_type(DType::Q4_0), 2u);
    EXPECT_EQ(llama_file_type(DType::Q8_0), 7u);
    EXPECT_EQ(llama_file_type(DType::BF16), 32u);
    EXPECT_EQ(llama_file_type(DType::Q1_0), 40u);
}


PlannedTensor typed(const std::string& name, std::vector<int64_t> shape, DType requested) {
    PlannedTensor t;
    t.name = name;
    t.shape = std::move(shape);
    choose_storage_type(t, requested);
    return t;
}

TEST(ConvertTypes, KeptF32AsLlamaCppKeepsThem) {
    for (DType requested : {DType::F16, DType::Q8_0, DType::Q1_0}) {
        EXPECT_EQ(typed("blk.0.attn_norm.weight", {128}, requested).type, DType::F32);
        EXPECT_EQ(typed("blk.0.ssm_norm.weight", {128}, requested).type, DType::F32);
        EXPECT_EQ(typed("blk.0.ssm_conv1d.weight", {4, 640}, requested).type, DType::F32);
        EXPECT_EQ(typed("blk.0.ffn_gate_inp.weight", {128, 4}, requested).type, DType::F32);
        EXPECT_EQ(typed("blk.0.ssm_a", {4}, requested).type, DType::F32);
        EXPECT_EQ(typed("blk.0.ffn_gate_inp_shexp.weight", {128}, requested).type, DType::F32);
        // Matrices, embeddings and the output head take the requested type.
        EXPECT_EQ(typed("token_embd.weight", {128, 256}, requested).type, requested);
        EXPECT_EQ(typed("output.weight", {128, 256}, requested).type, requested);
        EXPECT_EQ(typed("blk.0.ffn_down_exps.weight", {128, 128, 4}, requested).type, requested);
    }
    EXPECT_TRUE(typed("blk.0.attn_norm.weight", {128}, DType::F32).type_reason.empty());
    EXPECT_FALSE(typed("blk.0.attn_norm.weight", {128}, DType::Q1_0).fallback);
}

TEST(ConvertTypes, RowsThatDoNotFitFallBackAndSaySo) {
    const PlannedTensor q1 = typed("blk.0.ffn_down.weight", {96, 128}, DType::Q1_0);  // 96 = 3·32, not 128
    EXPECT_EQ(q1.type, DType::Q8_0);
    EXPECT_TRUE(q1.fallback);
    EXPECT_NE(q1.type_reason.find("96"), std::string::npos) << q1.type_reason;
    EXPECT_EQ(typed("blk.0.ffn_down.weight", {20, 128}, DType::Q1_0).type, DType::F16);  // 20 fits no block
    EXPECT_EQ(typed("blk.0.ffn_down.weight", {20, 128}, DType::Q8_0).type, DType::F16);
    EXPECT_EQ(typed("blk.0.ffn_down.weight", {20, 128}, DType::Q4_0).type, DType::F16);
    EXPECT_EQ(typed("blk.0.ffn_down.weight", {96, 128}, DType::Q2_0).type, DType::Q4_0);
    EXPECT_EQ(typed("blk.0.ffn_down.weight", {20, 128}, DType::F16).type, DType::F16);  // plain types always fit
    EXPECT_FALSE(typed("blk.0.ffn_down.weight", {128, 96}, DType::Q1_0).fallback);      // only the row length matters
}


// No false alarms: what the reference quantisers write from hostile rows (tiny values whose scale
// underflows fp16, large ones, all-zero, constant and single-spike blocks) passes both proofs.
TEST(ConvertChecks, ProofsAcceptTheReferenceQuantisersOnHostileRows) {
    std::vector<float> x;
    uint32_t state = 12345;
    auto uniform = [&] {  // xorshift, deterministic
        state ^= state << 13, state ^= state >> 17, state ^= state << 5;
        return float(state) / 4294967296.0f * 2.0f - 1.0f;
    };
    for (float scale : {1e-7f, 1e-4f, 0.02f, 1.0f, 100.0f, 3000.0f})
        for (int i = 0; i < 256; ++i) x.push_back(scale * uniform());
    x.insert(x.end(), 256, 0.0f);   // all zero
    x.insert(x.end(), 256, -0.3f);  // constant
    for (int i = 0; i < 256; ++i) x.push_back(i == 77 ? 5.0f : 1e-3f * uniform());  // one spike
    const int64_t row = 256;
    for (DType type : {DType::F32, DType::F16, DType::BF16, DType::Q8_0, DType::Q4_0, DType::Q1_0, DType::Q2_0,
                       DType::Q2_0_G64}) {
        const std::vector<uint8_t> bytes = stored(type, x);
        EXPECT_NO_THROW(check_round_trip("t", type, row, bytes, x)) << dtype_name(type);
        EXPECT_NO_THROW(check_block_scales("t", type, row, bytes, x)) << dtype_name(type);
    }
}

}  // namespace
}  // namespace deltabit
