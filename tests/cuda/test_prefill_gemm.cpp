// Prefill GEMM (ops/matmul/gemm_cuda.h: gemm_quantized, matmul_prefill) against the CPU reference
// cpu::matmul_int8_activations and against the decode GEMV, on the GPU machine; skips cleanly without
// CUDA or a GPU.
//
// What is checked, per dtype × (T, N, K) × block tile (automatic and each forced tile):
//   - every output is written (the buffer starts NaN) and the guard band after it is untouched;
//   - y[t][n] equals cpu::matmul_int8_activations within the fp32 bound of the kernel's arithmetic
//     (derived below), on every token of a sample of weight rows and every weight row of a sample of
//     tokens (the first, middle and last of each; edges of every tile are in the sample);
//   - on the sampled tokens, y equals the decode GEMV's y within the sum of the two kernels' bounds;
//   - blocks forced to walk many tiles (a grid far smaller than the tiles) cover every tile once;
//   - matmul_prefill takes the GEMM from kGemmMinTokens tokens and the GEMV below, and says which.
// Shapes: T = 1, 2, 3, 16, 63, 64, 65, 129, 512, 1029 on Bonsai-27B's matrices (hidden 5120, FFN
// 17408, vocab 248320, the 48-row beta/alpha projections) and small odd shapes for every dtype,
// including a K with a partial activation group.
#include <gtest/gtest.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "core/dtype.h"
#include "core/error.h"
#include "core/half.h"
#include "core/quant.h"
#include "core/tensor.h"
#include "ops/matmul.h"

#ifdef DELTABIT_HAVE_CUDA
#include "cuda/op_parity_cuda.h"
#include "cuda/quantized_test_data.h"
#include "ops/matmul/gemm_wgmma_cuda.h"
#include "ops/matmul/matmul_cuda.h"
#include "ops/matmul/gemm_cuda.h"
#include "ops/attention/attention_cuda.h"
#endif

