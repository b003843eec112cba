// CUDA decode GEMV (ops/matmul/matmul_cuda.h) against the CPU reference, on the GPU machine; skips cleanly
// without CUDA or a GPU.
//
// What is checked, per dtype × N × K × launch shape:
//   - the activation quantiser's int8 codes, scales and sums equal a CPU twin of its definition bit
//     for bit;
//   - y equals cpu dot_row applied to the same int8-dequantised activations within the fp32 rounding
//     bound of the kernel's summation tree (derived below), so one wrong or missing weight fails;
//   - y is within the activation-quantisation bound Σ|w|·scale/2 of dot_row on the raw f32 x (and the
//     measured error is printed);
//   - every output was written (the buffer starts NaN) and the guard bytes after it are untouched;
//   - a launch larger than the grid limit is split and still covers every row;
//   - fewer loads in flight (GemvLaunchConfig::loads_in_flight 8, 4: more, shorter batches) give y equal bit
//     for bit to 16 in the same shape, and the planner asks for them only where one batch holds a lane's row
//     and their extra resident blocks take the tiles through fewer rounds.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <random>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "core/dtype.h"
#include "core/error.h"
#include "core/half.h"
#include "core/quant.h"
#include "core/tensor.h"

#ifdef DELTABIT_HAVE_CUDA
#include "backend/cuda_probe.h"
#include "cuda/gemv_test_data.h"
#include "cuda/quantized_test_data.h"
#include "ops/matmul/gemv_b1_cuda.h"
#include "ops/matmul/gemv_b1_staged_cuda.h"
#include "ops/matmul/matmul_cuda.h"
#endif

