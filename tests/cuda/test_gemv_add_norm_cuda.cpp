// The decode seam folded into the GEMVs beside it (ops/matmul/matmul_cuda.h gemv_quantized_add_norm and the
// deferred-norm view every GEMV reads), on the GPU machine; skips cleanly without CUDA or a GPU.
//
//   producer  residual becomes residual + gemv_quantized(x, W) of the same launch config, bit for bit (the
//             fp32 add the seam does); out's q and {scale, sum} are the CPU twin of the quantiser applied
//             to residual ⊙ w (fp32 products), bit for bit, zeros to the group end, guard groups untouched;
//             out.norm_sum_sq[g] is the CPU twin of the contract's summation order (in-lane fmaf, then a
//             butterfly over 32 lanes), bit for bit; every arrival counter is zero after the call; a second
//             call on the same scratch does it all again. N 1 .. 5120 (partial last groups, one row),
//             K 128 and 5120, 11 launch shapes including tiles that straddle groups and split launches.
//   consumer  gemv_quantized and gemv_quantized_swiglu reading the deferred view equal the same calls on a
//             plain view of the same codes whose scales are scale·r, r = 1/sqrt(Σ/cols + eps) computed on
//             the host in the contract's order, bit for bit (N a whole number of weight blocks);
//   meaning   those dequantised activations q·scale·r are within half a quantisation step (plus a derived
//             fp32 bound) of cpu::rms_norm(residual)·w in double-summed form: the twins above are the norm.
//   errors    a plain output view, one of another width, without counters or in x's scratch, and missing
//             norm weights are refused; the writers of plain activations refuse a deferred view.
// Filter: '*AddNorm*'.
#include <gtest/gtest.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "core/dtype.h"
#include "core/error.h"
#include "ops/rms_norm.h"

#ifdef DELTABIT_HAVE_CUDA
#include "cuda/gemv_fused_support.h"
#include "cuda/gemv_test_data.h"
#include "cuda/op_parity_cuda.h"
#include "cuda/quantized_output_check.h"
#include "ops/elementwise/elementwise_cuda.h"
#include "ops/matmul/matmul_cuda.h"
#endif

