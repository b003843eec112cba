// soft_embedding: the expected embedding row under softmax(logits), against sums worked out by hand.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "core/half.h"
#include "ops/soft_embedding.h"
#include "ops_test_util.h"

namespace deltabit {
namespace {

TEST(SoftEmbedding, ExpectedRowUnderTheSoftmax) {
    // Vocabulary 3, D 2. Logits (ln 1, ln 2, ln 1) → p = (1/4, 1/2, 1/4); a second token with one logit far
    // above the rest picks that row alone (the others underflow to 0).
    const float table[6] = {4, 0, 0, 8, -4, 4};
    const WeightView w{table, DType::F32, 3, 2};
    const float logits[6] = {0.0f, float(std::log(2.0)), 0.0f, -1000.0f, 0.0f, 500.0f};
    std::vector<float> out(4);
    cpu::soft_embedding(logits, w, 2, out.data());
    test::expect_close(out, std::vector<double>{0.0, 5.0, -4.0, 4.0}, 1e-6);
}

TEST(SoftEmbedding, ReadsTheTableInItsOwnDtype) {
    // The same table stored as F16 gives the same result (its values are exact in fp16).
    const float values[6] = {4, 0, 0, 8, -4, 4};
    uint16_t halves[6];
    for (int i = 0; i < 6; ++i) halves[i] = float_to_half(values[i]);
    const WeightView w{halves, DType::F16, 3, 2};
    const float logits[3] = {0.0f, float(std::log(2.0)), 0.0f};
    std::vector<float> out(2);
    cpu::soft_embedding(logits, w, 1, out.data());
    test::expect_close(out, std::vector<double>{0.0, 5.0}, 1e-6);
}

}  // namespace
}  // namespace deltabit
