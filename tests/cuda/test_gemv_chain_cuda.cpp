// The chain of decode GEMVs in one persistent launch (ops/gemv_chain_cuda.h) against the same calls made one
// by one (ops/matmul_cuda.h, each parity-tested against the CPU reference in test_gemv_cuda.cpp and
// test_gemv_fused_cuda.cpp), on the GPU machine; skips cleanly without CUDA, without a GPU, or below compute
// capability 9.0. The chain promises the calls' bits, so it is held to bit equality:
//
//   a DeltaNet layer's GEMVs   add-norm (the output projection) → SwiGLU with its quantised output → add-norm
//                              (ffn_down) → the next layer's input group, each reading what the one before
//                              wrote: Bonsai-27B's shapes and small ragged ones (groups of 1, 63, 129 rows).
//                              Every output compared: the group's four y, the residual, the SwiGLU y, each
//                              quantised output's codes, group scales and sums, every arrival counter back to
//                              zero; the chain launched twice from the same state (its barrier counters reset).
//   plain ops                  gemv and SwiGLU without a quantised output.
//   refusals                   weights other than Q1_0, a seventeenth op: refused with a message, nothing
//                              recorded; an empty chain launches nothing.
//
// Outputs start as NaN and end in guard bytes (tests/cuda/op_parity_cuda.h). Filter: '*GemvChain*'.
#include <gtest/gtest.h>

#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "core/dtype.h"
#include "core/error.h"

#ifdef DELTABIT_HAVE_CUDA
#include "cuda/gemv_fused_support.h"
#include "cuda/gemv_test_data.h"
#include "cuda/op_parity_cuda.h"
#include "cuda/quantized_output_check.h"
#include "ops/gemv_chain_cuda.h"
#include "ops/matmul_cuda.h"
#endif

