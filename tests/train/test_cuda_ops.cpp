// Every CUDA training op (train/cuda/kernels.h, gemm.h) against its CPU reference op
// (train/reference_ops.h), forward and backward, on awkward shapes: odd sizes, GQA and Hv ≠ Hk
// groupings, dk ≠ dv, two sequences per batch (nothing may leak across them). The delta rule's tests
// are test_cuda_delta_rule.cpp. Skips without CUDA or a GPU.
//
// Tolerances, relative to the reference's largest magnitude (each test prints its measured error):
//   kFloat: fp32 kernels against double; one pass of fp32 sums over ≤ a few hundred terms and
//     expf/rsqrtf (≤ 2 ulp) stay below 1e-6 relative, so 1e-5 leaves a margin of 10 and a wrong term
//     (≥ 1e-3 of a value) still fails.
//   kBf16: products with both operands rounded to bf16 (unit roundoff 2⁻⁸ ≈ 3.9e-3); a dot product of K
//     terms errs by ≤ (2·2⁻⁸ + 2⁻¹⁶)·Σ|x·w|, in practice far less (the roundings are independent), which on these random operands stays within 1e-2 of the largest
//     output.
#include "cuda_test_support.h"
#include "attention_bf16_bounds.h"
#include "train/reference_ops.h"

#include <gtest/gtest.h>

#include <cstring>

#ifdef DELTABIT_HAVE_CUDA
#include "train/cuda/gemm.h"
#include "train/cuda/kernels.h"
#include "train/optimizer.h"
#include "train/qat.h"
#endif

