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

TEST(CudaTrainOps, RmsNormForwardBackward) {
    SKIP_WITHOUT_GPU();
    for (bool one_plus : {false, true})
        for (auto [rows, dim] : {std::pair{1, 3}, {37, 100}, {5, 1000}}) {
            const Vec x = normal_values(size_t(rows * dim), 1), w = normal_values(size_t(dim), 2, 0.3),
                      dy = normal_values(x.size(), 3);
            const float eps = 1e-6f;
            Vec y = zeros(x.size()), dx = zeros(x.size()), dw = zeros(w.size());
            ref::rms_norm_forward(x.data(), w.data(), rows, dim, eps, one_plus, y.data());
            ref::rms_norm_backward(x.data(), w.data(), dy.data(), rows, dim, eps, one_plus, dx.data(), dw.data());
            DeviceArray gx(x), gw(w), gdy(dy), gy = DeviceArray::zeros(y.size()), gdx = DeviceArray::zeros(x.size()),
                        gdw = DeviceArray::zeros(w.size());
            cuda::rms_norm_forward(gx.get(), gw.get(), rows, dim, eps, one_plus, gy.get());
            cuda::rms_norm_backward(gx.get(), gw.get(), gdy.get(), rows, dim, eps, one_plus, gdx.get(), gdw.get());
            const std::string tag = fmt::format("rms_norm{} {}x{}", one_plus ? "_1p" : "", rows, dim);
            DELTABIT_EXPECT_CLOSE(tag + " y", gy.read(), y, kFloat);
            DELTABIT_EXPECT_CLOSE(tag + " dx", gdx.read(), dx, kFloat);
            DELTABIT_EXPECT_CLOSE(tag + " dw", gdw.read(), dw, kFloat);
        }
}

TEST(CudaTrainOps, GatedRmsNormAndL2Norm) {
    SKIP_WITHOUT_GPU();
    for (auto [rows, dim] : {std::pair{1, 3}, {33, 128}, {7, 300}}) {
        const Vec x = normal_values(size_t(rows * dim), 4), z = normal_values(x.size(), 5),
                  w = normal_values(size_t(dim), 6, 0.5), dy = normal_values(x.size(), 7);
        const float eps = 1e-6f;
        Vec y = zeros(x.size()), dx = zeros(x.size()), dz = zeros(x.size()), dw = zeros(w.size());
        ref::gated_rms_norm_forward(x.data(), z.data(), w.data(), rows, dim, eps, y.data());
        ref::gated_rms_norm_backward(x.data(), z.data(), w.data(), dy.data(), rows, dim, eps, dx.data(), dz.data(),
                                     dw.data());
        DeviceArray gx(x), gz(z), gw(w), gdy(dy), gy = DeviceArray::zeros(x.size()), gdx = DeviceArray::zeros(x.size()),
                    gdz = DeviceArray::zeros(x.size()), gdw = DeviceArray::zeros(w.size());
        cuda::gated_rms_norm_forward(gx.get(), gz.get(), gw.get(), rows, dim, eps, gy.get());
        cuda::gated_rms_norm_backward(gx.get(), gz.get(), gw.get(), gdy.get(), rows, dim, eps, gdx.get(), gdz.get(),
                                      gdw.get());
        const std::string tag = fmt::format("gated_rms_norm {}x{}", rows, dim);
        DELTABIT_EXPECT_CLOSE(tag + " y", gy.read(), y, kFloat);
        DELTABIT_EXPECT_CLOSE(tag + " dx", gdx.read(), dx, kFloat);
        DELTABIT_EXPECT_CLOSE(tag + " dz", gdz.read(), dz, kFloat);
        DELTABIT_EXPECT_CLOSE(tag + " dw", gdw.read(), dw, kFloat);

        const double scale = 0.125;
        Vec l2 = zeros(x.size()), dl2 = zeros(x.size());
        ref::l2_norm_forward(x.data(), rows, dim, 1e-6, scale, l2.data());
        ref::l2_norm_backward(x.data(), dy.data(), rows, dim, 1e-6, scale, dl2.data());
        DeviceArray gl2 = DeviceArray::zeros(x.size()), gdl2 = DeviceArray::zeros(x.size());
        cuda::l2_norm_forward(gx.get(), rows, dim, 1e-6f, float(scale), gl2.get());
        cuda::l2_norm_backward(gx.get(), gdy.get(), rows, dim, 1e-6f, float(scale), gdl2.get());
        DELTABIT_EXPECT_CLOSE(fmt::format("l2_norm {}x{} y", rows, dim), gl2.read(), l2, kFloat);
        DELTABIT_EXPECT_CLOSE(fmt::format("l2_norm {}x{} dx", rows, dim), gdl2.read(), dl2, kFloat);
    }
}