namespace deltabit::test {
namespace {

#ifdef DELTABIT_HAVE_CUDA

#define DELTABIT_REQUIRE_CHAIN()                                                  \
    do {                                                                          \
        DELTABIT_REQUIRE_GPU();                                                   \
        if (!cuda::gemv_chain_supported())                                        \
            GTEST_SKIP() << "the GEMV chain needs compute capability 9.0";        \
    } while (0)

// A DeltaNet layer's GEMV shapes: hidden H, the DeltaNet value width V (the output projection's K), the FFN
// width F, and the rows of the next layer's input group (K = H).
struct LayerShape {
    const char* name;
    int64_t hidden, value, ffn;
    std::vector<int64_t> group_rows;
};

// The layer's weights and inputs, shared by both runs.
struct LayerWeights {
    cuda::ActivationScratch x;  // the DeltaNet output, quantised (V inputs)
    cuda::GemvWeights out_proj, gate, up, down;
    std::vector<cuda::GemvWeights> group;
    std::vector<float> residual, attn_norm, ffn_norm;
    GuardedDeviceArray<float> d_attn_norm, d_ffn_norm;
    LayerWeights(const LayerShape& s, std::mt19937& rng)
        : x(random_quantized_activations(s.value, rng)),
          out_proj(random_gemv_weights(DType::Q1_0, s.hidden, s.value, rng)),
          gate(random_gemv_weights(DType::Q1_0, s.ffn, s.hidden, rng)),
          up(random_gemv_weights(DType::Q1_0, s.ffn, s.hidden, rng)),
          down(random_gemv_weights(DType::Q1_0, s.hidden, s.ffn, rng)),
          residual(random_activations(s.hidden, rng)),
          attn_norm(uniform(size_t(s.hidden), rng, 0.5f, 1.5f)),
          ffn_norm(uniform(size_t(s.hidden), rng, 0.5f, 1.5f)),
          d_attn_norm(attn_norm),
          d_ffn_norm(ffn_norm) {
        for (int64_t rows : s.group_rows) group.push_back(random_gemv_weights(DType::Q1_0, rows, s.hidden, rng));
    }
};

// One run's outputs, poisoned, the residual fresh.
struct LayerRun {
    static constexpr float kEps = 1e-6f;
    GuardedDeviceArray<float> residual, ffn_y;
    GuardedQuantizedOutput after_attn, ffn_q, after_ffn;
    std::vector<GuardedDeviceArray<float>> group_y;
    LayerRun(const LayerShape& s, const LayerWeights& w)
        : residual(w.residual), ffn_y(size_t(s.ffn)), after_attn(s.hidden), ffn_q(s.ffn), after_ffn(s.hidden) {
        group_y.reserve(s.group_rows.size());
        for (int64_t rows : s.group_rows) group_y.emplace_back(size_t(rows));
    }
    std::vector<cuda::GemvOutput> group_outputs(const LayerWeights& w) const {
        std::vector<cuda::GemvOutput> out;
        for (size_t i = 0; i < w.group.size(); ++i) out.push_back({w.group[i].view(), group_y[i].get()});
        return out;
    }
};

// The four calls one by one, planned.
void run_calls(const LayerShape& s, const LayerWeights& w, LayerRun& r) {
    const cuda::QuantizedActivationsView a = r.after_attn.deferred_view(LayerRun::kEps);
    const cuda::QuantizedActivationsView q = r.ffn_q.view();
    const cuda::QuantizedActivationsView f = r.after_ffn.deferred_view(LayerRun::kEps);
    cuda::gemv_quantized_add_norm(w.x.view(s.value), w.out_proj.view(), r.residual.get(), w.d_attn_norm.get(), a,
                                  nullptr);
    cuda::gemv_quantized_swiglu(a, w.gate.view(), w.up.view(), r.ffn_y.get(), nullptr, &q);
    cuda::gemv_quantized_add_norm(q, w.down.view(), r.residual.get(), w.d_ffn_norm.get(), f, nullptr);
    cuda::gemv_quantized_group(f, r.group_outputs(w), nullptr);
}

// The same four as one chain.
cuda::GemvChainReport run_chain(const LayerShape& s, const LayerWeights& w, LayerRun& r,
                                const cuda::GemvChainScratch& scratch) {
    const cuda::QuantizedActivationsView a = r.after_attn.deferred_view(LayerRun::kEps);
    const cuda::QuantizedActivationsView q = r.ffn_q.view();
    const cuda::QuantizedActivationsView f = r.after_ffn.deferred_view(LayerRun::kEps);
    cuda::GemvChain chain(scratch);
    chain.add_norm(w.x.view(s.value), w.out_proj.view(), r.residual.get(), w.d_attn_norm.get(), a);
    chain.swiglu(a, w.gate.view(), w.up.view(), r.ffn_y.get(), &q);
    chain.add_norm(q, w.down.view(), r.residual.get(), w.d_ffn_norm.get(), f);
    const std::vector<cuda::GemvOutput> outputs = r.group_outputs(w);
    chain.group(f, outputs);
    EXPECT_EQ(chain.size(), 4);
    return chain.launch(nullptr);
}

struct QuantisedBits {
    std::vector<int8_t> q;
    std::vector<float> scale, sums;
    std::vector<int32_t> sum;
};
QuantisedBits download_quantised(const cuda::QuantizedActivationsView& v, bool deferred) {
    cuda::cuda_check(cudaDeviceSynchronize(), "quantised output");
    const size_t groups = size_t(cuda::activation_groups(v.cols));
    QuantisedBits b;
    b.q.resize(groups * cuda::kActivationGroup);
    std::vector<cuda::ActivationGroupMeta> meta(groups);
    cuda::cuda_check(cudaMemcpy(b.q.data(), v.q, b.q.size(), cudaMemcpyDeviceToHost), "q");
    cuda::cuda_check(cudaMemcpy(meta.data(), v.meta, groups * sizeof meta[0], cudaMemcpyDeviceToHost), "meta");
    for (const cuda::ActivationGroupMeta& m : meta) {
        b.scale.push_back(m.scale);
        b.sum.push_back(m.sum);
    }
    if (deferred) {
        b.sums.resize(groups);
        cuda::cuda_check(cudaMemcpy(b.sums.data(), v.norm_sum_sq, groups * sizeof(float), cudaMemcpyDeviceToHost), "sums");
    }
    return b;
}

void expect_same_quantised(const QuantisedBits& got, const QuantisedBits& want, const std::string& what) {
    ASSERT_EQ(got.q, want.q) << what << ": codes";
    ASSERT_TRUE(bitwise_equal(got.scale, want.scale)) << what << ": group scales";
    ASSERT_EQ(got.sum, want.sum) << what << ": group sums of codes";
    if (!want.sums.empty()) ASSERT_TRUE(bitwise_equal(got.sums, want.sums)) << what << ": Σ residual²";
}

void expect_same_layer(LayerRun& got, LayerRun& want, const std::string& what) {
    for (size_t i = 0; i < got.group_y.size(); ++i) {
        const std::string member = what + ": group member " + std::to_string(i);
        ASSERT_TRUE(bitwise_equal(got.group_y[i].download(member), want.group_y[i].download(member + " (calls)")))
            << member;
    }
    ASSERT_TRUE(bitwise_equal(got.residual.download(what), want.residual.download(what + " (calls)")))
        << what << ": residual";
    ASSERT_TRUE(bitwise_equal(got.ffn_y.download(what), want.ffn_y.download(what + " (calls)"))) << what << ": SwiGLU y";
    expect_same_quantised(download_quantised(got.after_attn.deferred_view(LayerRun::kEps), true),
                          download_quantised(want.after_attn.deferred_view(LayerRun::kEps), true),
                          what + ", after the output projection");
    expect_same_quantised(download_quantised(got.ffn_q.view(), false), download_quantised(want.ffn_q.view(), false),
                          what + ", SwiGLU's quantised y");
    expect_same_quantised(download_quantised(got.after_ffn.deferred_view(LayerRun::kEps), true),
                          download_quantised(want.after_ffn.deferred_view(LayerRun::kEps), true), what + ", after ffn_down");
    for (const GuardedQuantizedOutput* out : {&got.after_attn, &got.ffn_q, &got.after_ffn})
        ASSERT_TRUE(out->arrivals_all_zero()) << what;
}

class GemvChainLayer : public ::testing::TestWithParam<LayerShape> {};

TEST_P(GemvChainLayer, EqualsTheCallsOneByOneBitForBit) {
    DELTABIT_REQUIRE_CHAIN();
    const LayerShape& s = GetParam();
    std::mt19937 rng(29);
    const LayerWeights w(s, rng);
    LayerRun want(s, w);
    run_calls(s, w, want);
    const cuda::GemvChainScratch scratch;
    for (int launch = 1; launch <= 2; ++launch) {  // the second from the same state: the counters were reset
        const std::string what = std::string(s.name) + ", chain launch " + std::to_string(launch);
        LayerRun got(s, w);
        const cuda::GemvChainReport report = run_chain(s, w, got, scratch);
        EXPECT_EQ(report.ops, 4) << what;
        EXPECT_GE(report.slots, 2) << what;
        expect_same_layer(got, want, what);
    }
}

INSTANTIATE_TEST_SUITE_P(Shapes, GemvChainLayer,
                         ::testing::Values(LayerShape{"bonsai27b", 5120, 6144, 17408, {10240, 6144, 48, 48}},
                                           LayerShape{"ragged", 384, 640, 1152, {1, 63, 129, 200}}),
                         [](const ::testing::TestParamInfo<LayerShape>& info) { return std::string(info.param.name); });

TEST(GemvChainOps, PlainGemvAndSwigluEqualTheirCalls) {
    DELTABIT_REQUIRE_CHAIN();
    std::mt19937 rng(31);
    const int64_t k = 640, n = 1000;
    const cuda::ActivationScratch x_scratch = random_quantized_activations(k, rng);
    const cuda::QuantizedActivationsView x = x_scratch.view(k);
    const cuda::GemvWeights w = random_gemv_weights(DType::Q1_0, 129, k, rng);
    const cuda::GemvWeights gate = random_gemv_weights(DType::Q1_0, n, k, rng);
    const cuda::GemvWeights up = random_gemv_weights(DType::Q1_0, n, k, rng);

    GuardedDeviceArray<float> y_call(129), y_chain(129), s_call(static_cast<size_t>(n)), s_chain(static_cast<size_t>(n));
    cuda::gemv_quantized(x, w.view(), y_call.get(), nullptr);
    cuda::gemv_quantized_swiglu(x, gate.view(), up.view(), s_call.get(), nullptr);

    const cuda::GemvChainScratch scratch;
    cuda::GemvChain chain(scratch);
    chain.gemv(x, w.view(), y_chain.get());
    chain.swiglu(x, gate.view(), up.view(), s_chain.get());
    EXPECT_EQ(chain.launch(nullptr).ops, 2);
    ASSERT_TRUE(bitwise_equal(y_chain.download("gemv in a chain"), y_call.download("gemv call")));
    ASSERT_TRUE(bitwise_equal(s_chain.download("swiglu in a chain"), s_call.download("swiglu call")));
}

TEST(GemvChainOps, RefusesOtherTypesAndTooManyOpsAndLaunchesNothingEmpty) {
    DELTABIT_REQUIRE_CHAIN();
    std::mt19937 rng(37);
    const int64_t k = 256;
    const cuda::ActivationScratch x_scratch = random_quantized_activations(k, rng);
    const cuda::QuantizedActivationsView x = x_scratch.view(k);
    const cuda::GemvWeights q4 = random_gemv_weights(DType::Q4_0, 64, k, rng);
    const cuda::GemvWeights q1 = random_gemv_weights(DType::Q1_0, 64, k, rng);
    GuardedDeviceArray<float> y(64);
    const cuda::GemvChainScratch scratch;
    cuda::GemvChain chain(scratch);
    EXPECT_EQ(chain.launch(nullptr).ops, 0);
    try {
        chain.gemv(x, q4.view(), y.get());
        FAIL() << "Q4_0 weights must be refused";
    } catch (const Error& e) {
        EXPECT_NE(std::string(e.what()).find("Q1_0 weights only"), std::string::npos) << e.what();
    }
    EXPECT_EQ(chain.size(), 0);
    for (int i = 0; i < cuda::GemvChain::kMaxOps; ++i) chain.gemv(x, q1.view(), y.get());
    try {
        chain.gemv(x, q1.view(), y.get());
        FAIL() << "a seventeenth op must be refused";
    } catch (const Error& e) {
        EXPECT_NE(std::string(e.what()).find("at most 16 ops"), std::string::npos) << e.what();
    }
    EXPECT_EQ(chain.size(), cuda::GemvChain::kMaxOps);
    // Sixteen ops writing one y: it ends as the call's y (each op writes every row).
    chain.launch(nullptr);
    GuardedDeviceArray<float> want(64);
    cuda::gemv_quantized(x, q1.view(), want.get(), nullptr);
    ASSERT_TRUE(bitwise_equal(y.download("sixteen ops"), want.download("call")));
}

#else

TEST(GemvChain, SkippedWithoutCuda) { GTEST_SKIP() << "built without CUDA"; }

#endif

}  // namespace
}  // namespace deltabit::test