namespace deltabit {
namespace {

#ifdef DELTABIT_HAVE_CUDA

constexpr double kUnitRoundoff = 1.0 / (1 << 24);  // fp32, round to nearest
constexpr size_t kGuardBytes = 256;
constexpr uint8_t kGuardByte = 0xA5;

using test::HostQuantized;
using test::quantize_on_host;
using test::random_activations;

using test::random_weights;

struct Fixture {
    DType dtype;
    int64_t rows, cols;
    std::vector<uint8_t> weights;
    std::vector<float> x;
    HostQuantized xq;
    std::vector<float> x_dequantized;
    std::vector<float> ref_quantized;     // dot_row(w, q·scale)
    std::vector<float> ref_f32;           // dot_row(w, x)
    std::vector<double> abs_products;     // Σ_k |w_k · x'_k|
    std::vector<double> quantization_bound;  // Σ_k |w_k| · scale_g(k) / 2
};

Fixture make_fixture(DType t, int64_t rows, int64_t cols, uint32_t seed) {
    std::mt19937 rng(seed);
    Fixture f{t, rows, cols, random_weights(t, rows, cols, rng), random_activations(cols, rng), {}, {}, {}, {}, {}, {}};
    f.xq = quantize_on_host(f.x);
    f.x_dequantized.resize(size_t(cols));
    for (int64_t k = 0; k < cols; ++k) f.x_dequantized[size_t(k)] = float(f.xq.q[size_t(k)]) * f.xq.scale[size_t(k / 128)];
    f.ref_quantized.resize(size_t(rows));
    f.ref_f32.resize(size_t(rows));
    f.abs_products.resize(size_t(rows));
    f.quantization_bound.resize(size_t(rows));
    const WeightView w{f.weights.data(), t, rows, cols};
    test::parallel_for(rows, [&](int64_t r) {
        f.ref_quantized[size_t(r)] = dot_row(t, w.row(r), f.x_dequantized.data(), cols);
        f.ref_f32[size_t(r)] = dot_row(t, w.row(r), f.x.data(), cols);
        std::vector<float> row(static_cast<size_t>(cols));
        dequantize_row(t, w.row(r), row.data(), cols);
        double abs_sum = 0.0, bound = 0.0;
        for (int64_t k = 0; k < cols; ++k) {
            abs_sum += std::fabs(double(row[size_t(k)]) * f.x_dequantized[size_t(k)]);
            bound += std::fabs(double(row[size_t(k)])) * f.xq.scale[size_t(k / 128)] / 2;
        }
        f.abs_products[size_t(r)] = abs_sum;
        f.quantization_bound[size_t(r)] = bound;
    });
    return f;
}

// The kernel's fp32 error bound. Each unit's integer dot is exact (|dot| < 2^24); the product
// d·scale and the fma each round once (and the reference's x' = q·scale once more), a thread accumulates
// ceil(units / lanes) terms in sequence, then log2(lanes) shuffle additions: a term passes through at most
// depth = that many + 3 roundings, so |y − Σ w·x'| ≤ depth · u · Σ|w·x'|; the reference adds one rounding
// of its own.
int64_t classic_depth(const Fixture& f, int lanes_per_row) {
    const int64_t units = int64_t(gemv_code_row_bytes(f.dtype, f.cols) / 16);
    const int64_t passes = (units + lanes_per_row - 1) / lanes_per_row;
    return passes + int64_t(std::log2(lanes_per_row)) + 3;
}
double rounding_bound(const Fixture& f, int64_t depth, int64_t r) {
    return double(depth) * kUnitRoundoff * f.abs_products[size_t(r)] +
           kUnitRoundoff * std::fabs(double(f.ref_quantized[size_t(r)]));
}

struct DeviceRun {
    std::vector<float> y;
    bool guard_intact = true;
    cuda::GemvLaunchReport report;
};

// `launch(y)` writes `rows` floats into a NaN-poisoned buffer followed by guard bytes.
template <typename Launch>
DeviceRun run_guarded(int64_t rows, Launch&& launch) {
    const size_t out_bytes = size_t(rows) * sizeof(float);
    cuda::DeviceBuffer y(out_bytes + kGuardBytes);
    cuda::cuda_check(cudaMemset(y.get(), 0xFF, out_bytes), "poison y");  // 0xFFFFFFFF is a NaN
    cuda::cuda_check(cudaMemset(y.get<uint8_t>() + out_bytes, kGuardByte, kGuardBytes), "guard");
    DeviceRun run;
    run.report = launch(y.get<float>());
    cuda::cuda_check(cudaDeviceSynchronize(), "gemv");
    std::vector<uint8_t> host(out_bytes + kGuardBytes);
    y.download(host.data(), host.size());
    run.y.resize(size_t(rows));
    std::memcpy(run.y.data(), host.data(), out_bytes);
    for (size_t i = out_bytes; i < host.size(); ++i) run.guard_intact &= host[i] == kGuardByte;
    return run;
}

DeviceRun run_gemv(const cuda::QuantizedActivationsView& xq, const cuda::GemvWeightView& w, int64_t rows,
                   const cuda::GemvLaunchConfig* config) {
    return run_guarded(rows, [&](float* y) {
        return config != nullptr ? cuda::gemv_quantized(xq, w, y, nullptr, *config) : cuda::gemv_quantized(xq, w, y, nullptr);
    });
}

struct Check {
    double max_error_vs_f32 = 0.0;  // max |y − ref_f32| / max|ref_f32|
};

// `depth`: the roundings a term passes through on its way to y (see rounding_bound).
void expect_matches(const Fixture& f, const DeviceRun& run, int64_t depth, const std::string& what, Check& check) {
    ASSERT_TRUE(run.guard_intact) << what << ": bytes after the output were written";
    double max_ref = 0.0;
    for (float v : f.ref_f32) max_ref = std::max(max_ref, double(std::fabs(v)));
    for (int64_t r = 0; r < f.rows; ++r) {
        const double y = run.y[size_t(r)];
        ASSERT_FALSE(std::isnan(y)) << what << ": row " << r << " never written";
        const double tol = rounding_bound(f, depth, r);
        ASSERT_LE(std::fabs(y - f.ref_quantized[size_t(r)]), tol)
            << what << ": row " << r << " y " << y << " reference on quantised x " << f.ref_quantized[size_t(r)];
        // Quantisation bound, with the two fp32 rounding bounds of the two sides on top.
        const double quant_tol = f.quantization_bound[size_t(r)] * (1 + 1e-5) + 2 * tol +
                                 f.cols * kUnitRoundoff * std::fabs(double(f.ref_f32[size_t(r)]));
        ASSERT_LE(std::fabs(y - f.ref_f32[size_t(r)]), quant_tol) << what << ": row " << r << " vs f32 reference";
        if (max_ref > 0) check.max_error_vs_f32 = std::max(check.max_error_vs_f32, std::fabs(y - f.ref_f32[size_t(r)]) / max_ref);
    }
}

bool have_gpu() { return cuda::device_count() > 0; }

class GemvCuda : public ::testing::TestWithParam<DType> {};

TEST_P(GemvCuda, MatchesCpuReferenceOnHostileShapes) {
    if (!have_gpu()) GTEST_SKIP() << "no CUDA device on this machine";
    const DType t = GetParam();
    std::vector<int64_t> ks = {128, 256, 640, 5120, 17408};
    if (dtype_info(t).block_elems < 128) ks.push_back(dtype_info(t).block_elems * 3);  // a partial activation group
    const std::vector<int64_t> ns = {1, 63, 64, 65, 127, 129, 1000, 5120};
    std::vector<cuda::GemvLaunchConfig> configs;
    for (int lanes : {8, 16, 32}) {
        for (int rows_per_thread : {2, 4}) {
            for (int warps : {1, 3}) configs.push_back({lanes, rows_per_thread, warps, 0});
        }
    }
    for (int lanes : {8, 32}) {
        for (int loads : {8, 4}) {
            cuda::GemvLaunchConfig c{lanes, 2, 3, 0};
            c.loads_in_flight = loads;
            configs.push_back(c);
        }
    }
    Check check;
    uint32_t seed = 1;
    for (int64_t k : ks) {
        for (int64_t n : ns) {
            const Fixture f = make_fixture(t, n, k, seed++);
            const std::string shape = std::string(dtype_name(t)) + " N=" + std::to_string(n) + " K=" + std::to_string(k);
            const cuda::GemvWeights w = cuda::upload_gemv_weights(WeightView{f.weights.data(), t, n, k}, "test");
            cuda::DeviceBuffer x(size_t(k) * sizeof(float));
            x.upload(f.x.data(), x.bytes());
            const cuda::ActivationScratch scratch(k);
            const cuda::QuantizedActivationsView xq = scratch.view(k);
            cuda::quantize_activations(x.get<float>(), xq, nullptr);
            cuda::cuda_check(cudaDeviceSynchronize(), "quantize");

            // The quantiser, bit for bit.
            const int64_t groups = cuda::activation_groups(k);
            std::vector<int8_t> q(size_t(groups * 128));
            std::vector<cuda::ActivationGroupMeta> meta(static_cast<size_t>(groups));
            cuda::cuda_check(cudaMemcpy(q.data(), xq.q, q.size(), cudaMemcpyDeviceToHost), "q");
            cuda::cuda_check(cudaMemcpy(meta.data(), xq.meta, meta.size() * sizeof meta[0], cudaMemcpyDeviceToHost), "meta");
            ASSERT_EQ(q, f.xq.q) << shape << ": int8 activations";
            for (int64_t g = 0; g < groups; ++g) {
                ASSERT_EQ(float_to_bits(meta[size_t(g)].scale), float_to_bits(f.xq.scale[size_t(g)])) << shape << " group " << g;
                ASSERT_EQ(meta[size_t(g)].sum, f.xq.sum[size_t(g)]) << shape << " group " << g;
            }

            const DeviceRun planned = run_gemv(xq, w.view(), n, nullptr);
            expect_matches(f, planned, classic_depth(f, planned.report.config.lanes_per_row), shape + " (planned)", check);
            EXPECT_EQ(planned.report.launches, 1) << shape;
            for (const auto& c : configs) {
                const DeviceRun run = run_gemv(xq, w.view(), n, &c);
                const std::string what = shape + " lanes " + std::to_string(c.lanes_per_row) + " rows/thread " +
                                         std::to_string(c.rows_per_thread) + " warps " +
                                         std::to_string(c.warps_per_block) + " loads " +
                                         std::to_string(c.loads_in_flight);
                expect_matches(f, run, classic_depth(f, c.lanes_per_row), what, check);
                if (HasFatalFailure()) return;
                if (c.loads_in_flight != 16) {  // the same terms in the same order as 16 loads in flight
                    cuda::GemvLaunchConfig sixteen = c;
                    sixteen.loads_in_flight = 16;
                    const DeviceRun twin = run_gemv(xq, w.view(), n, &sixteen);
                    ASSERT_EQ(0, std::memcmp(run.y.data(), twin.y.data(), run.y.size() * sizeof(float)))
                        << what << ": differs from 16 loads in flight";
                }
            }
            // The twin of cpu::matmul: quantise + GEMV in one call gives the same y as the two steps.
            cuda::DeviceBuffer y(size_t(n) * sizeof(float));
            cuda::matmul(x.get<float>(), w.view(), 1, y.get<float>(), scratch);
            std::vector<float> y_host(static_cast<size_t>(n));
            y.download(y_host.data(), y.bytes());
            ASSERT_EQ(0, std::memcmp(y_host.data(), planned.y.data(), y.bytes())) << shape << ": matmul entry";
        }
    }
    std::printf("[ gemv %s ] max |y − f32 reference| / max|reference| = %.3g (activation int8 quantisation)\n",
                std::string(dtype_name(t)).c_str(), check.max_error_vs_f32);
}

INSTANTIATE_TEST_SUITE_P(AllTypes, GemvCuda,
                         ::testing::Values(DType::Q1_0, DType::Q2_0, DType::Q2_0_G64, DType::Q4_0, DType::Q8_0),
                         [](const auto& info) { return std::string(dtype_name(info.param)); });

// The binary tensor-core GEMV (ops/matmul/gemv_b1_cuda.h): a lane quad splits a row's units four ways, S warps
// split the unit groups S ways; a thread adds its terms in sequence, the quad with two shuffles, the slices
// one after another — ceil(groups / S) + 2 + (S − 1) roundings, + 3 as in classic_depth. Ragged tiles
// (N not a multiple of 16), partial unit groups (K = 128, 640), empty slices, every batch, 1 to 8 warps.
TEST(GemvB1Cuda, MatchesCpuReferenceOnHostileShapes) {
    if (!have_gpu()) GTEST_SKIP() << "no CUDA device on this machine";
    if (!cuda::gemv_b1_supported()) GTEST_SKIP() << "the binary mma needs compute capability 8.0";
    const std::vector<cuda::GemvB1Config> configs = {{4, 4, 1}, {1, 2, 1}, {3, 8, 3}, {8, 4, 8}, {8, 4, 2}, {6, 2, 3}};
    Check check;
    uint32_t seed = 500;
    for (int64_t k : {128, 640, 5120, 17408}) {
        for (int64_t n : {1, 15, 16, 17, 63, 129, 1000, 5120}) {
            const Fixture f = make_fixture(DType::Q1_0, n, k, seed++);
            const std::string shape = "b1 N=" + std::to_string(n) + " K=" + std::to_string(k);
            const cuda::GemvWeights w = cuda::upload_gemv_weights(WeightView{f.weights.data(), DType::Q1_0, n, k}, "test");
            cuda::DeviceBuffer x(size_t(k) * sizeof(float));
            x.upload(f.x.data(), x.bytes());
            const cuda::ActivationScratch scratch(k);
            const cuda::QuantizedActivationsView xq = scratch.view(k);
            cuda::quantize_activations(x.get<float>(), xq, nullptr);
            const cuda::ActivationBitPlanes planes(k);
            cuda::build_activation_bit_planes(xq, planes, nullptr);
            for (const cuda::GemvB1Config& c : configs) {
                const DeviceRun run = run_guarded(n, [&](float* y) {
                    cuda::gemv_q1_0_b1(xq, planes, w.view(), y, nullptr, c);
                    return cuda::GemvLaunchReport{};
                });
                const int64_t groups = (k / 128 + 3) / 4;
                const int64_t depth = (groups + c.splits - 1) / c.splits + 2 + (c.splits - 1) + 3;
                expect_matches(f, run, depth,
                               shape + " warps " + std::to_string(c.warps_per_block) + " batch " + std::to_string(c.batch) +
                                   " splits " + std::to_string(c.splits),
                               check);
                if (HasFatalFailure()) return;
            }
        }
    }
    std::printf("[ gemv b1 ] max |y − f32 reference| / max|reference| = %.3g\n", check.max_error_vs_f32);
}

TEST(GemvB1Cuda, RefusesWhatItCannotRun) {
    if (!have_gpu()) GTEST_SKIP() << "no CUDA device on this machine";
    std::mt19937 rng(3);
    const std::vector<uint8_t> q4 = random_weights(DType::Q4_0, 16, 256, rng);
    const cuda::GemvWeights w4 = cuda::upload_gemv_weights(WeightView{q4.data(), DType::Q4_0, 16, 256}, "q4");
    const std::vector<uint8_t> q1 = random_weights(DType::Q1_0, 16, 256, rng);
    const cuda::GemvWeights w1 = cuda::upload_gemv_weights(WeightView{q1.data(), DType::Q1_0, 16, 256}, "q1");
    const cuda::ActivationScratch scratch(512);
    const cuda::ActivationBitPlanes planes(256);
    cuda::DeviceBuffer y(16 * sizeof(float));
    EXPECT_THROW(cuda::gemv_q1_0_b1(scratch.view(256), planes, w4.view(), y.get<float>(), nullptr), Error);
    EXPECT_THROW(cuda::gemv_q1_0_b1(scratch.view(384), planes, w1.view(), y.get<float>(), nullptr), Error);  // K differs
    EXPECT_THROW(cuda::gemv_q1_0_b1(scratch.deferred_norm_view(256, 1e-6f), planes, w1.view(), y.get<float>(), nullptr),
                 Error);
    EXPECT_THROW(cuda::gemv_q1_0_b1(scratch.view(256), planes, w1.view(), y.get<float>(), nullptr, {9, 4}), Error);
    EXPECT_THROW(cuda::gemv_q1_0_b1(scratch.view(256), planes, w1.view(), y.get<float>(), nullptr, {4, 3}), Error);
    EXPECT_THROW(cuda::gemv_q1_0_b1(scratch.view(256), planes, w1.view(), y.get<float>(), nullptr, {4, 4, 3}), Error);
    EXPECT_THROW(cuda::build_activation_bit_planes(scratch.view(512), planes, nullptr), Error);  // planes too small
}

// The b1 GEMV fed from a shared-memory ring (ops/matmul/gemv_b1_staged_cuda.h): the terms and their order are
// gemv_q1_0_b1's with the same K splits, so its bound (above) holds unchanged and y equals gemv_q1_0_b1's bit
// for bit. Rings of 2 to 8 stages of 1 to 8 unit groups, 1 to 8 warps, grids capped so that blocks walk many
// rounds; ragged tiles, partial unit groups (K = 128·n, n = 1, 3, 5), empty slices, the Bonsai-27B shapes.
cuda::GemvB1StagedConfig staged_config(int warps, int splits, int stages, int groups, int blocks_per_sm, int max_grid,
                                       bool balanced = false) {
    cuda::GemvB1StagedConfig c;
    c.balanced_grid = balanced;
    c.warps_per_block = warps;
    c.splits = splits;
    c.stages = stages;
    c.stage_groups = groups;
    c.blocks_per_sm = blocks_per_sm;
    c.max_grid = max_grid;
    return c;
}
std::string staged_text(const cuda::GemvB1StagedConfig& c) {
    return "warps " + std::to_string(c.warps_per_block) + " splits " + std::to_string(c.splits) + " stages " +
           std::to_string(c.stages) + " groups " + std::to_string(c.stage_groups) + " blocks/SM " +
           std::to_string(c.blocks_per_sm) + " grid cap " + std::to_string(c.max_grid) +
           (c.balanced_grid ? " balanced" : "");
}

TEST(GemvB1StagedCuda, MatchesCpuReferenceAndB1BitForBit) {
    if (!have_gpu()) GTEST_SKIP() << "no CUDA device on this machine";
    if (!cuda::gemv_b1_supported()) GTEST_SKIP() << "the binary mma needs compute capability 8.0";
    const std::vector<cuda::GemvB1StagedConfig> configs = {
        staged_config(8, 4, 4, 2, 1, 0), staged_config(8, 8, 2, 1, 1, 0), staged_config(4, 1, 3, 8, 2, 0),
        staged_config(6, 3, 6, 2, 1, 3),  staged_config(1, 1, 2, 1, 1, 1), staged_config(8, 2, 8, 2, 1, 2),
        staged_config(4, 4, 4, 4, 2, 0), staged_config(8, 8, 4, 1, 1, 0), staged_config(8, 2, 4, 2, 1, 0, true),
        staged_config(4, 2, 2, 4, 1, 7, true)};
    std::vector<std::pair<int64_t, int64_t>> shapes;  // (N, K)
    for (int64_t k : {128, 384, 640, 5120, 17408})
        for (int64_t n : {1, 15, 16, 17, 63, 129, 1000, 5120}) shapes.push_back({n, k});
    // Bonsai-27B: attn_qkv, attn_gate, ffn_gate/up, the DeltaNet in-projection, the output projection (K 6144).
    for (const auto& nk : {std::pair<int64_t, int64_t>{10240, 5120}, {6144, 5120}, {17408, 5120}, {16480, 5120},
                           {5120, 6144}})
        shapes.push_back(nk);
    Check check;
    uint32_t seed = 700;
    for (const auto& [n, k] : shapes) {
        const Fixture f = make_fixture(DType::Q1_0, n, k, seed++);
        const std::string shape = "b1 staged N=" + std::to_string(n) + " K=" + std::to_string(k);
        const cuda::GemvWeights w = cuda::upload_gemv_weights(WeightView{f.weights.data(), DType::Q1_0, n, k}, "test");
        cuda::DeviceBuffer x(size_t(k) * sizeof(float));
        x.upload(f.x.data(), x.bytes());
        const cuda::ActivationScratch scratch(k);
        const cuda::QuantizedActivationsView xq = scratch.view(k);
        cuda::quantize_activations(x.get<float>(), xq, nullptr);
        const cuda::ActivationBitPlanes planes(k);
        cuda::build_activation_bit_planes(xq, planes, nullptr);
        for (const cuda::GemvB1StagedConfig& c : configs) {
            const std::string what = shape + " " + staged_text(c);
            const DeviceRun run = run_guarded(n, [&](float* y) {
                cuda::gemv_q1_0_b1_staged(xq, planes, w.view(), y, nullptr, c);
                return cuda::GemvLaunchReport{};
            });
            const int64_t groups = (k / 128 + 3) / 4;
            const int64_t depth = (groups + c.splits - 1) / c.splits + 2 + (c.splits - 1) + 3;
            expect_matches(f, run, depth, what, check);
            if (HasFatalFailure()) return;
            const DeviceRun b1 = run_guarded(n, [&](float* y) {
                cuda::gemv_q1_0_b1(xq, planes, w.view(), y, nullptr, {c.splits, 4, c.splits});
                return cuda::GemvLaunchReport{};
            });
            ASSERT_EQ(0, std::memcmp(run.y.data(), b1.y.data(), run.y.size() * sizeof(float)))
                << what << ": differs from gemv_q1_0_b1 with " << c.splits << " splits";
        }
    }
    std::printf("[ gemv b1 staged ] max |y − f32 reference| / max|reference| = %.3g\n", check.max_error_vs_f32);
}

// Back to back on one stream under programmatic launch, the planes rebuilt between into the same buffer: each
// kernel requests its weights before its wait but reads the planes after it, so every y equals the same launch
// made alone (a kernel reading the planes early would see the ones built for the launch before).
TEST(GemvB1StagedCuda, ChainWithPlanesRebuiltBetweenEqualsLaunchesAlone) {
    if (!have_gpu()) GTEST_SKIP() << "no CUDA device on this machine";
    if (!cuda::gemv_b1_supported()) GTEST_SKIP() << "the binary mma needs compute capability 8.0";
    struct Step {
        int64_t n, k;
    };
    // A layer's order: in-projection, output projection (K 6144), gate, up, down (K 17408), next in-projection.
    const std::vector<Step> steps = {{16480, 5120}, {5120, 6144}, {17408, 5120}, {17408, 5120}, {5120, 17408}, {16480, 5120}};
    std::mt19937 rng(77);
    std::vector<cuda::GemvWeights> weights;
    std::vector<std::unique_ptr<cuda::ActivationScratch>> scratches;
    std::vector<cuda::DeviceBuffer> xs, ys;
    for (const Step& s : steps) {
        const std::vector<uint8_t> bytes = random_weights(DType::Q1_0, s.n, s.k, rng);
        weights.push_back(cuda::upload_gemv_weights(WeightView{bytes.data(), DType::Q1_0, s.n, s.k}, "chain"));
        const std::vector<float> x = random_activations(s.k, rng);
        xs.emplace_back(size_t(s.k) * sizeof(float));
        xs.back().upload(x.data(), xs.back().bytes());
        scratches.push_back(std::make_unique<cuda::ActivationScratch>(s.k));
        cuda::quantize_activations(xs.back().get<float>(), scratches.back()->view(s.k), nullptr);
        ys.emplace_back(size_t(s.n) * sizeof(float));
    }
    const cuda::ActivationBitPlanes planes(17408);
    const cuda::GemvB1StagedConfig config = staged_config(8, 4, 4, 2, 1, 0);
    std::vector<std::vector<float>> alone;
    for (size_t i = 0; i < steps.size(); ++i) {
        const cuda::QuantizedActivationsView xq = scratches[i]->view(steps[i].k);
        cuda::build_activation_bit_planes(xq, planes, nullptr);
        cuda::gemv_q1_0_b1_staged(xq, planes, weights[i].view(), ys[i].get<float>(), nullptr, config);
        cuda::cuda_check(cudaDeviceSynchronize(), "alone");
        alone.emplace_back(static_cast<size_t>(steps[i].n));
        ys[i].download(alone.back().data(), ys[i].bytes());
        cuda::cuda_check(cudaMemset(ys[i].get(), 0xFF, ys[i].bytes()), "poison y");
    }
    cudaStream_t stream{};
    cuda::cuda_check(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), "stream");
    for (size_t i = 0; i < steps.size(); ++i) {
        const cuda::QuantizedActivationsView xq = scratches[i]->view(steps[i].k);
        cuda::build_activation_bit_planes(xq, planes, stream);
        cuda::gemv_q1_0_b1_staged(xq, planes, weights[i].view(), ys[i].get<float>(), stream, config);
    }
    cuda::cuda_check(cudaStreamSynchronize(stream), "chain");
    cudaStreamDestroy(stream);
    for (size_t i = 0; i < steps.size(); ++i) {
        std::vector<float> y(static_cast<size_t>(steps[i].n));
        ys[i].download(y.data(), ys[i].bytes());
        ASSERT_EQ(0, std::memcmp(y.data(), alone[i].data(), ys[i].bytes())) << "step " << i << " of the chain";
    }
}

TEST(GemvB1StagedCuda, RefusesWhatItCannotRun) {
    if (!have_gpu()) GTEST_SKIP() << "no CUDA device on this machine";
    std::mt19937 rng(4);
    const std::vector<uint8_t> q4 = random_weights(DType::Q4_0, 16, 256, rng);
    const cuda::GemvWeights w4 = cuda::upload_gemv_weights(WeightView{q4.data(), DType::Q4_0, 16, 256}, "q4");
    const std::vector<uint8_t> q1 = random_weights(DType::Q1_0, 16, 256, rng);
    const cuda::GemvWeights w1 = cuda::upload_gemv_weights(WeightView{q1.data(), DType::Q1_0, 16, 256}, "q1");
    const cuda::ActivationScratch scratch(512);
    const cuda::ActivationBitPlanes planes(256);
    cuda::DeviceBuffer y(16 * sizeof(float));
    float* out = y.get<float>();
    EXPECT_THROW(cuda::gemv_q1_0_b1_staged(scratch.view(256), planes, w4.view(), out, nullptr), Error);
    EXPECT_THROW(cuda::gemv_q1_0_b1_staged(scratch.view(384), planes, w1.view(), out, nullptr), Error);  // K differs
    EXPECT_THROW(cuda::gemv_q1_0_b1_staged(scratch.deferred_norm_view(256, 1e-6f), planes, w1.view(), out, nullptr),
                 Error);
    for (const cuda::GemvB1StagedConfig& bad :
         {staged_config(9, 1, 4, 2, 1, 0), staged_config(4, 3, 4, 2, 1, 0), staged_config(0, 1, 4, 2, 1, 0),
          staged_config(8, 4, 5, 2, 1, 0), staged_config(8, 4, 4, 3, 1, 0), staged_config(8, 4, 4, 2, 0, 0),
          staged_config(8, 4, 4, 2, 1, -1), staged_config(8, 4, 8, 8, 1, 0)}) {  // the last: 594 KB of ring
        EXPECT_THROW(cuda::gemv_q1_0_b1_staged(scratch.view(256), planes, w1.view(), out, nullptr, bad), Error)
            << staged_text(bad);
    }
}

TEST(GemvCudaLaunch, LargeNIsSplitAcrossLaunchesAndCoversEveryRow) {
    if (!have_gpu()) GTEST_SKIP() << "no CUDA device on this machine";
    // 300 001 rows with at most 1000 blocks per launch: many launches, the last one partial.
    const int64_t n = 300001, k = 128;
    const Fixture f = make_fixture(DType::Q1_0, n, k, 99);
    const cuda::GemvWeights w = cuda::upload_gemv_weights(WeightView{f.weights.data(), DType::Q1_0, n, k}, "big");
    cuda::DeviceBuffer x(size_t(k) * sizeof(float));
    x.upload(f.x.data(), x.bytes());
    const cuda::ActivationScratch scratch(k);
    cuda::quantize_activations(x.get<float>(), scratch.view(k), nullptr);
    const cuda::GemvLaunchConfig config{8, 2, 2, 1000};
    const DeviceRun run = run_gemv(scratch.view(k), w.view(), n, &config);
    const int64_t rows_per_block = 2 * (32 / 8) * 2;
    EXPECT_EQ(run.report.blocks, (n + rows_per_block - 1) / rows_per_block);
    EXPECT_EQ(run.report.launches, (run.report.blocks + 999) / 1000);
    EXPECT_GT(run.report.launches, 1);
    Check check;
    expect_matches(f, run, classic_depth(f, 8), "split launch", check);
}

// The planner takes fewer loads in flight only for fewer rounds of resident blocks: first the most loads that
// take the whole launch in one round (even with a lane's row in several batches), else the one-batch
// candidate where it saves rounds, else 16; the kernels not compiled are refused by name.
TEST(GemvCudaLaunch, PlansFewerLoadsInFlightOnlyWhereTheyTakeFewerRounds) {
    if (!have_gpu()) GTEST_SKIP() << "no CUDA device on this machine";
    // Bonsai-4B (K 2560 = 20 Q1_0 units, 9728 = 76, 4096 = 32) and -27B (K 5120 = 40, 17408 = 136) shapes.
    EXPECT_EQ(cuda::planned_loads_in_flight(DType::Q1_0, 2560, 16, 2), 4);    // 2 units a lane
    EXPECT_EQ(cuda::planned_loads_in_flight(DType::Q1_0, 2560, 8, 2), 8);     // 3
    EXPECT_EQ(cuda::planned_loads_in_flight(DType::Q1_0, 4096, 32, 2), 4);    // 1
    EXPECT_EQ(cuda::planned_loads_in_flight(DType::Q1_0, 9728, 32, 2), 8);    // 3
    EXPECT_EQ(cuda::planned_loads_in_flight(DType::Q1_0, 5120, 8, 2), 16);    // 5
    EXPECT_EQ(cuda::planned_loads_in_flight(DType::Q1_0, 17408, 16, 2), 16);  // 9
    EXPECT_EQ(cuda::planned_loads_in_flight(DType::Q4_0, 2560, 8, 2), 16);    // 80 units: 10 a lane
    EXPECT_EQ(cuda::planned_loads_in_flight(DType::Q1_0, 1024, 8, 4), 16);    // 1 unit, but 4 rows a thread: 16 only

    if (std::getenv("DELTABIT_GEMV_LOADS_IN_FLIGHT") == nullptr) {
        struct Shape {
            int64_t rows, cols;
            cuda::GemvKind kind = cuda::GemvKind::plain;
        };
        constexpr cuda::GemvKind kSwiglu = cuda::GemvKind::swiglu;
        // SwiGLU pairs count 2N rows. Bonsai-4B gate/up, ffn_down, q/k/v, o-proj, LM head; Bonsai-8B gate/up,
        // LM head; Bonsai-27B q/gate/k/v, gate/up, DeltaNet in-projection; a small odd shape.
        for (const Shape& sh : {Shape{2 * 9728, 2560, kSwiglu}, Shape{2560, 9728}, Shape{6144, 2560}, Shape{2560, 4096},
                                Shape{151936, 2560}, Shape{2 * 12288, 4096, kSwiglu}, Shape{151936, 4096},
                                Shape{14336, 5120}, Shape{2 * 17408, 5120, kSwiglu}, Shape{16480, 5120},
                                Shape{1000, 640}}) {
            const cuda::GemvLaunchConfig plan = cuda::plan_gemv(DType::Q1_0, sh.rows, sh.cols, sh.kind);
            EXPECT_EQ(cuda::planned_gemv_loads(DType::Q1_0, plan, sh.rows, sh.cols, sh.kind), plan.loads_in_flight);
            const auto rounds = [&](int loads) {
                cuda::GemvLaunchConfig c = plan;
                c.loads_in_flight = loads;
                return cuda::gemv_tile_rounds(DType::Q1_0, c, sh.rows, sh.cols, sh.kind);
            };
            const int64_t r16 = rounds(16), r8 = rounds(8), r4 = rounds(4);
            // Nothing here assumes the 4-load kernel holds more blocks than the 8-load one: that is ptxas's
            // register count, not the rule's (the rule tries 8 first either way). The 8-load kernel is capped at 96
            // registers, under the 16-load kernel's 128–166 (two rows a thread) for every dtype.
            ASSERT_GT(r16, 0);
            EXPECT_LE(r8, r16) << "the 8-load kernel (__maxnreg__ 96) holds fewer blocks than the 16-load one";
            const int one_batch = cuda::planned_loads_in_flight(DType::Q1_0, sh.cols, plan.lanes_per_row, 2);
            const int expected = r16 == 1                                ? 16
                                 : r8 == 1                                ? 8
                                 : r4 == 1                                ? 4
                                 : one_batch < 16 && rounds(one_batch) < r16 ? one_batch
                                                                          : 16;
            EXPECT_EQ(plan.loads_in_flight, expected)
                << sh.rows << "×" << sh.cols << ": rounds " << r16 << " / " << r8 << " / " << r4
                << " at 16 / 8 / 4 loads; one batch at " << one_batch;
            if (plan.loads_in_flight != 16) EXPECT_LT(rounds(plan.loads_in_flight), r16) << "fewer loads, no round saved";
        }
        // On an H200 (132 SMs): the Bonsai-4B SwiGLU's 608 tiles take two rounds at 16 loads (3 blocks an SM),
        // one at 8 (5); its ffn_down's 320 one either way. The 8B SwiGLU's 768 take one round only at 4 loads
        // (6 an SM); the 27B SwiGLU's 1088 take two at best, which did not pay with a lane's row in two batches.
        if (cuda::device_attribute(cudaDevAttrMultiProcessorCount, "SM count") == 132) {
            EXPECT_EQ(cuda::plan_gemv(DType::Q1_0, 2 * 9728, 2560, kSwiglu).loads_in_flight, 8);
            EXPECT_EQ(cuda::plan_gemv(DType::Q1_0, 2560, 9728).loads_in_flight, 16);
            EXPECT_EQ(cuda::plan_gemv(DType::Q1_0, 2 * 12288, 4096, kSwiglu).loads_in_flight, 4);
            EXPECT_EQ(cuda::plan_gemv(DType::Q1_0, 2 * 17408, 5120, kSwiglu).loads_in_flight, 16);
        }
    }

    std::mt19937 rng(6);
    const std::vector<uint8_t> bytes = random_weights(DType::Q1_0, 4, 256, rng);
    const cuda::GemvWeights w = cuda::upload_gemv_weights(WeightView{bytes.data(), DType::Q1_0, 4, 256}, "t");
    const cuda::ActivationScratch scratch(256);
    cuda::DeviceBuffer y(4 * sizeof(float));
    for (const auto& [rows, loads] : {std::pair{4, 8}, std::pair{2, 12}, std::pair{2, 2}}) {
        cuda::GemvLaunchConfig c{8, rows, 4, 0};
        c.loads_in_flight = loads;
        try {
            cuda::gemv_quantized(scratch.view(256), w.view(), y.get<float>(), nullptr, c);
            ADD_FAILURE() << "rows_per_thread " << rows << ", loads_in_flight " << loads << " was not refused";
        } catch (const Error& e) {
            EXPECT_NE(std::string(e.what()).find("loads_in_flight " + std::to_string(loads)), std::string::npos)
                << e.what();
        }
    }
}

TEST(GemvCudaLaunch, RefusesMismatchedShapesAndTokenCounts) {
    if (!have_gpu()) GTEST_SKIP() << "no CUDA device on this machine";
    std::mt19937 rng(5);
    const std::vector<uint8_t> bytes = random_weights(DType::Q1_0, 4, 256, rng);
    const cuda::GemvWeights w = cuda::upload_gemv_weights(WeightView{bytes.data(), DType::Q1_0, 4, 256}, "t");
    const cuda::ActivationScratch scratch(128);
    EXPECT_THROW(scratch.view(256), Error);
    const cuda::ActivationScratch big(256);
    cuda::DeviceBuffer y(4 * sizeof(float));
    EXPECT_THROW(cuda::gemv_quantized(big.view(128), w.view(), y.get<float>(), nullptr), Error);
    EXPECT_THROW(cuda::matmul(nullptr, w.view(), 2, y.get<float>(), big), Error);
}

#else

TEST(GemvCuda, SkippedWithoutCuda) { GTEST_SKIP() << "built without CUDA"; }

#endif

}  // namespace
}  // namespace deltabit
