// The staged decode GEMV (GemvLaunchConfig::staged, ops/gemv_staged_cuda.cu) against the classic kernel on
// the GPU machine; skips cleanly without CUDA, without a GPU, or below compute capability 9.0. The classic
// kernel is parity-tested against the CPU reference (test_gemv_cuda.cpp) and the staged one promises, for
// the same lanes_per_row and rows_per_thread, the same terms in the same order, so it is held to bit
// equality:
//
//   gemv_quantized        Q1_0, Q2_0, Q4_0, Q8_0; N 1 .. 5120 with ragged tiles, K 128 .. 17408; every
//                         lanes × rows shape; with the ring the device leaves (most of a matrix staged
//                         before the wait) and with a ring of two or three slots (every slot refilled many
//                         times); the Bonsai-27B LM head shape (248320 × 5120, ~235 tiles a block).
//   gemv_quantized_group  Bonsai-27B's DeltaNet input group (10240, 6144, 48, 48) and a ragged group:
//                         tiles never straddle two matrices.
//   gemv_quantized_swiglu y and, with y_quantized, the codes and {scale, sum} equal the classic call's
//                         bit for bit, every arrival counter back to zero; twice on one scratch.
//   gemv_quantized_add_norm  the residual, the codes and Σ residual² equal the classic call's bit for bit.
//   the planned shape     Q1_0 plans staged with DELTABIT_GEMV_STAGED=1 (and the call reports what ran);
//                         other types never; a ring that cannot hold two slots is refused with a message.
//
// Outputs start as NaN and end in guard bytes (tests/cuda/op_parity_cuda.h). Filter: '*Staged*'.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "core/dtype.h"
#include "core/error.h"
#include "ops/weight_repack.h"

#ifdef DELTABIT_HAVE_CUDA
#include "cuda/gemv_fused_support.h"
#include "cuda/gemv_test_data.h"
#include "cuda/op_parity_cuda.h"
#include "cuda/quantized_output_check.h"
#include "ops/matmul_cuda.h"
#endif

