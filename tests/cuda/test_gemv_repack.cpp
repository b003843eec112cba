// The GEMV weight layout (ops/matmul/weight_repack.h) on the host: hand-placed bits land where the layout
// says, every weight of random matrices reads back equal to the reference dequantisation, the load-time
// verifier accepts a true repack and refuses a corrupted one. Needs no GPU, so it runs in CI.
#include <gtest/gtest.h>

#include <cstring>
#include <random>
#include <vector>

#include "core/error.h"
#include "core/half.h"
#include "core/quant.h"
#include "cuda/quantized_test_data.h"
#include "ops/matmul/weight_repack.h"

namespace deltabit {
namespace {

// Random blocks (tests/cuda/quantized_test_data.h): random code bytes, a random fp16 scale of either sign.
std::vector<uint8_t> random_rows(DType t, int64_t rows, int64_t cols, uint32_t seed) {
    std::mt19937 rng(seed);
    return test::random_weights(t, rows, cols, rng);
}

TEST(GemvRepack, Q1_0BitLandsWhereTheLayoutSays) {
    // Only weight 5 of the block is +d: original byte 0, bit 5. Weight 5 = 4·j + k with j = 1, k = 1,
    // so the repacked word has bit 8·k + j = 9 set: byte 1 = 0x02, every other code byte 0.
    std::vector<uint8_t> block(18, 0);
    block[2] = 1u << 5;
    const GemvRepacked packed = repack_for_gemv({block.data(), DType::Q1_0, 1, 128}, "t");
    ASSERT_EQ(packed.codes.size(), 16u);
    for (size_t i = 0; i < 16; ++i) EXPECT_EQ(packed.codes[i], i == 1 ? 0x02 : 0x00) << "byte " << i;
    EXPECT_EQ(gemv_layout_level(packed, 0, 5), +1);
    EXPECT_EQ(gemv_layout_level(packed, 0, 4), -1);
    // Weight 100 (word 3, m = 4: j = 1, k = 0) → word 3 bit 1 → byte 12 = 0x02.
    block[2] = 0;
    block[2 + 100 / 8] = 1u << (100 % 8);
    const GemvRepacked packed2 = repack_for_gemv({block.data(), DType::Q1_0, 1, 128}, "t");
    for (size_t i = 0; i < 16; ++i) EXPECT_EQ(packed2.codes[i], i == 12 ? 0x02 : 0x00) << "byte " << i;
}

TEST(GemvRepack, Q2_0CodeLandsWhereTheLayoutSays) {
    // Weight 6 has code 0b10 (+1): original byte 1, bits 4..5 → 0x20; every other code is 0b01 (0),
    // i.e. original bytes 0x55. Weight 6 = 4·p + k with p = 1, k = 2 → repacked byte 2, bits 2..3.
    std::vector<uint8_t> block(34, 0x55);
    block[0] = block[1] = 0;
    block[2 + 1] = 0x55 & ~0x30;  // clear weight 6's pair
    block[2 + 1] |= 0x20;
    const GemvRepacked packed = repack_for_gemv({block.data(), DType::Q2_0, 1, 128}, "t");
    EXPECT_EQ(packed.codes[2], uint8_t((0x55 & ~0x0c) | 0x08));
    for (size_t i = 0; i < 32; ++i) {
        if (i != 2) EXPECT_EQ(packed.codes[i], 0x55) << "byte " << i;
    }
    EXPECT_EQ(gemv_layout_level(packed, 0, 6), +1);
}

TEST(GemvRepack, EveryWeightReadsBackAsTheReferenceDequantises) {
    for (DType t : {DType::Q1_0, DType::Q2_0, DType::Q2_0_G64, DType::Q4_0, DType::Q8_0}) {
        const int64_t block = dtype_info(t).block_elems;
        for (int64_t cols : {block, 5 * block, 1024 + block}) {
            const int64_t rows = 7;
            const std::vector<uint8_t> bytes = random_rows(t, rows, cols, uint32_t(cols) * 31 + uint32_t(t));
            const WeightView w{bytes.data(), t, rows, cols};
            const GemvRepacked packed = repack_for_gemv(w, "random");
            EXPECT_EQ(packed.codes.size() + 2 * packed.scales.size(), bytes.size()) << "same size as the original";
            EXPECT_NO_THROW(verify_gemv_repack(w, packed, "random"));
            std::vector<float> reference(static_cast<size_t>(cols));
            for (int64_t r = 0; r < rows; ++r) {
                dequantize_row(t, w.row(r), reference.data(), cols);
                for (int64_t j = 0; j < cols; ++j) {
                    const float scale = half_to_float(packed.scales[size_t(r * (cols / block) + j / block)]);
                    ASSERT_EQ(float(gemv_layout_level(packed, r, j)) * scale, reference[size_t(j)])
                        << dtype_name(t) << " cols " << cols << " row " << r << " weight " << j;
                }
            }
        }
    }
}

TEST(GemvRepack, VerifierRefusesACorruptedRepack) {
    const std::vector<uint8_t> bytes = random_rows(DType::Q1_0, 3, 256, 7);
    const WeightView w{bytes.data(), DType::Q1_0, 3, 256};
    GemvRepacked packed = repack_for_gemv(w, "blk.0.ffn_up");
    packed.codes[2 * 32 + 17] ^= 0x10;  // row 2, block 1
    try {
        verify_gemv_repack(w, packed, "blk.0.ffn_up");
        FAIL() << "a flipped bit passed verification";
    } catch (const Error& e) {
        EXPECT_NE(std::string(e.what()).find("blk.0.ffn_up: row 2 block 1"), std::string::npos) << e.what();
    }
    GemvRepacked scale_changed = repack_for_gemv(w, "t");
    scale_changed.scales[0] ^= 1;
    EXPECT_THROW(verify_gemv_repack(w, scale_changed, "t"), Error);
}

TEST(GemvRepack, RefusesTypesAndShapesWithoutALayout) {
    std::vector<uint8_t> bytes(4 * 128);
    EXPECT_THROW(repack_for_gemv({bytes.data(), DType::F32, 1, 128}, "t"), Error);
    EXPECT_THROW(repack_for_gemv({bytes.data(), DType::Q1_0, 1, 64}, "t"), Error);
}

}  // namespace
}  // namespace deltabit
