// Attention prefill on tensor cores (ops/attention/attention_cuda.h: attention_prefill_mma) against the naive CPU
// reference (cpu::attention) on the same f16-rounded keys and values: every head size it takes (64, 128,
// 256), GQA groups from 1 to 128 query heads per kv head (a block's 128 rows: positions that do not divide
// them, idle rows), prompts shorter and longer than a block, the gate on and off, large scores (the running
// max moves, the softmax rescales), continuations (n_past off the 32-key tile edge, 70 000 deep), Qwen3.5-27B's
// geometry, and blocks forced to walk many items. Skips cleanly without a GPU.
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "core/half.h"
#include "ops/attention.h"
#include "ops/op_parity.h"
#include "cuda/prefill_attention_support.h"

#ifdef DELTABIT_HAVE_CUDA
#include "cuda/op_parity_cuda.h"
#include "ops/attention/attention_cuda.h"
#endif

namespace deltabit::test {
namespace {

#ifdef DELTABIT_HAVE_CUDA

struct MmaCase {
    int64_t n_tokens, n_past, n_head, n_kv_head, head_dim;
    bool gate;
    float q_scale;  // > 1 makes scores large
};

// Error bound per output element, from the kernel's arithmetic (attention_prefill_mma_cuda.cu), in the terms
// test_decode_kernels.cpp derives for the decode kernel's tensor-core tiles:
//   score (log2 domain): q·scale rounded (u); the hi + lo·2^−11 split (within 2^−22 = 4u); the hi chain of
//     d/16 mma steps, each adding 16 products and C as one block aligned to the largest and truncated
//     (Fasi et al. 2021: ≤ 2u of the largest term per term, ≤ (17/32)·d·u·A over the chain); the lo
//     chain the same 2^−11 smaller; the combine fmaf (u); the row's 2^−e exact: |δs| ≤ ((17/32)·d + 10)·u·A;
//     a score error moves an output by at most 2·|δs|·vmax;
//   per key: its weight exp2f (4u) of an argument rounded within u·R (R = the score span, log2 domain), the
//     2^12 scale exact, the weight's hi + lo split (4u), its two mma adds into the output (≤ 2u of the
//     largest term each, ~2.1u a key), its add to the lane's denominator (u): ≤ (12 + 2R)·u a key with
//     the tile's rescale (4u + u·R per 32 keys) inside; then the 4-lane sum of l (2u), the divide (u).
std::vector<double> mma_tolerance(const cpu::AttentionDims& dims, const std::vector<float>& q,
                                  const std::vector<float>& k, const std::vector<float>& v,
                                  const std::vector<double>& want) {
    return attention_bounds(dims, q, k, v, want, [&](const AttentionRowStats& r) {
        const double score_err = (17.0 * double(dims.head_dim) / 32.0 + 10.0) * kU * r.a_max;
        const double span = 2.0 * r.s_max * 1.4426950408889634;
        return (2.0 * score_err + (double(r.n_visible) * (12.0 + 2.0 * span) + 8.0) * kU) * r.v_max;
    });
}

std::vector<float> rounded_to_half(const std::vector<float>& x, std::vector<uint16_t>& bits) {
    bits.resize(x.size());
    std::vector<float> back(x.size());
    for (size_t i = 0; i < x.size(); ++i) {
        bits[i] = float_to_half(x[i]);
        back[i] = half_to_float(bits[i]);
    }
    return back;
}

void check_mma(const MmaCase& c, uint32_t seed, int64_t max_blocks = 0) {
    std::mt19937 rng(seed);
    const int64_t n_kv = c.n_past + c.n_tokens;
    std::vector<float> q = uniform(size_t(c.n_tokens * c.n_head * c.head_dim), rng, -1.0f, 1.0f);
    for (float& x : q) x *= c.q_scale;
    std::vector<uint16_t> k_bits, v_bits;
    const std::vector<float> k = rounded_to_half(uniform(size_t(n_kv * c.n_kv_head * c.head_dim), rng, -1.0f, 1.0f), k_bits);
    const std::vector<float> v = rounded_to_half(uniform(k.size(), rng, -1.0f, 1.0f), v_bits);
    const std::vector<float> gate = uniform(q.size(), rng, -4.0f, 4.0f);
    const cpu::AttentionDims dims{c.n_tokens, c.n_past, c.n_head, c.n_kv_head, c.head_dim};
    ASSERT_TRUE(cuda::attention_prefill_mma_supported(dims));

    const std::vector<double> want = to_double(reference_attention(dims, q, k, v, c.gate ? gate.data() : nullptr));
    GuardedDeviceArray<float> dq(q), dgate(gate), dout(q.size());
    GuardedDeviceArray<uint16_t> dk(k_bits), dv(v_bits);
    cuda::attention_prefill_mma(dq.get(), dk.get(), dv.get(), c.gate ? dgate.get() : nullptr, dims, dout.get(), nullptr,
                                max_blocks);
    const std::string what = "attention prefill (tensor cores) T=" + std::to_string(c.n_tokens) + " past=" +
                             std::to_string(c.n_past) + " H=" + std::to_string(c.n_head) + "/" +
                             std::to_string(c.n_kv_head) + " d=" + std::to_string(c.head_dim) + (c.gate ? " gate" : "") +
                             (c.q_scale > 1 ? " large-scores" : "") +
                             (max_blocks > 0 ? " on " + std::to_string(max_blocks) + " blocks" : "");
    const std::vector<double> tol = mma_tolerance(dims, q, k, v, want);
    expect_within(dout.download(what), want, [&](size_t i) { return tol[i]; }, what);
}

TEST(PrefillAttentionMma, HostileShapes) {
    DELTABIT_REQUIRE_GPU();
    uint32_t seed = 300;
    const std::vector<MmaCase> cases = {
        {1, 0, 1, 1, 64, false, 1},     {1, 0, 1, 1, 256, true, 1},     {2, 63, 2, 1, 64, true, 1},
        {63, 0, 4, 2, 128, true, 1},    {65, 0, 4, 4, 64, false, 1},    {63, 65, 4, 1, 128, true, 1},
        {7, 121, 3, 1, 256, true, 1},   {64, 64, 8, 2, 128, false, 8},  {129, 0, 2, 1, 256, true, 8},
        {1000, 0, 2, 1, 64, true, 1},   {130, 3, 14, 2, 128, true, 2},  {5, 10, 64, 1, 64, false, 1},
        {33, 31, 6, 1, 64, true, 4},    {3, 33, 128, 1, 64, true, 1},   {300, 17, 12, 2, 256, false, 6},
        {257, 0, 1, 1, 128, false, 16},
    };
    for (const MmaCase& c : cases) check_mma(c, seed++);
}

TEST(PrefillAttentionMma, Qwen35Geometry) {
    DELTABIT_REQUIRE_GPU();
    check_mma({512, 0, 24, 4, 256, true, 1}, 400);     // a whole prompt
    check_mma({65, 1000, 24, 4, 256, true, 4}, 401);   // a prompt continuing a conversation
    check_mma({48, 32768, 24, 4, 256, true, 1}, 402);  // a chunk deep in a long prompt
}

TEST(PrefillAttentionMma, DeepContinuationAndFewBlocks) {
    DELTABIT_REQUIRE_GPU();
    check_mma({20, 69980, 2, 1, 64, true, 1}, 500);
    check_mma({300, 5, 8, 2, 64, false, 1}, 501, 3);  // each block walks many items
}

TEST(PrefillAttentionMma, RefusesUnsupportedShapes) {
    DELTABIT_REQUIRE_GPU();
    for (const cpu::AttentionDims& dims : {cpu::AttentionDims{4, 0, 2, 1, 96}, cpu::AttentionDims{4, 0, 129, 1, 64},
                                           cpu::AttentionDims{4, 0, 3, 2, 64}}) {
        EXPECT_FALSE(cuda::attention_prefill_mma_supported(dims));
        EXPECT_THROW(cuda::attention_prefill_mma(nullptr, nullptr, nullptr, nullptr, dims, nullptr, nullptr), Error);
    }
}

#else
TEST(PrefillAttentionMma, SkippedWithoutCuda) { GTEST_SKIP() << "built without CUDA"; }
#endif

}  // namespace
}  // namespace deltabit::test
