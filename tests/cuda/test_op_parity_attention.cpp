// Op parity, causal GQA attention: CUDA against the naive CPU reference over hostile shapes (head_dim
// and key counts around warp edges, n_past > 0, GQA groups, the gate on and off, large scores that
// make the online softmax rescale) and Qwen3.5-27B's geometry (24 q heads, 4 kv heads, head_dim 256).
// Skips cleanly without a GPU.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "ops/attention.h"
#include "ops/op_parity.h"

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

// Error bound per output element, from the kernel's arithmetic (attention_cuda.cu):
//   score s_p: q·scale rounded (u), then ceil(d/32) fmaf terms per lane and 5 butterfly levels:
//     |δs_p| ≤ (ceil(d/32) + 6)·u·A_p, A_p = Σ_j |q_j k_pj| / sqrt(d);
//     a score error moves the softmax output by at most 2·max|δs|·vmax (∂o/∂s_p = a_p (v_p − o));
//   per warp, each of its n_w = ceil(n/8) keys costs the running sums one fmaf (u), one rescale by
//     expf(m − m_new) (4u + u for the subtraction's rounding of an argument up to the score span R)
//     and its own weight's expf(s − m) (4u + u·R): ≤ n_w·(10 + 2R)·u relative to vmax;
//   the merge of 8 warps (8 expf, 8 fmaf, one divide): 40u; the gate sigmoid and multiply: 8u·|o|.
// Inputs are bounded, so vmax = max |v| over the visible keys bounds every |o|.
std::vector<double> attention_tolerance(const Case& c, const std::vector<float>& q, const std::vector<float>& k,
                                        const std::vector<float>& v, const std::vector<double>& want) {
    const int64_t d = c.head_dim, group = c.n_head / c.n_kv_head;
    const double inv_sqrt_d = 1.0 / std::sqrt(double(d));
    std::vector<double> tol(want.size());
    for (int64_t t = 0; t < c.n_tokens; ++t) {
        const int64_t n_visible = c.n_past + t + 1;
        for (int64_t h = 0; h < c.n_head; ++h) {
            const int64_t kvh = h / group;
            double a_max = 0, s_max = 0, v_max = 0;
            for (int64_t p = 0; p < n_visible; ++p) {
                double a = 0, s = 0;
                for (int64_t j = 0; j < d; ++j) {
                    const double qj = q[size_t((t * c.n_head + h) * d + j)];
                    const double kj = k[size_t((p * c.n_kv_head + kvh) * d + j)];
                    a += std::fabs(qj * kj);
                    s += qj * kj;
                    v_max = std::max(v_max, double(std::fabs(v[size_t((p * c.n_kv_head + kvh) * d + j)])));
                }
                a_max = std::max(a_max, a * inv_sqrt_d);
                s_max = std::max(s_max, std::fabs(s * inv_sqrt_d));
            }
            const double score_err = (std::ceil(double(d) / 32.0) + 6.0) * kU * a_max;
            const double n_w = std::ceil(double(n_visible) / double(cuda::kAttentionWarps));
            const double span = 2.0 * s_max;
            const double bound = (2.0 * score_err + (n_w * (10.0 + 2.0 * span) + 40.0) * kU) * v_max;
            for (int64_t j = 0; j < d; ++j) {
                const size_t i = size_t((t * c.n_head + h) * d + j);
                tol[i] = bound + 8.0 * kU * std::fabs(want[i]);
            }
        }
    }
    return tol;
}

void check_attention(const Case& c, uint32_t seed) {
    std::mt19937 rng(seed);
    const int64_t n_kv = c.n_past + c.n_tokens;
    std::vector<float> q = uniform(size_t(c.n_tokens * c.n_head * c.head_dim), rng, -1.0f, 1.0f);
    for (float& x : q) x *= c.q_scale;
    const std::vector<float> k = uniform(size_t(n_kv * c.n_kv_head * c.head_dim), rng, -1.0f, 1.0f);
    const std::vector<float> v = uniform(k.size(), rng, -1.0f, 1.0f);
    const std::vector<float> gate = uniform(q.size(), rng, -4.0f, 4.0f);
    const cpu::AttentionDims dims{c.n_tokens, c.n_past, c.n_head, c.n_kv_head, c.head_dim};

    std::vector<float> want(q.size());
    cpu::attention(q.data(), k.data(), v.data(), c.gate ? gate.data() : nullptr, dims, want.data());

    GuardedDeviceArray<float> dq(q), dk(k), dv(v), dgate(gate), dout(q.size());
    cuda::attention(dq.get(), dk.get(), dv.get(), c.gate ? dgate.get() : nullptr, dims, dout.get(), nullptr);
    const std::string what = "attention T=" + std::to_string(c.n_tokens) + " past=" + std::to_string(c.n_past) +
                             " H=" + std::to_string(c.n_head) + "/" + std::to_string(c.n_kv_head) +
                             " d=" + std::to_string(c.head_dim) + (c.gate ? " gate" : "") +
                             (c.q_scale > 1 ? " large-scores" : "");
    const std::vector<double> want_d = to_double(want);
    const std::vector<double> tol = attention_tolerance(c, q, k, v, want_d);
    expect_within(dout.download(what), want_d, [&](size_t i) { return tol[i]; }, what);
}

TEST(OpParityAttention, HostileShapes) {
    DELTABIT_REQUIRE_GPU();
    uint32_t seed = 1;
    const std::vector<Case> cases = {
        {1, 0, 1, 1, 1, false, 1},     {1, 0, 1, 1, 1, true, 1},      {1, 63, 2, 1, 63, true, 1},
        {1, 64, 2, 2, 64, false, 1},   {63, 0, 4, 2, 65, true, 1},    {65, 0, 4, 4, 32, false, 1},
        {63, 65, 4, 1, 127, true, 1},  {7, 121, 3, 1, 129, true, 1},  {64, 64, 8, 2, 128, false, 8},
        {129, 0, 2, 1, 256, true, 8},  {1000, 0, 2, 1, 64, true, 1},  {1, 1000, 2, 2, 33, false, 8},
    };
    for (const Case& c : cases) check_attention(c, seed++);
}

TEST(OpParityAttention, Qwen35Geometry) {
    DELTABIT_REQUIRE_GPU();
    uint32_t seed = 100;
    check_attention({1, 1000, 24, 4, 256, true, 1}, seed++);  // decode at depth 1000
    if (!quick_mode()) check_attention({65, 1000, 24, 4, 256, true, 4}, seed++);  // prefill continuing a prompt
}

#else
TEST(OpParityAttention, SkippedWithoutCuda) { GTEST_SKIP() << "built without CUDA"; }
#endif

}  // namespace
}  // namespace deltabit::test