TEST(CudaTrainOps, SwigluAndSigmoidGate) {
    SKIP_WITHOUT_GPU();
    const int64_t n = 1000003;  // past one grid-stride pass of the launch
    const Vec gate = normal_values(size_t(n), 8, 3.0), up = normal_values(size_t(n), 9), dout = normal_values(size_t(n), 10);
    Vec out = zeros(size_t(n)), dgate = zeros(size_t(n)), dup = zeros(size_t(n));
    ref::swiglu_forward(gate.data(), up.data(), n, out.data());
    ref::swiglu_backward(gate.data(), up.data(), dout.data(), n, dgate.data(), dup.data());
    DeviceArray gg(gate), gu(up), gd(dout), go = DeviceArray::zeros(size_t(n)), gdg = DeviceArray::zeros(size_t(n)),
                gdu = DeviceArray::zeros(size_t(n));
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
    DeviceArray ggated = DeviceArray::zeros(size_t(n)), gdatt = DeviceArray::zeros(size_t(n)),
                gdgate = DeviceArray::zeros(size_t(n));
    cuda::sigmoid_gate_forward(gu.get(), gg.get(), n, ggated.get());
    cuda::sigmoid_gate_backward(gu.get(), gg.get(), gd.get(), n, gdatt.get(), gdgate.get());
    DELTABIT_EXPECT_CLOSE("sigmoid_gate out", ggated.read(), gated, kFloat);
    DELTABIT_EXPECT_CLOSE("sigmoid_gate datt", gdatt.read(), datt, kFloat);
    DELTABIT_EXPECT_CLOSE("sigmoid_gate dgate", gdgate.read(), dg, kFloat);
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

TEST(CudaTrainOps, CausalConvPerSequence) {
    SKIP_WITHOUT_GPU();
    const int64_t B = 3, T = 9, C = 37, K = 4;
    const Vec x = normal_values(size_t(B * T * C), 12), w = normal_values(size_t(C * K), 13, 0.5),
              dy = normal_values(x.size(), 14);
    Vec y = zeros(x.size()), dx = zeros(x.size()), dw = zeros(w.size());
    for (int64_t b = 0; b < B; ++b) {
        const int64_t o = b * T * C;
        ref::conv_silu_forward(x.data() + o, w.data(), T, C, K, y.data() + o);
        ref::conv_silu_backward(x.data() + o, w.data(), dy.data() + o, T, C, K, dx.data() + o, dw.data());
    }
    DeviceArray gx(x), gw(w), gdy(dy), gy = DeviceArray::zeros(x.size()), gdx = DeviceArray::zeros(x.size()),
                gdw = DeviceArray::zeros(w.size());
    cuda::conv_silu_forward(gx.get(), gw.get(), B, T, C, K, gy.get());
    cuda::conv_silu_backward(gx.get(), gw.get(), gdy.get(), B, T, C, K, gdx.get(), gdw.get());
    DELTABIT_EXPECT_CLOSE("conv_silu y", gy.read(), y, kFloat);
    DELTABIT_EXPECT_CLOSE("conv_silu dx", gdx.read(), dx, kFloat);
    DELTABIT_EXPECT_CLOSE("conv_silu dw", gdw.read(), dw, kFloat);
}

TEST(CudaTrainOps, DeltaNetGates) {
    SKIP_WITHOUT_GPU();
    const int64_t N = 301, Hv = 6;
    Vec b = normal_values(size_t(N * Hv), 15, 2.0), a = normal_values(size_t(N * Hv), 16, 8.0);
    a[0] = 25.0;  // past softplus's threshold
    const Vec a_log = normal_values(size_t(Hv), 17, 0.5), dt_bias = normal_values(size_t(Hv), 18),
              dbeta = normal_values(b.size(), 19), dg = normal_values(b.size(), 20);
    Vec beta = zeros(b.size()), g = zeros(b.size()), db = zeros(b.size()), da = zeros(b.size()), da_log = zeros(size_t(Hv)),
        ddt = zeros(size_t(Hv));
    ref::gdn_gates_forward(b.data(), a.data(), a_log.data(), dt_bias.data(), N, Hv, beta.data(), g.data());
    ref::gdn_gates_backward(b.data(), a.data(), a_log.data(), dt_bias.data(), dbeta.data(), dg.data(), N, Hv, db.data(),
                            da.data(), da_log.data(), ddt.data());
    DeviceArray gb(b), ga(a), gal(a_log), gdt(dt_bias), gdbeta(dbeta), gdg(dg), gbeta = DeviceArray::zeros(b.size()),
        gg = DeviceArray::zeros(b.size()), gdb = DeviceArray::zeros(b.size()), gda = DeviceArray::zeros(b.size()),
        gdal = DeviceArray::zeros(size_t(Hv)), gddt = DeviceArray::zeros(size_t(Hv));
    cuda::gdn_gates_forward(gb.get(), ga.get(), gal.get(), gdt.get(), N, Hv, gbeta.get(), gg.get());
    cuda::gdn_gates_backward(gb.get(), ga.get(), gal.get(), gdt.get(), gdbeta.get(), gdg.get(), N, Hv, gdb.get(),
                             gda.get(), gdal.get(), gddt.get());
    DELTABIT_EXPECT_CLOSE("gates beta", gbeta.read(), beta, kFloat);
    DELTABIT_EXPECT_CLOSE("gates g", gg.read(), g, kFloat);
    DELTABIT_EXPECT_CLOSE("gates db", gdb.read(), db, kFloat);
    DELTABIT_EXPECT_CLOSE("gates da", gda.read(), da, kFloat);
    DELTABIT_EXPECT_CLOSE("gates dA_log", gdal.read(), da_log, kFloat);
    DELTABIT_EXPECT_CLOSE("gates ddt_bias", gddt.read(), ddt, kFloat);
}

TEST(CudaTrainOps, EmbeddingForwardBackward) {
    SKIP_WITHOUT_GPU();
    const int64_t V = 7, D = 33;
    const std::vector<int32_t> tokens{3, 3, 0, 6, 3, 1, 6};
    const int64_t N = int64_t(tokens.size());
    Vec embed = normal_values(size_t(V * D), 21);
    for (double& e : embed) e = double(float(e));  // the lookup copies floats exactly
    const Vec dx = normal_values(size_t(N * D), 22);
    Vec x = zeros(size_t(N * D)), dembed = zeros(embed.size());
    for (int64_t n = 0; n < N; ++n)
        for (int64_t i = 0; i < D; ++i) {
            x[size_t(n * D + i)] = embed[size_t(tokens[size_t(n)] * D + i)];
            dembed[size_t(tokens[size_t(n)] * D + i)] += dx[size_t(n * D + i)];
        }
    DeviceArray ge(embed), gdx(dx), gx = DeviceArray::zeros(x.size()), gde = DeviceArray::zeros(embed.size());
    DeviceInts gt(tokens);
    cuda::embedding_forward(ge.get(), gt.get(), N, D, gx.get());
    cuda::embedding_backward(gdx.get(), gt.get(), N, D, gde.get());
    DELTABIT_EXPECT_CLOSE("embedding x", gx.read(), x, 0.0);
    DELTABIT_EXPECT_CLOSE("embedding dembed", gde.read(), dembed, kFloat);
}

// Attention in both product modes; gemm.h's switch picks the kernels (attention_kernels.cu):
//   fp32: the CUDA-core kernels, fp32 against double: kFloat.
//   bf16: at head_dim 64 and 128 the flash tensor-core kernels, every element within the bound their
//     arithmetic implies (attention_bf16_bounds.h; the worst error / bound is printed); other head dims
//     keep the CUDA-core kernels and kFloat. The gradients are added to nonzero accumulators (the kernels
//     add; the trainer relies on it), so each bound also carries that addition's fp32 rounding, 2⁻²⁴ of
//     the sum, and weights below fp32's normal range may flush to zero (an absolute 1e-37). Each bf16
//     case runs twice and the bits must match: no atomics, as the trainer's resume test requires.
struct AttentionOutputs {
    Vec o, lse, dq, dk, dv;
};

constexpr double kDqBase = 0.5, kDkBase = 0.25, kDvBase = -0.5;

AttentionOutputs run_attention(const Vec& q, const Vec& k, const Vec& v, const Vec& dout, int64_t B, int64_t T,
                               int64_t Hq, int64_t Hkv, int64_t dh, double scale, bool with_bases) {
    DeviceArray gq(q), gk(k), gv(v), gdout(dout), go = DeviceArray::zeros(q.size()),
        glse = DeviceArray::zeros(size_t(B * T * Hq)), gwork = DeviceArray::zeros(size_t(B * T * Hq)),
        gdq(Vec(q.size(), with_bases ? kDqBase : 0.0)), gdk(Vec(k.size(), with_bases ? kDkBase : 0.0)),
        gdv(Vec(v.size(), with_bases ? kDvBase : 0.0));
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
        const AttentionOutputs got = run_attention(q, k, v, dout, B, T, Hq, Hkv, dh, scale, false);
        DELTABIT_EXPECT_CLOSE(tag + " fp32 o", got.o, o, kFloat);
        DELTABIT_EXPECT_CLOSE(tag + " fp32 dq", got.dq, dq, kFloat);
        DELTABIT_EXPECT_CLOSE(tag + " fp32 dk", got.dk, dk, kFloat);
        DELTABIT_EXPECT_CLOSE(tag + " fp32 dv", got.dv, dv, kFloat);
    }
    const cuda::ScopedGemmMath math(cuda::GemmMath::bf16);
    const testing::AttentionWithBounds want =
        testing::attention_with_bf16_bounds(q, k, v, dout, B, T, Hq, Hkv, dh, scale);
    const AttentionOutputs got = run_attention(q, k, v, dout, B, T, Hq, Hkv, dh, scale, true);
    if (dh == 64 || dh == 128) {
        EXPECT_LE(worst_over_bound(tag + " bf16 o", got.o, want.o, want.o_bound, 0.0), 1.0);
        EXPECT_LE(worst_over_bound(tag + " bf16 dq", got.dq, want.dq, want.dq_bound, kDqBase), 1.0);
        EXPECT_LE(worst_over_bound(tag + " bf16 dk", got.dk, want.dk, want.dk_bound, kDkBase), 1.0);
        EXPECT_LE(worst_over_bound(tag + " bf16 dv", got.dv, want.dv, want.dv_bound, kDvBase), 1.0);
    } else {
        auto minus = [](Vec x, double base) {
            for (double& e : x) e -= base;
            return x;
        };
        DELTABIT_EXPECT_CLOSE(tag + " bf16 o", got.o, want.o, kFloat);
        DELTABIT_EXPECT_CLOSE(tag + " bf16 dq", minus(got.dq, kDqBase), want.dq, kFloat);
        DELTABIT_EXPECT_CLOSE(tag + " bf16 dk", minus(got.dk, kDkBase), want.dk, kFloat);
        DELTABIT_EXPECT_CLOSE(tag + " bf16 dv", minus(got.dv, kDvBase), want.dv, kFloat);
    }
    const AttentionOutputs again = run_attention(q, k, v, dout, B, T, Hq, Hkv, dh, scale, true);
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
