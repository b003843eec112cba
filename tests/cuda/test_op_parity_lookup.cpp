// Op parity, lookups and selection: CUDA embedding_lookup for every weight dtype (bit-exact against
// dequantize_row, out-of-range ids → NaN rows) and moe_router (ids exactly equal, ties included;
// weights within their fp32 bound). Skips cleanly without a GPU.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "core/dtype.h"
#include "core/half.h"
#include "core/tensor.h"
#include "ops/embedding.h"
#include "ops/moe_router.h"
#include "ops/op_parity.h"

#ifdef DELTABIT_HAVE_CUDA
#include "cuda/op_parity_cuda.h"
#include "cuda/quantized_test_data.h"
#include "ops/elementwise/elementwise_cuda.h"
#endif

namespace deltabit::test {
namespace {

#ifdef DELTABIT_HAVE_CUDA

void check_embedding(DType type, int64_t vocab, int64_t dim, int64_t n_tokens, uint32_t seed) {
    std::mt19937 rng(seed);
    const std::vector<uint8_t> table = random_table(type, vocab, dim, rng);
    std::uniform_int_distribution<int32_t> id(0, int32_t(vocab - 1));
    std::vector<int32_t> ids(static_cast<size_t>(n_tokens));
    for (int32_t& i : ids) i = id(rng);
    ids[0] = int32_t(vocab - 1);  // the last row: an off-by-one row stride reads past the table
    if (n_tokens > 1) ids[1] = 0;

    std::vector<float> want(size_t(n_tokens * dim));
    cpu::embedding_lookup(WeightView{table.data(), type, vocab, dim}, ids.data(), n_tokens, want.data());

    GuardedDeviceArray<uint8_t> dtable(table);
    GuardedDeviceArray<int32_t> dids(ids);
    GuardedDeviceArray<float> dout(want.size());
    cuda::embedding_lookup(WeightView{dtable.get(), type, vocab, dim}, dids.get(), n_tokens, dout.get(), nullptr);
    const std::string what = "embedding " + std::string(dtype_name(type)) + " vocab=" + std::to_string(vocab) +
                             " D=" + std::to_string(dim) + " T=" + std::to_string(n_tokens);
    expect_ulps(dout.download(what), want, 0, what);  // exact: both compute d·level in fp32
}

TEST(OpParityLookup, EmbeddingEveryDType) {
    DELTABIT_REQUIRE_GPU();
    uint32_t seed = 1;
    for (DType type : kWeightDTypes) {
        const int64_t block = dtype_info(type).block_elems;
        std::vector<int64_t> dims = {block, 2 * block, 5120};  // 5120: Bonsai-27B's hidden size
        if (block == 1) dims.insert(dims.end(), {63, 65, 127, 129});
        for (int64_t dim : dims) {
            for (int64_t vocab : {int64_t(1), int64_t(63), int64_t(1000)}) {
                for (int64_t t : {int64_t(1), int64_t(65)}) check_embedding(type, vocab, dim, t, seed++);
            }
        }
        check_embedding(type, 4099, 5120, 1000, seed++);
    }
}

TEST(OpParityLookup, EmbeddingOutOfRangeIdGivesNanRow) {
    DELTABIT_REQUIRE_GPU();
    // The device cannot throw: an id outside the vocabulary yields a NaN row (embedding contract in
    // ops/elementwise/elementwise_cuda.h) and reads nothing outside the table (compute-sanitizer checks the reads).
    std::mt19937 rng(7);
    const int64_t vocab = 3, dim = 128;
    const std::vector<uint8_t> table = random_table(DType::Q1_0, vocab, dim, rng);
    const std::vector<int32_t> ids = {2, 3, -1, 0};
    GuardedDeviceArray<uint8_t> dtable(table);
    GuardedDeviceArray<int32_t> dids(ids);
    GuardedDeviceArray<float> dout(size_t(4 * dim));
    cuda::embedding_lookup(WeightView{dtable.get(), DType::Q1_0, vocab, dim}, dids.get(), 4, dout.get(), nullptr);
    const std::vector<float> got = dout.download("embedding out of range");
    for (int64_t j = 0; j < dim; ++j) {
        ASSERT_FALSE(std::isnan(got[size_t(j)])) << "valid id 2, element " << j;
        ASSERT_TRUE(std::isnan(got[size_t(dim + j)])) << "id 3 (= vocab), element " << j;
        ASSERT_TRUE(std::isnan(got[size_t(2 * dim + j)])) << "id −1, element " << j;
        ASSERT_FALSE(std::isnan(got[size_t(3 * dim + j)])) << "valid id 0, element " << j;
    }
}

// ---- moe_router ----
// Weight bound: e = expf(l − max) carries the subtraction's rounding (u·|l − max| absolute in the
// exponent) and expf's 4u; the denominator sums n_expert positive terms as n_expert/32 in order per
// lane plus 5 butterfly levels (renormalised: top_k terms in order); the divide u; the reference's
// rounding u. Relative: (|l − max| + 4 + n_terms + 5 + 2)·u, with |l − max| ≤ the logits' span.
void check_moe_router(int64_t n_tokens, int64_t n_expert, int64_t top_k, bool renormalize, bool ties,
                      uint32_t seed) {
    std::mt19937 rng(seed);
    std::vector<float> logits = uniform(size_t(n_tokens * n_expert), rng, -4.0f, 4.0f);
    // Ties: logits on a grid of 0.5, so many experts share a probability and only the index orders them.
    if (ties) {
        for (float& l : logits) l = std::round(l * 2.0f) / 2.0f;
    }
    std::vector<int32_t> want_ids(size_t(n_tokens * top_k));
    std::vector<float> want_w(want_ids.size());
    cpu::moe_router(logits.data(), n_tokens, n_expert, top_k, renormalize, want_ids.data(), want_w.data());

    GuardedDeviceArray<float> dlogits(logits), dw(want_w.size());
    GuardedDeviceArray<int32_t> dids(want_ids.size());
    cuda::moe_router(dlogits.get(), n_tokens, n_expert, top_k, renormalize, dids.get(), dw.get(), nullptr);
    const std::string what = "moe_router T=" + std::to_string(n_tokens) + " E=" + std::to_string(n_expert) +
                             " k=" + std::to_string(top_k) + (renormalize ? " renorm" : "") + (ties ? " ties" : "");
    const std::vector<int32_t> got_ids = dids.download(what);
    for (size_t i = 0; i < want_ids.size(); ++i) {
        ASSERT_EQ(got_ids[i], want_ids[i]) << what << ": token " << i / size_t(top_k) << " pick " << i % size_t(top_k);
    }
    const double n_terms = renormalize ? double(top_k) : std::ceil(double(n_expert) / 32.0) + 5.0;
    const double rel = (8.0 + 4.0 + n_terms + 2.0) * kU;  // logits span 8
    expect_relative(dw.download(what), to_double(want_w), rel, 0.0, what + " weights");
}

TEST(OpParityLookup, MoeRouter) {
    DELTABIT_REQUIRE_GPU();
    uint32_t seed = 100;
    check_moe_router(1, 1, 1, false, false, seed++);
    check_moe_router(1, 1, 1, true, false, seed++);
    for (int64_t t : kHostileLengths) {
        check_moe_router(t, 64, 8, false, false, seed++);
        check_moe_router(t, 65, 8, true, false, seed++);
        check_moe_router(t, 512, 10, true, false, seed++);  // Qwen3-Next / Qwen3.5-MoE: 512 experts, top 10
        check_moe_router(t, 129, 16, true, true, seed++);
    }
    check_moe_router(63, 65, 65, false, true, seed++);  // top_k = n_expert: a full sort
    check_moe_router(65, 1000, 10, true, false, seed++);  // past 512 experts: logits read from memory per pass
    check_moe_router(65, 1000, 10, false, true, seed++);
}

#else
TEST(OpParityLookup, SkippedWithoutCuda) { GTEST_SKIP() << "built without CUDA"; }
#endif

}  // namespace
}  // namespace deltabit::test
