// The fused decode kernels against the unfused launches they replace, on the GPU machine; skips cleanly
// without CUDA or a GPU. The unfused kernels are parity-tested against the CPU elsewhere
// (test_gemv_cuda.cpp, test_op_parity_*.cpp), and the fused ones promise the same arithmetic in the same
// order, so they are held to bit equality wherever their contract says so:
//
//   gemv_quantized_group   each member's y is gemv_quantized of that matrix alone with the same explicit
//                          launch config, bit for bit (Q1_0, Q4_0, Q8_0; groups of 1..4 matrices with
//                          awkward row counts; K 128, 640, 5120; 12 launch shapes plus two forced to split
//                          into many launches); the planned overload equals gemv_quantized with
//                          plan_gemv(dtype, total rows, K); malformed groups throw.
//   gemv_quantized_swiglu  y is gemv_quantized(gate) and gemv_quantized(up) with the same config followed
//                          by cuda::swiglu, bit for bit (Q1_0, Q2_0; N 1 .. 17408; K 128, 5120);
//                          rows_per_thread 4 and gate/up of different shapes throw.
//     with y_quantized     (its own scratch, cuda/quantized_output_check.h) y is the call without it, bit
//                          for bit; q and {scale, sum} are the CPU twin of the quantiser applied to that
//                          y, bit for bit, zeros to the group end, guard groups untouched; every arrival
//                          counter is zero after the call; a second call on the same scratch does it all
//                          again (Q1_0, Q4_0; N 1 .. 17408; K 128, 5120; 9 launch shapes including tiles
//                          that straddle groups, 2 split, planned); views of the wrong width, without
//                          counters or in x's own scratch throw.
//   add_rms_norm_quantize  x becomes exactly x + residual (fp32 add); h is within a derived fp32 bound of
//                          cpu::rms_norm on that x; hq is the CPU twin of the quantiser applied to the
//                          kernel's own h, bit for bit, with zeros up to the group end.
//
// Every output starts as NaN (0xFF bytes) and ends in guard bytes that must come back untouched
// (tests/cuda/op_parity_cuda.h), so an unwritten row and a write past the end both fail. Filter: '*Fused*'.
#include <gtest/gtest.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <initializer_list>
#include <random>
#include <span>
#include <string>
#include <vector>

#include "core/dtype.h"
#include "core/error.h"
#include "core/half.h"
#include "ops/rms_norm.h"
#include "ops/matmul/weight_repack.h"

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

// ---- shared helpers ----

// The launch shape a report echoes must be the one asked for (or planned).
void expect_same_shape(const cuda::GemvLaunchConfig& got, const cuda::GemvLaunchConfig& want, const std::string& what) {
    EXPECT_EQ(got.lanes_per_row, want.lanes_per_row) << what;
    EXPECT_EQ(got.rows_per_thread, want.rows_per_thread) << what;
    EXPECT_EQ(got.warps_per_block, want.warps_per_block) << what;
}

// Splitting: with max_blocks set, the row tiles are spread over ceil(blocks / max_blocks) launches;
// without it one launch covers every tile (the tests' grids are far inside the device limit).
void expect_split(const cuda::GemvLaunchReport& report, int64_t max_blocks, const std::string& what) {
    EXPECT_GT(report.blocks, 0) << what;
    const int64_t launches = max_blocks > 0 ? (report.blocks + max_blocks - 1) / max_blocks : 1;
    EXPECT_EQ(report.launches, launches) << what << ": " << report.blocks << " row tiles";
}

int64_t tile_rows(const cuda::GemvLaunchConfig& c) {
    return int64_t(c.warps_per_block) * (32 / c.lanes_per_row) * c.rows_per_thread;
}

// ---- gemv_quantized_group ----

struct GroupRun {
    std::vector<std::vector<float>> y;  // one per member
    cuda::GemvLaunchReport report;
};

GroupRun run_group(const cuda::QuantizedActivationsView& x, const std::vector<cuda::GemvWeights>& members,
                   const cuda::GemvLaunchConfig* config, const std::string& what) {
    std::vector<GuardedDeviceArray<float>> ys;
    ys.reserve(members.size());
    std::vector<cuda::GemvOutput> outputs;
    for (const cuda::GemvWeights& m : members) {
        ys.emplace_back(size_t(m.rows));
        outputs.push_back({m.view(), ys.back().get()});
    }
    GroupRun run;
    run.report = config != nullptr ? cuda::gemv_quantized_group(x, outputs, nullptr, *config)
                                   : cuda::gemv_quantized_group(x, outputs, nullptr);
    for (size_t i = 0; i < ys.size(); ++i) run.y.push_back(ys[i].download(what + " member " + std::to_string(i)));
    return run;
}

