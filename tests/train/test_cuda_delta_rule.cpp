// The trainer's chunked gated delta rule on the device (train/cuda/kernels.h: delta_rule_forward,
// delta_rule_backward) against the recurrent double reference (train/reference_ops.h), on lengths that
// end inside, exactly at and short of its 64-token chunks, grouped value heads, several sequences and
// strong and weak decays. Skips without CUDA or a GPU.
//
// Tolerances:
//   kFloat: the fp32 kernels (GemmMath::fp32, and every key dim the tensor-core kernels are not built
//     for) are held to 1e-5 of the reference's largest magnitude: per chunk their sums run over ≤ 128
//     keys and ≤ 64 tokens, T = (I + A)^{-1} is substituted over ≤ 64 rows of entries ≤ 1, and the fp32
//     state crosses ≤ 3 chunk boundaries here, so each result carries a few hundred roundings of 2⁻²⁴
//     relative to the largest operand, ~1e-6 at worst. Measured by running these kernels' code on the
//     CPU through an emulation of the CUDA thread model (docs/notes/delta-rule-chunked-backward.md):
//     worst 5.6e-7 over these shapes and decays.
//   The tensor-core kernels (GemmMath::bf16 at key dims 64 and 128: the forward and the backward's
//     carry): every element of o, of dS at every chunk's end and of W = Tᵀ dV' within the bound their
//     arithmetic implies (delta_rule_bf16_bounds.h), printed as worst |Δ| / bound.
//   The tensor-core gradients kernel (the same switch): every element of dq, dk, dv, dg and dβ within
//     the bound of its own arithmetic plus the errors of the states, V', dS and W it reads
//     (delta_rule_gradients_with_bf16_bounds), within the bound of its own arithmetic alone against the
//     formulas evaluated on the inputs it read (those four as the device left them), and to kBf16.
//   kBf16: 1e-2 of the largest value, as test_cuda_ops.cpp holds the bf16 matrix products (operands
//     rounded to bf16).
#include "cuda_test_support.h"
#include "delta_rule_bf16_bounds.h"
#include "train/reference_ops.h"

#include <gtest/gtest.h>

#include <fmt/format.h>

#include <algorithm>
#include <cstring>

#ifdef DELTABIT_HAVE_CUDA
#include "train/cuda/gemm.h"
#include "train/cuda/kernel_marks.h"
#include "train/cuda/kernels.h"
#endif

