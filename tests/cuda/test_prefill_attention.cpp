// Flash-style attention prefill on the GPU (ops/attention/attention_cuda.h: attention_prefill) against the naive
// CPU reference (cpu::attention): hostile shapes (head_dim off the 4-float and warp edges, GQA groups
// that do not divide the 64 rows of a block, the gate on and off, large scores that make the online
// softmax rescale, n_past > 0), Qwen3.5-27B's geometry (24 query heads on 4 kv heads, head_dim 256),
// a continuation 70 000 positions deep, and blocks forced to walk many (kv head, query tile) items. Each
// case also runs from a half cache (attention_prefill_half_cache), which must give the f32 kernel's output
// on the rounded keys and values bit for bit.
// Skips cleanly without a GPU.
#include <gtest/gtest.h>

#include <algorithm>
#include <bit>
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

struct Case {
    int64_t n_tokens, n_past, n_head, n_kv_head, head_dim;
    bool gate;
    float q_scale;  // > 1 makes scores large, so the running max moves and the softmax rescales
};

// Error bound per output element, from the kernel's arithmetic (attention_prefill_cuda.cu):
//   score s_p: q·scale rounded (u), then one fmaf chain of d4 terms: |δs_p| ≤ (d + 5)·u·A_p with
//     A_p = Σ_j |q_j k_pj| / sqrt(d); a score error moves the softmax output by at most 2·max|δs|·vmax;
//   softmax over n visible keys in n_t = ceil(n/32) tiles: each key's weight e^{s−m} (4u + u·R for the
//     subtraction of an argument up to the score span R), each tile's rescale e^{m_old − m_new} (the
//     same) applied to l and acc (2u), and the sums over keys of l (n fp32 additions) and of acc (n
//     fmaf): ≤ (2n + n_t·(12 + 2R) + 4 + R)·u relative to vmax; the final divide u, the gate 8u·|o|.
// Inputs are bounded, so vmax = max |v| over the visible keys bounds every |o|.
std::vector<double> attention_tolerance(const Case& c, const std::vector<float>& q, const std::vector<float>& k,
                                        const std::vector<float>& v, const std::vector<double>& want) {
    const cpu::AttentionDims dims{c.n_tokens, c.n_past, c.n_head, c.n_kv_head, c.head_dim};
    return attention_bounds(dims, q, k, v, want, [&](const AttentionRowStats& r) {
        const double score_err = double(c.head_dim + 5) * kU * r.a_max;
        const double n = double(r.n_visible), n_t = std::ceil(n / 32.0), span = 2.0 * r.s_max;
        return (2.0 * score_err + (2.0 * n + n_t * (12.0 + 2.0 * span) + 5.0 + span) * kU) * r.v_max;
    });
}

std::string describe(const Case& c) {
    return "attention prefill T=" + std::to_string(c.n_tokens) + " past=" + std::to_string(c.n_past) +
           " H=" + std::to_string(c.n_head) + "/" + std::to_string(c.n_kv_head) + " d=" + std::to_string(c.head_dim) +
           (c.gate ? " gate" : "") + (c.q_scale > 1 ? " large-scores" : "");
}