class FusedGemvGroup : public ::testing::TestWithParam<DType> {};

TEST_P(FusedGemvGroup, EachMemberEqualsItsOwnGemvBitForBit) {
    DELTABIT_REQUIRE_GPU();
    const DType t = GetParam();
    // Qwen3.5-27B's DeltaNet input projections, all reading one x (qkv 10240, z 6144, β 48, α 48); row
    // counts that end mid-tile for every launch shape; a group of one.
    const std::vector<std::vector<int64_t>> groups = {{10240, 6144, 48, 48}, {1, 63, 129}, {5120}};
    std::vector<cuda::GemvLaunchConfig> configs;
    for (int lanes : {8, 16, 32}) {
        for (int rows_per_thread : {2, 4}) {
            for (int warps : {1, 4}) configs.push_back({lanes, rows_per_thread, warps, 0});
        }
    }
    // Seven tiles per launch: every group needs several launches, and a launch boundary falls inside
    // members and across the boundary between two of them.
    configs.push_back({16, 2, 4, 7});
    configs.push_back({8, 4, 1, 7});

    std::mt19937 rng(2026 + uint32_t(t));
    for (int64_t k : {128, 640, 5120}) {
        const cuda::ActivationScratch scratch = random_quantized_activations(k, rng);
        const cuda::QuantizedActivationsView x = scratch.view(k);
        for (const std::vector<int64_t>& rows : groups) {
            std::vector<cuda::GemvWeights> members;
            std::string shape = std::string(dtype_name(t)) + " K=" + std::to_string(k) + " N={";
            int64_t total_rows = 0;
            for (int64_t n : rows) {
                members.push_back(random_gemv_weights(t, n, k, rng));
                shape += (total_rows == 0 ? "" : ",") + std::to_string(n);
                total_rows += n;
            }
            shape += "}";

            for (const cuda::GemvLaunchConfig& c : configs) {
                const std::string what = shape + " " + config_text(c);
                const GroupRun run = run_group(x, members, &c, what);
                ASSERT_FALSE(HasFailure()) << what;  // guard bytes
                expect_same_shape(run.report.config, c, what);
                expect_split(run.report, c.max_blocks, what);
                // Tiles: at least the packed count, at most one partial tile per member.
                int64_t padded_tiles = 0;
                for (int64_t n : rows) padded_tiles += (n + tile_rows(c) - 1) / tile_rows(c);
                EXPECT_GE(run.report.blocks, (total_rows + tile_rows(c) - 1) / tile_rows(c)) << what;
                EXPECT_LE(run.report.blocks, padded_tiles) << what;
                for (size_t m = 0; m < members.size(); ++m) {
                    ASSERT_TRUE(bitwise_equal(run.y[m], gemv_alone(x, members[m].view(), c, what)))
                        << what << ": member " << m;
                }
            }

            // Planned: one shape for the whole group, chosen for its total row count.
            const cuda::GemvLaunchConfig plan = cuda::plan_gemv(t, total_rows, k);
            const std::string what = shape + " planned (" + config_text(plan) + ")";
            const GroupRun run = run_group(x, members, nullptr, what);
            ASSERT_FALSE(HasFailure()) << what;
            expect_same_shape(run.report.config, plan, what);
            expect_split(run.report, 0, what);
            for (size_t m = 0; m < members.size(); ++m) {
                ASSERT_TRUE(bitwise_equal(run.y[m], gemv_alone(x, members[m].view(), plan, what)))
                    << what << ": member " << m;
            }
        }
    }
}

INSTANTIATE_TEST_SUITE_P(Types, FusedGemvGroup, ::testing::Values(DType::Q1_0, DType::Q4_0, DType::Q8_0),
                         [](const auto& info) { return std::string(dtype_name(info.param)); });