namespace deltabit::train {
namespace {

#ifndef DELTABIT_HAVE_CUDA
TEST(CudaTrainDeltaRule, SkippedWithoutCuda) { GTEST_SKIP() << "built without CUDA"; }
#else

using testing::DeviceArray;
using testing::normal_values;
using testing::worst_over_bound;
using Vec = std::vector<double>;

constexpr double kFloat = 1e-5;
constexpr double kBf16 = 1e-2;

Vec zeros(size_t n) { return Vec(n, 0.0); }
// The starting value of the five gradients, which delta_rule_backward overwrites (kernels.h's "(=)"): a
// kernel that still added into them would be off by this much, one that skipped an element would leave it.
constexpr double kStale = 3.0;
DeviceArray stale(size_t n) { return DeviceArray(Vec(n, kStale)); }

// The delta rule's inputs as the layer feeds them: normalised keys and queries, gates in the layer's
// ranges. decay: the scale of |g| (0.5: a chunk forgets e^{-20} of its entering state; 3: far more).
// gain: queries of norm `gain` and keys of norm √gain (gain 2: larger products and β‖k‖² up to 2, the
// edge of the recurrence's contraction).
struct DeltaRuleInputs {
    Vec q, k, v, g, beta, dout;
};

DeltaRuleInputs delta_rule_inputs(int64_t B, int64_t T, int64_t Hk, int64_t Hv, int64_t dk, int64_t dv, double decay,
                                  double gain = 1.0) {
    DeltaRuleInputs in{normal_values(size_t(B * T * Hk * dk), 27), normal_values(size_t(B * T * Hk * dk), 28),
                       normal_values(size_t(B * T * Hv * dv), 29), normal_values(size_t(B * T * Hv), 31, decay),
                       normal_values(size_t(B * T * Hv), 32), normal_values(size_t(B * T * Hv * dv), 30)};
    for (Vec* x : {&in.q, &in.k})
        for (int64_t r = 0; r < B * T * Hk; ++r) {
            double sum = 0.0;
            for (int64_t i = 0; i < dk; ++i) sum += (*x)[size_t(r * dk + i)] * (*x)[size_t(r * dk + i)];
            const double norm = x == &in.q ? gain : std::sqrt(gain);
            for (int64_t i = 0; i < dk; ++i) (*x)[size_t(r * dk + i)] *= norm / std::sqrt(sum + 1e-6);
        }
    for (double& x : in.g) x = -std::fabs(x);
    for (double& x : in.beta) x = ref::sigmoid(x);
    return in;
}

struct DeltaRuleGradients {
    Vec o, dq, dk, dv, dg, dbeta;
};

DeltaRuleGradients delta_rule_reference(const DeltaRuleInputs& in, int64_t B, int64_t T, int64_t Hk, int64_t Hv,
                                        int64_t dk, int64_t dv) {
    DeltaRuleGradients r{zeros(in.v.size()), zeros(in.q.size()), zeros(in.k.size()),
                         zeros(in.v.size()), zeros(in.g.size()), zeros(in.g.size())};
    const ref::DeltaRuleShape shape{T, Hk, Hv, dk, dv};
    for (int64_t b = 0; b < B; ++b) {
        const int64_t ok = b * T * Hk * dk, ov = b * T * Hv * dv, og = b * T * Hv;
        ref::delta_rule_forward(in.q.data() + ok, in.k.data() + ok, in.v.data() + ov, in.g.data() + og,
                                in.beta.data() + og, shape, r.o.data() + ov);
        ref::delta_rule_backward(in.q.data() + ok, in.k.data() + ok, in.v.data() + ov, in.g.data() + og,
                                 in.beta.data() + og, in.dout.data() + ov, shape, r.dq.data() + ok, r.dk.data() + ok,
                                 r.dv.data() + ov, r.dg.data() + og, r.dbeta.data() + og);
    }
    return r;
}

// The fp32 kernels (GemmMath::fp32; the bf16 path takes them too at key dims the tensor-core kernels
// are not built for). The five gradients start stale (kStale): each element must be overwritten.
void check_delta_rule(int64_t B, int64_t T, int64_t Hk, int64_t Hv, int64_t dk, int64_t dv, double decay = 0.5) {
    const cuda::ScopedGemmMath math(cuda::GemmMath::fp32);
    const DeltaRuleInputs in = delta_rule_inputs(B, T, Hk, Hv, dk, dv, decay);
    const Vec &q = in.q, &k = in.k, &v = in.v, &g = in.g, &beta = in.beta, &dout = in.dout;
    const DeltaRuleGradients want = delta_rule_reference(in, B, T, Hk, Hv, dk, dv);
    const Vec &o = want.o, &dq = want.dq, &dk_ = want.dk, &dv_ = want.dv, &dg = want.dg, &dbeta = want.dbeta;
    DeviceArray gq(q), gk(k), gv(v), gg(g), gbeta(beta), gdout(dout), go = DeviceArray::zeros(v.size()),
        gdq = stale(q.size()), gdk = stale(k.size()), gdv = stale(v.size()), gdg = stale(g.size()),
        gdbeta = stale(g.size()),
        // Poisoned: a kernel that reads a value the forward or the backward did not write gives NaN.
        gsaved = DeviceArray(Vec(size_t(cuda::delta_rule_saved_floats(B, T, Hv, dk, dv)), NAN)),
        gscratch = DeviceArray(Vec(size_t(cuda::delta_rule_scratch_floats(B, T, Hv, dk, dv)), NAN));
    cuda::delta_rule_forward(gq.get(), gk.get(), gv.get(), gg.get(), gbeta.get(), B, T, Hk, Hv, dk, dv, go.get(),
                             gsaved.get());
    cuda::delta_rule_backward(gq.get(), gk.get(), gv.get(), gg.get(), gbeta.get(), gdout.get(), gsaved.get(), B, T, Hk,
                              Hv, dk, dv, gdq.get(), gdk.get(), gdv.get(), gdg.get(), gdbeta.get(), gscratch.get());
    const std::string tag = fmt::format("delta_rule B{} T{} {}/{} {}x{} decay {}", B, T, Hk, Hv, dk, dv, decay);
    DELTABIT_EXPECT_CLOSE(tag + " o", go.read(), o, kFloat);
    DELTABIT_EXPECT_CLOSE(tag + " dq", gdq.read(), dq, kFloat);
    DELTABIT_EXPECT_CLOSE(tag + " dk", gdk.read(), dk_, kFloat);
    DELTABIT_EXPECT_CLOSE(tag + " dv", gdv.read(), dv_, kFloat);
    DELTABIT_EXPECT_CLOSE(tag + " dg", gdg.read(), dg, kFloat);
    DELTABIT_EXPECT_CLOSE(tag + " dbeta", gdbeta.read(), dbeta, kFloat);
}

TEST(CudaTrainOps, DeltaRuleForwardBackward) {
    SKIP_WITHOUT_GPU();
    check_delta_rule(1, 1, 1, 1, 3, 4);
    check_delta_rule(2, 150, 1, 2, 5, 7);     // three chunks, the last partial; grouped value heads
    check_delta_rule(2, 64, 2, 2, 4, 40);     // one whole chunk; two value tiles, the second partial
    check_delta_rule(1, 70, 2, 4, 64, 128);   // the default model's head shape: 4 value tiles, 2 chunks
    check_delta_rule(1, 65, 1, 1, 128, 41);   // the widest keys; a chunk of one token
    check_delta_rule(1, 130, 1, 1, 16, 8, 3.0);    // strong decays: e^γ underflows fp32 inside a chunk
    check_delta_rule(1, 100, 1, 1, 16, 8, 0.01);   // weak decays: states carried nearly whole
    check_delta_rule(2, 200, 3, 6, 64, 128, 0.1);  // four chunks of the default model's heads, Hv = 2·Hk
    check_delta_rule(1, 66, 1, 1, 1, 3, 0.5);       // one key: A_ij = ±β_i e^{γ_i−γ_j}, T least damped
}

// The scratch of delta_rule_backward after its carry: dS at every chunk's end, then W per token
// (BackwardScratch in delta_rule_chunked_kernels.cu).
struct CarryOutputs {
    Vec dstates, w;
};

CarryOutputs carry_of(const Vec& scratch, int64_t B, int64_t T, int64_t Hv, int64_t dk, int64_t dv) {
    const int64_t states = B * Hv * ((T + cuda::kDeltaChunk - 1) / cuda::kDeltaChunk) * dk * dv;
    return {Vec(scratch.begin(), scratch.begin() + states),
            Vec(scratch.begin() + states, scratch.begin() + states + B * T * Hv * dv)};
}

// The tensor-core kernels (GemmMath::bf16 at key dims 64 and 128: the forward, the backward's carry and
// its gradients): every element of o, of dS at every chunk's end, of W and of the five gradients within
// the bound their arithmetic implies (delta_rule_bf16_bounds.h; the worst error / bound is printed), from
// the float inputs the device sees. The bounds' own double values are first checked against the
// recurrent reference (o and the gradients, 1e-9: two double evaluations of one function) and against
// the fp32 kernels' carry (dS and W, kFloat). `saved` and `scratch` start as NaN, so a value left
// unwritten shows, and the five gradients start stale (kStale), which they must overwrite; the marks show
// that the tensor-core kernels ran; a second run gives the same bits.
// Everything is also held to kBf16 of the reference's largest.
void check_delta_rule_bf16(int64_t B, int64_t T, int64_t Hk, int64_t Hv, int64_t dk, int64_t dv, double decay = 0.5,
                           double gain = 1.0) {
    DeltaRuleInputs in = delta_rule_inputs(B, T, Hk, Hv, dk, dv, decay, gain);
    for (Vec* x : {&in.q, &in.k, &in.v, &in.g, &in.beta, &in.dout})
        for (double& e : *x) e = double(float(e));
    const DeltaRuleGradients want = delta_rule_reference(in, B, T, Hk, Hv, dk, dv);
    const testing::DeltaRuleWithBounds bounded =
        testing::delta_rule_with_bf16_bounds(in.q, in.k, in.v, in.g, in.beta, B, T, Hk, Hv, dk, dv);
    const testing::DeltaRuleCarryWithBounds carry =
        testing::delta_rule_carry_with_bf16_bounds(in.q, in.k, in.g, in.beta, in.dout, B, T, Hk, Hv, dk, dv);
    const testing::DeltaRuleGradientsWithBounds grads = testing::delta_rule_gradients_with_bf16_bounds(
        in.q, in.k, in.v, in.g, in.beta, in.dout, B, T, Hk, Hv, dk, dv, bounded, carry);
    const std::string tag =
        fmt::format("delta_rule bf16 B{} T{} {}/{} {}x{} decay {} gain {}", B, T, Hk, Hv, dk, dv, decay, gain);
    EXPECT_LE(testing::relative_error(tag + " bound's o", bounded.o, want.o), 1e-9);
    EXPECT_LE(testing::relative_error(tag + " bound's dq", grads.dq, want.dq), 1e-9);
    EXPECT_LE(testing::relative_error(tag + " bound's dk", grads.dk, want.dk), 1e-9);
    EXPECT_LE(testing::relative_error(tag + " bound's dv", grads.dv, want.dv), 1e-9);
    EXPECT_LE(testing::relative_error(tag + " bound's dg", grads.dg, want.dg), 1e-9);
    EXPECT_LE(testing::relative_error(tag + " bound's dbeta", grads.dbeta, want.dbeta), 1e-9);

    const size_t saved_floats = size_t(cuda::delta_rule_saved_floats(B, T, Hv, dk, dv)),
                 scratch_floats = size_t(cuda::delta_rule_scratch_floats(B, T, Hv, dk, dv));
    DeviceArray gq(in.q), gk(in.k), gv(in.v), gg(in.g), gbeta(in.beta), gdout(in.dout);
    struct Run {
        Vec o, saved, scratch, dq, dk, dv, dg, dbeta;
        std::vector<std::string> kernels;
    };
    auto run = [&](cuda::GemmMath math) {
        const cuda::ScopedGemmMath scoped(math);
        DeviceArray go = DeviceArray::zeros(in.v.size()), gsaved(Vec(saved_floats, NAN)),
                    gscratch(Vec(scratch_floats, NAN)), gdq = stale(in.q.size()), gdk = stale(in.k.size()),
                    gdv = stale(in.v.size()), gdg = stale(in.g.size()), gdbeta = stale(in.g.size());
        testing::MarkedKernels marks;
        cuda::delta_rule_forward(gq.get(), gk.get(), gv.get(), gg.get(), gbeta.get(), B, T, Hk, Hv, dk, dv, go.get(),
                                 gsaved.get());
        cuda::delta_rule_backward(gq.get(), gk.get(), gv.get(), gg.get(), gbeta.get(), gdout.get(), gsaved.get(), B, T,
                                  Hk, Hv, dk, dv, gdq.get(), gdk.get(), gdv.get(), gdg.get(), gdbeta.get(),
                                  gscratch.get());
        return Run{go.read(),  gsaved.read(), gscratch.read(), gdq.read(),  gdk.read(),
                   gdv.read(), gdg.read(),    gdbeta.read(),   marks.names};
    };
    {
        const CarryOutputs fp32 = carry_of(run(cuda::GemmMath::fp32).scratch, B, T, Hv, dk, dv);
        DELTABIT_EXPECT_CLOSE(tag + " bound's dS (fp32 kernels)", fp32.dstates, carry.dstates, kFloat);
        DELTABIT_EXPECT_CLOSE(tag + " bound's W (fp32 kernels)", fp32.w, carry.w, kFloat);
    }
    const Run first = run(cuda::GemmMath::bf16), second = run(cuda::GemmMath::bf16);
    auto ran = [&](const char* kernel) {
        return std::find(first.kernels.begin(), first.kernels.end(), kernel) != first.kernels.end();
    };
    EXPECT_TRUE(ran("delta: chunk_factors_mma_kernel") && ran("delta: forward_walk_mma_kernel") &&
                ran("delta: backward_carry_mma_kernel") && ran("delta: backward_gradients_mma_kernel") &&
                !ran("delta: forward_walk_kernel") && !ran("delta: backward_carry_kernel") &&
                !ran("delta: backward_gradients_kernel"))
        << tag << ": the tensor-core kernels did not run";
    EXPECT_LE(worst_over_bound(tag + " o", first.o, bounded.o, bounded.o_bound, 0.0), 1.0);
    const CarryOutputs got = carry_of(first.scratch, B, T, Hv, dk, dv);
    EXPECT_LE(worst_over_bound(tag + " dS", got.dstates, carry.dstates, carry.dstates_bound, 0.0), 1.0);
    EXPECT_LE(worst_over_bound(tag + " W", got.w, carry.w, carry.w_bound, 0.0), 1.0);
    EXPECT_LE(worst_over_bound(tag + " dq", first.dq, grads.dq, grads.dq_bound, 0.0), 1.0);
    EXPECT_LE(worst_over_bound(tag + " dk", first.dk, grads.dk, grads.dk_bound, 0.0), 1.0);
    EXPECT_LE(worst_over_bound(tag + " dv", first.dv, grads.dv, grads.dv_bound, 0.0), 1.0);
    EXPECT_LE(worst_over_bound(tag + " dg", first.dg, grads.dg, grads.dg_bound, 0.0), 1.0);
    EXPECT_LE(worst_over_bound(tag + " dbeta", first.dbeta, grads.dbeta, grads.dbeta_bound, 0.0), 1.0);
    {
        // The gradients kernel alone: its inputs as the device left them (the states and V' in `saved`,
        // dS and W in scratch), exact, so that only its own arithmetic is bounded.
        const int64_t states = B * Hv * ((T + cuda::kDeltaChunk - 1) / cuda::kDeltaChunk) * dk * dv;
        const Vec saved_states(first.saved.begin(), first.saved.begin() + states),
            saved_v_new(first.saved.begin() + states, first.saved.begin() + states + B * T * Hv * dv);
        const testing::DeltaRuleWithBounds device_forward{{}, {}, saved_states, zeros(saved_states.size()),
                                                          saved_v_new, zeros(saved_v_new.size())};
        const testing::DeltaRuleCarryWithBounds device_carry{got.dstates, zeros(got.dstates.size()), got.w,
                                                             zeros(got.w.size())};
        const testing::DeltaRuleGradientsWithBounds own = testing::delta_rule_gradients_with_bf16_bounds(
            in.q, in.k, in.v, in.g, in.beta, in.dout, B, T, Hk, Hv, dk, dv, device_forward, device_carry);
        const std::string alone = tag + " (its own inputs)";
        EXPECT_LE(worst_over_bound(alone + " dq", first.dq, own.dq, own.dq_bound, 0.0), 1.0);
        EXPECT_LE(worst_over_bound(alone + " dk", first.dk, own.dk, own.dk_bound, 0.0), 1.0);
        EXPECT_LE(worst_over_bound(alone + " dv", first.dv, own.dv, own.dv_bound, 0.0), 1.0);
        EXPECT_LE(worst_over_bound(alone + " dg", first.dg, own.dg, own.dg_bound, 0.0), 1.0);
        EXPECT_LE(worst_over_bound(alone + " dbeta", first.dbeta, own.dbeta, own.dbeta_bound, 0.0), 1.0);
    }
    // The bounds are worst cases of every rounding at once, loose where the decay is weak (a chunk's T
    // then sums 64 × 64 bounds of |K Kᵀ|'s errors); the bf16 products' usual check keeps those shapes
    // able to fail.
    DELTABIT_EXPECT_CLOSE(tag + " o", first.o, want.o, kBf16);
    DELTABIT_EXPECT_CLOSE(tag + " dS", got.dstates, carry.dstates, kBf16);
    DELTABIT_EXPECT_CLOSE(tag + " W", got.w, carry.w, kBf16);
    DELTABIT_EXPECT_CLOSE(tag + " dq", first.dq, want.dq, kBf16);
    DELTABIT_EXPECT_CLOSE(tag + " dk", first.dk, want.dk, kBf16);
    DELTABIT_EXPECT_CLOSE(tag + " dv", first.dv, want.dv, kBf16);
    DELTABIT_EXPECT_CLOSE(tag + " dg", first.dg, want.dg, kBf16);
    DELTABIT_EXPECT_CLOSE(tag + " dbeta", first.dbeta, want.dbeta, kBf16);
    // memcmp: NaN (a value never written) compares unequal to itself under ==.
    auto same = [](const Vec& x, const Vec& y) {
        return x.size() == y.size() && std::memcmp(x.data(), y.data(), x.size() * sizeof(double)) == 0;
    };
    EXPECT_TRUE(same(first.o, second.o) && same(first.saved, second.saved) && same(first.scratch, second.scratch) &&
                same(first.dq, second.dq) && same(first.dk, second.dk) && same(first.dv, second.dv) &&
                same(first.dg, second.dg) && same(first.dbeta, second.dbeta))
        << tag << ": two runs differ";
    size_t unwritten = 0;
    for (double x : first.saved) unwritten += std::isnan(x);
    for (double x : got.dstates) unwritten += std::isnan(x);
    for (double x : got.w) unwritten += std::isnan(x);
    EXPECT_EQ(unwritten, 0u) << tag << ": saved or carried values the kernels did not write";
}

TEST(CudaTrainOps, DeltaRuleBf16TensorCores) {
    SKIP_WITHOUT_GPU();
    check_delta_rule_bf16(1, 1, 1, 1, 64, 32);            // one token
    check_delta_rule_bf16(2, 150, 1, 2, 64, 40);          // two sequences, 3 chunks (the last partial), Hv = 2·Hk, a partial value tile
    check_delta_rule_bf16(1, 130, 2, 4, 128, 128);        // qwen35-100m's heads: 4 value tiles, a chunk of 2 tokens
    check_delta_rule_bf16(1, 65, 1, 1, 128, 41);          // a chunk of one token; an odd value dim
    check_delta_rule_bf16(1, 100, 1, 1, 64, 64, 3.0);     // strong decays: e^γ underflows fp32 inside a chunk
    check_delta_rule_bf16(1, 200, 1, 3, 128, 32, 0.01);   // weak decays: states carried nearly whole, Hv = 3·Hk
    check_delta_rule_bf16(1, 150, 2, 4, 64, 64, 0.5, 2.0);    // queries of norm 2, keys of norm √2
    check_delta_rule_bf16(1, 100, 1, 2, 128, 96, 0.5, 2.0);   // the same at dk = 128, three value tiles
}

// The switch: bf16 at a key dim the tensor-core kernels are not built for, and fp32 at one they are,
// keep the fp32 kernels.
TEST(CudaTrainOps, DeltaRuleBf16KernelsOnlyWhereBuilt) {
    SKIP_WITHOUT_GPU();
    for (auto [math, dk] : {std::pair{cuda::GemmMath::bf16, 32}, {cuda::GemmMath::fp32, 64}}) {
        const cuda::ScopedGemmMath scoped(math);
        const int64_t T = 3, dv = 8;
        const DeltaRuleInputs in = delta_rule_inputs(1, T, 1, 1, dk, dv, 0.5);
        DeviceArray gq(in.q), gk(in.k), gv(in.v), gg(in.g), gbeta(in.beta), gdout(in.dout),
            go = DeviceArray::zeros(in.v.size()), gdq = DeviceArray::zeros(in.q.size()),
            gdk = DeviceArray::zeros(in.k.size()), gdv = DeviceArray::zeros(in.v.size()),
            gdg = DeviceArray::zeros(in.g.size()), gdbeta = DeviceArray::zeros(in.g.size()),
            gsaved = DeviceArray::zeros(size_t(cuda::delta_rule_saved_floats(1, T, 1, dk, dv))),
            gscratch = DeviceArray::zeros(size_t(cuda::delta_rule_scratch_floats(1, T, 1, dk, dv)));
        testing::MarkedKernels marks;
        cuda::delta_rule_forward(gq.get(), gk.get(), gv.get(), gg.get(), gbeta.get(), 1, T, 1, 1, dk, dv, go.get(),
                                 gsaved.get());
        cuda::delta_rule_backward(gq.get(), gk.get(), gv.get(), gg.get(), gbeta.get(), gdout.get(), gsaved.get(), 1, T,
                                  1, 1, dk, dv, gdq.get(), gdk.get(), gdv.get(), gdg.get(), gdbeta.get(),
                                  gscratch.get());
        EXPECT_TRUE(marks.ran("delta: forward_walk_kernel") && marks.ran("delta: backward_carry_kernel") &&
                    marks.ran("delta: backward_gradients_kernel") && !marks.ran("delta: forward_walk_mma_kernel") &&
                    !marks.ran("delta: backward_carry_mma_kernel") &&
                    !marks.ran("delta: backward_gradients_mma_kernel"))
            << "key dim " << dk;
    }
}

// The backward sums with plain stores and fixed orders (no atomics): two runs agree bit for bit.
TEST(CudaTrainOps, DeltaRuleBackwardIsDeterministic) {
    SKIP_WITHOUT_GPU();
    const int64_t B = 2, T = 130, Hk = 2, Hv = 4, dk = 16, dv = 40;
    const Vec q = normal_values(size_t(B * T * Hk * dk), 41, 0.25), k = normal_values(q.size(), 42, 0.25),
              v = normal_values(size_t(B * T * Hv * dv), 43), dout = normal_values(v.size(), 44);
    Vec g = normal_values(size_t(B * T * Hv), 45, 0.5), beta = normal_values(g.size(), 46);
    for (double& x : g) x = -std::fabs(x);
    for (double& x : beta) x = ref::sigmoid(x);
    DeviceArray gq(q), gk(k), gv(v), gg(g), gbeta(beta), gdout(dout), go = DeviceArray::zeros(v.size()),
        gsaved = DeviceArray::zeros(size_t(cuda::delta_rule_saved_floats(B, T, Hv, dk, dv))),
        gscratch = DeviceArray::zeros(size_t(cuda::delta_rule_scratch_floats(B, T, Hv, dk, dv)));
    cuda::delta_rule_forward(gq.get(), gk.get(), gv.get(), gg.get(), gbeta.get(), B, T, Hk, Hv, dk, dv, go.get(),
                             gsaved.get());
    std::vector<Vec> runs;
    for (int run = 0; run < 2; ++run) {
        DeviceArray gdq = stale(q.size()), gdk = stale(k.size()), gdv = stale(v.size()), gdg = stale(g.size()),
                    gdbeta = stale(g.size());
        cuda::delta_rule_backward(gq.get(), gk.get(), gv.get(), gg.get(), gbeta.get(), gdout.get(), gsaved.get(), B, T,
                                  Hk, Hv, dk, dv, gdq.get(), gdk.get(), gdv.get(), gdg.get(), gdbeta.get(),
                                  gscratch.get());
        Vec all;
        for (const DeviceArray* a : {&gdq, &gdk, &gdv, &gdg, &gdbeta}) {
            const Vec x = a->read();
            all.insert(all.end(), x.begin(), x.end());
        }
        runs.push_back(all);
    }
    EXPECT_EQ(runs[0], runs[1]);
}

TEST(CudaTrainOps, DeltaRuleRefusesKeysWiderThanItsSharedMemory) {
    SKIP_WITHOUT_GPU();
    DeviceArray x = DeviceArray::zeros(1);
    EXPECT_THROW(cuda::delta_rule_forward(x.get(), x.get(), x.get(), x.get(), x.get(), 1, 1, 1, 1,
                                          cuda::kDeltaMaxKeyDim + 1, 4, x.get(), x.get()),
                 Error);
}

#endif

}  // namespace
}  // namespace deltabit::train