namespace deltabit::test {
namespace {

#ifdef DELTABIT_HAVE_CUDA

constexpr double kUnit = 1.0 / (1 << 24);  // fp32 unit roundoff

// Activations whose magnitude changes per group of 128 over three decades, as hidden states do.
std::vector<float> random_activations(int64_t rows, int64_t cols, std::mt19937& rng) {
    std::uniform_real_distribution<float> value(-1.0f, 1.0f), log_magnitude(-2.0f, 1.0f);
    std::vector<float> x(size_t(rows * cols));
    for (int64_t r = 0; r < rows; ++r) {
        float magnitude = 1.0f;
        for (int64_t k = 0; k < cols; ++k) {
            if (k % 128 == 0) magnitude = std::pow(10.0f, log_magnitude(rng));
            x[size_t(r * cols + k)] = value(rng) * magnitude;
        }
    }
    return x;
}

// The activations as both GPU kernels see them: q · scale per group (cpu::matmul_int8_activations's
// definition, restated here to form the error bounds' Σ|w·x'|).
std::vector<float> dequantized_activations(const std::vector<float>& x, int64_t cols) {
    std::vector<float> out(x.size());
    for (size_t r = 0; r < x.size(); r += size_t(cols)) {
        for (int64_t begin = 0; begin < cols; begin += 128) {
            const int64_t end = std::min(cols, begin + 128);
            float amax = 0.0f;
            for (int64_t k = begin; k < end; ++k) amax = std::max(amax, std::fabs(x[r + size_t(k)]));
            const float inv = amax > 0.0f ? 127.0f / amax : 0.0f, scale = amax / 127.0f;
            for (int64_t k = begin; k < end; ++k)
                out[r + size_t(k)] = std::clamp(std::nearbyint(x[r + size_t(k)] * inv), -127.0f, 127.0f) * scale;
        }
    }
    return out;
}

struct Case {
    DType dtype;
    int64_t tokens, rows, cols;
};

std::string describe(const Case& c) {
    return std::string(dtype_name(c.dtype)) + " T=" + std::to_string(c.tokens) + " N=" + std::to_string(c.rows) +
           " K=" + std::to_string(c.cols);
}

// Weights per fp32 term of the GEMM (one term per weight-scale group) and per term of the GEMV (one
// per 16-byte unit of codes).
int64_t gemm_terms(const Case& c) {
    const int64_t group = c.dtype == DType::Q1_0 || c.dtype == DType::Q2_0 ? 128 : c.dtype == DType::Q2_0_G64 ? 64 : 32;
    return (c.cols + group - 1) / group;
}
int64_t gemv_terms(const Case& c) { return int64_t(gemv_code_row_bytes(c.dtype, c.cols) / 16); }

// fp32 bound of the GEMM: each term float(dot)·(d_w·scale_x) is the exact product rounded twice (the
// scale product, the fmaf), and the fmaf chain over `terms` terms adds at most `terms` roundings of
// partial sums bounded by Σ|w·x'|: |y − Σ w·x'| ≤ (terms + 2)·u·Σ|w·x'|. The reference rounds once
// more (its double sum to float, and x' = q·scale once per element): + u·|ref| + u·Σ|w·x'|.
double gemm_bound(const Case& c, double abs_sum, double ref) {
    return double(gemm_terms(c) + 3) * kUnit * abs_sum + kUnit * std::fabs(ref);
}
// The GEMV's bound (tests/cuda/test_gemv_cuda.cpp): at most units + log2(32) + 3 roundings per term.
double gemv_bound(const Case& c, double abs_sum, double ref) {
    return double(gemv_terms(c) + 8) * kUnit * abs_sum + kUnit * std::fabs(ref);
}

struct Fixture {
    Case c;
    std::vector<uint8_t> weights;
    std::vector<float> x, x_rounded;
    std::vector<int64_t> tokens, rows;  // samples
    // reference over (every token × sampled rows) and (sampled tokens × every row)
    std::vector<float> ref_by_row;      // [rows.size()][T]
    std::vector<double> abs_by_row;
    std::vector<float> ref_by_token;    // [tokens.size()][N]
    std::vector<double> abs_by_token;
};

Fixture make_fixture(const Case& c, uint32_t seed) {
    std::mt19937 rng(seed);
    Fixture f;
    f.c = c;
    f.weights = random_weights(c.dtype, c.rows, c.cols, rng);
    f.x = random_activations(c.tokens, c.cols, rng);
    f.x_rounded = dequantized_activations(f.x, c.cols);
    f.tokens = sample(c.tokens, 2, 1, rng);
    f.rows = sample(c.rows, 70, 60, rng);
    const WeightView w{f.weights.data(), c.dtype, c.rows, c.cols};

    f.ref_by_row.resize(f.rows.size() * size_t(c.tokens));
    f.abs_by_row.resize(f.ref_by_row.size());
    parallel_for(int64_t(f.rows.size()), [&](int64_t i) {
        const int64_t n = f.rows[size_t(i)];
        std::vector<float> y(static_cast<size_t>(c.tokens)), row(static_cast<size_t>(c.cols));
        cpu::matmul_int8_activations(f.x.data(), w.slice_rows(n, 1), c.tokens, y.data());
        dequantize_row(c.dtype, w.row(n), row.data(), c.cols);
        for (int64_t t = 0; t < c.tokens; ++t) {
            double abs_sum = 0.0;
            for (int64_t k = 0; k < c.cols; ++k)
                abs_sum += std::fabs(double(row[size_t(k)]) * f.x_rounded[size_t(t * c.cols + k)]);
            f.ref_by_row[size_t(i * c.tokens + t)] = y[size_t(t)];
            f.abs_by_row[size_t(i * c.tokens + t)] = abs_sum;
        }
    });

    f.ref_by_token.resize(f.tokens.size() * size_t(c.rows));
    f.abs_by_token.resize(f.ref_by_token.size());
    for (size_t i = 0; i < f.tokens.size(); ++i) {
        const int64_t t = f.tokens[i];
        constexpr int64_t kSlice = 512;  // rows per reference call, in parallel
        parallel_for((c.rows + kSlice - 1) / kSlice, [&](int64_t s) {
            const int64_t n0 = s * kSlice, count = std::min(kSlice, c.rows - n0);
            cpu::matmul_int8_activations(f.x.data() + t * c.cols, w.slice_rows(n0, count), 1,
                                         f.ref_by_token.data() + i * size_t(c.rows) + size_t(n0));
            std::vector<float> row(static_cast<size_t>(c.cols));
            for (int64_t n = n0; n < n0 + count; ++n) {
                dequantize_row(c.dtype, w.row(n), row.data(), c.cols);
                double abs_sum = 0.0;
                for (int64_t k = 0; k < c.cols; ++k)
                    abs_sum += std::fabs(double(row[size_t(k)]) * f.x_rounded[size_t(t * c.cols + k)]);
                f.abs_by_token[i * size_t(c.rows) + size_t(n)] = abs_sum;
            }
        });
    }
    return f;
}

// Worst |y − ref| / bound over the samples; fails at the first element outside.
double check_against_reference(const Fixture& f, const std::vector<float>& y, const std::string& what) {
    const Case& c = f.c;
    for (size_t i = 0; i < y.size(); ++i) {
        if (std::isnan(y[i])) {
            ADD_FAILURE() << what << ": y[" << i / size_t(c.rows) << "][" << i % size_t(c.rows) << "] never written";
            return INFINITY;
        }
    }
    double worst = 0.0;
    auto check = [&](int64_t t, int64_t n, float ref, double abs_sum) {
        const double got = y[size_t(t * c.rows + n)];
        const double bound = gemm_bound(c, abs_sum, ref);
        const double err = std::fabs(got - ref);
        if (!(err <= bound)) {
            ADD_FAILURE() << what << ": y[" << t << "][" << n << "] = " << got << ", reference " << ref << " ± " << bound;
            return false;
        }
        worst = std::max(worst, bound > 0 ? err / bound : 0.0);
        return true;
    };
    for (size_t i = 0; i < f.rows.size(); ++i)
        for (int64_t t = 0; t < c.tokens; ++t)
            if (!check(t, f.rows[i], f.ref_by_row[i * size_t(c.tokens) + size_t(t)], f.abs_by_row[i * size_t(c.tokens) + size_t(t)]))
                return INFINITY;
    for (size_t i = 0; i < f.tokens.size(); ++i)
        for (int64_t n = 0; n < c.rows; ++n)
            if (!check(f.tokens[i], n, f.ref_by_token[i * size_t(c.rows) + size_t(n)], f.abs_by_token[i * size_t(c.rows) + size_t(n)]))
                return INFINITY;
    return worst;
}

struct DeviceFixture {
    cuda::GemvWeights w;
    GuardedDeviceArray<float> x;
    cuda::ActivationRowsScratch scratch;
    explicit DeviceFixture(const Fixture& f)
        : w(cuda::upload_gemv_weights(WeightView{f.weights.data(), f.c.dtype, f.c.rows, f.c.cols}, "test")),
          x(f.x),
          scratch(f.c.tokens, f.c.cols) {}
};

void check_case(const Case& c, uint32_t seed) {
    const Fixture f = make_fixture(c, seed);
    DeviceFixture d(f);
    const cuda::QuantizedActivationRows xq = d.scratch.view(c.tokens, c.cols);
    cuda::quantize_activation_rows(d.x.get(), xq, nullptr);
    const std::string shape = describe(c);

    std::vector<float> y_m64;
    // The automatic choice last, so that it too is compared with the m64 tile when it runs a warpgroup tile
    // (possibly as two launches: ws_tail_plan).
    for (cuda::GemmTile tile : {cuda::GemmTile::m16_n64, cuda::GemmTile::m64_n128, cuda::GemmTile::m128_n128,
                                cuda::GemmTile::wgmma_m128_n128, cuda::GemmTile::wgmma_ws_m128_n128,
                                cuda::GemmTile::wgmma_ws_m64_n128, cuda::GemmTile::wgmma_ws_m32_n128,
                                cuda::GemmTile::wgmma_ws_m16_n128, cuda::GemmTile::automatic}) {
        if (!cuda::gemm_tile_supported(tile, c.dtype)) continue;
        GuardedDeviceArray<float> y(size_t(c.tokens * c.rows));
        const cuda::GemmLaunchReport report = cuda::gemm_quantized(xq, d.w.view(), y.get(), nullptr, tile);
        const std::string what =
            shape + " tile " + cuda::gemm_tile_name(report.tile) +
            (report.tail_rows > 0
                 ? " + last " + std::to_string(report.tail_rows) + " rows " + cuda::gemm_tile_name(report.tail_tile)
                 : "") +
            (tile == cuda::GemmTile::automatic ? " (automatic)" : "");
        if (tile != cuda::GemmTile::automatic) EXPECT_EQ(report.tile, tile) << what;
        const std::vector<float> got = y.download(what);
        const double worst = check_against_reference(f, got, what);
        // The same terms in the same k order (ops/matmul/gemm_cuda.h): the warpgroup tiles' y is the m64 tile's.
        if (tile == cuda::GemmTile::m64_n128) y_m64 = got;
        if (report.tile >= cuda::GemmTile::wgmma_m128_n128) {  // the warpgroup tiles
            ASSERT_EQ(got.size(), y_m64.size()) << what;
            for (size_t i = 0; i < got.size(); ++i)
                ASSERT_EQ(std::bit_cast<uint32_t>(got[i]), std::bit_cast<uint32_t>(y_m64[i]))
                    << what << ": output " << i << " differs from the m64 tile's";
        }
        std::printf("[prefill gemm] %-52s tiles %7lld  worst %.3f of bound\n", what.c_str(), (long long)report.tiles, worst);
        if (::testing::Test::HasFailure()) return;
    }

    // Against the decode GEMV on the sampled tokens.
    GuardedDeviceArray<float> y(size_t(c.tokens * c.rows));
    cuda::gemm_quantized(xq, d.w.view(), y.get(), nullptr);
    const std::vector<float> y_gemm = y.download(shape);
    const cuda::ActivationScratch one(c.cols);
    GuardedDeviceArray<float> y_gemv(size_t(c.rows));
    for (size_t i = 0; i < f.tokens.size(); ++i) {
        const int64_t t = f.tokens[i];
        cuda::matmul(d.x.get() + t * c.cols, d.w.view(), 1, y_gemv.get(), one);
        const std::vector<float> g = y_gemv.download(shape + " gemv");
        for (int64_t n = 0; n < c.rows; ++n) {
            const double abs_sum = f.abs_by_token[i * size_t(c.rows) + size_t(n)];
            const double ref = f.ref_by_token[i * size_t(c.rows) + size_t(n)];
            const double bound = gemm_bound(c, abs_sum, ref) + gemv_bound(c, abs_sum, ref);
            ASSERT_LE(std::fabs(double(y_gemm[size_t(t * c.rows + n)]) - g[size_t(n)]), bound)
                << shape << ": token " << t << " row " << n << " GEMM vs GEMV";
        }
    }
}

TEST(PrefillGemm, Q1_0Bonsai27BShapes) {
    DELTABIT_REQUIRE_GPU();
    uint32_t seed = 1;
    const std::vector<Case> cases = {
        {DType::Q1_0, 1, 129, 5120},     {DType::Q1_0, 2, 5120, 5120},     {DType::Q1_0, 3, 248320, 5120},
        {DType::Q1_0, 16, 6144, 5120},   {DType::Q1_0, 63, 1000, 5120},    {DType::Q1_0, 64, 17408, 5120},
        {DType::Q1_0, 65, 48, 5120},     {DType::Q1_0, 129, 5120, 17408},  {DType::Q1_0, 512, 17408, 5120},
        {DType::Q1_0, 1029, 10240, 5120},
    };
    for (const Case& c : cases) {
        check_case(c, seed++);
        if (HasFailure()) return;
    }
}

// The few-token Q1_0 GEMM of the batched decode step (gemm_q1_0_small), each of its kernels: every token
// and weight row of the samples within the GEMM's bound of cpu::matmul_int8_activations, every output
// written and nothing past it (guard band), at 1 to 8 tokens (its one tile, full and partly), on
// Bonsai-27B's matrices and odd ones (N not a multiple of 32, 128 or 256; K of 1, 3, 5, 9, 17 or 25 groups:
// split warps without a group, wide kernels' partial last chunk) — and the wide kernels' y bit for bit the
// split kernel's (the same terms summed in the same order).
TEST(PrefillGemm, SmallBatchQ1_0Kernel) {
    DELTABIT_REQUIRE_GPU();
    uint32_t seed = 300;
    const std::vector<Case> cases = {
        {DType::Q1_0, 2, 10240, 5120}, {DType::Q1_0, 5, 48, 5120},  {DType::Q1_0, 8, 17408, 5120},
        {DType::Q1_0, 7, 5120, 17408}, {DType::Q1_0, 8, 40, 384},   {DType::Q1_0, 3, 1000, 5120},
        {DType::Q1_0, 6, 6144, 5120},  {DType::Q1_0, 1, 129, 1024}, {DType::Q1_0, 4, 248320, 5120},
        {DType::Q1_0, 2, 300, 128},    {DType::Q1_0, 3, 257, 1152}, {DType::Q1_0, 5, 130, 640},
        {DType::Q1_0, 8, 1000, 3200},  {DType::Q1_0, 6, 520, 2176}, {DType::Q1_0, 4, 17408, 5120},
    };
    const struct {
        cuda::SmallGemmKernel kernel;
        const char* name;
    } kernels[] = {{cuda::SmallGemmKernel::split, "split"},
                   {cuda::SmallGemmKernel::wide64, "wide64"},
                   {cuda::SmallGemmKernel::wide128, "wide128"},
                   {cuda::SmallGemmKernel::wide256, "wide256"}};
    for (const Case& c : cases) {
        const Fixture f = make_fixture(c, seed++);
        DeviceFixture d(f);
        const cuda::QuantizedActivationRows xq = d.scratch.view(c.tokens, c.cols);
        cuda::quantize_activation_rows(d.x.get(), xq, nullptr);
        std::vector<float> split_y;
        for (const auto& k : kernels) {
            GuardedDeviceArray<float> y(size_t(c.tokens * c.rows));
            cuda::gemm_q1_0_small(xq, d.w.view(), y.get(), nullptr, k.kernel);
            const std::string what = describe(c) + " small " + k.name;
            const std::vector<float> got = y.download(what);
            const double worst = check_against_reference(f, got, what);
            std::printf("[prefill gemm] %-60s worst %.3f of bound\n", what.c_str(), worst);
            if (HasFailure()) return;
            if (k.kernel == cuda::SmallGemmKernel::split) {
                split_y = got;
                continue;
            }
            for (size_t i = 0; i < got.size(); ++i)
                ASSERT_EQ(std::bit_cast<uint32_t>(got[i]), std::bit_cast<uint32_t>(split_y[i]))
                    << what << ": y[" << i / size_t(c.rows) << "][" << i % size_t(c.rows) << "] = " << got[i]
                    << ", split kernel " << split_y[i];
        }
    }
    // Shapes it does not take are refused, naming them.
    const Fixture f = make_fixture({DType::Q1_0, 9, 64, 256}, 9);
    DeviceFixture d(f);
    GuardedDeviceArray<float> y(size_t(9 * 64));
    EXPECT_THROW(cuda::gemm_q1_0_small(d.scratch.view(9, 256), d.w.view(), y.get(), nullptr), Error);
    const Fixture q4 = make_fixture({DType::Q4_0, 4, 64, 256}, 10);
    DeviceFixture d4(q4);
    EXPECT_THROW(cuda::gemm_q1_0_small(d4.scratch.view(4, 256), d4.w.view(), y.get(), nullptr), Error);
    EXPECT_THROW(cuda::gemm_q1_0_small(d4.scratch.view(4, 256), d4.w.view(), y.get(), nullptr,
                                       cuda::SmallGemmKernel::wide128),
                 Error);
}

TEST(PrefillGemm, OtherDtypesOddShapes) {
    DELTABIT_REQUIRE_GPU();
    uint32_t seed = 100;
    for (DType t : {DType::Q2_0, DType::Q2_0_G64, DType::Q4_0, DType::Q8_0}) {
        const int64_t block = dtype_info(t).block_elems;
        const std::vector<Case> cases = {
            {t, 1, 65, 640}, {t, 65, 129, 5120}, {t, 200, 300, 1152}, {t, 70, 33, 3 * block},  // 3 blocks: a partial group
            {t, 17, 257, 128 + block},
        };
        for (const Case& c : cases) {
            check_case(c, seed++);
            if (HasFailure()) return;
        }
    }
}

TEST(PrefillGemm, SmallGridWalksEveryTile) {
    DELTABIT_REQUIRE_GPU();
    const Case c{DType::Q1_0, 300, 1000, 1024};
    const Fixture f = make_fixture(c, 7);
    DeviceFixture d(f);
    const cuda::QuantizedActivationRows xq = d.scratch.view(c.tokens, c.cols);
    cuda::quantize_activation_rows(d.x.get(), xq, nullptr);
    for (cuda::GemmTile tile : {cuda::GemmTile::m16_n64, cuda::GemmTile::m64_n128, cuda::GemmTile::m128_n128,
                                cuda::GemmTile::wgmma_m128_n128, cuda::GemmTile::wgmma_ws_m128_n128,
                                cuda::GemmTile::wgmma_ws_m64_n128, cuda::GemmTile::wgmma_ws_m32_n128,
                                cuda::GemmTile::wgmma_ws_m16_n128}) {
        if (!cuda::gemm_tile_supported(tile, c.dtype)) continue;
        GuardedDeviceArray<float> y(size_t(c.tokens * c.rows));
        const cuda::GemmLaunchReport report = cuda::gemm_quantized(xq, d.w.view(), y.get(), nullptr, tile, 7);
        EXPECT_EQ(report.blocks, 7);
        EXPECT_GT(report.tiles, 7 * 3);
        const std::string what = describe(c) + " tile " + cuda::gemm_tile_name(tile) + " on 7 blocks";
        check_against_reference(f, y.download(what), what);
    }
}

// Every stage ring of the warp-specialised tile (a benchmark compares them, one is the default) gives the m64
// tile's y bit for bit — on the whole grid and on 7 blocks walking 3 × 8 tiles each (the ring wraps and
// its barriers change phase many times), three times each, as a race would show in some runs only.
TEST(PrefillGemm, EveryWarpSpecialisedPipelineIsTheM64Tile) {
    DELTABIT_REQUIRE_GPU();
    if (!cuda::gemm_tile_supported(cuda::GemmTile::wgmma_ws_m128_n128, DType::Q1_0))
        GTEST_SKIP() << "no sm_90a machine code for this device";
    for (const Case& c : {Case{DType::Q1_0, 300, 1000, 1024}, Case{DType::Q1_0, 512, 5120, 17408}}) {
        std::mt19937 rng(11);
        const std::vector<uint8_t> weights = random_weights(c.dtype, c.rows, c.cols, rng);
        const cuda::GemvWeights w = cuda::upload_gemv_weights(WeightView{weights.data(), c.dtype, c.rows, c.cols}, "test");
        GuardedDeviceArray<float> x(random_activations(c.tokens, c.cols, rng));
        const cuda::ActivationRowsScratch scratch(c.tokens, c.cols);
        const cuda::QuantizedActivationRows xq = scratch.view(c.tokens, c.cols);
        cuda::quantize_activation_rows(x.get(), xq, nullptr);
        GuardedDeviceArray<float> y(size_t(c.tokens * c.rows));
        cuda::gemm_quantized(xq, w.view(), y.get(), nullptr, cuda::GemmTile::m64_n128);
        const std::vector<float> y_m64 = y.download(describe(c) + " m64");
        for (int p = 0; p < cuda::detail::ws_pipeline_count(); ++p)
            for (int64_t blocks : {int64_t(0), int64_t(7)})
                for (int run = 0; run < 3; ++run) {
                    const std::string what = describe(c) + " ws pipeline " + cuda::detail::ws_pipeline_name(p) + " on " +
                                             (blocks ? "7 blocks" : "the whole grid") + ", run " + std::to_string(run);
                    GuardedDeviceArray<float> out(size_t(c.tokens * c.rows));
                    cuda::detail::gemm_q1_0_wgmma_ws(xq, w.view(), out.get(), nullptr, blocks, p);
                    const std::vector<float> got = out.download(what);
                    for (size_t i = 0; i < got.size(); ++i)
                        ASSERT_EQ(std::bit_cast<uint32_t>(got[i]), std::bit_cast<uint32_t>(y_m64[i]))
                            << what << ": output " << i << " differs from the m64 tile's";
                }
    }
}

// A view that starts one row into the weights (as the model's row slices do) with an odd number of scales a
// row: its scales begin 2 bytes off a 4-byte word, and the warp-specialised kernel, which copies each row's
// scale as the aligned word holding it, must pick the other half of the word than for the whole matrix. Every
// tile on the slice gives the whole matrix's rows 1.. bit for bit.
// Where the automatic choice cuts a Q1_0 matrix into a 128-token part and a narrow-tile tail (host only: the
// plan is arithmetic on the shape and the SM count; the GPU tests above hold the cut's y to the m64 tile's).
TEST(PrefillGemm, TailPlanFillsTheLastRound) {
    using cuda::detail::ws_tail_plan;
    struct Expect {
        int64_t tokens, rows, head_rows;
        int tail_tokens;
    };
    // 132 SMs (H200). ffn_gate/up at 512 tokens: 544 tiles, 4 whole rounds + 16 tiles → the last 4 row blocks
    // as 16-token tiles (128 of them); ffn_down: 160 tiles → 33 row blocks, then 7 as 32-token tiles (112);
    // ssm_qkv: 320 → 66 row blocks, then 14 as 64-token tiles; attention q+gate (384 tiles: 120 left over)
    // and a 4096-token FFN (33 rounds, 1 nearly full) keep one launch; 129 tokens × 5120 rows (80 tiles, a
    // single short round) run wholly as 64-token tiles; a whole number of rounds is never cut.
    for (const Expect& e : {Expect{512, 17408, 16896, 16}, Expect{512, 5120, 4224, 32}, Expect{512, 10240, 8448, 64},
                            Expect{512, 12288, 0, 0}, Expect{4096, 17408, 0, 0}, Expect{129, 5120, 0, 64},
                            Expect{128, 16896, 0, 0}}) {
        const cuda::detail::WsTailPlan plan = ws_tail_plan(e.tokens, e.rows, 132);
        EXPECT_EQ(plan.tail_tokens, e.tail_tokens) << e.tokens << " tokens × " << e.rows << " rows";
        if (e.tail_tokens > 0) EXPECT_EQ(plan.head_rows, e.head_rows) << e.tokens << " tokens × " << e.rows << " rows";
    }
}

TEST(PrefillGemm, RowSliceWithOddScaleAlignment) {
    DELTABIT_REQUIRE_GPU();
    const int64_t rows = 301, cols = 3 * 128, tokens = 70;  // 3 scales a row: row 1's start at byte 6
    std::mt19937 rng(21);
    const std::vector<uint8_t> weights = random_weights(DType::Q1_0, rows, cols, rng);
    const cuda::GemvWeights w = cuda::upload_gemv_weights(WeightView{weights.data(), DType::Q1_0, rows, cols}, "test");
    GuardedDeviceArray<float> x(random_activations(tokens, cols, rng));
    const cuda::ActivationRowsScratch scratch(tokens, cols);
    const cuda::QuantizedActivationRows xq = scratch.view(tokens, cols);
    cuda::quantize_activation_rows(x.get(), xq, nullptr);
    GuardedDeviceArray<float> y_whole(size_t(tokens * rows));
    cuda::gemm_quantized(xq, w.view(), y_whole.get(), nullptr, cuda::GemmTile::m64_n128);
    const std::vector<float> whole = y_whole.download("whole matrix, m64");

    const cuda::GemvWeightView slice = w.view().slice_rows(1, rows - 1);
    ASSERT_EQ(reinterpret_cast<uintptr_t>(slice.scales) % 4, 2u) << "the slice's scales start mid-word";
    for (cuda::GemmTile tile : {cuda::GemmTile::automatic, cuda::GemmTile::m64_n128, cuda::GemmTile::wgmma_m128_n128,
                                cuda::GemmTile::wgmma_ws_m128_n128, cuda::GemmTile::wgmma_ws_m64_n128,
                                cuda::GemmTile::wgmma_ws_m32_n128, cuda::GemmTile::wgmma_ws_m16_n128}) {
        if (!cuda::gemm_tile_supported(tile, DType::Q1_0)) continue;
        const std::string what = std::string("rows 1..300 of 301 × 384, tile ") + cuda::gemm_tile_name(tile);
        GuardedDeviceArray<float> y(size_t(tokens * slice.rows));
        cuda::gemm_quantized(xq, slice, y.get(), nullptr, tile);
        const std::vector<float> got = y.download(what);
        for (int64_t t = 0; t < tokens; ++t)
            for (int64_t n = 0; n < slice.rows; ++n)
                ASSERT_EQ(std::bit_cast<uint32_t>(got[size_t(t * slice.rows + n)]),
                          std::bit_cast<uint32_t>(whole[size_t(t * rows + n + 1)]))
                    << what << ": token " << t << " row " << n;
    }
}

TEST(PrefillGemm, MatmulPrefillPicksGemvOrGemmByTokenCount) {
    DELTABIT_REQUIRE_GPU();
    for (int64_t tokens : {int64_t(1), cuda::kGemmMinTokens - 1, cuda::kGemmMinTokens, int64_t(40)}) {
        if (tokens < 1) continue;
        const Case c{DType::Q1_0, tokens, 300, 640};
        const Fixture f = make_fixture(c, uint32_t(500 + tokens));
        DeviceFixture d(f);
        GuardedDeviceArray<float> y(size_t(c.tokens * c.rows));
        const bool gemm = cuda::matmul_prefill(d.x.get(), d.w.view(), tokens, y.get(), d.scratch, nullptr);
        EXPECT_EQ(gemm, tokens >= cuda::kGemmMinTokens) << describe(c);
        const std::vector<float> got = y.download(describe(c));
        // Either path is within the looser (GEMV) bound of the reference.
        for (size_t i = 0; i < f.rows.size(); ++i)
            for (int64_t t = 0; t < tokens; ++t) {
                const double ref = f.ref_by_row[i * size_t(tokens) + size_t(t)];
                const double bound = gemv_bound(c, f.abs_by_row[i * size_t(tokens) + size_t(t)], ref);
                ASSERT_LE(std::fabs(got[size_t(t * c.rows + f.rows[i])] - ref), bound) << describe(c);
            }
    }
}

TEST(PrefillGemm, RefusesMismatchedShapes) {
    DELTABIT_REQUIRE_GPU();
    std::mt19937 rng(5);
    const std::vector<uint8_t> bytes = random_weights(DType::Q1_0, 4, 256, rng);
    const cuda::GemvWeights w = cuda::upload_gemv_weights(WeightView{bytes.data(), DType::Q1_0, 4, 256}, "t");
    const cuda::ActivationRowsScratch scratch(8, 256);
    EXPECT_THROW(scratch.view(9, 256), Error);
    GuardedDeviceArray<float> y(64);
    EXPECT_THROW(cuda::gemm_quantized(scratch.view(8, 128), w.view(), y.get(), nullptr), Error);
    // The warpgroup tile is Q1_0 only: asked for other weights, a clear error instead of another tile.
    const std::vector<uint8_t> q4 = random_weights(DType::Q4_0, 4, 256, rng);
    const cuda::GemvWeights w4 = cuda::upload_gemv_weights(WeightView{q4.data(), DType::Q4_0, 4, 256}, "t4");
    for (cuda::GemmTile tile : {cuda::GemmTile::wgmma_m128_n128, cuda::GemmTile::wgmma_ws_m128_n128,
                                cuda::GemmTile::wgmma_ws_m16_n128}) {
        EXPECT_FALSE(cuda::gemm_tile_supported(tile, DType::Q4_0));
        EXPECT_THROW(cuda::gemm_quantized(scratch.view(8, 256), w4.view(), y.get(), nullptr, tile), Error);
    }
}

#else
TEST(PrefillGemm, SkippedWithoutCuda) { GTEST_SKIP() << "built without CUDA"; }
#endif

}  // namespace
}  // namespace deltabit::test
