// Op parity, element-wise and short-window ops: CUDA swiglu, gdn_gates, rope (partial NeoX, positions
// past 200K, more tokens than one grid) and conv1d (with the rolling state carried across calls)
// against the naive CPU references. Skips cleanly without a GPU.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <numeric>
#include <string>
#include <vector>

#include "ops/conv1d.h"
#include "ops/gdn_gates.h"
#include "ops/op_parity.h"
#include "ops/rope.h"
#include "ops/swiglu.h"

#ifdef DELTABIT_HAVE_CUDA
#include "cuda/op_parity_cuda.h"
#include "ops/cuda/cuda_launch.h"
#include "ops/elementwise/elementwise_cuda.h"
#include "ops/delta_rule/delta_rule_cuda.h"
#endif

namespace deltabit::test {
namespace {

#ifdef DELTABIT_HAVE_CUDA

std::string n_str(const char* op, int64_t n) { return std::string(op) + " n=" + std::to_string(n); }

// ---- swiglu ----
// silu(g)·up: expf 4u (damped by e/(1+e) ≤ 1), 1 + e, the divide and the multiply u each, the
// reference's rounding u: 8u relative. The floor covers silu's −0 where the reference has a denormal.
constexpr double kSwigluRel = 8 * kU;

void check_swiglu(int64_t n, bool in_place, uint32_t seed) {
    std::mt19937 rng(seed);
    const std::vector<float> gate = uniform(size_t(n), rng, -12.0f, 12.0f);
    const std::vector<float> up = uniform(size_t(n), rng, -3.0f, 3.0f);
    std::vector<float> want(static_cast<size_t>(n));
    cpu::swiglu(gate.data(), up.data(), n, want.data());
    GuardedDeviceArray<float> dg(gate), du(up), dout(in_place ? 0 : size_t(n));
    cuda::swiglu(dg.get(), du.get(), n, in_place ? dg.get() : dout.get(), nullptr);
    const std::string what = n_str("swiglu", n) + (in_place ? " out=gate" : "");
    const std::vector<float> got = (in_place ? dg : dout).download(what);
    expect_relative(got, to_double(want), kSwigluRel, 1e-30, what);
}

TEST(OpParityElementwise, Swiglu) {
    DELTABIT_REQUIRE_GPU();
    uint32_t seed = 1;
    for (int64_t n : kHostileLengths) check_swiglu(n, false, seed++);
    check_swiglu(17408, true, seed++);  // Bonsai-27B FFN width, decode
    if (!quick_mode()) check_swiglu(cuda::kMaxGridBlocks * 256 + 1000, false, seed++);  // past one grid
}

// ---- gdn_gates ----
// beta = 1/(1 + expf(−b)): 4u + u + u, reference u → 7u. g = ssm_a · log1pf(expf(x)): expf's 4u in
// e changes log1p(e) by at most 4u relative (e/(1+e) ≤ log1p(e)), log1pf 2u, the multiply u, the
// reference u → 8u; identical above the threshold 20 (x itself).
constexpr double kBetaRel = 7 * kU;
constexpr double kDecayRel = 8 * kU;

void check_gdn_gates(int64_t n_tokens, int64_t n_heads, uint32_t seed) {
    std::mt19937 rng(seed);
    const size_t n = size_t(n_tokens * n_heads);
    const std::vector<float> b = uniform(n, rng, -8.0f, 8.0f);
    // a + dt_bias spans softplus's log1p branch and its x > 20 branch.
    const std::vector<float> a = uniform(n, rng, -12.0f, 26.0f);
    const std::vector<float> ssm_a = uniform(size_t(n_heads), rng, -16.0f, -0.01f);
    const std::vector<float> dt_bias = uniform(size_t(n_heads), rng, -1.0f, 1.0f);
    std::vector<float> beta(n), g(n);
    cpu::gdn_gates(b.data(), a.data(), ssm_a.data(), dt_bias.data(), n_tokens, n_heads, beta.data(), g.data());
    GuardedDeviceArray<float> db(b), da(a), dssm(ssm_a), ddt(dt_bias), dbeta(n), dgo(n);
    cuda::gdn_gates(db.get(), da.get(), dssm.get(), ddt.get(), n_tokens, n_heads, dbeta.get(), dgo.get(), nullptr);
    const std::string what = "gdn_gates T=" + std::to_string(n_tokens) + " H=" + std::to_string(n_heads);
    expect_relative(dbeta.download(what), to_double(beta), kBetaRel, 0.0, what + " beta");
    expect_relative(dgo.download(what), to_double(g), kDecayRel, 0.0, what + " g");
}

TEST(OpParityElementwise, GdnGates) {
    DELTABIT_REQUIRE_GPU();
    uint32_t seed = 100;
    for (int64_t t : kHostileLengths) {
        for (int64_t h : {int64_t(1), int64_t(48), int64_t(63)}) check_gdn_gates(t, h, seed++);
    }
}

// ---- rope ----
// Same fp32 angle, double cos/sin/rotation on both sides. The device's and the host's double cos/sin
// may differ by a few double ulps, which moves the double result by ≤ 2^-50·(|x0| + |x1|) ≤ 1e-14
// here (|x| ≤ 4) and can flip the final rounding: one fp32 ulp of the result, plus that 1e-14 where
// the rotation cancels to almost nothing.
void check_rope(int64_t n_tokens, int64_t n_head, int64_t head_dim, int64_t rope_dim, int32_t first_pos,
                uint32_t seed) {
    std::mt19937 rng(seed);
    std::vector<float> x = uniform(size_t(n_tokens * n_head * head_dim), rng, -4.0f, 4.0f);
    std::vector<int32_t> pos(static_cast<size_t>(n_tokens));
    std::iota(pos.begin(), pos.end(), first_pos);
    if (n_tokens > 2) std::swap(pos[0], pos[size_t(n_tokens - 1)]);  // positions need not be sorted
    GuardedDeviceArray<float> dx(x);
    GuardedDeviceArray<int32_t> dpos(pos);
    cpu::rope_neox(x.data(), pos.data(), n_tokens, n_head, head_dim, rope_dim, 1e7f);
    cuda::rope_neox(dx.get(), dpos.get(), n_tokens, n_head, head_dim, rope_dim, 1e7f, nullptr);
    const std::string what = "rope T=" + std::to_string(n_tokens) + " H=" + std::to_string(n_head) + " d=" +
                             std::to_string(head_dim) + " rope=" + std::to_string(rope_dim) + " pos0=" +
                             std::to_string(first_pos);
    const std::vector<double> want = to_double(x);
    expect_within(
        dx.download(what), want,
        [&](size_t i) {
            const float w = std::fabs(x[i]);
            return double(std::nextafter(w, INFINITY) - w) + 1e-14;
        },
        what);
}

TEST(OpParityElementwise, RopeHostileShapes) {
    DELTABIT_REQUIRE_GPU();
    uint32_t seed = 200;
    for (int64_t t : kHostileLengths) {
        check_rope(t, 1, 2, 2, 0, seed++);
        check_rope(t, 3, 65, 64, 7, seed++);      // odd head_dim: the tail passes through
        check_rope(t, 24, 256, 64, 1000, seed++); // Qwen3.5: 64 of 256 rotated
        check_rope(t, 4, 128, 128, 31, seed++);   // Qwen3: full rotation
    }
}

TEST(OpParityElementwise, RopeLongContext) {
    DELTABIT_REQUIRE_GPU();
    if (quick_mode()) GTEST_SKIP() << "long shapes skipped in quick mode";
    // 200K tokens at positions up to 200K: one block per token, so blocks take several tokens each
    // (kMaxGridBlocks = 65535), and angles up to 2·10^5 rad.
    check_rope(200000, 2, 64, 64, 0, 300);
    check_rope(3, 24, 256, 64, 262141, 301);  // the last positions of a 256K context
}

// ---- conv1d ----
// Each output: a K-term fmaf chain (≤ K·u·Σ|w·x| to first order, the reference's sum in double),
// then silu, whose slope is within [−0.1, 1.1], and silu's own 7u relative; the reference's rounding
// u. So |got − want| ≤ 1.1·K·u·Σ_j|w_j x_j| + 8u·|want|.
void check_conv1d(int64_t n_tokens, int64_t channels, int64_t kernel, uint32_t seed) {
    std::mt19937 rng(seed);
    const int64_t history = kernel - 1;
    const std::vector<float> x = uniform(size_t(n_tokens * channels), rng, -3.0f, 3.0f);
    const std::vector<float> w = uniform(size_t(channels * kernel), rng, -1.0f, 1.0f);
    std::vector<float> state = uniform(size_t(history * channels), rng, -3.0f, 3.0f);

    // Σ_j |w_j · window_j| per output, from the same window the reference builds.
    std::vector<double> abs_sum(size_t(n_tokens * channels));
    for (int64_t t = 0; t < n_tokens; ++t) {
        for (int64_t c = 0; c < channels; ++c) {
            double s = 0;
            for (int64_t j = 0; j < kernel; ++j) {
                const int64_t row = t + j;
                const float wx = row < history ? state[size_t(row * channels + c)]
                                               : x[size_t((row - history) * channels + c)];
                s += std::fabs(double(w[size_t(c * kernel + j)]) * wx);
            }
            abs_sum[size_t(t * channels + c)] = s;
        }
    }

    GuardedDeviceArray<float> dx(x), dw(w), dstate(state), dout(x.size());
    std::vector<float> want(x.size());
    cpu::conv1d_causal_silu(x.data(), w.data(), state.data(), n_tokens, channels, kernel, want.data());
    cuda::conv1d_causal_silu(dx.get(), dw.get(), dstate.get(), n_tokens, channels, kernel, dout.get(), nullptr);
    const std::string what = "conv1d T=" + std::to_string(n_tokens) + " C=" + std::to_string(channels) +
                             " K=" + std::to_string(kernel);
    const std::vector<double> want_d = to_double(want);
    expect_within(
        dout.download(what), want_d,
        [&](size_t i) { return 1.1 * double(kernel) * kU * abs_sum[i] + 8 * kU * std::fabs(want_d[i]); }, what);
    // The new state is a copy of inputs: exact.
    expect_ulps(dstate.download(what + " state"), state, 0, what + " state");
}

TEST(OpParityElementwise, Conv1dHostileShapes) {
    DELTABIT_REQUIRE_GPU();
    uint32_t seed = 400;
    // T below, at and above K − 1 (the state roll shifts in place when T < K − 1).
    for (int64_t t : {int64_t(1), int64_t(2), int64_t(3), int64_t(63), int64_t(65), int64_t(129), int64_t(1000)}) {
        for (int64_t c : {int64_t(1), int64_t(63), int64_t(65), int64_t(129)}) {
            // Every K up to 5: conv1d_split_l2 (below) is held to this op for K ≤ 4.
            for (int64_t k : {int64_t(1), int64_t(2), int64_t(3), int64_t(4), int64_t(5)}) check_conv1d(t, c, k, seed++);
        }
    }
    // Bonsai-27B's DeltaNet conv: K = 4 over 2·16·128 + 48·128 = 10240 channels.
    check_conv1d(1, 10240, 4, seed++);
    check_conv1d(129, 10240, 4, seed++);
}

// The DeltaNet prompt's fused conv (conv1d_split_l2) against its three steps on the GPU — conv1d_causal_silu
// (held to the CPU reference above), the split, l2_norm (held to its reference in test_op_parity_norms) —
// every bit of q, k, v and the state: head dims on and off the warp (64, 96, 128, 200, 256), value parts
// shorter than, equal to and past one warp's 256 channels, 1 to 4 taps, T within one 16-token slab and
// across several, a nonzero incoming state.
void check_conv1d_split(int64_t T, int64_t heads, int64_t dk, int64_t dv_total, int64_t kernel, uint32_t seed) {
    std::mt19937 rng(seed);
    const int64_t key_dim = heads * dk, channels = 2 * key_dim + dv_total, history = kernel - 1;
    const std::vector<float> x = uniform(size_t(T * channels), rng, -3.0f, 3.0f);
    const std::vector<float> w = uniform(size_t(channels * kernel), rng, -1.0f, 1.0f);
    const std::vector<float> state = uniform(size_t(history * channels), rng, -3.0f, 3.0f);
    const float eps = 1e-6f;
    const std::string what = "conv1d_split_l2 T=" + std::to_string(T) + " heads=" + std::to_string(heads) +
                             " dk=" + std::to_string(dk) + " v=" + std::to_string(dv_total) + " K=" +
                             std::to_string(kernel);

    GuardedDeviceArray<float> dx(x), dw(w), state_fused(state), state_steps(state);
    GuardedDeviceArray<float> q(size_t(T * key_dim)), k(size_t(T * key_dim)), v(size_t(T * dv_total));
    ASSERT_TRUE(cuda::conv1d_split_l2_supported(dk, kernel)) << what;
    cuda::conv1d_split_l2(dx.get(), dw.get(), state_fused.get(), T, heads, dk, dv_total, kernel, eps, q.get(), k.get(),
                          v.get(), nullptr);

    GuardedDeviceArray<float> conv(x.size()), q_steps(size_t(T * key_dim)), k_steps(size_t(T * key_dim));
    cuda::conv1d_causal_silu(dx.get(), dw.get(), state_steps.get(), T, channels, kernel, conv.get(), nullptr);
    const std::vector<float> out = conv.download(what + " conv");
    std::vector<float> q_raw(size_t(T * key_dim)), k_raw(q_raw.size()), v_want(size_t(T * dv_total));
    for (int64_t t = 0; t < T; ++t) {
        const float* row = out.data() + t * channels;
        std::copy(row, row + key_dim, q_raw.begin() + t * key_dim);
        std::copy(row + key_dim, row + 2 * key_dim, k_raw.begin() + t * key_dim);
        std::copy(row + 2 * key_dim, row + channels, v_want.begin() + t * dv_total);
    }
    GuardedDeviceArray<float> dq_raw(q_raw), dk_raw(k_raw);
    cuda::l2_norm(dq_raw.get(), T * heads, dk, eps, q_steps.get(), nullptr);
    cuda::l2_norm(dk_raw.get(), T * heads, dk, eps, k_steps.get(), nullptr);
    expect_ulps(q.download(what + " q"), q_steps.download(what + " q steps"), 0, what + " q");
    expect_ulps(k.download(what + " k"), k_steps.download(what + " k steps"), 0, what + " k");
    expect_ulps(v.download(what + " v"), v_want, 0, what + " v");
    expect_ulps(state_fused.download(what + " state"), state_steps.download(what + " state steps"), 0,
                what + " state");
}

TEST(OpParityElementwise, Conv1dSplitL2IsConvSplitAndNormBitForBit) {
    DELTABIT_REQUIRE_GPU();
    uint32_t seed = 600;
    for (int64_t T : {int64_t(1), int64_t(2), int64_t(16), int64_t(17), int64_t(129)}) {
        for (int64_t kernel : {int64_t(1), int64_t(2), int64_t(3), int64_t(4)}) {
            check_conv1d_split(T, 2, 128, 384, kernel, seed++);
        }
        check_conv1d_split(T, 3, 64, 256, 4, seed++);
        check_conv1d_split(T, 1, 96, 100, 4, seed++);
        check_conv1d_split(T, 2, 200, 520, 4, seed++);
        check_conv1d_split(T, 1, 256, 32, 3, seed++);
    }
    // Bonsai-27B's DeltaNet: 16 key heads of 128, 48 value heads of 128, K = 4.
    check_conv1d_split(130, 16, 128, 48 * 128, 4, seed++);
    EXPECT_FALSE(cuda::conv1d_split_l2_supported(257, 4));
    EXPECT_FALSE(cuda::conv1d_split_l2_supported(128, 5));
    EXPECT_THROW(cuda::conv1d_split_l2(nullptr, nullptr, nullptr, 4, 1, 300, 8, 4, 1e-6f, nullptr, nullptr, nullptr,
                                       nullptr),
                 std::exception);
}

TEST(OpParityElementwise, Conv1dStateCarriesAcrossCalls) {
    DELTABIT_REQUIRE_GPU();
    // Running [x1; x2] in one call equals x1 then x2 with the state carried (conv1d.h), here with x1
    // shorter than the history so the second call reads state rows the first call shifted.
    const int64_t c = 65, k = 4, t1 = 1, t2 = 6;
    std::mt19937 rng(500);
    const std::vector<float> x = uniform(size_t((t1 + t2) * c), rng, -3.0f, 3.0f);
    const std::vector<float> w = uniform(size_t(c * k), rng, -1.0f, 1.0f);
    std::vector<float> state(size_t((k - 1) * c), 0.0f);
    std::vector<float> want(x.size());
    cpu::conv1d_causal_silu(x.data(), w.data(), state.data(), t1 + t2, c, k, want.data());

    GuardedDeviceArray<float> dx(x), dw(w), dstate(std::vector<float>(size_t((k - 1) * c), 0.0f)), dout(x.size());
    cuda::conv1d_causal_silu(dx.get(), dw.get(), dstate.get(), t1, c, k, dout.get(), nullptr);
    cuda::conv1d_causal_silu(dx.get() + t1 * c, dw.get(), dstate.get(), t2, c, k, dout.get() + t1 * c, nullptr);
    const std::vector<double> want_d = to_double(want);
    // Inputs in [−3, 3], taps in [−1, 1]: Σ|w·x| ≤ 3K, the bound of check_conv1d with that maximum.
    expect_within(
        dout.download("conv1d split"), want_d,
        [&](size_t i) { return 1.1 * double(k) * kU * 3.0 * double(k) + 8 * kU * std::fabs(want_d[i]); },
        "conv1d x1 (T=1) then x2 (T=6) vs one call");
    expect_ulps(dstate.download("conv1d split state"), state, 0, "conv1d split state");
}

#else
TEST(OpParityElementwise, SkippedWithoutCuda) { GTEST_SKIP() << "built without CUDA"; }
#endif

}  // namespace
}  // namespace deltabit::test
