// Muon on the device (train/cuda/muon_update.h) against the CPU reference (train/muon.h): one step on
// tall, wide, square and very thin matrices, from a non-zero momentum, with and without a clip factor,
// and on nearly low-rank updates. Skips without CUDA or a GPU.
//
// What must agree and how closely:
//   momentum buffer: the same fp32 operations in the same order on both sides (one rounding each, no
//     FMA): equal bit for bit.
//   parameters: θ' = θ − η(s·O + λθ) with O from Newton–Schulz, fp32 products on the device (cuBLAS,
//     CUBLAS_COMPUTE_32F) against double on the CPU. A CPU emulation of the iteration in fp32 with
//     sequential sums (the worst accumulation order) differed from double, in max|ΔO| / max|O| over
//     64×64, 96×40, 40×96, 7×130, 130×7, 256×256, 512×128, 128×512, 1×33:
//       Gaussian inputs ≤ 3.2e-6;
//       rank 4 plus noise of 1e-3 ≤ 1.1e-4: the noise's tiny singular values are what the iteration
//       lifts most (slope 3.4 per step, ~480 over five), so their fp32 error is amplified most.
//     The bounds are 10× those: 3e-5 and 1e-3 of η·s·max|O|, plus θ's own fp32 rounding.
#include "cuda_test_support.h"

#include "train/muon.h"

#include <gtest/gtest.h>

#include <cstring>

#ifdef DELTABIT_HAVE_CUDA
#include "train/cuda/muon_update.h"
#endif