TEST(FusedGemvGroupErrors, RefusesMalformedGroups) {
    DELTABIT_REQUIRE_GPU();
    std::mt19937 rng(7);
    const cuda::ActivationScratch scratch = random_quantized_activations(256, rng);
    const cuda::QuantizedActivationsView x128 = scratch.view(128);
    const cuda::GemvWeights q1_128 = random_gemv_weights(DType::Q1_0, 4, 128, rng);
    const cuda::GemvWeights q1_256 = random_gemv_weights(DType::Q1_0, 4, 256, rng);
    const cuda::GemvWeights q4_128 = random_gemv_weights(DType::Q4_0, 4, 128, rng);
    // Real outputs, so a call that wrongly goes ahead writes somewhere harmless.
    std::vector<cuda::DeviceBuffer> ys;
    for (int i = 0; i <= cuda::kMaxGemvGroup; ++i) ys.emplace_back(4 * sizeof(float));
    const cuda::GemvLaunchConfig config{8, 2, 4, 0};

    auto group = [&](std::initializer_list<const cuda::GemvWeights*> members) {
        std::vector<cuda::GemvOutput> outputs;
        for (const cuda::GemvWeights* m : members) outputs.push_back({m->view(), ys[outputs.size()].get<float>()});
        return outputs;
    };
    // Control: a full group of kMaxGemvGroup well-formed members is accepted.
    std::vector<cuda::GemvOutput> ok;
    for (int i = 0; i < cuda::kMaxGemvGroup; ++i) ok.push_back({q1_128.view(), ys[size_t(i)].get<float>()});
    EXPECT_NO_THROW(cuda::gemv_quantized_group(x128, ok, nullptr, config));
    EXPECT_NO_THROW(cuda::gemv_quantized_group(x128, ok, nullptr));
    cuda::cuda_check(cudaDeviceSynchronize(), "group control");

    ok.push_back({q1_128.view(), ys[cuda::kMaxGemvGroup].get<float>()});
    EXPECT_THROW(cuda::gemv_quantized_group(x128, ok, nullptr, config), Error) << "more than kMaxGemvGroup members";
    EXPECT_THROW(cuda::gemv_quantized_group(x128, ok, nullptr), Error) << "more than kMaxGemvGroup members";
    EXPECT_THROW(cuda::gemv_quantized_group(x128, std::span<const cuda::GemvOutput>{}, nullptr, config), Error)
        << "empty group";
    EXPECT_THROW(cuda::gemv_quantized_group(x128, std::span<const cuda::GemvOutput>{}, nullptr), Error)
        << "empty group";
    EXPECT_THROW(cuda::gemv_quantized_group(x128, group({&q1_128, &q1_256}), nullptr, config), Error)
        << "members with different K (the second necessarily also disagrees with x)";
    EXPECT_THROW(cuda::gemv_quantized_group(x128, group({&q1_128, &q4_128}), nullptr, config), Error)
        << "members with different dtypes";
    EXPECT_THROW(cuda::gemv_quantized_group(x128, group({&q1_256, &q1_256}), nullptr, config), Error)
        << "K of the members differs from x's";
    EXPECT_THROW(cuda::gemv_quantized_group(x128, group({&q1_128}), nullptr, {8, 3, 4, 0}), Error)
        << "no kernel for rows_per_thread 3";
    cuda::cuda_check(cudaDeviceSynchronize(), "group errors");
}

// ---- gemv_quantized_swiglu ----

struct SwigluRun {
    std::vector<float> y;
    cuda::GemvLaunchReport report;
};

SwigluRun run_swiglu(const cuda::QuantizedActivationsView& x, const cuda::GemvWeightView& gate,
                     const cuda::GemvWeightView& up, const cuda::GemvLaunchConfig* config, const std::string& what) {
    GuardedDeviceArray<float> y(size_t(gate.rows));
    SwigluRun run;
    run.report = config != nullptr ? cuda::gemv_quantized_swiglu(x, gate, up, y.get(), nullptr, *config)
                                   : cuda::gemv_quantized_swiglu(x, gate, up, y.get(), nullptr);
    run.y = y.download(what);
    return run;
}

// The three launches the fused kernel replaces.
std::vector<float> swiglu_unfused(const cuda::QuantizedActivationsView& x, const cuda::GemvWeightView& gate,
                                  const cuda::GemvWeightView& up, const cuda::GemvLaunchConfig& config,
                                  const std::string& what) {
    const size_t n = size_t(gate.rows);
    GuardedDeviceArray<float> g(n), u(n), y(n);
    cuda::gemv_quantized(x, gate, g.get(), nullptr, config);
    cuda::gemv_quantized(x, up, u.get(), nullptr, config);
    cuda::swiglu(g.get(), u.get(), int64_t(n), y.get(), nullptr);
    return y.download(what + " (unfused)");
}

class FusedGemvSwiglu : public ::testing::TestWithParam<DType> {};