void check_attention(const Case& c, uint32_t seed, int64_t max_blocks = 0) {
    std::mt19937 rng(seed);
    const int64_t n_kv = c.n_past + c.n_tokens;
    std::vector<float> q = uniform(size_t(c.n_tokens * c.n_head * c.head_dim), rng, -1.0f, 1.0f);
    for (float& x : q) x *= c.q_scale;
    const std::vector<float> k = uniform(size_t(n_kv * c.n_kv_head * c.head_dim), rng, -1.0f, 1.0f);
    const std::vector<float> v = uniform(k.size(), rng, -1.0f, 1.0f);
    const std::vector<float> gate = uniform(q.size(), rng, -4.0f, 4.0f);
    const cpu::AttentionDims dims{c.n_tokens, c.n_past, c.n_head, c.n_kv_head, c.head_dim};

    const std::vector<float> want = reference_attention(dims, q, k, v, c.gate ? gate.data() : nullptr);

    GuardedDeviceArray<float> dq(q), dk(k), dv(v), dgate(gate), dout(q.size());
    cuda::attention_prefill(dq.get(), dk.get(), dv.get(), c.gate ? dgate.get() : nullptr, dims, dout.get(), nullptr,
                            max_blocks);
    const std::string what = describe(c) + (max_blocks > 0 ? " on " + std::to_string(max_blocks) + " blocks" : "");
    const std::vector<double> want_d = to_double(want);
    const std::vector<double> tol = attention_tolerance(c, q, k, v, want_d);
    expect_within(dout.download(what), want_d, [&](size_t i) { return tol[i]; }, what);

    // From a half cache: the f32 kernel's output on the same keys and values rounded to binary16, bit for bit.
    std::vector<uint16_t> k_half(k.size()), v_half(v.size());
    std::vector<float> k_rounded(k.size()), v_rounded(v.size());
    for (size_t i = 0; i < k.size(); ++i) {
        k_half[i] = float_to_half(k[i]), v_half[i] = float_to_half(v[i]);
        k_rounded[i] = half_to_float(k_half[i]), v_rounded[i] = half_to_float(v_half[i]);
    }
    GuardedDeviceArray<uint16_t> dk_half(k_half), dv_half(v_half);
    GuardedDeviceArray<float> dk_rounded(k_rounded), dv_rounded(v_rounded), dout_half(q.size()), dout_rounded(q.size());
    cuda::attention_prefill_half_cache(dq.get(), dk_half.get(), dv_half.get(), c.gate ? dgate.get() : nullptr, dims,
                                       dout_half.get(), nullptr, max_blocks);
    cuda::attention_prefill(dq.get(), dk_rounded.get(), dv_rounded.get(), c.gate ? dgate.get() : nullptr, dims,
                            dout_rounded.get(), nullptr, max_blocks);
    const std::vector<float> got_half = dout_half.download(what + " half cache");
    const std::vector<float> got_rounded = dout_rounded.download(what + " rounded f32 cache");
    for (size_t i = 0; i < got_half.size(); ++i)
        ASSERT_EQ(std::bit_cast<uint32_t>(got_half[i]), std::bit_cast<uint32_t>(got_rounded[i]))
            << what << ": half-cache output " << i << " differs from the f32 kernel's on the rounded cache";
}

TEST(PrefillAttention, HostileShapes) {
    DELTABIT_REQUIRE_GPU();
    uint32_t seed = 1;
    const std::vector<Case> cases = {
        {1, 0, 1, 1, 1, false, 1},    {1, 0, 1, 1, 1, true, 1},     {2, 63, 2, 1, 63, true, 1},
        {63, 0, 4, 2, 65, true, 1},   {65, 0, 4, 4, 32, false, 1},  {63, 65, 4, 1, 127, true, 1},
        {7, 121, 3, 1, 129, true, 1}, {64, 64, 8, 2, 128, false, 8}, {129, 0, 2, 1, 256, true, 8},
        {1000, 0, 2, 1, 64, true, 1}, {130, 3, 14, 2, 100, true, 2}, {5, 10, 64, 1, 16, false, 1},
        {33, 31, 6, 1, 33, true, 4},
    };
    for (const Case& c : cases) check_attention(c, seed++);
}

TEST(PrefillAttention, Qwen35Geometry) {
    DELTABIT_REQUIRE_GPU();
    check_attention({512, 0, 24, 4, 256, true, 1}, 100);    // a whole prompt
    check_attention({65, 1000, 24, 4, 256, true, 4}, 101);  // a prompt continuing a conversation
}

TEST(PrefillAttention, DeepContinuationAndFewBlocks) {
    DELTABIT_REQUIRE_GPU();
    // 70 000 positions deep: a key loop far longer than any grid dimension, within one block's walk.
    check_attention({20, 69980, 2, 1, 64, true, 1}, 200);
    // Far more (kv head, query tile) items than blocks: each block walks many, longest first.
    check_attention({300, 5, 8, 2, 64, false, 1}, 201, 3);
}

TEST(PrefillAttention, RefusesUnsupportedShapes) {
    DELTABIT_REQUIRE_GPU();
    const cpu::AttentionDims wide{4, 0, 2, 1, 257};
    EXPECT_THROW(cuda::attention_prefill(nullptr, nullptr, nullptr, nullptr, wide, nullptr, nullptr), Error);
    const cpu::AttentionDims huge_group{4, 0, 65, 1, 64};
    EXPECT_THROW(cuda::attention_prefill(nullptr, nullptr, nullptr, nullptr, huge_group, nullptr, nullptr), Error);
}

#else
TEST(PrefillAttention, SkippedWithoutCuda) { GTEST_SKIP() << "built without CUDA"; }
#endif

}  // namespace
}  // namespace deltabit::test