namespace deltabit::train {
namespace {

#ifndef DELTABIT_HAVE_CUDA
TEST(CudaMuon, SkippedWithoutCuda) { GTEST_SKIP() << "built without CUDA"; }
#else

using Vec = std::vector<double>;

constexpr double kGaussianTolerance = 3e-5;
constexpr double kLowRankTolerance = 1e-3;

struct Case {
    const char* name;
    int64_t rows, cols;
    bool low_rank;
    float grad_scale;
};

std::vector<float> floats(const Vec& v) { return std::vector<float>(v.begin(), v.end()); }

// Rank 4 with decaying weights plus Gaussian noise of 1e-3: a gradient from few tokens looks like this.
Vec low_rank_values(int64_t rows, int64_t cols, uint64_t seed) {
    const Vec left = testing::normal_values(size_t(rows * 4), seed);
    const Vec right = testing::normal_values(size_t(cols * 4), seed + 1);
    const Vec noise = testing::normal_values(size_t(rows * cols), seed + 2, 1e-3);
    Vec u(size_t(rows * cols));
    for (int64_t i = 0; i < rows; ++i)
        for (int64_t j = 0; j < cols; ++j) {
            double sum = noise[size_t(i * cols + j)];
            for (int k = 0; k < 4; ++k) sum += left[size_t(i * 4 + k)] * right[size_t(j * 4 + k)] * std::pow(0.3, k);
            u[size_t(i * cols + j)] = sum;
        }
    return u;
}

void expect_step_matches(const Case& c, uint64_t seed) {
    SCOPED_TRACE(c.name);
    const int64_t n = c.rows * c.cols;
    const std::vector<float> w0 = floats(testing::normal_values(size_t(n), seed, 0.02));
    const std::vector<float> g = floats(c.low_rank ? low_rank_values(c.rows, c.cols, seed + 10)
                                                   : testing::normal_values(size_t(n), seed + 10));
    const std::vector<float> m0 = floats(testing::normal_values(size_t(n), seed + 20, 0.5));
    OptimizerSection o;
    o.kind = "muon";
    o.muon_momentum = 0.95;
    o.muon_weight_decay = 0.1;
    const double eta = 0.05;

    // The CPU: the trainer clips in place (g·factor in fp32) before the update reads the gradient.
    std::vector<float> cpu_w = w0, cpu_m = m0, cpu_g = g;
    for (float& x : cpu_g) x *= c.grad_scale;
    muon_update_matrix(cpu_w, cpu_g, cpu_m, c.rows, c.cols, o, eta);
    // The direction the CPU orthogonalised, for the bound's max|O|.
    Vec u(static_cast<size_t>(n));
    const float mu = float(o.muon_momentum);
    for (size_t i = 0; i < size_t(n); ++i) u[i] = double(cpu_g[i] + mu * cpu_m[i]);
    double max_o = 0.0;
    for (double x : newton_schulz(u, c.rows, c.cols, o.muon_ns_steps)) max_o = std::max(max_o, std::fabs(x));

    deltabit::cuda::DeviceBuffer dw(size_t(n) * 4), dg(size_t(n) * 4), dm(size_t(n) * 4);
    dw.upload(w0.data(), size_t(n) * 4);
    dg.upload(g.data(), size_t(n) * 4);
    dm.upload(m0.data(), size_t(n) * 4);
    cuda::MuonWorkspace workspace;
    cuda::muon_update(dw.get<float>(), dg.get<float>(), dm.get<float>(), c.rows, c.cols, c.grad_scale, o, eta,
                      workspace);
    std::vector<float> gpu_w(static_cast<size_t>(n)), gpu_m(static_cast<size_t>(n)), gpu_g(static_cast<size_t>(n));
    dw.download(gpu_w.data(), size_t(n) * 4);
    dm.download(gpu_m.data(), size_t(n) * 4);
    dg.download(gpu_g.data(), size_t(n) * 4);

    EXPECT_EQ(std::memcmp(gpu_m.data(), cpu_m.data(), size_t(n) * 4), 0) << "momentum buffers differ";
    EXPECT_EQ(std::memcmp(gpu_g.data(), g.data(), size_t(n) * 4), 0) << "the gradient was changed";
    const double tolerance = c.low_rank ? kLowRankTolerance : kGaussianTolerance;
    const double scale = muon_update_scale(c.rows, c.cols);
    double worst = 0.0, worst_ratio = 0.0;
    int64_t outside = 0;
    for (size_t i = 0; i < size_t(n); ++i) {
        const double diff = std::fabs(double(gpu_w[i]) - double(cpu_w[i]));
        const double bound = eta * scale * tolerance * max_o + 0x1p-23 * std::fabs(double(cpu_w[i]));
        worst = std::max(worst, diff);
        worst_ratio = std::max(worst_ratio, diff / bound);
        if (diff > bound && outside++ < 5)
            ADD_FAILURE() << "value " << i << ": gpu " << gpu_w[i] << " cpu " << cpu_w[i] << " (bound " << bound << ")";
    }
    std::printf("[ cuda muon ] %-26s max|dtheta| %.3g = %.3g of eta*s*max|O| (bound %.0e), worst/bound %.3g\n", c.name,
                worst, worst / (eta * scale * max_o), tolerance, worst_ratio);
    // The step did something: θ moved by about η·s·RMS(O) ≈ η·0.2.
    double moved = 0.0;
    for (size_t i = 0; i < size_t(n); ++i) moved = std::max(moved, std::fabs(double(gpu_w[i]) - double(w0[i])));
    EXPECT_GT(moved, 0.5 * eta * scale * max_o);
}

TEST(CudaMuon, OneStepMatchesCpuReference) {
    SKIP_WITHOUT_GPU();
    const std::vector<Case> cases = {
        {"square 64x64", 64, 64, false, 1.0f},   {"tall 96x40", 96, 40, false, 1.0f},
        {"wide 40x96", 40, 96, false, 1.0f},     {"thin 7x130", 7, 130, false, 1.0f},
        {"tall thin 130x7", 130, 7, false, 1.0f}, {"row 1x33", 1, 33, false, 1.0f},
        {"tall 96x40 clipped", 96, 40, false, 0.37f}, {"low rank 64x64", 64, 64, true, 1.0f},
        {"low rank tall 256x96", 256, 96, true, 1.0f},
    };
    uint64_t seed = 100;
    for (const Case& c : cases) expect_step_matches(c, seed += 100);
}

// A zero update (zero gradient and momentum) stays zero through X₀ = U / (‖U‖ + 1e-7): only the decay moves θ.
TEST(CudaMuon, ZeroUpdateLeavesOnlyTheDecay) {
    SKIP_WITHOUT_GPU();
    const int64_t rows = 8, cols = 12, n = rows * cols;
    const std::vector<float> w0 = floats(testing::normal_values(size_t(n), 7, 0.5)), zeros(size_t(n), 0.0f);
    OptimizerSection o;
    o.muon_weight_decay = 0.5;
    deltabit::cuda::DeviceBuffer dw(size_t(n) * 4), dg(size_t(n) * 4), dm(size_t(n) * 4);
    dw.upload(w0.data(), size_t(n) * 4);
    dg.upload(zeros.data(), size_t(n) * 4);
    dm.upload(zeros.data(), size_t(n) * 4);
    cuda::MuonWorkspace workspace;
    cuda::muon_update(dw.get<float>(), dg.get<float>(), dm.get<float>(), rows, cols, 1.0f, o, 0.1, workspace);
    std::vector<float> w(static_cast<size_t>(n)), cpu = w0, cpu_m = zeros;
    dw.download(w.data(), size_t(n) * 4);
    muon_update_matrix(cpu, zeros, cpu_m, rows, cols, o, 0.1);
    for (size_t i = 0; i < size_t(n); ++i) {
        EXPECT_EQ(w[i], cpu[i]) << i;
        EXPECT_EQ(w[i], float(double(w0[i]) - 0.1 * 0.5 * double(w0[i]))) << i;
    }
}

#endif

}  // namespace
}  // namespace deltabit::train