TEST_P(FusedGemvSwiglu, EqualsTwoGemvsThenSwigluBitForBit) {
    DELTABIT_REQUIRE_GPU();
    const DType t = GetParam();
    std::vector<cuda::GemvLaunchConfig> configs;
    for (int lanes : {8, 16, 32}) {
        for (int warps : {1, 4}) configs.push_back({lanes, 2, warps, 0});
    }
    configs.push_back({16, 2, 4, 7});  // split into many launches
    std::mt19937 rng(4242 + uint32_t(t));
    for (int64_t k : {128, 5120}) {
        const cuda::ActivationScratch scratch = random_quantized_activations(k, rng);
        const cuda::QuantizedActivationsView x = scratch.view(k);
        // 17408: Qwen3.5-27B's FFN width.
        for (int64_t n : {1, 63, 129, 1000, 17408}) {
            const cuda::GemvWeights gate = random_gemv_weights(t, n, k, rng);
            const cuda::GemvWeights up = random_gemv_weights(t, n, k, rng);
            const std::string shape = std::string(dtype_name(t)) + " N=" + std::to_string(n) + " K=" + std::to_string(k);
            for (const cuda::GemvLaunchConfig& c : configs) {
                const std::string what = shape + " " + config_text(c);
                const SwigluRun run = run_swiglu(x, gate.view(), up.view(), &c, what);
                ASSERT_FALSE(HasFailure()) << what;
                expect_same_shape(run.report.config, c, what);
                expect_split(run.report, c.max_blocks, what);
                ASSERT_TRUE(bitwise_equal(run.y, swiglu_unfused(x, gate.view(), up.view(), c, what))) << what;
            }
            // Planned: the contract fixes rows_per_thread at 2 and nothing else, so the reference uses
            // whatever shape the call reports.
            const SwigluRun run = run_swiglu(x, gate.view(), up.view(), nullptr, shape + " planned");
            const std::string what = shape + " planned (" + config_text(run.report.config) + ")";
            ASSERT_FALSE(HasFailure()) << what;
            EXPECT_EQ(run.report.config.rows_per_thread, 2) << what;
            expect_split(run.report, 0, what);
            ASSERT_TRUE(bitwise_equal(run.y, swiglu_unfused(x, gate.view(), up.view(), run.report.config, what))) << what;
        }
    }
}

INSTANTIATE_TEST_SUITE_P(Types, FusedGemvSwiglu, ::testing::Values(DType::Q1_0, DType::Q2_0),
                         [](const auto& info) { return std::string(dtype_name(info.param)); });

TEST(FusedGemvSwigluErrors, RefusesFourRowsPerThreadAndUnequalMatrices) {
    DELTABIT_REQUIRE_GPU();
    std::mt19937 rng(11);
    const cuda::ActivationScratch scratch = random_quantized_activations(256, rng);
    const cuda::QuantizedActivationsView x128 = scratch.view(128);
    const cuda::GemvWeights q1_64x128 = random_gemv_weights(DType::Q1_0, 64, 128, rng);
    const cuda::GemvWeights q1_64x128b = random_gemv_weights(DType::Q1_0, 64, 128, rng);
    const cuda::GemvWeights q1_128x128 = random_gemv_weights(DType::Q1_0, 128, 128, rng);
    const cuda::GemvWeights q1_64x256 = random_gemv_weights(DType::Q1_0, 64, 256, rng);
    const cuda::GemvWeights q2_64x128 = random_gemv_weights(DType::Q2_0, 64, 128, rng);
    cuda::DeviceBuffer y(128 * sizeof(float));
    float* out = y.get<float>();
    const cuda::GemvLaunchConfig pair{8, 2, 4, 0};

    // Control: a well-formed call is accepted.
    EXPECT_NO_THROW(cuda::gemv_quantized_swiglu(x128, q1_64x128.view(), q1_64x128b.view(), out, nullptr, pair));
    cuda::cuda_check(cudaDeviceSynchronize(), "swiglu control");

    EXPECT_THROW(cuda::gemv_quantized_swiglu(x128, q1_64x128.view(), q1_64x128b.view(), out, nullptr, {8, 4, 4, 0}),
                 Error)
        << "rows_per_thread 4";
    EXPECT_THROW(cuda::gemv_quantized_swiglu(x128, q1_64x128.view(), q1_128x128.view(), out, nullptr, pair), Error)
        << "gate and up with different N";
    EXPECT_THROW(cuda::gemv_quantized_swiglu(x128, q1_64x128.view(), q1_128x128.view(), out, nullptr), Error)
        << "gate and up with different N (planned)";
    EXPECT_THROW(cuda::gemv_quantized_swiglu(x128, q1_64x128.view(), q1_64x256.view(), out, nullptr, pair), Error)
        << "gate and up with different K";
    EXPECT_THROW(cuda::gemv_quantized_swiglu(x128, q1_64x128.view(), q2_64x128.view(), out, nullptr, pair), Error)
        << "gate and up with different dtypes";
    EXPECT_THROW(cuda::gemv_quantized_swiglu(x128, q1_64x256.view(), q1_64x256.view(), out, nullptr, pair), Error)
        << "K differs from x's";
    cuda::cuda_check(cudaDeviceSynchronize(), "swiglu errors");
}

