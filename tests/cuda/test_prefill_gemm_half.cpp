// The Q1_0 prompt GEMM on f16 activations (ops/matmul/gemm_cuda.h: round_activation_rows_f16, gemm_q1_0_half,
// matmul_prompt) against its CPU reference cpu::matmul_f16_activations, on the GPU machine; skips cleanly
// without CUDA, a GPU or sm_90a machine code.
//
// What is checked:
//   - the rounding: every f16 bit and every row scale equal the CPU's (ops/matmul/f16_activations.h), on rows that
//     f16 could not hold unscaled (max 3e5), rows deep in its subnormals (1e-9), zero rows, odd magnitudes;
//     the FFN's rows rounded straight from gate and up equal swiglu then the rounding, bit for bit;
//   - y[t][n] equals the reference within the fp32 bound of the tensor cores' summation (below), on every
//     token of a sample of weight rows and every weight row of a sample of tokens, for every tile and the
//     automatic choice (with its tail cut), every output written (NaN poison) and the guard band intact;
//   - blocks forced to walk many tiles cover every tile once; split k (2 to 8 blocks of a cluster sharing a
//     tile's k-tiles) within the same bound and the same bits run after run, clusters walking many tiles;
//     a row slice (the tail launch's) with an odd scale alignment; matmul_prompt's path by token count and
//     dtype; bad shapes and impossible splits are refused;
//   - the automatic choice's plan from its round costs (host only, so it runs without a GPU too).
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
#include "core/half.h"
#include "core/quant.h"
#include "core/tensor.h"
#include "ops/matmul.h"

#ifdef DELTABIT_HAVE_CUDA
#include "cuda/op_parity_cuda.h"
#include "cuda/quantized_test_data.h"
#include "ops/matmul/gemm_wgmma_cuda.h"
#include "ops/matmul/matmul_cuda.h"
#include "ops/elementwise/elementwise_cuda.h"
#include "ops/matmul/gemm_cuda.h"
#endif

