// Op parity, row norms: CUDA rms_norm (plain and 1 + w, hidden and per-head shapes), l2_norm and
// gated_rms_norm against the naive CPU references, over hostile shapes, in place and out of place,
// and over more rows than one grid holds (the grid-stride path). Skips cleanly without a GPU.
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "ops/gated_rms_norm.h"
#include "ops/l2_norm.h"
#include "ops/op_parity.h"
#include "ops/rms_norm.h"

#ifdef DELTABIT_HAVE_CUDA
#include "cuda/op_parity_cuda.h"
#include "ops/cuda/cuda_launch.h"
#include "ops/elementwise/elementwise_cuda.h"
#endif

namespace deltabit::test {
namespace {

#ifdef DELTABIT_HAVE_CUDA

// Relative error bound of a CUDA row norm's output, in u (fp32 unit roundoff):
//   sum of squares: each of P threads adds ceil(dim/P) positive terms in order (≤ n_t·u), then
//   log2(P) butterfly levels (≤ u each): relative error ≤ (n_t + log2 P)·u;
//   /dim, +eps, sqrtf, 1/x: ≤ 4u, and the square root halves the sum's error;
//   x·scale, ·w (and 1 + w): ≤ 3u; the reference's own rounding to fp32: u.
// `extra` adds the op's own element-wise terms.
double norm_rel_tol(int64_t dim, double extra_u) {
    const int p = cuda::norm_threads_per_row(dim);
    const double n_t = std::ceil(double(dim) / p);
    return ((n_t + std::log2(double(p))) / 2.0 + 8.0 + extra_u) * kU;
}
// Elements whose reference underflows near zero get an absolute floor far below any real value.
constexpr double kTinyAbs = 1e-30;

// Rows with magnitudes over six decades, as residual streams have.
std::vector<float> norm_input(int64_t rows, int64_t dim, std::mt19937& rng) {
    std::vector<float> x = uniform(size_t(rows * dim), rng, -2.0f, 2.0f);
    for (int64_t r = 0; r < rows; ++r) {
        const float scale = r % 3 == 0 ? 1e-3f : (r % 3 == 1 ? 1.0f : 1e3f);
        for (int64_t i = 0; i < dim; ++i) x[size_t(r * dim + i)] *= scale;
    }
    return x;
}

std::string shape(const char* op, int64_t rows, int64_t dim, const char* variant) {
    return std::string(op) + " rows=" + std::to_string(rows) + " dim=" + std::to_string(dim) + " " + variant;
}

void check_rms_norm(int64_t rows, int64_t dim, cpu::NormWeight weight, bool in_place, uint32_t seed) {
    std::mt19937 rng(seed);
    const std::vector<float> x = norm_input(rows, dim, rng);
    const std::vector<float> w = weight == cpu::NormWeight::plain ? uniform(size_t(dim), rng, 0.5f, 1.5f)
                                                                  : uniform(size_t(dim), rng, -0.5f, 0.5f);
    std::vector<float> want(x.size());
    cpu::rms_norm(x.data(), w.data(), rows, dim, 1e-6f, weight, want.data());

    GuardedDeviceArray<float> dx(x), dw(w);
    GuardedDeviceArray<float> dy(in_place ? 0 : x.size());
    float* y = in_place ? dx.get() : dy.get();
    cuda::rms_norm(dx.get(), dw.get(), rows, dim, 1e-6f, weight, y, nullptr);
    const std::string what = shape("rms_norm", rows, dim,
                                   (std::string(weight == cpu::NormWeight::plain ? "w" : "1+w") +
                                    (in_place ? " in-place" : "")).c_str());
    const std::vector<float> got = (in_place ? dx : dy).download(what);
    expect_relative(got, to_double(want), norm_rel_tol(dim, 0), kTinyAbs, what);
}

TEST(OpParityNorms, RmsNormHostileShapes) {
    DELTABIT_REQUIRE_GPU();
    // Dims across the warp-per-row / block-per-row switch (1024) and the real ones (head_dim 128 and
    // 256 for per-head norms, hidden 5120).
    const std::vector<int64_t> dims = {1, 63, 64, 65, 127, 129, 256, 1000, 1024, 1025, 5120};
    const std::vector<int64_t> rows = {1, 63, 65, 129};
    uint32_t seed = 1;
    for (int64_t dim : dims) {
        for (int64_t r : rows) {
            check_rms_norm(r, dim, cpu::NormWeight::plain, false, seed++);
            check_rms_norm(r, dim, cpu::NormWeight::one_plus, false, seed++);
        }
        check_rms_norm(65, dim, cpu::NormWeight::plain, true, seed++);
    }
}

TEST(OpParityNorms, PerHeadNormRealDims) {
    DELTABIT_REQUIRE_GPU();
    // Qwen3.5-27B q_norm / k_norm: [T][n_head][256] as rows = T·n_head (24 q heads, 4 kv heads); Qwen3's 128.
    check_rms_norm(1000 * 24, 256, cpu::NormWeight::plain, true, 101);
    check_rms_norm(1000 * 4, 256, cpu::NormWeight::plain, false, 102);
    check_rms_norm(129 * 32, 128, cpu::NormWeight::plain, false, 103);
}

TEST(OpParityNorms, RowsBeyondOneGrid) {
    DELTABIT_REQUIRE_GPU();
    if (quick_mode()) GTEST_SKIP() << "long shapes skipped in quick mode";
    // More rows than one grid of kMaxGridBlocks covers, on both paths (8 rows per block on the warp
    // path, so ~1M rows there, as a 200K-token prefill's per-head norm over 5 heads; one row per block
    // on the block path): each block must take several rows.
    const int64_t warp_rows = 8 * cuda::kMaxGridBlocks * 2 + 5;
    check_rms_norm(warp_rows, 8, cpu::NormWeight::plain, false, 201);
    check_rms_norm(cuda::kMaxGridBlocks + 4465, 1025, cpu::NormWeight::plain, true, 202);
}

void check_l2_norm(int64_t rows, int64_t dim, bool in_place, uint32_t seed) {
    std::mt19937 rng(seed);
    const std::vector<float> x = norm_input(rows, dim, rng);
    std::vector<float> want(x.size());
    cpu::l2_norm(x.data(), rows, dim, 1e-6f, want.data());
    GuardedDeviceArray<float> dx(x), dy(in_place ? 0 : x.size());
    cuda::l2_norm(dx.get(), rows, dim, 1e-6f, in_place ? dx.get() : dy.get(), nullptr);
    const std::string what = shape("l2_norm", rows, dim, in_place ? "in-place" : "");
    const std::vector<float> got = (in_place ? dx : dy).download(what);
    expect_relative(got, to_double(want), norm_rel_tol(dim, 0), kTinyAbs, what);
}

TEST(OpParityNorms, L2NormHostileShapes) {
    DELTABIT_REQUIRE_GPU();
    uint32_t seed = 300;
    for (int64_t dim : {int64_t(1), int64_t(63), int64_t(64), int64_t(65), int64_t(127), int64_t(128),
                        int64_t(129), int64_t(1000), int64_t(1025)}) {
        for (int64_t r : {int64_t(1), int64_t(65), int64_t(1000)}) check_l2_norm(r, dim, false, seed++);
    }
    check_l2_norm(129 * 16, 128, true, seed++);  // q/k of the gated DeltaNet: H_k = 16, d_k = 128
}

void check_gated_rms_norm(int64_t rows, int64_t dim, bool in_place, uint32_t seed) {
    std::mt19937 rng(seed);
    const std::vector<float> x = norm_input(rows, dim, rng);
    const std::vector<float> z = uniform(x.size(), rng, -6.0f, 6.0f);
    const std::vector<float> w = uniform(size_t(dim), rng, 0.5f, 1.5f);
    std::vector<float> want(x.size());
    cpu::gated_rms_norm(x.data(), z.data(), w.data(), rows, dim, 1e-6f, want.data());
    GuardedDeviceArray<float> dx(x), dz(z), dw(w), dy(in_place ? 0 : x.size());
    cuda::gated_rms_norm(dx.get(), dz.get(), dw.get(), rows, dim, 1e-6f, in_place ? dx.get() : dy.get(), nullptr);
    const std::string what = shape("gated_rms_norm", rows, dim, in_place ? "in-place" : "");
    const std::vector<float> got = (in_place ? dx : dy).download(what);
    // silu(z) = z / (1 + expf(−z)): expf 4u (damped by e/(1+e) ≤ 1), the add and the divide u each,
    // then one more multiply: 7u on top of the norm.
    expect_relative(got, to_double(want), norm_rel_tol(dim, 7), kTinyAbs, what);
}

TEST(OpParityNorms, GatedRmsNormHostileShapes) {
    DELTABIT_REQUIRE_GPU();
    uint32_t seed = 400;
    for (int64_t dim : {int64_t(1), int64_t(63), int64_t(65), int64_t(128), int64_t(129), int64_t(1025)}) {
        for (int64_t r : {int64_t(1), int64_t(63), int64_t(129)}) check_gated_rms_norm(r, dim, false, seed++);
    }
    check_gated_rms_norm(1000 * 48, 128, true, seed++);  // DeltaNet output: T·H_v rows of d_v = 128
}

#else
TEST(OpParityNorms, SkippedWithoutCuda) { GTEST_SKIP() << "built without CUDA"; }
#endif

}  // namespace
}  // namespace deltabit::test