// ---- gemv_quantized_swiglu with a quantised output ----

// One shape and launch config (nullptr: planned) with y_quantized, against the same call without it.
// The kernel quantises a group of 128 outputs in whichever block completes it, counting arrivals per
// group, so the shapes that matter are tiles straddling group boundaries (3 warps: tiles of 12, 6 or 3
// outputs, none of which divides 128), groups completed in a later launch than they started (max_blocks
// 7) and partial last groups (N 1, 63, 129, 1000). Called twice on one scratch with q and meta poisoned
// again in between: if the first call left a counter off zero, that group never completes in the second
// and its poison stays.
void check_swiglu_quantized_output(const cuda::QuantizedActivationsView& x, const cuda::GemvWeightView& gate,
                                   const cuda::GemvWeightView& up, const cuda::GemvLaunchConfig* config,
                                   const std::string& shape) {
    const SwigluRun plain = run_swiglu(x, gate, up, config, shape + " without y_quantized");
    const std::string what = shape + " " + config_text(plain.report.config);
    ASSERT_FALSE(::testing::Test::HasFailure()) << what;
    GuardedQuantizedOutput yq(gate.rows);  // its own scratch, never x's
    for (int call = 1; call <= 2; ++call) {
        const std::string this_call = what + " with y_quantized, call " + std::to_string(call);
        if (call > 1) yq.poison();
        const cuda::QuantizedActivationsView view = yq.view();
        GuardedDeviceArray<float> y(size_t(gate.rows));
        const cuda::GemvLaunchReport report =
            config != nullptr ? cuda::gemv_quantized_swiglu(x, gate, up, y.get(), nullptr, *config, &view)
                              : cuda::gemv_quantized_swiglu(x, gate, up, y.get(), nullptr, &view);
        const std::vector<float> got = y.download(this_call);
        ASSERT_FALSE(::testing::Test::HasFailure()) << this_call;  // guard bytes
        expect_same_shape(report.config, plain.report.config, this_call);
        EXPECT_EQ(report.blocks, plain.report.blocks) << this_call;
        EXPECT_EQ(report.launches, plain.report.launches) << this_call;
        // (a) the side output changes nothing about y.
        ASSERT_TRUE(bitwise_equal(got, plain.y)) << this_call << ": y";
        // (b) the int8 groups are the quantiser's definition applied to that y.
        ASSERT_TRUE(yq.matches_host_quantizer(got)) << this_call;
        // (c) every counter back at zero for the next launch.
        ASSERT_TRUE(yq.arrivals_all_zero()) << this_call;
    }
}

class FusedGemvSwigluQuantizedOutput : public ::testing::TestWithParam<DType> {};

TEST_P(FusedGemvSwigluQuantizedOutput, YUnchangedAndQuantizedBitForBitTwice) {
    DELTABIT_REQUIRE_GPU();
    const DType t = GetParam();
    std::vector<cuda::GemvLaunchConfig> configs;
    for (int lanes : {8, 16, 32}) {
        for (int warps : {1, 3, 4}) configs.push_back({lanes, 2, warps, 0});
    }
    // Split into many launches: 16-output tiles (8 per group), and 12-output tiles that straddle groups.
    configs.push_back({16, 2, 4, 7});
    configs.push_back({8, 2, 3, 7});
    // Grids of 3 and 2 blocks: each walks many tiles, its quantised output's epilogue run for 8 tiles at a time
    // and for the rest at its end (quantize_completed_tiles), tiles of one group in one epilogue, 12-output
    // tiles straddling groups, and a split launch.
    for (cuda::GemvLaunchConfig c : {cuda::GemvLaunchConfig{16, 2, 3, 0}, cuda::GemvLaunchConfig{8, 2, 4, 0},
                                     cuda::GemvLaunchConfig{32, 2, 3, 50}}) {
        c.max_grid = c.max_blocks > 0 ? 2 : 3;
        configs.push_back(c);
    }
    std::mt19937 rng(5150 + uint32_t(t));
    for (int64_t k : {128, 5120}) {
        const cuda::ActivationScratch scratch = random_quantized_activations(k, rng);
        const cuda::QuantizedActivationsView x = scratch.view(k);
        // 128: exactly one group; 17408 (Qwen3.5-27B's FFN width): 136 whole groups.
        for (int64_t n : {1, 63, 128, 129, 1000, 17408}) {
            const cuda::GemvWeights gate = random_gemv_weights(t, n, k, rng);
            const cuda::GemvWeights up = random_gemv_weights(t, n, k, rng);
            const std::string shape =
                std::string(dtype_name(t)) + " N=" + std::to_string(n) + " K=" + std::to_string(k);
            for (const cuda::GemvLaunchConfig& c : configs) {
                check_swiglu_quantized_output(x, gate.view(), up.view(), &c, shape);
                if (HasFailure()) return;
            }
            check_swiglu_quantized_output(x, gate.view(), up.view(), nullptr, shape + " planned");
            if (HasFailure()) return;
        }
    }
}