namespace deltabit::test {
namespace {

#ifdef DELTABIT_HAVE_CUDA

#define DELTABIT_REQUIRE_HALF_GEMM()                                                              \
    DELTABIT_REQUIRE_GPU();                                                                       \
    if (!cuda::half_gemm_available()) GTEST_SKIP() << "no sm_90a machine code for this device"

// Rows whose magnitude changes per group of 128 over three decades (as hidden states do), one row in seven
// scaled past f16's range or deep below its normals, one row of zeros.
std::vector<float> random_activations(int64_t rows, int64_t cols, std::mt19937& rng) {
    std::uniform_real_distribution<float> value(-1.0f, 1.0f), log_magnitude(-2.0f, 1.0f);
    std::vector<float> x(size_t(rows * cols));
    for (int64_t r = 0; r < rows; ++r) {
        const float row_scale = r % 7 == 3 ? 3e4f : r % 7 == 5 ? 1e-9f : r == 1 ? 0.0f : 1.0f;
        float magnitude = 1.0f;
        for (int64_t k = 0; k < cols; ++k) {
            if (k % 128 == 0) magnitude = std::pow(10.0f, log_magnitude(rng));
            x[size_t(r * cols + k)] = value(rng) * magnitude * row_scale;
        }
    }
    return x;
}

struct Case {
    int64_t tokens, rows, cols;
};
std::string describe(const Case& c) {
    return "Q1_0 T=" + std::to_string(c.tokens) + " N=" + std::to_string(c.rows) + " K=" + std::to_string(c.cols);
}

// The bound, fixed before the first GPU run. The products ±d·h are exact in fp32 (11 × 11 significant bits);
// the tensor cores add them in k-steps of 16, each step's 16 products into the running fp32 sum, in an order
// and with a rounding (nearest or toward zero) of their own: at most K/16 + 16 additions stand between a
// product and y, each off by at most 2^−23 of a partial sum bounded by Σ|w·h|. The scale by 2^−e is exact;
// the reference (double, rounded once to float) adds u·|ref|. Split k over S blocks shortens each block's
// chain to K/(16S) + 16 and adds S − 1 additions of the blocks' sums: never more (K ≥ 16S), same bound.
double half_gemm_bound(int64_t cols, double abs_sum, double ref) {
    constexpr double kUlpStep = 1.0 / (1 << 23);
    return double(cols / 16 + 16) * kUlpStep * abs_sum + std::ldexp(1.0, -24) * std::fabs(ref);
}

struct Fixture {
    Case c;
    std::vector<uint8_t> weights;
    std::vector<float> x, x_rounded;    // x_rounded: cpu::round_activations_f16 of every row
    std::vector<int64_t> tokens, rows;  // samples
    std::vector<float> ref_by_row, ref_by_token;  // [rows.size()][T], [tokens.size()][N]
    std::vector<double> abs_by_row, abs_by_token;
};

Fixture make_fixture(const Case& c, uint32_t seed) {
    std::mt19937 rng(seed);
    Fixture f;
    f.c = c;
    f.weights = random_weights(DType::Q1_0, c.rows, c.cols, rng);
    f.x = random_activations(c.tokens, c.cols, rng);
    f.x_rounded.resize(f.x.size());
    for (int64_t t = 0; t < c.tokens; ++t)
        cpu::round_activations_f16(f.x.data() + t * c.cols, c.cols, f.x_rounded.data() + t * c.cols);
    f.tokens = sample(c.tokens, 2, 2, rng);
    f.rows = sample(c.rows, 70, 60, rng);
    const WeightView w{f.weights.data(), DType::Q1_0, c.rows, c.cols};
    auto abs_sum = [&](const std::vector<float>& row, int64_t t) {
        double s = 0.0;
        for (int64_t k = 0; k < c.cols; ++k) s += std::fabs(double(row[size_t(k)]) * f.x_rounded[size_t(t * c.cols + k)]);
        return s;
    };
    f.ref_by_row.resize(f.rows.size() * size_t(c.tokens));
    f.abs_by_row.resize(f.ref_by_row.size());
    parallel_for(int64_t(f.rows.size()), [&](int64_t i) {
        const int64_t n = f.rows[size_t(i)];
        std::vector<float> row(size_t(c.cols));
        cpu::matmul_f16_activations(f.x.data(), w.slice_rows(n, 1), c.tokens, f.ref_by_row.data() + i * c.tokens);
        dequantize_row(DType::Q1_0, w.row(n), row.data(), c.cols);
        for (int64_t t = 0; t < c.tokens; ++t) f.abs_by_row[size_t(i * c.tokens + t)] = abs_sum(row, t);
    });
    f.ref_by_token.resize(f.tokens.size() * size_t(c.rows));
    f.abs_by_token.resize(f.ref_by_token.size());
    for (size_t i = 0; i < f.tokens.size(); ++i) {
        const int64_t t = f.tokens[i];
        constexpr int64_t kSlice = 512;
        parallel_for((c.rows + kSlice - 1) / kSlice, [&](int64_t s) {
            const int64_t n0 = s * kSlice, count = std::min(kSlice, c.rows - n0);
            cpu::matmul_f16_activations(f.x.data() + t * c.cols, w.slice_rows(n0, count), 1,
                                        f.ref_by_token.data() + i * size_t(c.rows) + size_t(n0));
            std::vector<float> row(size_t(c.cols));
            for (int64_t n = n0; n < n0 + count; ++n) {
                dequantize_row(DType::Q1_0, w.row(n), row.data(), c.cols);
                f.abs_by_token[i * size_t(c.rows) + size_t(n)] = abs_sum(row, t);
            }
        });
    }
    return f;
}

// Worst |y − ref| / bound over the samples; fails at the first element outside or never written.
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
        const double bound = half_gemm_bound(c.cols, abs_sum, ref);
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
            if (!check(f.tokens[i], n, f.ref_by_token[i * size_t(c.rows) + size_t(n)],
                       f.abs_by_token[i * size_t(c.rows) + size_t(n)]))
                return INFINITY;
    return worst;
}

struct DeviceFixture {
    cuda::GemvWeights w;
    GuardedDeviceArray<float> x;
    cuda::DeviceBuffer rows_buffer;
    cuda::HalfActivationRows rows;
    DeviceFixture(const Fixture& f, cudaStream_t stream)
        : w(cuda::upload_gemv_weights(WeightView{f.weights.data(), DType::Q1_0, f.c.rows, f.c.cols}, "test")),
          x(f.x),
          rows_buffer(cuda::half_activation_rows_bytes(f.c.tokens, f.c.cols)),
          rows(cuda::half_activation_rows_view(rows_buffer.get(), f.c.tokens, f.c.cols)) {
        cuda::round_activation_rows_f16(x.get(), rows, stream);
    }
};

constexpr cuda::GemmTile kHalfTiles[] = {
    cuda::GemmTile::half_m128_n256, cuda::GemmTile::half_m64_n256, cuda::GemmTile::half_m32_n256,
    cuda::GemmTile::half_m16_n256,  cuda::GemmTile::half_m128_n128, cuda::GemmTile::half_m64_n128,
    cuda::GemmTile::half_m32_n128,  cuda::GemmTile::half_m16_n128,  cuda::GemmTile::automatic};

void check_case(const Case& c, uint32_t seed, int64_t max_blocks = 0) {
    const Fixture f = make_fixture(c, seed);
    DeviceFixture d(f, nullptr);
    const std::string shape = describe(c) + (max_blocks > 0 ? " max_blocks " + std::to_string(max_blocks) : "");
    for (cuda::GemmTile tile : kHalfTiles) {
        GuardedDeviceArray<float> y(size_t(c.tokens * c.rows));
        const cuda::GemmLaunchReport report = cuda::gemm_q1_0_half(d.rows, d.w.view(), y.get(), nullptr, tile, max_blocks);
        const std::string what =
            shape + " tile " + cuda::gemm_tile_name(report.tile) +
            (report.tail_rows > 0
                 ? " + last " + std::to_string(report.tail_rows) + " rows " + cuda::gemm_tile_name(report.tail_tile)
                 : "") +
            (report.splits > 1 ? " split " + std::to_string(report.splits) : "") +
            (tile == cuda::GemmTile::automatic ? " (automatic)" : "");
        if (tile != cuda::GemmTile::automatic) EXPECT_EQ(report.tile, tile) << what;
        if (max_blocks > 0) EXPECT_LE(report.blocks, max_blocks) << what;
        const double worst = check_against_reference(f, y.download(what), what);
        std::printf("[half gemm] %-60s tiles %7lld  worst %.3f of bound\n", what.c_str(), (long long)report.tiles, worst);
        if (::testing::Test::HasFailure()) return;
    }
}

TEST(PrefillGemmHalf, RoundingIsTheCpuReferenceBitForBit) {
    DELTABIT_REQUIRE_HALF_GEMM();
    std::mt19937 rng(11);
    const int64_t T = 30, K = 5120;
    std::vector<float> x = random_activations(T, K, rng);
    x[size_t(9 * K + 17)] = 65520.0f * 4;  // a lone value past f16's range in an otherwise ordinary row
    x[size_t(10 * K + 3)] = std::ldexp(1.0f, -140);  // an fp32 subnormal in a row of them
    for (int64_t k = 0; k < K; ++k) x[size_t(10 * K + k)] = std::ldexp(float(k % 7) - 3.0f, -135);
    GuardedDeviceArray<float> dx(x);
    GuardedDeviceArray<uint8_t> buffer(cuda::half_activation_rows_bytes(T, K));
    const cuda::HalfActivationRows rows = cuda::half_activation_rows_view(buffer.get(), T, K);
    cuda::round_activation_rows_f16(dx.get(), rows, nullptr);
    const std::vector<uint8_t> got = buffer.download("rounded rows");
    std::vector<float> expected(static_cast<size_t>(K));
    for (int64_t t = 0; t < T; ++t) {
        cpu::round_activations_f16(x.data() + t * K, K, expected.data());
        float inv = 0;
        std::memcpy(&inv, got.data() + (reinterpret_cast<uint8_t*>(rows.inv_scale) - buffer.get()) + t * 4, 4);
        for (int64_t k = 0; k < K; ++k) {
            uint16_t h = 0;
            std::memcpy(&h, got.data() + size_t(t * K + k) * 2, 2);
            const float value = half_to_float(h) * inv;
            ASSERT_EQ(std::bit_cast<uint32_t>(value), std::bit_cast<uint32_t>(expected[size_t(k)]))
                << "row " << t << " element " << k << ": " << x[size_t(t * K + k)] << " rounded to " << value
                << ", the CPU to " << expected[size_t(k)];
            ASSERT_TRUE(std::isfinite(half_to_float(h))) << "row " << t << " element " << k;
        }
    }
}

TEST(PrefillGemmHalf, Bonsai27BShapes) {
    DELTABIT_REQUIRE_HALF_GEMM();
    uint32_t seed = 1;
    for (const Case& c : {Case{8, 10240, 5120}, Case{16, 48, 5120}, Case{63, 17408, 5120}, Case{65, 5120, 17408},
                          Case{129, 1024, 5120}, Case{512, 5120, 17408}, Case{1029, 6144, 5120}})
        check_case(c, seed++);
}

TEST(PrefillGemmHalf, OddShapes) {
    DELTABIT_REQUIRE_HALF_GEMM();
    uint32_t seed = 100;
    for (const Case& c : {Case{8, 1, 128}, Case{9, 129, 128}, Case{17, 255, 256}, Case{33, 257, 384},
                          Case{127, 1000, 1024}, Case{200, 640, 128}})
        check_case(c, seed++);
}

TEST(PrefillGemmHalf, SmallGridWalksEveryTile) {
    DELTABIT_REQUIRE_HALF_GEMM();
    check_case(Case{300, 1000, 1024}, 7, 3);
}

TEST(PrefillGemmHalf, SplitKWithinTheBoundAndRepeatable) {
    DELTABIT_REQUIRE_HALF_GEMM();
    // 300 tokens × 1000 rows: many tiles for each cluster when the grid is 2 clusters (every slot handed over
    // and freed again and again), partial tiles in both directions; 16 tokens × K = 4096: few tiles, long walks.
    uint32_t seed = 40;
    for (const Case& c : {Case{300, 1000, 2048}, Case{16, 1000, 4096}}) {
        const Fixture f = make_fixture(c, seed++);
        DeviceFixture d(f, nullptr);
        for (cuda::GemmTile tile : {cuda::GemmTile::half_m128_n256, cuda::GemmTile::half_m64_n128,
                                    cuda::GemmTile::half_m32_n256, cuda::GemmTile::half_m16_n128})
            for (int splits : {2, 3, 4, 8})
                for (int64_t max_blocks : {int64_t(0), int64_t(2 * splits)}) {
                    GuardedDeviceArray<float> y(size_t(c.tokens * c.rows));
                    const cuda::GemmLaunchReport report =
                        cuda::gemm_q1_0_half(d.rows, d.w.view(), y.get(), nullptr, tile, max_blocks, splits);
                    const std::string what = describe(c) + " tile " + cuda::gemm_tile_name(tile) + " split " +
                                             std::to_string(splits) + " max_blocks " + std::to_string(max_blocks);
                    EXPECT_EQ(report.splits, splits) << what;
                    EXPECT_EQ(report.blocks % splits, 0) << what;
                    const std::vector<float> first = y.download(what);
                    const double worst = check_against_reference(f, first, what);
                    cuda::gemm_q1_0_half(d.rows, d.w.view(), y.get(), nullptr, tile, max_blocks, splits);
                    const std::vector<float> again = y.download(what + " again");
                    for (size_t i = 0; i < first.size(); ++i)
                        ASSERT_EQ(std::bit_cast<uint32_t>(first[i]), std::bit_cast<uint32_t>(again[i]))
                            << what << ": y[" << i << "] differs between two runs";
                    std::printf("[half gemm] %-60s worst %.3f of bound\n", what.c_str(), worst);
                    if (::testing::Test::HasFailure()) return;
                }
    }
}

TEST(PrefillGemmHalf, RowSliceWithOddScaleAlignment) {
    DELTABIT_REQUIRE_HALF_GEMM();
    // Rows 3 .. of a K = 384 matrix: the slice's scales start on an odd 2-byte boundary (3 scales a row).
    const Case full{70, 300, 384};
    const Fixture f = make_fixture(full, 5);
    DeviceFixture d(f, nullptr);
    const int64_t first = 3, count = 290;
    GuardedDeviceArray<float> y(size_t(full.tokens * full.rows));
    cuda::gemm_q1_0_half(d.rows, d.w.view().slice_rows(first, count), y.get(), nullptr, cuda::GemmTile::half_m64_n256);
    const std::vector<float> got = y.download("slice");
    GuardedDeviceArray<float> y_full(size_t(full.tokens * full.rows));
    cuda::gemm_q1_0_half(d.rows, d.w.view(), y_full.get(), nullptr, cuda::GemmTile::half_m64_n256);
    const std::vector<float> want = y_full.download("full");
    for (int64_t t = 0; t < full.tokens; ++t)
        for (int64_t n = 0; n < count; ++n)
            ASSERT_EQ(std::bit_cast<uint32_t>(got[size_t(t * count + n)]),
                      std::bit_cast<uint32_t>(want[size_t(t * full.rows + first + n)]))
                << "token " << t << " row " << first + n;
}

TEST(PrefillGemmHalf, MatmulPromptPathByTokensAndDtype) {
    DELTABIT_REQUIRE_GPU();
    std::mt19937 rng(3);
    const int64_t N = 256, K = 512;
    const std::vector<uint8_t> q1 = random_weights(DType::Q1_0, N, K, rng);
    const cuda::GemvWeights w = cuda::upload_gemv_weights(WeightView{q1.data(), DType::Q1_0, N, K}, "test");
    const std::vector<float> x = random_activations(16, K, rng);
    GuardedDeviceArray<float> dx(x), y(size_t(16 * N));
    cuda::DeviceBuffer scratch(cuda::prompt_scratch_bytes(w.view(), 16));
    const bool f16 = cuda::half_prompt_gemm_enabled();
    EXPECT_EQ(cuda::matmul_prompt(dx.get(), w.view(), 7, y.get(), scratch.get(), nullptr), cuda::PromptMatmulPath::gemv);
    EXPECT_EQ(cuda::matmul_prompt(dx.get(), w.view(), 8, y.get(), scratch.get(), nullptr),
              f16 ? cuda::PromptMatmulPath::f16_gemm : cuda::PromptMatmulPath::int8_gemm);
    // For 16 tokens it computes exactly what the path it names computes step by step (each path's accuracy
    // against its CPU reference is the other tests'): the same rounding, the same automatic tile, the same bits.
    cuda::matmul_prompt(dx.get(), w.view(), 16, y.get(), scratch.get(), nullptr);
    const std::vector<float> got = y.download("matmul_prompt");
    GuardedDeviceArray<float> y_path(size_t(16 * N));
    cuda::DeviceBuffer rows_buffer(std::max(cuda::half_activation_rows_bytes(16, K), cuda::activation_rows_bytes(16, K)));
    if (f16) {
        const cuda::HalfActivationRows rows = cuda::half_activation_rows_view(rows_buffer.get(), 16, K);
        cuda::round_activation_rows_f16(dx.get(), rows, nullptr);
        cuda::gemm_q1_0_half(rows, w.view(), y_path.get(), nullptr);
    } else {
        const cuda::QuantizedActivationRows rows = cuda::activation_rows_view(rows_buffer.get(), 16, K);
        cuda::quantize_activation_rows(dx.get(), rows, nullptr);
        cuda::gemm_quantized(rows, w.view(), y_path.get(), nullptr);
    }
    const std::vector<float> want = y_path.download("the path step by step");
    for (size_t i = 0; i < want.size(); ++i)
        ASSERT_EQ(std::bit_cast<uint32_t>(got[i]), std::bit_cast<uint32_t>(want[i])) << "output " << i;
    // Q8_0 weights never take the f16 GEMM.
    std::vector<float> dense(size_t(N * K));
    for (float& v : dense) v = std::uniform_real_distribution<float>(-1, 1)(rng);
    std::vector<uint8_t> q8(size_t(N) * dtype_bytes(DType::Q8_0, uint64_t(K)));
    for (int64_t n = 0; n < N; ++n)
        quantize_row(DType::Q8_0, dense.data() + n * K, q8.data() + size_t(n) * dtype_bytes(DType::Q8_0, uint64_t(K)), K);
    const cuda::GemvWeights w8 = cuda::upload_gemv_weights(WeightView{q8.data(), DType::Q8_0, N, K}, "test");
    EXPECT_EQ(cuda::matmul_prompt(dx.get(), w8.view(), 16, y.get(), scratch.get(), nullptr),
              cuda::PromptMatmulPath::int8_gemm);
}

// The FFN's activations rounded for ffn_down in one pass (round_swiglu_rows_f16) are swiglu's output rounded
// by round_activation_rows_f16, every bit of every f16 and row scale: rows short and long, one beyond what the
// kernel keeps in shared memory (24580 > 24576 values: the products computed again), rows scaled past f16's
// range and deep in its subnormals. And the FFN's matmul through prepare_prompt_rows_swiglu is
// matmul_prompt of swiglu's output bit for bit, on whichever path the switch gives.
TEST(PrefillGemmHalf, SwigluRowsAreSwigluThenRounding) {
    DELTABIT_REQUIRE_GPU();
    std::mt19937 rng(21);
    struct Shape {
        int64_t rows, cols;
    };
    for (const Shape sh : {Shape{9, 17408}, Shape{3, 24580}, Shape{5, 4}, Shape{13, 1028}}) {
        const std::string what = std::to_string(sh.rows) + "×" + std::to_string(sh.cols);
        std::vector<float> gate(size_t(sh.rows * sh.cols));
        for (float& v : gate) v = std::uniform_real_distribution<float>(-12.0f, 12.0f)(rng);
        const std::vector<float> up = random_activations(sh.rows, sh.cols, rng);
        GuardedDeviceArray<float> dg(gate), du(up), act(gate.size());
        cuda::swiglu(dg.get(), du.get(), int64_t(gate.size()), act.get(), nullptr);
        const size_t bytes = cuda::half_activation_rows_bytes(sh.rows, sh.cols);
        GuardedDeviceArray<uint8_t> fused(bytes), two_steps(bytes);
        const cuda::HalfActivationRows a = cuda::half_activation_rows_view(fused.get(), sh.rows, sh.cols);
        const cuda::HalfActivationRows b = cuda::half_activation_rows_view(two_steps.get(), sh.rows, sh.cols);
        cuda::round_swiglu_rows_f16(dg.get(), du.get(), a, nullptr);
        cuda::round_activation_rows_f16(act.get(), b, nullptr);
        // The f16 values, then the row scales.
        const size_t used = size_t(reinterpret_cast<uint8_t*>(a.inv_scale) - fused.get()) + size_t(sh.rows) * 4;
        const std::vector<uint8_t> got = fused.download(what), want = two_steps.download(what);
        for (size_t i = 0; i < used; ++i)
            ASSERT_EQ(got[i], want[i]) << what << ": byte " << i << " of the rounded rows";
    }

    const int64_t T = 16, N = 256, K = 1024;
    const std::vector<uint8_t> q1 = random_weights(DType::Q1_0, N, K, rng);
    const cuda::GemvWeights w = cuda::upload_gemv_weights(WeightView{q1.data(), DType::Q1_0, N, K}, "test");
    std::vector<float> gate(size_t(T * K));
    for (float& v : gate) v = std::uniform_real_distribution<float>(-6.0f, 6.0f)(rng);
    const std::vector<float> up = random_activations(T, K, rng);
    GuardedDeviceArray<float> dg(gate), du(up), act(gate.size()), act_direct(gate.size()), y(size_t(T * N)),
        y_direct(size_t(T * N));
    cuda::DeviceBuffer scratch(cuda::prompt_scratch_bytes(w.view(), T));
    const cuda::PromptRows rows =
        cuda::prepare_prompt_rows_swiglu(dg.get(), du.get(), act.get(), w.view(), T, scratch.get(), nullptr);
    EXPECT_EQ(rows.path, cuda::half_prompt_gemm_enabled() ? cuda::PromptMatmulPath::f16_gemm
                                                          : cuda::PromptMatmulPath::int8_gemm);
    cuda::gemm_prompt_rows(rows, w.view(), y.get(), nullptr);
    cuda::swiglu(dg.get(), du.get(), T * K, act_direct.get(), nullptr);
    cuda::matmul_prompt(act_direct.get(), w.view(), T, y_direct.get(), scratch.get(), nullptr);
    const std::vector<float> got = y.download("through the swiglu rows"), want = y_direct.download("matmul_prompt");
    for (size_t i = 0; i < want.size(); ++i)
        ASSERT_EQ(std::bit_cast<uint32_t>(got[i]), std::bit_cast<uint32_t>(want[i])) << "output " << i;
}

TEST(PrefillGemmHalf, PlanPicksTilesByRoundCosts) {
    // Host only: the automatic choice's arithmetic on 132 SMs (clusters of s blocks taken as 132 / s; the
    // device's own counts are lower for 3 and more) with the measured round costs (gemm_half_cuda.cu kHalfTiles,
    // per 40 k-tiles) and a split's costs per round. ffn_gate/up at 512 tokens: 272 tiles, two whole rounds
    // (66 row blocks, 16896 rows) and the last 512 rows as 16 × 128 tiles (cost 2.30 against 2.60 for
    // 128 × 128 alone). ssm_qkv: one round (8448 rows), the rest as 64 × 128 tiles (1.375 against 1.56).
    // ffn_down (K = 17408) fills only 80 SMs with one round of the widest tile: its k split over 3 blocks, two
    // rounds of 44 clusters (2.67 against 3.4); ssm_gate's 96 tiles stay unsplit (a split gains under 10%).
    // A few weight rows or tokens: narrow tiles, split (beta/alpha: 0.16 against 0.30), but not a walk of
    // fewer than 4 k-tiles a block. The 3% margin of a cut is against the one-launch cost only.
    using cuda::GemmTile;
    using cuda::detail::half_gemm_plan;
    struct Expect {
        int64_t tokens, rows, k_tiles;
        GemmTile head_tile;
        int64_t head_rows;
        GemmTile tile;
        int splits;
    };
    const cuda::detail::HalfGemmClusters h200 = cuda::detail::half_gemm_clusters_for(132);
    EXPECT_EQ(h200.of[1], 132);
    EXPECT_EQ(h200.of[3], 44);
    for (const Expect& e : {Expect{512, 48, 40, GemmTile::automatic, 0, GemmTile::half_m16_n128, 4},
                            Expect{512, 6144, 40, GemmTile::automatic, 0, GemmTile::half_m128_n256, 1},
                            Expect{512, 5120, 136, GemmTile::automatic, 0, GemmTile::half_m128_n256, 3},
                            Expect{512, 1024, 40, GemmTile::automatic, 0, GemmTile::half_m64_n128, 2},
                            Expect{512, 17408, 40, GemmTile::half_m128_n256, 16896, GemmTile::half_m16_n128, 1},
                            Expect{512, 10240, 40, GemmTile::half_m128_n256, 8448, GemmTile::half_m64_n128, 1},
                            Expect{16, 10240, 40, GemmTile::automatic, 0, GemmTile::half_m16_n256, 3},
                            Expect{16, 5120, 136, GemmTile::automatic, 0, GemmTile::half_m16_n128, 3},
                            Expect{8, 1, 40, GemmTile::automatic, 0, GemmTile::half_m16_n128, 4},
                            Expect{8, 1, 7, GemmTile::automatic, 0, GemmTile::half_m16_n128, 1}}) {
        const cuda::detail::HalfGemmPlan plan = half_gemm_plan(e.tokens, e.rows, e.k_tiles, h200);
        const std::string what = std::to_string(e.tokens) + " tokens × " + std::to_string(e.rows) + " rows × " +
                                 std::to_string(e.k_tiles) + " k-tiles";
        EXPECT_EQ(plan.head_rows, e.head_rows) << what;
        EXPECT_EQ(plan.head_tile, e.head_tile) << what;
        EXPECT_EQ(plan.tile, e.tile) << what << ": " << cuda::gemm_tile_name(plan.tile);
        EXPECT_EQ(plan.splits, e.splits) << what;
        if (plan.head_rows > 0) EXPECT_EQ(plan.head_rows % 256, 0) << what;
    }
}

TEST(PrefillGemmHalf, RefusesImpossibleSplits) {
    DELTABIT_REQUIRE_HALF_GEMM();
    std::mt19937 rng(6);
    const auto tile = cuda::GemmTile::half_m16_n128;
    for (const int64_t K : {int64_t(512), int64_t(4096)}) {
        const std::vector<uint8_t> q1 = random_weights(DType::Q1_0, 256, K, rng);
        const cuda::GemvWeights w = cuda::upload_gemv_weights(WeightView{q1.data(), DType::Q1_0, 256, K}, "test");
        cuda::DeviceBuffer buffer(cuda::half_activation_rows_bytes(16, K));
        const cuda::HalfActivationRows rows = cuda::half_activation_rows_view(buffer.get(), 16, K);
        GuardedDeviceArray<float> y(size_t(16 * 256));
        if (K == 512) {  // 4 k-tiles: not 8 blocks' worth; 9 blocks a cluster never; no split on automatic
            EXPECT_THROW(cuda::gemm_q1_0_half(rows, w.view(), y.get(), nullptr, tile, 0, 8), Error);
            EXPECT_THROW(cuda::gemm_q1_0_half(rows, w.view(), y.get(), nullptr, tile, 0, 9), Error);
            EXPECT_THROW(cuda::gemm_q1_0_half(rows, w.view(), y.get(), nullptr, cuda::GemmTile::automatic, 0, 2),
                         Error);
            continue;
        }
        // 16 tokens × 256 rows × 32 k-tiles: two 16 × 128 tiles, which the automatic choice splits — unless the
        // rows have no room for the partial sums, where it runs unsplit and a named split is refused.
        EXPECT_GT(cuda::gemm_q1_0_half(rows, w.view(), y.get(), nullptr).splits, 1);
        cuda::HalfActivationRows no_room = rows;
        no_room.partials = nullptr;
        no_room.partial_floats = 0;
        EXPECT_THROW(cuda::gemm_q1_0_half(no_room, w.view(), y.get(), nullptr, tile, 0, 2), Error);
        EXPECT_EQ(cuda::gemm_q1_0_half(no_room, w.view(), y.get(), nullptr).splits, 1);
    }
}

TEST(PrefillGemmHalf, RefusesBadShapes) {
    DELTABIT_REQUIRE_HALF_GEMM();
    std::mt19937 rng(4);
    const std::vector<uint8_t> q1 = random_weights(DType::Q1_0, 256, 256, rng);
    const cuda::GemvWeights w = cuda::upload_gemv_weights(WeightView{q1.data(), DType::Q1_0, 256, 256}, "test");
    cuda::DeviceBuffer buffer(cuda::half_activation_rows_bytes(16, 384));
    GuardedDeviceArray<float> y(size_t(16 * 256));
    EXPECT_THROW(cuda::gemm_q1_0_half(cuda::half_activation_rows_view(buffer.get(), 16, 384), w.view(), y.get(), nullptr),
                 Error);
    EXPECT_THROW(cuda::gemm_q1_0_half(cuda::half_activation_rows_view(buffer.get(), 16, 256), w.view(), y.get(), nullptr,
                                      cuda::GemmTile::m64_n128),
                 Error);
}

#else
TEST(PrefillGemmHalf, SkippedWithoutCuda) { GTEST_SKIP() << "built without CUDA"; }
#endif

}  // namespace
}  // namespace deltabit::test