namespace deltabit::train {
namespace {

#ifndef DELTABIT_HAVE_CUDA
TEST(CudaTrainOps, SkippedWithoutCuda) { GTEST_SKIP() << "built without CUDA"; }
#else

using testing::DeviceArray;
using testing::DeviceInts;
using testing::normal_values;
using testing::worst_over_bound;
using Vec = std::vector<double>;

constexpr double kFloat = 1e-5;
constexpr double kBf16 = 1e-2;

Vec zeros(size_t n) { return Vec(n, 0.0); }
// The starting value of an output an op overwrites (kernels.h's "(=)"): a kernel that still added into
// it would be off by this much.
constexpr double kStale = 3.0;
DeviceArray stale(size_t n) { return DeviceArray(Vec(n, kStale)); }

// The norms' backward kernel for rows of dim: fused (dx and the weight gradient's partial rows in one
// pass) up to 1,024 values a row, else the row kernel then the weight-gradient pass (norm_kernels.cu).
// Asserted from the kernel marks, so a shape that silently took the other form fails.
void expect_norm_backward_form(const testing::MarkedKernels& marks, const std::string& fused, int64_t dim,
                               const std::string& tag) {
    const bool want_fused = dim <= 1024;
    EXPECT_EQ(marks.ran("norm: " + fused), want_fused) << tag << ": fused backward";
    EXPECT_EQ(marks.ran("norm: norm_weight_partials_kernel"), !want_fused) << tag << ": two-pass backward";
}

// Shapes: every width the fused kernels are built for (columns a lane 4: dim 3, 100, 128; 8: 200;
// 16: 300; 24: 768; 32: 1000) and the two-pass form (1100); ragged row counts whose last slab of 64
// is short (37, 65: one row past a slab, 129, 700, 1500). dw starts at nonzero values: the op adds.
TEST(CudaTrainOps, RmsNormForwardBackward) {
    SKIP_WITHOUT_GPU();
    for (bool one_plus : {false, true})
        for (auto [rows, dim] : {std::pair{1, 3}, {37, 100}, {5, 1000}, {1500, 128}, {700, 300}, {129, 200},
                                 {65, 768}, {4, 1100}}) {
            const Vec x = normal_values(size_t(rows * dim), 1), w = normal_values(size_t(dim), 2, 0.3),
                      dy = normal_values(x.size(), 3), dw_start = normal_values(size_t(dim), 47);
            const float eps = 1e-6f;
            Vec y = zeros(x.size()), dx = zeros(x.size()), dw = dw_start;
            ref::rms_norm_forward(x.data(), w.data(), rows, dim, eps, one_plus, y.data());
            ref::rms_norm_backward(x.data(), w.data(), dy.data(), rows, dim, eps, one_plus, dx.data(), dw.data());
            DeviceArray gx(x), gw(w), gdy(dy), gy = DeviceArray::zeros(y.size()), gdx = DeviceArray::zeros(x.size()),
                        gdw(dw_start);
            const std::string tag = fmt::format("rms_norm{} {}x{}", one_plus ? "_1p" : "", rows, dim);
            cuda::rms_norm_forward(gx.get(), gw.get(), rows, dim, eps, one_plus, gy.get());
            {
                testing::MarkedKernels marks;
                cuda::rms_norm_backward(gx.get(), gw.get(), gdy.get(), rows, dim, eps, one_plus, gdx.get(), gdw.get());
                expect_norm_backward_form(marks, "rms_norm_backward_fused_kernel", dim, tag);
            }
            DELTABIT_EXPECT_CLOSE(tag + " y", gy.read(), y, kFloat);
            DELTABIT_EXPECT_CLOSE(tag + " dx", gdx.read(), dx, kFloat);
            DELTABIT_EXPECT_CLOSE(tag + " dw", gdw.read(), dw, kFloat);
            // dw's sum over rows (slabs of rows, then the slabs in order) has no atomics: a second run
            // repeats it to the bit.
            DeviceArray gdx2 = DeviceArray::zeros(x.size()), gdw2(dw_start);
            cuda::rms_norm_backward(gx.get(), gw.get(), gdy.get(), rows, dim, eps, one_plus, gdx2.get(), gdw2.get());
            EXPECT_TRUE(gdw2.read() == gdw.read()) << tag << ": two runs' dw differ";
            EXPECT_TRUE(gdx2.read() == gdx.read()) << tag << ": two runs' dx differ";
        }
}

// More rows than the fused backward's 1,024 slabs of 64 hold (65,536): slabs of ⌈rows / 1,024⌉ rows, the
// last one short (70,001 = 1,014 × 69 + 35). Narrow rows keep it quick (on the GPU; the CPU emulation
// takes minutes). dw sums 70,001 terms, but as a tree whose longest chain is 32 additions (a warp's 9
// rows, 8 warps, a second-stage lane's 32 slabs, 32 lanes), so kFloat's reasoning holds.
TEST(CudaTrainOps, RmsNormBackwardManySlabs) {
    SKIP_WITHOUT_GPU();
    const int64_t rows = 70001, dim = 3;
    const Vec x = normal_values(size_t(rows * dim), 48), w = normal_values(size_t(dim), 49, 0.3),
              dy = normal_values(x.size(), 50), dw_start = normal_values(size_t(dim), 51);
    const float eps = 1e-6f;
    Vec dx = zeros(x.size()), dw = dw_start;
    ref::rms_norm_backward(x.data(), w.data(), dy.data(), rows, dim, eps, true, dx.data(), dw.data());
    DeviceArray gx(x), gw(w), gdy(dy), gdx = stale(x.size()), gdw(dw_start), gdw2(dw_start);
    cuda::rms_norm_backward(gx.get(), gw.get(), gdy.get(), rows, dim, eps, true, gdx.get(), gdw.get(), 0, false);
    DELTABIT_EXPECT_CLOSE("rms_norm 70001x3 dx", gdx.read(), dx, kFloat);
    DELTABIT_EXPECT_CLOSE("rms_norm 70001x3 dw", gdw.read(), dw, kFloat);
    cuda::rms_norm_backward(gx.get(), gw.get(), gdy.get(), rows, dim, eps, true, nullptr, gdw2.get());
    EXPECT_TRUE(gdw2.read() == gdw.read()) << "two runs' dw differ (the second without dx)";
}

TEST(CudaTrainOps, GatedRmsNormAndL2Norm) {
    SKIP_WITHOUT_GPU();
    for (auto [rows, dim] : {std::pair{1, 3}, {33, 128}, {7, 300}, {1500, 128}, {65, 768}, {4, 1100}}) {
        const Vec x = normal_values(size_t(rows * dim), 4), z = normal_values(x.size(), 5),
                  w = normal_values(size_t(dim), 6, 0.5), dy = normal_values(x.size(), 7),
                  dw_start = normal_values(size_t(dim), 52);
        const float eps = 1e-6f;
        Vec y = zeros(x.size()), dx = zeros(x.size()), dz = zeros(x.size()), dw = dw_start;
        ref::gated_rms_norm_forward(x.data(), z.data(), w.data(), rows, dim, eps, y.data());
        ref::gated_rms_norm_backward(x.data(), z.data(), w.data(), dy.data(), rows, dim, eps, dx.data(), dz.data(),
                                     dw.data());
        DeviceArray gx(x), gz(z), gw(w), gdy(dy), gy = DeviceArray::zeros(x.size()), gdx = stale(x.size()),
                    gdz = stale(x.size()), gdw(dw_start);
        const std::string tag = fmt::format("gated_rms_norm {}x{}", rows, dim);
        cuda::gated_rms_norm_forward(gx.get(), gz.get(), gw.get(), rows, dim, eps, gy.get());
        {
            testing::MarkedKernels marks;
            cuda::gated_rms_norm_backward(gx.get(), gz.get(), gw.get(), gdy.get(), rows, dim, eps, gdx.get(),
                                          gdz.get(), gdw.get());
            expect_norm_backward_form(marks, "gated_rms_norm_backward_fused_kernel", dim, tag);
        }
        DELTABIT_EXPECT_CLOSE(tag + " y", gy.read(), y, kFloat);
        DELTABIT_EXPECT_CLOSE(tag + " dx", gdx.read(), dx, kFloat);
        DELTABIT_EXPECT_CLOSE(tag + " dz", gdz.read(), dz, kFloat);
        DELTABIT_EXPECT_CLOSE(tag + " dw", gdw.read(), dw, kFloat);
        DeviceArray gdx2 = stale(x.size()), gdz2 = stale(x.size()), gdw2(dw_start);
        cuda::gated_rms_norm_backward(gx.get(), gz.get(), gw.get(), gdy.get(), rows, dim, eps, gdx2.get(), gdz2.get(),
                                      gdw2.get());
        EXPECT_TRUE(gdw2.read() == gdw.read()) << tag << ": two runs' dw differ";
        EXPECT_TRUE(gdx2.read() == gdx.read() && gdz2.read() == gdz.read()) << tag << ": two runs' dx or dz differ";

        const double scale = 0.125;
        Vec l2 = zeros(x.size()), dl2 = zeros(x.size());
        ref::l2_norm_forward(x.data(), rows, dim, 1e-6, scale, l2.data());
        ref::l2_norm_backward(x.data(), dy.data(), rows, dim, 1e-6, scale, dl2.data());
        DeviceArray gl2 = DeviceArray::zeros(x.size()), gdl2 = stale(x.size());
        cuda::l2_norm_forward(gx.get(), dim, rows, 1, dim, 1e-6f, float(scale), gl2.get());
        cuda::l2_norm_backward(gx.get(), dim, gdy.get(), rows, 1, dim, 1e-6f, float(scale), gdl2.get());
        DELTABIT_EXPECT_CLOSE(fmt::format("l2_norm {}x{} y", rows, dim), gl2.read(), l2, kFloat);
        DELTABIT_EXPECT_CLOSE(fmt::format("l2_norm {}x{} dx", rows, dim), gdl2.read(), dl2, kFloat);
    }
}

// The l2 norms read their rows in place from a wider tensor (the DeltaNet's q and k inside the conv's
// q|k output): 3 heads of 40 at column 40 of rows of 250; dx lands at the same places and leaves the
// other columns alone.
TEST(CudaTrainOps, L2NormStrided) {
    SKIP_WITHOUT_GPU();
    const int64_t N = 11, heads = 3, dim = 40, stride = 250, at = 40;
    const Vec wide = normal_values(size_t(N * stride), 41), dy = normal_values(size_t(N * heads * dim), 42);
    Vec x(size_t(N * heads * dim));
    for (int64_t n = 0; n < N; ++n)
        for (int64_t i = 0; i < heads * dim; ++i) x[size_t(n * heads * dim + i)] = wide[size_t(n * stride + at + i)];
    const double scale = 0.3;
    Vec y = zeros(x.size()), dx = zeros(x.size());
    ref::l2_norm_forward(x.data(), N * heads, dim, 1e-6, scale, y.data());
    ref::l2_norm_backward(x.data(), dy.data(), N * heads, dim, 1e-6, scale, dx.data());
    Vec dx_wide(wide.size(), kStale);
    for (int64_t n = 0; n < N; ++n)
        for (int64_t i = 0; i < heads * dim; ++i)
            dx_wide[size_t(n * stride + at + i)] = dx[size_t(n * heads * dim + i)];
    DeviceArray gwide(wide), gdy(dy), gy = DeviceArray::zeros(y.size()), gdx = stale(wide.size());
    cuda::l2_norm_forward(gwide.get() + at, stride, N, heads, dim, 1e-6f, float(scale), gy.get());
    cuda::l2_norm_backward(gwide.get() + at, stride, gdy.get(), N, heads, dim, 1e-6f, float(scale), gdx.get() + at);
    DELTABIT_EXPECT_CLOSE("l2_norm strided y", gy.read(), y, kFloat);
    DELTABIT_EXPECT_CLOSE("l2_norm strided dx", gdx.read(), dx_wide, kFloat);
}

TEST(CudaTrainOps, SwigluAndSigmoidGate) {
    SKIP_WITHOUT_GPU();
    const int64_t n = 1000003;  // past one grid-stride pass of the launch
    const Vec gate = normal_values(size_t(n), 8, 3.0), up = normal_values(size_t(n), 9), dout = normal_values(size_t(n), 10);
    Vec out = zeros(size_t(n)), dgate = zeros(size_t(n)), dup = zeros(size_t(n));
    ref::swiglu_forward(gate.data(), up.data(), n, out.data());
    ref::swiglu_backward(gate.data(), up.data(), dout.data(), n, dgate.data(), dup.data());
    DeviceArray gg(gate), gu(up), gd(dout), go = DeviceArray::zeros(size_t(n)), gdg = stale(size_t(n)),
                gdu = stale(size_t(n));
    cuda::swiglu_forward(gg.get(), gu.get(), n, go.get());
    cuda::swiglu_backward(gg.get(), gu.get(), gd.get(), n, gdg.get(), gdu.get());
    DELTABIT_EXPECT_CLOSE("swiglu out", go.read(), out, kFloat);
    DELTABIT_EXPECT_CLOSE("swiglu dgate", gdg.read(), dgate, kFloat);
    DELTABIT_EXPECT_CLOSE("swiglu dup", gdu.read(), dup, kFloat);

    // The attention output gate: gated = att·σ(gate) (reference_model.cpp's loop).
    Vec gated = zeros(size_t(n)), datt = zeros(size_t(n)), dg = zeros(size_t(n));
    for (int64_t i = 0; i < n; ++i) {
        const double s = ref::sigmoid(gate[size_t(i)]);
        gated[size_t(i)] = up[size_t(i)] * s;
        datt[size_t(i)] = dout[size_t(i)] * s;
        dg[size_t(i)] = dout[size_t(i)] * up[size_t(i)] * s * (1.0 - s);
    }
    DeviceArray ggated = DeviceArray::zeros(size_t(n)), gdatt = stale(size_t(n)), gdgate = stale(size_t(n));
    cuda::sigmoid_gate_forward(gu.get(), gg.get(), 1, n, 1, ggated.get());
    cuda::sigmoid_gate_backward(gu.get(), gg.get(), 1, gd.get(), n, 1, gdatt.get(), gdgate.get());
    DELTABIT_EXPECT_CLOSE("sigmoid_gate out", ggated.read(), gated, kFloat);
    DELTABIT_EXPECT_CLOSE("sigmoid_gate datt", gdatt.read(), datt, kFloat);
    DELTABIT_EXPECT_CLOSE("sigmoid_gate dgate", gdgate.read(), dg, kFloat);

    // The residual: out = x + delta, into a third buffer and in place.
    Vec sum(static_cast<size_t>(n));
    for (size_t i = 0; i < size_t(n); ++i) sum[i] = double(float(gate[i])) + double(float(up[i]));
    DeviceArray gsum = stale(size_t(n)), ginplace(gate);
    cuda::residual_add(gg.get(), gu.get(), n, gsum.get());
    cuda::residual_add(ginplace.get(), gu.get(), n, ginplace.get());
    DELTABIT_EXPECT_CLOSE("residual_add out", gsum.read(), sum, kFloat);
    DELTABIT_EXPECT_CLOSE("residual_add in place", ginplace.read(), sum, kFloat);
}

// Strided inputs read in place (the attention's q and gate inside q|gate, per head q then gate): the q
// norm at row stride 2·dim with dq overwritten at the same places, the gate at column dim of the same
// rows with its gradient beside dq; the columns neither writes keep their value.
TEST(CudaTrainOps, StridedQAndGate) {
    SKIP_WITHOUT_GPU();
    const int64_t rows = 300, dim = 40, stride = 2 * dim;
    const Vec qg = normal_values(size_t(rows * stride), 43), w = normal_values(size_t(dim), 44, 0.3),
              dy = normal_values(size_t(rows * dim), 45), att = normal_values(size_t(rows * dim), 46);
    Vec q(size_t(rows * dim)), gate(q.size());
    for (int64_t r = 0; r < rows; ++r)
        for (int64_t i = 0; i < dim; ++i) {
            q[size_t(r * dim + i)] = qg[size_t(r * stride + i)];
            gate[size_t(r * dim + i)] = qg[size_t(r * stride + dim + i)];
        }
    const float eps = 1e-6f;
    Vec y = zeros(q.size()), dq = zeros(q.size()), dw = zeros(w.size()), gated(q.size()), datt(q.size()),
        dgate(q.size());
    ref::rms_norm_forward(q.data(), w.data(), rows, dim, eps, true, y.data());
    ref::rms_norm_backward(q.data(), w.data(), dy.data(), rows, dim, eps, true, dq.data(), dw.data());
    for (size_t i = 0; i < q.size(); ++i) {
        const double s = ref::sigmoid(gate[i]);
        gated[i] = att[i] * s;
        datt[i] = dy[i] * s;
        dgate[i] = dy[i] * att[i] * s * (1.0 - s);
    }
    Vec dqg(qg.size());
    for (int64_t r = 0; r < rows; ++r)
        for (int64_t i = 0; i < dim; ++i) {
            dqg[size_t(r * stride + i)] = dq[size_t(r * dim + i)];
            dqg[size_t(r * stride + dim + i)] = dgate[size_t(r * dim + i)];
        }
    DeviceArray gqg(qg), gw(w), gdy(dy), gatt(att), gy = DeviceArray::zeros(y.size()), gdw = DeviceArray::zeros(w.size()),
        ggated = DeviceArray::zeros(q.size()), gdatt = stale(q.size()), gdqg = stale(qg.size());
    cuda::rms_norm_forward(gqg.get(), gw.get(), rows, dim, eps, true, gy.get(), stride);
    cuda::rms_norm_backward(gqg.get(), gw.get(), gdy.get(), rows, dim, eps, true, gdqg.get(), gdw.get(), stride, false);
    cuda::sigmoid_gate_forward(gatt.get(), gqg.get() + dim, stride, rows, dim, ggated.get());
    cuda::sigmoid_gate_backward(gatt.get(), gqg.get() + dim, stride, gdy.get(), rows, dim, gdatt.get(),
                                gdqg.get() + dim);
    DELTABIT_EXPECT_CLOSE("strided rms_norm y", gy.read(), y, kFloat);
    DELTABIT_EXPECT_CLOSE("strided rms_norm dw", gdw.read(), dw, kFloat);
    DELTABIT_EXPECT_CLOSE("strided sigmoid_gate out", ggated.read(), gated, kFloat);
    DELTABIT_EXPECT_CLOSE("strided sigmoid_gate datt", gdatt.read(), datt, kFloat);
    DELTABIT_EXPECT_CLOSE("strided dq | dgate", gdqg.read(), dqg, kFloat);
    // A half-stride gap: rows of dim at stride dim + 8, dx overwritten there, the gaps left alone.
    const int64_t gap_stride = dim + 8;
    Vec wide(size_t(rows * gap_stride), kStale), dq_wide(wide.size(), kStale);
    for (int64_t r = 0; r < rows; ++r)
        for (int64_t i = 0; i < dim; ++i) {
            wide[size_t(r * gap_stride + i)] = q[size_t(r * dim + i)];
            dq_wide[size_t(r * gap_stride + i)] = dq[size_t(r * dim + i)];
        }
    DeviceArray gwide(wide), gdx_wide = stale(wide.size()), gdw2 = DeviceArray::zeros(w.size());
    cuda::rms_norm_backward(gwide.get(), gw.get(), gdy.get(), rows, dim, eps, true, gdx_wide.get(), gdw2.get(),
                            gap_stride, false);
    DELTABIT_EXPECT_CLOSE("gapped rms_norm dx", gdx_wide.read(), dq_wide, kFloat);
    DELTABIT_EXPECT_CLOSE("gapped rms_norm dw", gdw2.read(), dw, kFloat);
}

TEST(CudaTrainOps, RopeForwardBackwardPerSequence) {
    SKIP_WITHOUT_GPU();
    const int64_t B = 2, T = 13, heads = 3, head_dim = 8;
    for (int64_t rope_dim : {int64_t(4), int64_t(8)}) {
        const Vec x = normal_values(size_t(B * T * heads * head_dim), 11);
        Vec fwd = x, bwd = x;
        for (int64_t b = 0; b < B; ++b) {  // each sequence starts at position 0
            ref::rope_forward(fwd.data() + b * T * heads * head_dim, T, heads, head_dim, rope_dim, 1.0e6f);
            ref::rope_backward(bwd.data() + b * T * heads * head_dim, T, heads, head_dim, rope_dim, 1.0e6f);
        }
        DeviceArray gf(x), gb(x);
        cuda::rope_apply(gf.get(), B, T, heads, head_dim, rope_dim, 1.0e6f, 1.0f);
        cuda::rope_apply(gb.get(), B, T, heads, head_dim, rope_dim, 1.0e6f, -1.0f);
        DELTABIT_EXPECT_CLOSE(fmt::format("rope {} forward", rope_dim), gf.read(), fwd, kFloat);
        DELTABIT_EXPECT_CLOSE(fmt::format("rope {} backward", rope_dim), gb.read(), bwd, kFloat);
    }
}

// The output's channels split in two buffers at `split` (the DeltaNet's q|k and v), dy read the same
// way; T = 300 over 3 sequences gives the weight gradient 4 slabs of rows.
TEST(CudaTrainOps, CausalConvPerSequence) {
    SKIP_WITHOUT_GPU();
    const int64_t B = 3, C = 37, K = 4, split = 10;
    for (int64_t T : {int64_t(9), int64_t(300)}) {
        const Vec x = normal_values(size_t(B * T * C), 12), w = normal_values(size_t(C * K), 13, 0.5),
                  dy = normal_values(x.size(), 14);
        Vec y = zeros(x.size()), dx = zeros(x.size()), dw = zeros(w.size());
        for (int64_t b = 0; b < B; ++b) {
            const int64_t o = b * T * C;
            ref::conv_silu_forward(x.data() + o, w.data(), T, C, K, y.data() + o);
            ref::conv_silu_backward(x.data() + o, w.data(), dy.data() + o, T, C, K, dx.data() + o, dw.data());
        }
        // [N][C] ↔ [N][split] and [N][C − split].
        const int64_t N = B * T;
        auto lo = [&](const Vec& v) {
            Vec out(size_t(N * split));
            for (int64_t n = 0; n < N; ++n)
                for (int64_t c = 0; c < split; ++c) out[size_t(n * split + c)] = v[size_t(n * C + c)];
            return out;
        };
        auto hi = [&](const Vec& v) {
            Vec out(size_t(N * (C - split)));
            for (int64_t n = 0; n < N; ++n)
                for (int64_t c = split; c < C; ++c) out[size_t(n * (C - split) + c - split)] = v[size_t(n * C + c)];
            return out;
        };
        DeviceArray gx(x), gw(w), gdy_lo(lo(dy)), gdy_hi(hi(dy)), gy_lo = DeviceArray::zeros(size_t(N * split)),
            gy_hi = DeviceArray::zeros(size_t(N * (C - split))), gdx = stale(x.size()),
            gdw = DeviceArray::zeros(w.size());
        cuda::conv_silu_forward(gx.get(), gw.get(), B, T, C, K, split, gy_lo.get(), gy_hi.get());
        cuda::conv_silu_backward(gx.get(), gw.get(), gdy_lo.get(), gdy_hi.get(), B, T, C, K, split, gdx.get(),
                                 gdw.get());
        const std::string tag = fmt::format("conv_silu T{}", T);
        DELTABIT_EXPECT_CLOSE(tag + " y channels < split", gy_lo.read(), lo(y), kFloat);
        DELTABIT_EXPECT_CLOSE(tag + " y channels ≥ split", gy_hi.read(), hi(y), kFloat);
        DELTABIT_EXPECT_CLOSE(tag + " dx", gdx.read(), dx, kFloat);
        DELTABIT_EXPECT_CLOSE(tag + " dw", gdw.read(), dw, kFloat);
        DeviceArray gdw2 = DeviceArray::zeros(w.size());
        cuda::conv_silu_backward(gx.get(), gw.get(), gdy_lo.get(), gdy_hi.get(), B, T, C, K, split, nullptr,
                                 gdw2.get());
        EXPECT_TRUE(gdw2.read() == gdw.read()) << tag << ": two runs' dw differ";
    }
}

TEST(CudaTrainOps, DeltaNetGates) {
    SKIP_WITHOUT_GPU();
    const int64_t Hv = 6;
    for (int64_t N : {int64_t(301), int64_t(2500)}) {  // 2,500 rows: 3 slabs of the per-head sums
        Vec b = normal_values(size_t(N * Hv), 15, 2.0), a = normal_values(size_t(N * Hv), 16, 8.0);
        a[0] = 25.0;  // past softplus's threshold
        const Vec a_log = normal_values(size_t(Hv), 17, 0.5), dt_bias = normal_values(size_t(Hv), 18),
                  dbeta = normal_values(b.size(), 19), dg = normal_values(b.size(), 20);
        Vec beta = zeros(b.size()), g = zeros(b.size()), db = zeros(b.size()), da = zeros(b.size()),
            da_log = zeros(size_t(Hv)), ddt = zeros(size_t(Hv));
        ref::gdn_gates_forward(b.data(), a.data(), a_log.data(), dt_bias.data(), N, Hv, beta.data(), g.data());
        ref::gdn_gates_backward(b.data(), a.data(), a_log.data(), dt_bias.data(), dbeta.data(), dg.data(), N, Hv,
                                db.data(), da.data(), da_log.data(), ddt.data());
        DeviceArray gb(b), ga(a), gal(a_log), gdt(dt_bias), gdbeta(dbeta), gdg(dg),
            gbeta = DeviceArray::zeros(b.size()), gg = DeviceArray::zeros(b.size()), gdb = stale(b.size()),
            gda = stale(b.size()),
            gdal = DeviceArray::zeros(size_t(Hv)), gddt = DeviceArray::zeros(size_t(Hv));
        cuda::gdn_gates_forward(gb.get(), ga.get(), gal.get(), gdt.get(), N, Hv, gbeta.get(), gg.get());
        cuda::gdn_gates_backward(gb.get(), ga.get(), gal.get(), gdt.get(), gdbeta.get(), gdg.get(), N, Hv, gdb.get(),
                                 gda.get(), gdal.get(), gddt.get());
        const std::string tag = fmt::format("gates N{}", N);
        DELTABIT_EXPECT_CLOSE(tag + " beta", gbeta.read(), beta, kFloat);
        DELTABIT_EXPECT_CLOSE(tag + " g", gg.read(), g, kFloat);
        DELTABIT_EXPECT_CLOSE(tag + " db", gdb.read(), db, kFloat);
        DELTABIT_EXPECT_CLOSE(tag + " da", gda.read(), da, kFloat);
        DELTABIT_EXPECT_CLOSE(tag + " dA_log", gdal.read(), da_log, kFloat);
        DELTABIT_EXPECT_CLOSE(tag + " ddt_bias", gddt.read(), ddt, kFloat);
    }
}

// The gradient sums each token's rows in runs of at most 64 (embedding_kernels.cu): the short case has
// tokens with one run (added straight into dembed); the long one a token in 40% of 3,000 rows (19 runs
// through partial rows), one in exactly 64 and one in 65 (the edges of a run), and tokens never seen
// (rows left as they were). dembed starts nonzero: the gradient adds. A second run repeats the bits.
TEST(CudaTrainOps, EmbeddingForwardBackward) {
    SKIP_WITHOUT_GPU();
    const int64_t D = 33;
    std::vector<int32_t> skewed(3000);
    for (size_t n = 0; n < skewed.size(); ++n) skewed[n] = n % 5 < 2 ? 0 : int32_t(3 + (n * 7919) % 40);
    for (size_t n = 0; n < 64; ++n) skewed[5 * n + 2] = 1;   // 64 rows of token 1
    for (size_t n = 0; n < 65; ++n) skewed[5 * n + 1003] = 2;  // 65 of token 2
    const std::vector<std::pair<int64_t, std::vector<int32_t>>> cases = {{7, {3, 3, 0, 6, 3, 1, 6}}, {50, skewed}};
    for (const auto& [V, tokens] : cases) {
        const int64_t N = int64_t(tokens.size());
        Vec embed = normal_values(size_t(V * D), 21);
        for (double& e : embed) e = double(float(e));  // the lookup copies floats exactly
        Vec dx = normal_values(size_t(N * D), 22), base = normal_values(embed.size(), 23);
        for (Vec* v : {&dx, &base})
            for (double& e : *v) e = double(float(e));
        Vec x = zeros(size_t(N * D)), dembed = base;
        for (int64_t n = 0; n < N; ++n)
            for (int64_t i = 0; i < D; ++i) {
                x[size_t(n * D + i)] = embed[size_t(tokens[size_t(n)] * D + i)];
                dembed[size_t(tokens[size_t(n)] * D + i)] += dx[size_t(n * D + i)];
            }
        DeviceArray ge(embed), gdx(dx), gx = DeviceArray::zeros(x.size()), gde(base), gde2(base);
        DeviceInts gt(tokens);
        cuda::embedding_forward(ge.get(), gt.get(), N, D, gx.get());
        cuda::embedding_backward(gdx.get(), tokens, V, D, gde.get());
        cuda::embedding_backward(gdx.get(), tokens, V, D, gde2.get());
        const std::string tag = fmt::format("embedding V{} N{}", V, N);
        DELTABIT_EXPECT_CLOSE(tag + " x", gx.read(), x, 0.0);
        DELTABIT_EXPECT_CLOSE(tag + " dembed", gde.read(), dembed, kFloat);
        EXPECT_TRUE(gde2.read() == gde.read()) << tag << ": two runs' dembed differ";
    }
    // A token outside the vocabulary is named, and nothing is written.
    const std::vector<int32_t> bad{1, 7, 2};
    DeviceArray gdx = DeviceArray::zeros(size_t(3 * D)), gde = DeviceArray::zeros(size_t(7 * D));
    EXPECT_THROW(cuda::embedding_backward(gdx.get(), bad, 7, D, gde.get()), Error);
}

// Attention in both product modes; gemm.h's switch picks the kernels (attention_kernels.cu):
//   fp32: the CUDA-core kernels, fp32 against double: kFloat.
//   bf16: at head_dim 64 and 128 the flash tensor-core kernels, every element within the bound their
//     arithmetic implies (attention_bf16_bounds.h; the worst error / bound is printed); other head dims
//     keep the CUDA-core kernels and kFloat. Weights below fp32's normal range may flush to zero (an
//     absolute 1e-37). Each bf16 case runs twice and the bits must match: no atomics, as the trainer's
//     resume test requires.
// In every run dq, dk and dv start stale (kStale): the kernels overwrite them (kernels.h's "(=)"), so one
// that still added into them, or skipped an element, is off by 3.
struct AttentionOutputs {
    Vec o, lse, dq, dk, dv;
};

AttentionOutputs run_attention(const Vec& q, const Vec& k, const Vec& v, const Vec& dout, int64_t B, int64_t T,
                               int64_t Hq, int64_t Hkv, int64_t dh, double scale) {
    DeviceArray gq(q), gk(k), gv(v), gdout(dout), go = DeviceArray::zeros(q.size()),
        glse = DeviceArray::zeros(size_t(B * T * Hq)), gwork = DeviceArray::zeros(size_t(B * T * Hq)),
        gdq = stale(q.size()), gdk = stale(k.size()), gdv = stale(v.size());
    cuda::attention_forward(gq.get(), gk.get(), gv.get(), B, T, Hq, Hkv, dh, float(scale), go.get(), glse.get());
    cuda::attention_backward(gq.get(), gk.get(), gv.get(), go.get(), glse.get(), gdout.get(), B, T, Hq, Hkv, dh,
                             float(scale), gdq.get(), gdk.get(), gdv.get(), gwork.get());
    return {go.read(), glse.read(), gdq.read(), gdk.read(), gdv.read()};
}

void check_attention(int64_t B, int64_t T, int64_t Hq, int64_t Hkv, int64_t dh, double qk_std = 1.0) {
    const double scale = 1.0 / std::sqrt(double(dh));
    Vec q = normal_values(size_t(B * T * Hq * dh), 23, qk_std), k = normal_values(size_t(B * T * Hkv * dh), 24, qk_std),
        v = normal_values(size_t(B * T * Hkv * dh), 25), dout = normal_values(q.size(), 26);
    for (Vec* x : {&q, &k, &v, &dout})
        for (double& e : *x) e = double(float(e));  // the device sees floats: the reference takes the same values
    const std::string tag = fmt::format("attention B{} T{} {}/{}x{}", B, T, Hq, Hkv, dh);
    {
        const cuda::ScopedGemmMath math(cuda::GemmMath::fp32);
        Vec o = zeros(q.size()), dq = zeros(q.size()), dk = zeros(k.size()), dv = zeros(v.size());
        const ref::AttentionShape shape{T, Hq, Hkv, dh, scale};
        for (int64_t b = 0; b < B; ++b) {
            const int64_t oq = b * T * Hq * dh, okv = b * T * Hkv * dh;
            ref::attention_forward(q.data() + oq, k.data() + okv, v.data() + okv, shape, o.data() + oq);
            ref::attention_backward(q.data() + oq, k.data() + okv, v.data() + okv, dout.data() + oq, shape,
                                    dq.data() + oq, dk.data() + okv, dv.data() + okv);
        }
        const AttentionOutputs got = run_attention(q, k, v, dout, B, T, Hq, Hkv, dh, scale);
        DELTABIT_EXPECT_CLOSE(tag + " fp32 o", got.o, o, kFloat);
        DELTABIT_EXPECT_CLOSE(tag + " fp32 dq", got.dq, dq, kFloat);
        DELTABIT_EXPECT_CLOSE(tag + " fp32 dk", got.dk, dk, kFloat);
        DELTABIT_EXPECT_CLOSE(tag + " fp32 dv", got.dv, dv, kFloat);
    }
    const cuda::ScopedGemmMath math(cuda::GemmMath::bf16);
    const testing::AttentionWithBounds want =
        testing::attention_with_bf16_bounds(q, k, v, dout, B, T, Hq, Hkv, dh, scale);
    const AttentionOutputs got = run_attention(q, k, v, dout, B, T, Hq, Hkv, dh, scale);
    if (dh == 64 || dh == 128) {
        EXPECT_LE(worst_over_bound(tag + " bf16 o", got.o, want.o, want.o_bound, 0.0), 1.0);
        EXPECT_LE(worst_over_bound(tag + " bf16 dq", got.dq, want.dq, want.dq_bound, 0.0), 1.0);
        EXPECT_LE(worst_over_bound(tag + " bf16 dk", got.dk, want.dk, want.dk_bound, 0.0), 1.0);
        EXPECT_LE(worst_over_bound(tag + " bf16 dv", got.dv, want.dv, want.dv_bound, 0.0), 1.0);
    } else {
        DELTABIT_EXPECT_CLOSE(tag + " bf16 o", got.o, want.o, kFloat);
        DELTABIT_EXPECT_CLOSE(tag + " bf16 dq", got.dq, want.dq, kFloat);
        DELTABIT_EXPECT_CLOSE(tag + " bf16 dk", got.dk, want.dk, kFloat);
        DELTABIT_EXPECT_CLOSE(tag + " bf16 dv", got.dv, want.dv, kFloat);
    }
    const AttentionOutputs again = run_attention(q, k, v, dout, B, T, Hq, Hkv, dh, scale);
    EXPECT_TRUE(again.o == got.o && again.lse == got.lse && again.dq == got.dq && again.dk == got.dk &&
                again.dv == got.dv)
        << tag << ": two bf16 runs differ";
}

TEST(CudaTrainOps, AttentionForwardBackward) {
    SKIP_WITHOUT_GPU();
    check_attention(1, 1, 1, 1, 4);
    check_attention(2, 70, 4, 2, 16);
    check_attention(1, 300, 8, 2, 64);
}

// The flash kernels' edges: T = 1, lengths that are no multiple of the 64-row or 32-key tiles (row tiles
// then straddle positions: 64 is no multiple of 3, 5, 6, 7), two sequences, query groups 1 .. 8 at both
// head dims, the configs' geometries (6 / 2 heads at 64 and 128) and peaked softmaxes (q, k std 2).
TEST(CudaTrainOps, AttentionFlashEdges) {
    SKIP_WITHOUT_GPU();
    check_attention(1, 1, 1, 1, 128);
    check_attention(1, 1, 8, 1, 64);
    check_attention(3, 33, 2, 1, 128);
    for (int64_t group = 1; group <= 8; ++group)
        check_attention(1, 23 + 13 * group, group * (group % 2 == 0 ? 2 : 1), group % 2 == 0 ? 2 : 1,
                        group % 3 == 0 ? 128 : 64);
    check_attention(2, 200, 6, 2, 64);
    check_attention(1, 160, 6, 2, 128);
    check_attention(1, 129, 4, 1, 128, 2.0);
    check_attention(2, 64, 3, 1, 64, 2.0);
}

TEST(CudaTrainOps, LinearOnCublas) {
    SKIP_WITHOUT_GPU();
    for (auto [n, in, out] : {std::tuple{1, 1, 1}, {37, 100, 65}, {300, 256, 259}}) {
        const Vec x = normal_values(size_t(n * in), 33), w = normal_values(size_t(out * in), 34, 0.1),
                  dy = normal_values(size_t(n * out), 35);
        Vec y = zeros(size_t(n * out)), dx = zeros(x.size()), dw = zeros(w.size());
        ref::linear_forward(x.data(), w.data(), n, in, out, y.data());
        ref::linear_backward(x.data(), w.data(), dy.data(), n, in, out, dx.data(), dw.data());
        DeviceArray gx(x), gw(w), gdy(dy), gy = DeviceArray::zeros(y.size()), gdx = DeviceArray::zeros(x.size()),
                    gdw = DeviceArray::zeros(w.size());
        cuda::linear_forward(gx.get(), gw.get(), n, in, out, gy.get());
        cuda::linear_backward_input(gdy.get(), gw.get(), n, in, out, gdx.get());
        cuda::linear_backward_weight(gdy.get(), gx.get(), n, in, out, gdw.get());
        const std::string tag = fmt::format("linear {}x{}→{}", n, in, out);
        DELTABIT_EXPECT_CLOSE(tag + " y", gy.read(), y, kBf16);
        DELTABIT_EXPECT_CLOSE(tag + " dx", gdx.read(), dx, kBf16);
        DELTABIT_EXPECT_CLOSE(tag + " dw", gdw.read(), dw, kBf16);
        // accumulate = false: the product overwrites dx (the first product into a layer's gradient).
        DeviceArray gdx_over = stale(x.size());
        cuda::linear_backward_input(gdy.get(), gw.get(), n, in, out, gdx_over.get(), false);
        DELTABIT_EXPECT_CLOSE(tag + " dx overwritten", gdx_over.read(), dx, kBf16);
    }
}

TEST(CudaTrainOps, LmHeadCrossEntropyInChunks) {
    SKIP_WITHOUT_GPU();
    const int64_t n = 50, D = 64, V = 259, chunk = 16;
    const Vec x = normal_values(size_t(n * D), 36), w = normal_values(size_t(V * D), 37, 0.2);
    std::vector<int32_t> targets(static_cast<size_t>(n));
    for (int64_t t = 0; t < n; ++t) targets[size_t(t)] = t % 9 == 4 ? -1 : int32_t((t * 37) % V);
    int64_t counted = 0;
    const double scale = 0.5;
    const double loss = ref::lm_head_cross_entropy_forward(x.data(), w.data(), targets.data(), n, D, V, chunk, &counted);
    Vec dx = zeros(x.size()), dw = zeros(w.size());
    ref::lm_head_cross_entropy_backward(x.data(), w.data(), targets.data(), n, D, V, chunk, scale, dx.data(), dw.data());
    // The device path as train_model.cpp runs it: logits per chunk, softmax rows, two products back.
    DeviceArray gx(x), gw(w), glogits = DeviceArray::zeros(size_t(chunk * V)), gdx = DeviceArray::zeros(x.size()),
                gdw = DeviceArray::zeros(w.size());
    DeviceInts gt(targets);
    deltabit::cuda::DeviceBuffer loss_sum(sizeof(double));
    cudaMemset(loss_sum.get(), 0, sizeof(double));
    for (int64_t begin = 0; begin < n; begin += chunk) {
        const int64_t rows = std::min(chunk, n - begin);
        cuda::linear_forward(gx.get() + begin * D, gw.get(), rows, D, V, glogits.get());
        cuda::cross_entropy_rows(glogits.get(), gt.get() + begin, rows, V, float(scale), loss_sum.get<double>());
        cuda::linear_backward_input(glogits.get(), gw.get(), rows, D, V, gdx.get() + begin * D);
        cuda::linear_backward_weight(glogits.get(), gx.get() + begin * D, rows, D, V, gdw.get());
    }
    double got = 0.0;
    loss_sum.download(&got, sizeof got);
    DELTABIT_EXPECT_CLOSE("lm_head loss", Vec{got}, Vec{loss}, kBf16);
    DELTABIT_EXPECT_CLOSE("lm_head dx", gdx.read(), dx, kBf16);
    DELTABIT_EXPECT_CLOSE("lm_head dw", gdw.read(), dw, kBf16);
}

// The device's QAT weights are the CPU's bit for bit (the export depends on it), at λ < 1 and λ = 1.
TEST(CudaTrainOps, QatBinariseBitExact) {
    SKIP_WITHOUT_GPU();
    ModelConfig c;
    c.arch = Arch::qwen3;
    c.n_vocab = 5;
    c.n_embd = 256;
    c.n_ff = 128;
    c.n_head = 2;
    c.n_head_kv = 1;
    c.head_dim = 128;
    c.rope_dim = 128;
    c.layers = {LayerKind::full_attention};
    c.layer_is_moe = {false};
    const ParameterLayout layout(c);
    std::vector<float> params = initial_parameters(layout, 0.02, 3);
    params[size_t(layout.get("model.layers.0.mlp.up_proj.weight").offset)] = -0.0f;  // −0 binarises to +d
    for (double lambda : {0.3, 1.0}) {
        std::vector<float> want(params.size(), 0.0f);
        qat_effective_weights(layout, params, lambda, want);
        std::vector<float> got = params;
        deltabit::cuda::DeviceBuffer in(params.size() * 4), out(params.size() * 4);
        in.upload(params.data(), params.size() * 4);
        out.upload(params.data(), params.size() * 4);
        for (const ParameterInfo& p : layout.all()) {
            if (!is_binarised(p)) continue;
            cuda::qat_binarise(in.get<float>() + p.offset, p.size / p.shape.back(), p.shape.back(), float(lambda),
                               lambda == 1.0, out.get<float>() + p.offset);
        }
        out.download(got.data(), got.size() * 4);
        int64_t differing = 0;
        for (size_t i = 0; i < got.size(); ++i) differing += std::memcmp(&got[i], &want[i], 4) != 0;
        EXPECT_EQ(differing, 0) << "λ = " << lambda;
    }
}

// AdamW with clipping on the device against train/optimizer.cpp: the same fp32/double arithmetic; only
// the norm's summation order differs (≤ 1e-7 relative), which moves the clip factor by as little.
TEST(CudaTrainOps, AdamwMatchesCpu) {
    SKIP_WITHOUT_GPU();
    ModelConfig c;
    c.arch = Arch::qwen3;
    c.n_vocab = 7;
    c.n_embd = 16;
    c.n_ff = 24;
    c.n_head = 2;
    c.n_head_kv = 1;
    c.head_dim = 8;
    c.rope_dim = 8;
    c.layers = {LayerKind::full_attention};
    c.layer_is_moe = {false};
    const ParameterLayout layout(c);
    OptimizerSection o;
    o.clip = 0.5;
    std::vector<float> params = initial_parameters(layout, 0.1, 4), cpu_params = params;
    AdamState cpu_state;
    std::vector<uint8_t> decay(params.size(), 0);
    for (const ParameterInfo& p : layout.all())
        if (p.role == ParameterRole::matrix || p.role == ParameterRole::embedding)
            std::fill_n(decay.begin() + p.offset, p.size, uint8_t(1));
    deltabit::cuda::DeviceBuffer gp(params.size() * 4), gg(params.size() * 4), gm(params.size() * 4),
        gv(params.size() * 4), gd(decay.size()), sum(sizeof(double));
    gp.upload(params.data(), params.size() * 4);
    gd.upload(decay.data(), decay.size());
    cudaMemset(gm.get(), 0, params.size() * 4);
    cudaMemset(gv.get(), 0, params.size() * 4);
    for (int step = 1; step <= 3; ++step) {
        const Vec g64 = normal_values(params.size(), 40 + uint64_t(step), 0.1);
        std::vector<float> grads(g64.begin(), g64.end());
        gg.upload(grads.data(), grads.size() * 4);
        const double lr = 1e-2;
        const double cpu_norm = adamw_step(layout, o, lr, cpu_params, grads, cpu_state);
        cudaMemset(sum.get(), 0, sizeof(double));
        cuda::sum_of_squares(gg.get<float>(), int64_t(params.size()), sum.get<double>());
        double sum_sq = 0.0;
        sum.download(&sum_sq, sizeof sum_sq);
        const double norm = std::sqrt(sum_sq);
        EXPECT_NEAR(norm, cpu_norm, 1e-6 * cpu_norm);
        const float factor = norm > o.clip ? float(o.clip / norm) : 1.0f;
        cuda::adamw_update(gp.get<float>(), gg.get<float>(), gm.get<float>(), gv.get<float>(), gd.get<uint8_t>(),
                           int64_t(params.size()), false, factor, float(o.beta1), float(o.beta2),
                           1.0 - std::pow(o.beta1, step), 1.0 - std::pow(o.beta2, step), lr, o.eps, o.weight_decay);
    }
    gp.download(params.data(), params.size() * 4);
    DELTABIT_EXPECT_CLOSE("adamw params after 3 steps", Vec(params.begin(), params.end()),
                          Vec(cpu_params.begin(), cpu_params.end()), 1e-5);
}

#endif

}  // namespace
}  // namespace deltabit::train