INSTANTIATE_TEST_SUITE_P(Types, FusedGemvSwigluQuantizedOutput, ::testing::Values(DType::Q1_0, DType::Q4_0),
                         [](const auto& info) { return std::string(dtype_name(info.param)); });

TEST(FusedGemvSwigluQuantizedOutputErrors, RefusesViewsOfOtherWidthsWithoutCountersOrSharingX) {
    DELTABIT_REQUIRE_GPU();
    std::mt19937 rng(13);
    constexpr int64_t kN = 64;
    // x's scratch is wide enough that a view of it of N inputs passes every check but the sharing one.
    const cuda::ActivationScratch x_scratch = random_quantized_activations(256, rng);
    const cuda::QuantizedActivationsView x = x_scratch.view(128);
    const cuda::GemvWeights gate = random_gemv_weights(DType::Q1_0, kN, 128, rng);
    const cuda::GemvWeights up = random_gemv_weights(DType::Q1_0, kN, 128, rng);
    cuda::DeviceBuffer y(kN * sizeof(float));
    const cuda::GemvLaunchConfig pair{8, 2, 4, 0};
    const cuda::ActivationScratch y_scratch(256);

    // Control: a view of N inputs in its own scratch is accepted, with and without a config.
    const cuda::QuantizedActivationsView ok = y_scratch.view(kN);
    EXPECT_NO_THROW(cuda::gemv_quantized_swiglu(x, gate.view(), up.view(), y.get<float>(), nullptr, pair, &ok));
    EXPECT_NO_THROW(cuda::gemv_quantized_swiglu(x, gate.view(), up.view(), y.get<float>(), nullptr, &ok));
    cuda::cuda_check(cudaDeviceSynchronize(), "swiglu quantised output control");

    const cuda::QuantizedActivationsView wider = y_scratch.view(kN + 1);
    const cuda::QuantizedActivationsView narrower = y_scratch.view(kN - 1);
    cuda::QuantizedActivationsView no_counters = ok;
    no_counters.arrivals = nullptr;
    const cuda::QuantizedActivationsView shares_x = x_scratch.view(kN);
    for (const bool planned : {false, true}) {
        auto call = [&](const cuda::QuantizedActivationsView& yq) {
            if (planned) return cuda::gemv_quantized_swiglu(x, gate.view(), up.view(), y.get<float>(), nullptr, &yq);
            return cuda::gemv_quantized_swiglu(x, gate.view(), up.view(), y.get<float>(), nullptr, pair, &yq);
        };
        const std::string how = planned ? " (planned)" : " (explicit config)";
        EXPECT_THROW(call(wider), Error) << "a view of N + 1 inputs" << how;
        EXPECT_THROW(call(narrower), Error) << "a view of N − 1 inputs" << how;
        EXPECT_THROW(call(no_counters), Error) << "a view without arrival counters" << how;
        EXPECT_THROW(call(shares_x), Error) << "a view of x's own scratch" << how;
    }
    cuda::cuda_check(cudaDeviceSynchronize(), "swiglu quantised output errors");
    // Two accepted calls and four refused ones (which must launch nothing) leave every counter at zero.
    EXPECT_TRUE(arrivals_zero(ok, cuda::activation_groups(256)));
}

// ---- add_rms_norm_quantize ----