namespace deltabit::test {
namespace {

#ifdef DELTABIT_HAVE_CUDA

#define DELTABIT_REQUIRE_STAGED()                                                          \
    do {                                                                                   \
        DELTABIT_REQUIRE_GPU();                                                            \
        if (!cuda::staged_gemv_supported())                                                \
            GTEST_SKIP() << "the staged GEMV needs compute capability 9.0";               \
    } while (0)

int sm_count() {
    int device = 0, sms = 0;
    cuda::cuda_check(cudaGetDevice(&device), "cudaGetDevice");
    cuda::cuda_check(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device), "SM count");
    return sms;
}

cuda::GemvLaunchConfig staged_twin(cuda::GemvLaunchConfig c, int64_t ring_bytes = 0) {
    c.staged = true;
    c.staged_ring_bytes = ring_bytes;
    return c;
}

// A ring of two or three slots for this launch shape (the kernel's tiles are whole warp items of at least
// 24 KB unless the matrix is smaller; see ops/gemv_staged_cuda.cu), so every slot is refilled many times.
int64_t small_ring(DType t, int64_t k, const cuda::GemvLaunchConfig& c, int matrices) {
    const int64_t item_rows = int64_t(32 / c.lanes_per_row) * (matrices == 2 ? 1 : c.rows_per_thread);
    const int64_t row_bytes = int64_t(gemv_code_row_bytes(t, k)) + k / dtype_info(t).block_elems * 2;
    const int64_t item_bytes = item_rows * row_bytes * matrices;
    return 2 * (std::max<int64_t>(24 * 1024, item_bytes) + item_bytes + 256);
}

std::string staged_text(const cuda::GemvLaunchConfig& c) {
    return config_text(c) + (c.staged ? " staged" : "") +
           (c.staged_ring_bytes > 0 ? " ring " + std::to_string(c.staged_ring_bytes) : std::string());
}

// A staged run: the staged launcher ran (only it reports tiles), one launch whose grid is one block per SM
// or one per tile where there are fewer (more only for a quantised output's bounded runs).
void expect_staged_report(const cuda::GemvLaunchReport& report, bool quantised_output, const std::string& what) {
    ASSERT_GT(report.staged_tiles, 0) << what << ": the classic kernel ran";
    EXPECT_EQ(report.launches, 1) << what;
    if (quantised_output) {
        EXPECT_GE(report.blocks, std::min<int64_t>(report.staged_tiles, sm_count())) << what;
        EXPECT_LE(report.blocks, report.staged_tiles) << what;
    } else {
        EXPECT_EQ(report.blocks, std::min<int64_t>(report.staged_tiles, sm_count())) << what;
    }
}

struct Shape {
    int64_t n, k;
};

std::vector<float> run_gemv(const cuda::QuantizedActivationsView& x, const cuda::GemvWeightView& w,
                            const cuda::GemvLaunchConfig& config, const std::string& what) {
    GuardedDeviceArray<float> y(size_t(w.rows));
    const cuda::GemvLaunchReport report = cuda::gemv_quantized(x, w, y.get(), nullptr, config);
    if (config.staged)
        expect_staged_report(report, false, what);
    else
        EXPECT_EQ(report.staged_tiles, 0) << what << ": the staged kernel ran";
    return y.download(what);
}

class StagedGemv : public ::testing::TestWithParam<DType> {};

TEST_P(StagedGemv, EqualsClassicBitForBitForEveryLaunchShape) {
    DELTABIT_REQUIRE_STAGED();
    const DType t = GetParam();
    std::vector<Shape> shapes = {{1, 128}, {63, 640}, {129, 5120}, {1000, 2560}, {5120, 6144}};
    if (t == DType::Q1_0) shapes.push_back({5120, 17408});  // Bonsai-27B ffn_down
    std::mt19937 rng(7);
    for (const Shape& shape : shapes) {
        const cuda::ActivationScratch x_scratch = random_quantized_activations(shape.k, rng);
        const cuda::QuantizedActivationsView x = x_scratch.view(shape.k);
        const cuda::GemvWeights w = random_gemv_weights(t, shape.n, shape.k, rng);
        for (int lanes : {8, 16, 32}) {
            for (int rows : {2, 4}) {
                const cuda::GemvLaunchConfig classic{lanes, rows, 4, 0};
                const std::string what = std::string(dtype_name(t)) + " N=" + std::to_string(shape.n) +
                                         " K=" + std::to_string(shape.k) + " " + config_text(classic);
                const std::vector<float> want = run_gemv(x, w.view(), classic, what + " classic");
                // The ring the device leaves, then one of two or three slots (refilled over and over).
                for (int64_t ring : {int64_t(0), small_ring(t, shape.k, classic, 1)}) {
                    const cuda::GemvLaunchConfig staged = staged_twin(classic, ring);
                    const std::string staged_what = what + " vs " + staged_text(staged);
                    if (!cuda::staged_gemv_fits(t, shape.k, shape.n, staged, false)) {
                        // Wide rows (Q8_0's are 8× Q1_0's) with 16-row items: refused, never run half-staged.
                        ASSERT_NE(t, DType::Q1_0) << staged_what << ": every Q1_0 shape here must fit";
                        ASSERT_THROW(cuda::gemv_quantized(x, w.view(), nullptr, nullptr, staged), Error) << staged_what;
                        continue;
                    }
                    ASSERT_TRUE(bitwise_equal(run_gemv(x, w.view(), staged, staged_what), want)) << staged_what;
                }
            }
        }
    }
}

INSTANTIATE_TEST_SUITE_P(Types, StagedGemv, ::testing::Values(DType::Q1_0, DType::Q2_0, DType::Q4_0, DType::Q8_0),
                         [](const ::testing::TestParamInfo<DType>& info) { return std::string(dtype_name(info.param)); });

TEST(StagedGemvShapes, LmHeadOfBonsai27bEqualsClassic) {
    DELTABIT_REQUIRE_STAGED();
    std::mt19937 rng(11);
    const int64_t n = 248320, k = 5120;
    const cuda::ActivationScratch x_scratch = random_quantized_activations(k, rng);
    const cuda::QuantizedActivationsView x = x_scratch.view(k);
    const cuda::GemvWeights w = random_gemv_weights(DType::Q1_0, n, k, rng);
    cuda::GemvLaunchConfig classic = cuda::plan_gemv(DType::Q1_0, n, k);
    classic.staged = false;
    const cuda::GemvLaunchConfig planned = staged_twin(classic);
    ASSERT_TRUE(cuda::staged_gemv_fits(DType::Q1_0, k, n, planned, false));
    const std::vector<float> want = run_gemv(x, w.view(), classic, "LM head classic");
    ASSERT_TRUE(bitwise_equal(run_gemv(x, w.view(), planned, "LM head staged"), want));
}

TEST(StagedGemvShapes, GroupsEqualClassicMemberByMember) {
    DELTABIT_REQUIRE_STAGED();
    std::mt19937 rng(13);
    struct GroupCase {
        std::vector<int64_t> rows;
        int64_t k;
    };
    for (const GroupCase& g : {GroupCase{{10240, 6144, 48, 48}, 5120}, GroupCase{{1, 63, 129}, 640}}) {
        const cuda::ActivationScratch x_scratch = random_quantized_activations(g.k, rng);
        const cuda::QuantizedActivationsView x = x_scratch.view(g.k);
        std::vector<cuda::GemvWeights> members;
        for (int64_t rows : g.rows) members.push_back(random_gemv_weights(DType::Q1_0, rows, g.k, rng));
        for (int lanes : {8, 16, 32}) {
            const cuda::GemvLaunchConfig classic{lanes, 2, 4, 0};
            for (int64_t ring : {int64_t(0), small_ring(DType::Q1_0, g.k, classic, 1)}) {
                const cuda::GemvLaunchConfig staged = staged_twin(classic, ring);
                const std::string what = "group K=" + std::to_string(g.k) + " " + staged_text(staged);
                std::vector<GuardedDeviceArray<float>> y_classic, y_staged;
                y_classic.reserve(members.size());
                y_staged.reserve(members.size());
                std::vector<cuda::GemvOutput> out_classic, out_staged;
                for (const cuda::GemvWeights& m : members) {
                    y_classic.emplace_back(size_t(m.rows));
                    y_staged.emplace_back(size_t(m.rows));
                    out_classic.push_back({m.view(), y_classic.back().get()});
                    out_staged.push_back({m.view(), y_staged.back().get()});
                }
                cuda::gemv_quantized_group(x, out_classic, nullptr, classic);
                expect_staged_report(cuda::gemv_quantized_group(x, out_staged, nullptr, staged), false, what);
                for (size_t i = 0; i < members.size(); ++i) {
                    const std::string member = what + " member " + std::to_string(i);
                    ASSERT_TRUE(bitwise_equal(y_staged[i].download(member), y_classic[i].download(member + " classic")))
                        << member;
                }
            }
        }
    }
}

TEST(StagedGemvShapes, SwigluAndItsQuantisedOutputEqualClassic) {
    DELTABIT_REQUIRE_STAGED();
    std::mt19937 rng(17);
    for (const Shape& shape : {Shape{1, 128}, Shape{100, 5120}, Shape{1000, 640}, Shape{17408, 5120}}) {
        const cuda::ActivationScratch x_scratch = random_quantized_activations(shape.k, rng);
        const cuda::QuantizedActivationsView x = x_scratch.view(shape.k);
        const cuda::GemvWeights gate = random_gemv_weights(DType::Q1_0, shape.n, shape.k, rng);
        const cuda::GemvWeights up = random_gemv_weights(DType::Q1_0, shape.n, shape.k, rng);
        for (int lanes : {8, 16, 32}) {
            const cuda::GemvLaunchConfig classic{lanes, 2, 4, 0};
            GuardedDeviceArray<float> y_classic(size_t(shape.n));
            cuda::gemv_quantized_swiglu(x, gate.view(), up.view(), y_classic.get(), nullptr, classic);
            const std::vector<float> want = y_classic.download("swiglu classic");
            for (int64_t ring : {int64_t(0), small_ring(DType::Q1_0, shape.k, classic, 2)}) {
                const cuda::GemvLaunchConfig staged = staged_twin(classic, ring);
                const std::string what = "swiglu N=" + std::to_string(shape.n) + " K=" + std::to_string(shape.k) +
                                         " " + staged_text(staged);
                GuardedDeviceArray<float> y_staged(size_t(shape.n));
                expect_staged_report(
                    cuda::gemv_quantized_swiglu(x, gate.view(), up.view(), y_staged.get(), nullptr, staged), false, what);
                ASSERT_TRUE(bitwise_equal(y_staged.download(what), want)) << what;

                GuardedQuantizedOutput out(shape.n);
                const cuda::QuantizedActivationsView yq = out.view();
                for (int call = 1; call <= 2; ++call) {
                    const std::string this_call = what + " with y_quantized, call " + std::to_string(call);
                    if (call > 1) out.poison();
                    GuardedDeviceArray<float> y(size_t(shape.n));
                    expect_staged_report(
                        cuda::gemv_quantized_swiglu(x, gate.view(), up.view(), y.get(), nullptr, staged, &yq), true,
                        this_call);
                    const std::vector<float> got = y.download(this_call);
                    ASSERT_TRUE(bitwise_equal(got, want)) << this_call;
                    ASSERT_TRUE(out.matches_host_quantizer(got)) << this_call;
                    ASSERT_TRUE(out.arrivals_all_zero()) << this_call;
                }
            }
        }
    }
}

TEST(StagedGemvShapes, AddNormEqualsClassic) {
    DELTABIT_REQUIRE_STAGED();
    std::mt19937 rng(19);
    for (const Shape& shape : {Shape{5120, 17408}, Shape{5120, 6144}, Shape{300, 1024}, Shape{1, 128}}) {
        const cuda::ActivationScratch x_scratch = random_quantized_activations(shape.k, rng);
        const cuda::QuantizedActivationsView x = x_scratch.view(shape.k);
        const cuda::GemvWeights w = random_gemv_weights(DType::Q1_0, shape.n, shape.k, rng);
        const std::vector<float> residual = random_activations(shape.n, rng);
        const std::vector<float> norm_w = uniform(size_t(shape.n), rng, 0.5f, 1.5f);
        const GuardedDeviceArray<float> d_norm_w(norm_w);
        const cuda::GemvLaunchConfig classic = [&] {
            cuda::GemvLaunchConfig c = cuda::plan_gemv(DType::Q1_0, shape.n, shape.k);
            c.staged = false;
            return c;
        }();
        const std::string what = "add_norm N=" + std::to_string(shape.n) + " K=" + std::to_string(shape.k);

        struct Result {
            std::vector<float> residual;
            std::vector<int8_t> q;
            std::vector<cuda::ActivationGroupMeta> meta;
            std::vector<float> sums;
        };
        auto run = [&](const cuda::GemvLaunchConfig& config) {
            GuardedQuantizedOutput out(shape.n);
            const cuda::QuantizedActivationsView deferred = out.deferred_view(1e-6f);
            const GuardedDeviceArray<float> d_residual(residual);
            const cuda::GemvLaunchReport report =
                cuda::gemv_quantized_add_norm(x, w.view(), d_residual.get(), d_norm_w.get(), deferred, nullptr, config);
            if (config.staged) expect_staged_report(report, true, what);
            Result r;
            r.residual = d_residual.download(what + " " + staged_text(config));
            const size_t groups = size_t(cuda::activation_groups(shape.n));
            r.q.resize(groups * cuda::kActivationGroup);
            r.meta.resize(groups);
            r.sums.resize(groups);
            cuda::cuda_check(cudaMemcpy(r.q.data(), deferred.q, r.q.size(), cudaMemcpyDeviceToHost), "q");
            cuda::cuda_check(cudaMemcpy(r.meta.data(), deferred.meta, groups * sizeof r.meta[0], cudaMemcpyDeviceToHost),
                             "meta");
            cuda::cuda_check(cudaMemcpy(r.sums.data(), deferred.norm_sum_sq, groups * sizeof(float), cudaMemcpyDeviceToHost),
                             "sums");
            EXPECT_TRUE(out.arrivals_all_zero()) << what;
            return r;
        };
        const Result want = run(classic);
        const Result got = run(staged_twin(classic));
        ASSERT_TRUE(bitwise_equal(got.residual, want.residual)) << what << ": residual";
        ASSERT_TRUE(bitwise_equal(got.sums, want.sums)) << what << ": Σ residual²";
        ASSERT_EQ(got.q, want.q) << what << ": codes";
        for (size_t g = 0; g < want.meta.size(); ++g) {
            ASSERT_EQ(got.meta[g].scale, want.meta[g].scale) << what << ": scale of group " << g;
            ASSERT_EQ(got.meta[g].sum, want.meta[g].sum) << what << ": sum of group " << g;
        }
    }
}

TEST(StagedGemvShapes, PlannedForQ1OnlyWhenSwitchedOnAndRefusedWhereTheRingCannotHoldTwoSlots) {
    DELTABIT_REQUIRE_STAGED();
    // DELTABIT_GEMV_STAGED=1 plans it for Q1_0 (off by default); never for the other types.
    const bool planned = cuda::staged_gemv_planned();
    EXPECT_EQ(cuda::plan_gemv(DType::Q1_0, 5120, 17408).staged, planned);
    EXPECT_EQ(cuda::plan_gemv(DType::Q1_0, 34816, 5120).staged, planned);
    EXPECT_FALSE(cuda::plan_gemv(DType::Q4_0, 5120, 17408).staged);
    EXPECT_FALSE(cuda::plan_gemv(DType::Q8_0, 4096, 4096).staged);

    std::mt19937 rng(23);
    const cuda::ActivationScratch x_scratch = random_quantized_activations(17408, rng);
    const cuda::GemvWeights w = random_gemv_weights(DType::Q1_0, 64, 17408, rng);
    GuardedDeviceArray<float> y(64);
    // The planned call ran the kernel planned.
    EXPECT_EQ(cuda::gemv_quantized(x_scratch.view(17408), w.view(), y.get(), nullptr).staged_tiles > 0, planned);
    // A ring of 4 KB cannot hold two tiles of K = 17408 (a 4-row item alone is 9.8 KB).
    const cuda::GemvLaunchConfig tiny = staged_twin({16, 2, 4, 0}, 4096);
    try {
        cuda::gemv_quantized(x_scratch.view(17408), w.view(), y.get(), nullptr, tiny);
        FAIL() << "a ring too small for two slots must be refused";
    } catch (const Error& e) {
        EXPECT_NE(std::string(e.what()).find("does not fit two ring slots"), std::string::npos) << e.what();
    }
}

#else

TEST(StagedGemv, SkippedWithoutCuda) { GTEST_SKIP() << "built without CUDA"; }

#endif

}  // namespace
}  // namespace deltabit::test