namespace deltabit::test {
namespace {

#ifdef DELTABIT_HAVE_CUDA

constexpr int kLanes = 32;

// A warp's xor butterfly (__shfl_xor_sync over offsets 16 .. 1), each level adding the partner lane's
// value. Float addition commutes, so every lane ends with the same float; returns it.
float butterfly_sum(float (&lanes)[kLanes]) {
    for (int offset = 16; offset > 0; offset /= 2) {
        float next[kLanes];
        for (int l = 0; l < kLanes; ++l) next[l] = lanes[l] + lanes[l ^ offset];
        std::copy(next, next + kLanes, lanes);
    }
    return lanes[0];
}

// The contract's Σy² of one group of 128 (ops/matmul/matmul_cuda.h): lane l holds y[4l .. 4l+3] (zero past the
// row), adds their squares with fmaf in order, then the butterfly.
float group_sum_sq_twin(const std::vector<float>& y, int64_t g) {
    float lane_sum[kLanes];
    for (int l = 0; l < kLanes; ++l) {
        float s = 0.0f;
        for (int i = 0; i < 4; ++i) {
            const int64_t k = g * cuda::kActivationGroup + 4 * l + i;
            const float v = k < int64_t(y.size()) ? y[size_t(k)] : 0.0f;
            s = std::fma(v, v, s);
        }
        lane_sum[l] = s;
    }
    return butterfly_sum(lane_sum);
}

// The reading GEMV's r = 1/sqrt(Σ/cols + eps): lane l adds group sums l, l + 32, ... in order, then the
// butterfly. The device divides and takes the root correctly rounded (no fast math), as the host does.
float norm_scale_twin(const std::vector<float>& group_sums, int64_t cols, float eps) {
    float lane_sum[kLanes] = {};
    for (size_t g = 0; g < group_sums.size(); ++g) lane_sum[g % kLanes] += group_sums[g];
    return 1.0f / std::sqrt(butterfly_sum(lane_sum) / float(cols) + eps);
}

std::vector<float> download_sums(const cuda::QuantizedActivationsView& v) {
    std::vector<float> sums(size_t(cuda::activation_groups(v.cols)));
    cuda::cuda_check(cudaMemcpy(sums.data(), v.norm_sum_sq, sums.size() * sizeof(float), cudaMemcpyDeviceToHost),
                     "download norm sums");
    return sums;
}

// A plain view holding the deferred view's codes with every group scale multiplied by r (as the reading
// GEMV does when it loads them): the twin input of the consumer checks.
struct ScaledCopy {
    int64_t cols;
    cuda::ActivationScratch scratch;
    std::vector<cuda::ActivationGroupMeta> meta;  // the scaled entries, as uploaded
    ScaledCopy(const cuda::QuantizedActivationsView& deferred, float r) : cols(deferred.cols), scratch(deferred.cols) {
        const int64_t groups = cuda::activation_groups(cols);
        const cuda::QuantizedActivationsView v = scratch.view(cols);
        cuda::cuda_check(cudaMemcpy(v.q, deferred.q, size_t(groups * cuda::kActivationGroup), cudaMemcpyDeviceToDevice),
                         "copy codes");
        meta.resize(size_t(groups));
        cuda::cuda_check(cudaMemcpy(meta.data(), deferred.meta, meta.size() * sizeof meta[0], cudaMemcpyDeviceToHost),
                         "download meta");
        for (cuda::ActivationGroupMeta& m : meta) m.scale *= r;
        cuda::cuda_check(cudaMemcpy(v.meta, meta.data(), meta.size() * sizeof meta[0], cudaMemcpyHostToDevice),
                         "upload scaled meta");
    }
    cuda::QuantizedActivationsView view() const { return scratch.view(cols); }
};

// Half a quantisation step, relative slack for r and the reference (units of u = 2^-24):
//   a group sum passes 4 fmaf + 5 butterfly roundings, the sum of G group sums G/32 + 5 more, all terms
//   positive: ≤ n·u relative with n = 9 + ceil(G/32) + 5; the root halves it; /cols, +eps, sqrt, 1/x: 4u;
//   scale·r: u. The quantiser: |q·scale − g| ≤ scale/2 + 2u·|g| (127/amax and amax/127 each rounded once).
//   The reference cpu::rms_norm: x·scale·w in fp32, 3u (its double sum is exact enough to ignore).
double dequantised_rel_tol(int64_t cols) {
    const double groups = double(cuda::activation_groups(cols));
    const double n_sum = 9.0 + std::ceil(groups / 32.0) + 5.0;
    return (n_sum / 2.0 + 4.0 + 1.0 + 2.0 + 3.0) * kU;
}

struct AddNormCase {
    DType type;
    int64_t n, k;
    float eps;
};

std::string case_text(const AddNormCase& c, const cuda::GemvLaunchConfig* config) {
    return std::string(dtype_name(c.type)) + " N=" + std::to_string(c.n) + " K=" + std::to_string(c.k) +
           " eps=" + std::to_string(c.eps) + " " + (config != nullptr ? config_text(*config) : std::string("planned"));
}

// One producer call checked (twice on one scratch), then the consumers of its output.
void check_add_norm(const AddNormCase& c, const cuda::GemvLaunchConfig* config, uint32_t seed) {
    std::mt19937 rng(seed);
    const std::string what = case_text(c, config);
    const cuda::ActivationScratch x_scratch = random_quantized_activations(c.k, rng);
    const cuda::QuantizedActivationsView x = x_scratch.view(c.k);
    const cuda::GemvWeights w = random_gemv_weights(c.type, c.n, c.k, rng);
    const std::vector<float> residual = random_activations(c.n, rng);
    const std::vector<float> norm_w = uniform(size_t(c.n), rng, 0.5f, 1.5f);
    const GuardedDeviceArray<float> d_norm_w(norm_w);

    const cuda::GemvLaunchConfig plain_config = config != nullptr ? *config : cuda::plan_gemv(c.type, c.n, c.k);
    const std::vector<float> y = gemv_alone(x, w.view(), plain_config, what);
    std::vector<float> want_residual(residual.size());
    for (size_t i = 0; i < residual.size(); ++i) want_residual[i] = residual[i] + y[i];
    std::vector<float> g(residual.size());
    for (size_t i = 0; i < g.size(); ++i) g[i] = want_residual[i] * norm_w[i];

    GuardedQuantizedOutput out(c.n);
    const cuda::QuantizedActivationsView deferred = out.deferred_view(c.eps);
    for (int call = 1; call <= 2; ++call) {
        const std::string this_call = what + ", call " + std::to_string(call);
        if (call > 1) out.poison();
        const GuardedDeviceArray<float> d_residual(residual);
        const cuda::GemvLaunchReport report =
            config != nullptr
                ? cuda::gemv_quantized_add_norm(x, w.view(), d_residual.get(), d_norm_w.get(), deferred, nullptr, *config)
                : cuda::gemv_quantized_add_norm(x, w.view(), d_residual.get(), d_norm_w.get(), deferred, nullptr);
        EXPECT_EQ(report.config.lanes_per_row, plain_config.lanes_per_row) << this_call;
        const std::vector<float> got = d_residual.download(this_call);
        ASSERT_FALSE(::testing::Test::HasFailure()) << this_call;  // guard bytes
        ASSERT_TRUE(bitwise_equal(got, want_residual)) << this_call << ": residual + W·x";
        ASSERT_TRUE(out.matches_host_quantizer(g)) << this_call << ": codes of residual ⊙ w";
        const std::vector<float> sums = download_sums(deferred);
        for (size_t gi = 0; gi < sums.size(); ++gi) {
            const float want = group_sum_sq_twin(want_residual, int64_t(gi));
            ASSERT_EQ(std::bit_cast<uint32_t>(sums[gi]), std::bit_cast<uint32_t>(want))
                << this_call << ": Σ residual² of group " << gi << " is " << sums[gi] << ", want " << want;
        }
        ASSERT_TRUE(out.arrivals_all_zero()) << this_call;
    }

    // The consumers: r from the group sums, in the contract's order.
    const float r = norm_scale_twin(download_sums(deferred), c.n, c.eps);
    const ScaledCopy scaled(deferred, r);
    const cuda::QuantizedActivationsView plain = scaled.view();

    // Meaning: q·scale·r against the norm computed on the host.
    {
        std::vector<float> h_ref(size_t(c.n));
        cpu::rms_norm(want_residual.data(), norm_w.data(), 1, c.n, c.eps, cpu::NormWeight::plain, h_ref.data());
        std::vector<int8_t> q(size_t(c.n));
        cuda::cuda_check(cudaMemcpy(q.data(), deferred.q, q.size(), cudaMemcpyDeviceToHost), "download q");
        const double rel = dequantised_rel_tol(c.n);
        for (int64_t i = 0; i < c.n; ++i) {
            const double step = double(scaled.meta[size_t(i / cuda::kActivationGroup)].scale);
            const double got = double(q[size_t(i)]) * step;
            const double bound = 0.5 * step * (1.0 + 2.0 * kU) + rel * std::fabs(double(h_ref[size_t(i)])) + 1e-30;
            ASSERT_LE(std::fabs(got - double(h_ref[size_t(i)])), bound)
                << what << ": element " << i << " dequantises to " << got << ", rms_norm·w is " << h_ref[size_t(i)];
        }
    }

    // A reading GEMV takes the N outputs as its K: whole weight blocks only (128 for Q1_0, 32 for Q4_0).
    if (c.n % dtype_info(c.type).block_elems != 0) return;
    const int64_t consumer_rows = 257;  // two whole tiles of most shapes and a ragged one
    const cuda::GemvWeights next = random_gemv_weights(c.type, consumer_rows, c.n, rng);
    const cuda::GemvLaunchConfig consumer_config = cuda::plan_gemv(c.type, consumer_rows, c.n);
    {
        GuardedDeviceArray<float> got{size_t(consumer_rows)};
        cuda::gemv_quantized(deferred, next.view(), got.get(), nullptr, consumer_config);
        const std::vector<float> want = gemv_alone(plain, next.view(), consumer_config, what + " consumer twin");
        ASSERT_TRUE(bitwise_equal(got.download(what + " consumer"), want)) << what << ": GEMV reading the deferred view";
    }
    {
        const cuda::GemvWeights up = random_gemv_weights(c.type, consumer_rows, c.n, rng);
        GuardedDeviceArray<float> got{size_t(consumer_rows)}, want{size_t(consumer_rows)};
        cuda::gemv_quantized_swiglu(deferred, next.view(), up.view(), got.get(), nullptr);
        cuda::gemv_quantized_swiglu(plain, next.view(), up.view(), want.get(), nullptr);
        ASSERT_TRUE(bitwise_equal(got.download(what + " swiglu consumer"), want.download(what + " swiglu twin")))
            << what << ": SwiGLU GEMV reading the deferred view";
    }
}

class GemvAddNorm : public ::testing::TestWithParam<DType> {};

TEST_P(GemvAddNorm, ResidualCodesSumsAndConsumersBitForBit) {
    DELTABIT_REQUIRE_GPU();
    const DType t = GetParam();
    std::vector<cuda::GemvLaunchConfig> configs;
    for (int lanes : {8, 16, 32}) {
        for (int warps : {1, 3}) configs.push_back({lanes, 2, warps, 0});
    }
    configs.push_back({8, 4, 8, 0});   // 128-row tiles: one whole group each
    configs.push_back({16, 4, 3, 0});  // 24-row tiles straddling groups
    configs.push_back({16, 2, 4, 7});  // split into many launches
    configs.push_back({8, 2, 3, 5});
    // Three blocks walking every tile: the epilogue for 8 tiles at a time and the rest (quantize_completed_tiles).
    for (cuda::GemvLaunchConfig c : {cuda::GemvLaunchConfig{16, 4, 3, 0}, cuda::GemvLaunchConfig{32, 2, 1, 0}}) {
        c.max_grid = 3;
        configs.push_back(c);
    }
    uint32_t seed = 7100 + uint32_t(t);
    for (const int64_t k : {int64_t(128), int64_t(5120)}) {
        for (const int64_t n : {int64_t(1), int64_t(63), int64_t(128), int64_t(1000), int64_t(5120)}) {
            // eps small as models have it, and one as large as the mean square (it must enter r).
            for (const float eps : {1e-6f, 0.3f}) {
                const AddNormCase c{t, n, k, eps};
                for (const cuda::GemvLaunchConfig& config : configs) {
                    check_add_norm(c, &config, ++seed);
                    if (HasFailure()) return;
                }
                check_add_norm(c, nullptr, ++seed);
                if (HasFailure()) return;
            }
        }
    }
}

INSTANTIATE_TEST_SUITE_P(Types, GemvAddNorm, ::testing::Values(DType::Q1_0, DType::Q4_0),
                         [](const auto& info) { return std::string(dtype_name(info.param)); });

TEST(GemvAddNormErrors, RefusesPlainOrMisfitOutputsAndPlainWritersRefuseDeferredViews) {
    DELTABIT_REQUIRE_GPU();
    std::mt19937 rng(17);
    constexpr int64_t kN = 256, kK = 128;
    const cuda::ActivationScratch x_scratch = random_quantized_activations(512, rng);
    const cuda::QuantizedActivationsView x = x_scratch.view(kK);
    const cuda::GemvWeights w = random_gemv_weights(DType::Q1_0, kN, kK, rng);
    const GuardedDeviceArray<float> residual(random_activations(kN, rng));
    const GuardedDeviceArray<float> norm_w(uniform(size_t(kN), rng, 0.5f, 1.5f));
    const cuda::ActivationScratch out_scratch(512);
    const cuda::QuantizedActivationsView ok = out_scratch.deferred_norm_view(kN, 1e-6f);
    auto call = [&](const cuda::QuantizedActivationsView& out, const float* nw = nullptr) {
        return cuda::gemv_quantized_add_norm(x, w.view(), residual.get(), nw != nullptr ? nw : norm_w.get(), out, nullptr);
    };
    EXPECT_NO_THROW(call(ok)) << "control";
    cuda::cuda_check(cudaDeviceSynchronize(), "add norm control");

    cuda::QuantizedActivationsView no_counters = ok;
    no_counters.arrivals = nullptr;
    EXPECT_THROW(call(out_scratch.view(kN)), Error) << "a plain output view";
    EXPECT_THROW(call(out_scratch.deferred_norm_view(kN + 1, 1e-6f)), Error) << "a view of N + 1 inputs";
    EXPECT_THROW(call(no_counters), Error) << "a view without arrival counters";
    EXPECT_THROW(call(x_scratch.deferred_norm_view(kN, 1e-6f)), Error) << "a view of x's own scratch";
    EXPECT_THROW(cuda::gemv_quantized_add_norm(x, w.view(), residual.get(), nullptr, ok, nullptr), Error)
        << "no norm weights";

    // Writers of plain activations refuse the deferred view.
    const GuardedDeviceArray<float> values(random_activations(kN, rng));
    EXPECT_THROW(cuda::quantize_activations(values.get(), ok, nullptr), Error) << "quantize_activations";
    GuardedDeviceArray<float> x_row(random_activations(kN, rng)), h{size_t(kN)};
    EXPECT_THROW(cuda::add_rms_norm_quantize(x_row.get(), nullptr, norm_w.get(), kN, 1e-6f, cpu::NormWeight::plain,
                                             h.get(), ok, nullptr),
                 Error)
        << "add_rms_norm_quantize";
    const cuda::GemvWeights gate = random_gemv_weights(DType::Q1_0, kN, kK, rng);
    GuardedDeviceArray<float> act{size_t(kN)};
    EXPECT_THROW(cuda::gemv_quantized_swiglu(x, gate.view(), w.view(), act.get(), nullptr, &ok), Error)
        << "gemv_quantized_swiglu's y_quantized";
    cuda::cuda_check(cudaDeviceSynchronize(), "add norm errors");
    // One accepted call and every refusal (which launches nothing) leave the counters at zero.
    EXPECT_TRUE(arrivals_zero(ok, cuda::activation_groups(512)));
}

#else

TEST(GemvAddNorm, SkippedWithoutCuda) { GTEST_SKIP() << "built without CUDA"; }

#endif

}  // namespace
}  // namespace deltabit::test