// Relative error bound of h against cpu::rms_norm (sum in double, one rounding at the end), in units of
// u = 2^-24, the fp32 unit roundoff.
//   Σx²: a block of P threads, each adding its t squares in order (fmaf: one rounding per term), then
//     log2(P) tree levels: each square passes through at most n = t + log2(P) roundings, and all terms
//     are positive, so |ŝ − S| ≤ n·u·S to first order. t = ceil(dim/P), or 4 per pass of 4P elements
//     for a kernel that takes its elements in float4 slices (so 4 even when dim < P). P is the kernel's
//     choice; the contract says one block holds the row in registers, so this takes the worst n over
//     blocks of 128 to 1024 threads (fewer than 128 would need over 128 registers of x per thread at
//     dim 16384). A kernel outside that model needs this bound recomputed, not loosened.
//   The square root halves that relative error; adding eps ≥ 0 can only shrink it.
//   /dim, +eps, sqrtf, 1/x: ≤ 4u, and 4u more for rsqrtf (≤ 2 ulp) or multiplying by 1/dim.
//   x·scale, ·w (and 1 + w): ≤ 3u. The reference's own rounding to fp32: u.
// At dim 16384: n = 128 + 7, (67.5 + 12)u ≈ 4.7e-6; at dim ≤ 1024 (7.5 + 12)u ≈ 1.2e-6. The plausible
// bugs are far outside it: forgetting w, 1 + w, the residual or eps (the second eps below is half the
// mean square: a 22% effect) is off by percents, and dividing by dim − 1 instead of dim is off by
// 1/(2·dim) ≥ 3e-5.
double add_rms_norm_rel_tol(int64_t dim) {
    double worst_n = 0.0;
    for (int p = 128; p <= 1024; p *= 2) {
        const double per_thread = std::max(std::ceil(double(dim) / p), 4.0 * std::ceil(double(dim) / (4.0 * p)));
        worst_n = std::max(worst_n, per_thread + std::log2(double(p)));
    }
    return (worst_n / 2.0 + 12.0) * kU;
}
constexpr double kTinyAbs = 1e-30;  // floor for elements whose reference is ~0

// One case: (a) x, (b) h, (c) hq as in the file header, each failure naming the case.
void check_add_rms_norm_quantize(int64_t dim, bool with_residual, cpu::NormWeight weight, bool eps_matters,
                                 uint32_t seed) {
    std::mt19937 rng(seed);
    const std::vector<float> x_before = random_activations(dim, rng);
    const std::vector<float> residual = random_activations(dim, rng);
    const std::vector<float> w = weight == cpu::NormWeight::plain ? uniform(size_t(dim), rng, 0.5f, 1.5f)
                                                                 : uniform(size_t(dim), rng, -0.5f, 0.5f);
    // The residual add, on the host: one fp32 add per element, the same operation the kernel must do.
    std::vector<float> x_after = x_before;
    if (with_residual) {
        for (size_t i = 0; i < x_after.size(); ++i) x_after[i] = x_before[i] + residual[i];
    }
    double mean_sq = 0.0;
    for (float v : x_after) mean_sq += double(v) * v;
    mean_sq /= double(dim);
    const float eps = eps_matters ? float(0.5 * mean_sq) : 1e-6f;
    std::vector<float> h_ref(static_cast<size_t>(dim));
    cpu::rms_norm(x_after.data(), w.data(), 1, dim, eps, weight, h_ref.data());

    const std::string what = "add_rms_norm_quantize dim=" + std::to_string(dim) +
                             (with_residual ? " +residual" : " no residual") +
                             (weight == cpu::NormWeight::plain ? " w" : " 1+w") + " eps=" + std::to_string(eps);

    GuardedDeviceArray<float> dx(x_before), dres(residual), dw(w), dh(static_cast<size_t>(dim));
    // Two groups more than dim needs: q bytes and {scale, sum} entries past the call's groups are a guard.
    const int64_t max_cols = dim + 2 * cuda::kActivationGroup;
    const cuda::ActivationScratch scratch(max_cols);
    cuda::cuda_check(cudaMemset(scratch.buffer.get(), kPoisonByte, scratch.buffer.bytes()), "poison hq");
    const cuda::QuantizedActivationsView hq = scratch.view(dim);
    cuda::add_rms_norm_quantize(dx.get(), with_residual ? dres.get() : nullptr, dw.get(), dim, eps, weight, dh.get(),
                                hq, nullptr);

    // (a) x updated in place, exactly.
    const std::vector<float> x_got = dx.download(what + " x");
    ASSERT_TRUE(bitwise_equal(x_got, x_after)) << what << ": x after the call";
    (void)dres.download(what + " residual");  // its guard too (an input, but a stray write would land there)

    // (b) h against the reference within the derived bound (NaN, i.e. an unwritten element, never passes).
    const std::vector<float> h = dh.download(what + " h");
    expect_relative(h, to_double(h_ref), add_rms_norm_rel_tol(dim), kTinyAbs, what + " h");
    ASSERT_FALSE(::testing::Test::HasFailure()) << what;

    // (c) hq: the quantiser's definition applied to the kernel's own h, bit for bit.
    const HostQuantized want = quantize_on_host(h);
    const int64_t groups = cuda::activation_groups(dim);
    const int64_t all_groups = cuda::activation_groups(max_cols);
    std::vector<int8_t> q(size_t(all_groups * cuda::kActivationGroup));
    std::vector<cuda::ActivationGroupMeta> meta(static_cast<size_t>(all_groups));
    cuda::cuda_check(cudaMemcpy(q.data(), hq.q, q.size(), cudaMemcpyDeviceToHost), "download hq.q");
    cuda::cuda_check(cudaMemcpy(meta.data(), hq.meta, meta.size() * sizeof meta[0], cudaMemcpyDeviceToHost),
                     "download hq.meta");
    for (int64_t i = 0; i < groups * cuda::kActivationGroup; ++i) {
        // want.q is zero from dim to the group end: the padding must be written as zeros.
        ASSERT_EQ(q[size_t(i)], want.q[size_t(i)]) << what << ": q[" << i << "]" << (i >= dim ? " (padding)" : "");
    }
    for (size_t i = size_t(groups * cuda::kActivationGroup); i < q.size(); ++i) {
        ASSERT_EQ(uint8_t(q[i]), kPoisonByte) << what << ": q[" << i << "] past the call's groups was written";
    }
    for (int64_t g = 0; g < groups; ++g) {
        ASSERT_EQ(std::bit_cast<uint32_t>(meta[size_t(g)].scale), std::bit_cast<uint32_t>(want.scale[size_t(g)]))
            << what << ": group " << g << " scale " << meta[size_t(g)].scale << ", want " << want.scale[size_t(g)];
        ASSERT_EQ(meta[size_t(g)].sum, want.sum[size_t(g)]) << what << ": group " << g << " sum";
    }
    for (int64_t g = groups; g < all_groups; ++g) {
        uint8_t bytes[sizeof(cuda::ActivationGroupMeta)];
        std::memcpy(bytes, &meta[size_t(g)], sizeof bytes);
        for (uint8_t b : bytes) ASSERT_EQ(b, kPoisonByte) << what << ": meta of group " << g << " was written";
    }
}

TEST(FusedAddRmsNormQuantize, MatchesAddThenRmsNormThenQuantizer) {
    DELTABIT_REQUIRE_GPU();
    // Qwen3.5 hidden sizes (2560, 5120), head-sized 128, a 640-wide bottleneck, 4096 + 128 (one group past
    // a power of two), the largest allowed, and two lengths that end mid-group.
    const std::vector<int64_t> dims = {128, 640, 2560, 5120, 4096 + 128, cuda::kResidualNormMaxDim, 100, 130};
    uint32_t seed = 1;
    for (int64_t dim : dims) {
        for (bool with_residual : {true, false}) {
            for (cpu::NormWeight weight : {cpu::NormWeight::plain, cpu::NormWeight::one_plus}) {
                for (bool eps_matters : {false, true}) {
                    check_add_rms_norm_quantize(dim, with_residual, weight, eps_matters, seed++);
                    if (HasFailure()) return;
                }
            }
        }
    }
}

TEST(FusedAddRmsNormQuantize, RefusesRowsLongerThanOneBlockHolds) {
    DELTABIT_REQUIRE_GPU();
    const int64_t dim = cuda::kResidualNormMaxDim + 1;
    GuardedDeviceArray<float> x(std::vector<float>(size_t(dim), 1.0f)), w(std::vector<float>(size_t(dim), 1.0f));
    GuardedDeviceArray<float> h(static_cast<size_t>(dim));
    const cuda::ActivationScratch scratch(dim);
    EXPECT_THROW(cuda::add_rms_norm_quantize(x.get(), nullptr, w.get(), dim, 1e-6f, cpu::NormWeight::plain, h.get(),
                                             scratch.view(dim), nullptr),
                 Error);
    cuda::cuda_check(cudaDeviceSynchronize(), "add_rms_norm_quantize refusal");
}

#else

TEST(FusedGemv, SkippedWithoutCuda) { GTEST_SKIP() << "built without CUDA"; }

#endif

}  // namespace
}  // namespace deltabit::test
