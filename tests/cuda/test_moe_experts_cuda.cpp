// The grouped MoE experts (ops/moe/moe_experts_cuda.h) against the CPU reference ops composed as
// models/blocks.cpp moe_ffn composes them: per token and slot, cpu::matmul_int8_activations (quantised
// experts: the numerics the GPU path promises) or cpu::matmul (plain), cpu::swiglu or cpu::gelu_glu, the
// down product, Σ_j p·s·down in double, + sigmoid(gate)·shared. Hostile routings: experts that get no
// token, one expert getting every token, T = 1, T not a multiple of a row tile (16) or of a tensor-core tile of
// pairs (8), top_k 1 and 8, F and D not multiples of a tile or of an activation group of 128, odd K (bf16).
// Output and scratch start as NaN and end in a guard band (tests/cuda/op_parity_cuda.h).
//
// Both paths run every case on the same routing and are held to the reference: the tensor-core products
// (MoeExpertsArgs::tensor_cores, ops/moe/moe_experts_mma_cuda.cu) and the CUDA-core ones. The DiffusionGemma
// shapes (E 128, top-8, D 2816, F 704 at T 256, its canvas, and T 1024, its encoder) are checked on every
// `check_stride`-th token and the last (the reference is a naive loop); the others on every token.
//
// The bound, per output, from the arithmetic (u = 2^−24, one fp32 rounding; first order):
//   gate/up  g = Σ_k w_k·x_k over the int8-rounded x (codes equal to the reference's: the same quantiser on
//            the same floats), S = Σ|w_k·x_k|. Quantised, CUDA cores: per 16-byte unit an exact integer dot
//            times d_w·scale (one rounding), per lane in order, then 5 butterfly levels. Quantised, tensor
//            cores: per weight-scale group an exact integer dot times d_w·scale (one rounding), added by fmaf
//            in k order — G ≤ m groups, each add one rounding of a partial sum ≤ S. The reference forms each
//            q·scale in fp32 (one rounding), sums in double and rounds once: either way
//            |Δg| ≤ (m + 9)·u·S + u·|g|, m the units a row has (Σ|terms| ≤ S by the triangle inequality).
//            Plain on CUDA cores: the same with m = ⌈K/32⌉ a lane.
//            BF16 on tensor cores (fixed before the first run, from the kernel's arithmetic): x = hi + mid +
//            lo + r, |r| ≤ 2⁻²⁴·|x| (dense_gemm_cuda.h), each weight·part product exact. Per k16 step b, three
//            mma from a zero accumulator, lo then mid then hi; an mma adds its 16 products and C as one block
//            aligned to the largest and truncated, ≤ 17 terms × 2u of the largest (Fasi et al. 2021,
//            ops/cuda/tensor_core.cuh). With M_b the step's largest |w·x|: lo's terms ≤ 2⁻¹⁶(1 + 2⁻⁸)·M_b,
//            mid's ≤ 2⁻⁸(1 + 2⁻⁸)·M_b with |C| ≤ 2⁻¹²·M_b before it, hi's ≤ (1 + 2⁻⁸)·M_b with |C| ≤ M_b/16:
//            the step errs by ≤ 34u·M_b·(1 + 2⁻⁸ + 2⁻⁸(1 + 2⁻⁸) + 2⁻¹⁶) ≤ 35u·M_b ≤ 35u·S_b. Then ⌈K/16⌉ fp32
//            adds of the step sums in k order, each partial ≤ (1 + 2⁻⁷)·S: ≤ ⌈K/16⌉·(1 + 2⁻⁷)·u·S; r adds u·S.
//            So |Δg| ≤ 1.02·(⌈K/16⌉ + 36)·u·S + u·|g| (1.02 covers the (1 + 2⁻⁷) factors and second order).
//   act      f(g)·v with |f'| ≤ 1.13 (silu ≤ 1.10, gelu_tanh ≤ 1.13), expf/tanhf a few ulp:
//            δ = 1.13·|Δg|·|v| + |f(g)|·|Δv| + |Δg|·|Δv| + 8u·|act|.
//   down's input, per element k: plain, the act itself: c_k = δ_k. Quantised, act rounded to int8 per
//            group: where the interval act ± δ (amax moving by the group's largest δ) keeps the code, c_k =
//            δ_amax + 127u·scale (the scale moves, the code not); where it can cross a rounding boundary the
//            code may differ by one: c_k adds one quantum, 1.001·scale. Such elements are rare (counted below).
//   down     |Δ| ≤ (m + 9)·u·Σ|w_ik·a_k| + u·|down| + Σ_k |w_ik|·c_k.
//   combine  Σ_j |p·s|·|Δdown_j| + (top_k + 3)·u·Σ_j |p·s·down_j| + 6u·|sigmoid(g)·shared| (sigmoid_f ≤ ~3 ulp).
// A wrong expert, slot, token, row or scale moves outputs by O(1) (weights ±0.5, x ±1): far outside it.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "core/dtype.h"
#include "core/env_switch.h"
#include "core/error.h"
#include "core/half.h"
#include "core/quant.h"
#include "core/tensor.h"
#include "ops/activations.h"
#include "ops/gelu_glu.h"
#include "ops/matmul.h"
#include "ops/swiglu.h"
#include "cuda/op_parity_cuda.h"

#ifdef DELTABIT_HAVE_CUDA

#include "cuda/gemv_test_data.h"
#include "ops/moe/moe_experts_cuda.h"

namespace deltabit {
namespace {

constexpr double kU = 1.0 / 16777216.0;  // 2^−24
constexpr double kMaxGluSlope = 1.13;

// One stacked expert matrix: GGUF rows on the host (the reference reads them), their floats (for the
// bound), and the device copy the kernels read.
struct ExpertMatrix {
    DType dtype;
    int64_t rows, cols;
    std::vector<uint8_t> raw;
    std::vector<float> values;
    cuda::GemvWeights quantized;
    cuda::DeviceBuffer plain;

    WeightView host() const { return {raw.data(), dtype, rows, cols}; }
    cuda::ExpertMatrixView device() const {
        cuda::ExpertMatrixView v;
        v.quantized = gemv_layout_supports(dtype);
        if (v.quantized) v.q = quantized.view();
        else v.plain = {plain.get<uint8_t>(), dtype, rows, cols};
        return v;
    }
};

ExpertMatrix make_matrix(DType t, int64_t rows, int64_t cols, std::mt19937& rng) {
    std::uniform_real_distribution<float> u(-0.5f, 0.5f);
    ExpertMatrix m{t, rows, cols};
    std::vector<float> w(size_t(rows * cols));
    for (float& x : w) x = u(rng);
    const size_t row_bytes = dtype_bytes(t, uint64_t(cols));
    m.raw.resize(row_bytes * size_t(rows));
    m.values.resize(w.size());
    for (int64_t r = 0; r < rows; ++r) {
        quantize_row(t, w.data() + r * cols, m.raw.data() + size_t(r) * row_bytes, cols);
        dequantize_row(t, m.raw.data() + size_t(r) * row_bytes, m.values.data() + r * cols, cols);
    }
    if (gemv_layout_supports(t)) {
        m.quantized = cuda::upload_gemv_weights(m.host(), "test expert matrix");
    } else {
        m.plain = cuda::DeviceBuffer(m.raw.size());
        m.plain.upload(m.raw.data(), m.raw.size());
    }
    return m;
}

// The activations a matmul of `w` reads: int8-rounded per group for quantised weights (ops/matmul.h).
std::vector<double> rounded_input(const float* x, int64_t k, DType w) {
    std::vector<double> out(x, x + k);
    if (!gemv_layout_supports(w)) return out;
    const test::HostQuantized q = test::quantize_on_host(std::vector<float>(x, x + k));
    for (int64_t i = 0; i < k; ++i) out[size_t(i)] = double(q.q[size_t(i)]) * double(q.scale[size_t(i / 128)]);
    return out;
}

// The coefficient c of a product's bound |Δ| ≤ c·u·Σ|w·x| + u·|y| (the header's derivation): m + 9 with m the
// 16-byte units (quantised, either path) or ⌈K/32⌉ a lane (plain on CUDA cores); BF16 on tensor cores
// 1.02·(⌈K/16⌉ + 36).
double product_bound_terms(DType w, int64_t k, bool tensor_cores) {
    if (gemv_layout_supports(w)) return double(gemv_code_row_bytes(w, k) / 16) + 9;
    if (tensor_cores && w == DType::BF16) return 1.02 * (double((k + 15) / 16) + 36);
    return double((k + 31) / 32) + 9;
}

void reference_matmul(const float* x, const ExpertMatrix& m, int64_t first_row, int64_t n_rows, float* y) {
    const WeightView w = m.host().slice_rows(first_row, n_rows);
    if (gemv_layout_supports(m.dtype)) cpu::matmul_int8_activations(x, w, 1, y);
    else cpu::matmul(x, w, 1, y);
}

struct Case {
    std::string name;
    DType gate_type, down_type;
    int64_t T, D, F, E, top_k;
    enum Routing { random, one_expert, skip_some } routing;
    cuda::GluActivation act;
    bool expert_scale, shared;
    int64_t check_stride = 1;  // tokens held to the reference: every check_stride-th, and the last
    bool checked(int64_t t) const { return t % check_stride == 0 || t == T - 1; }
};

std::vector<int32_t> make_routing(const Case& c, std::mt19937& rng) {
    std::vector<int32_t> ids(size_t(c.T * c.top_k));
    std::vector<int32_t> pool;
    for (int32_t e = 0; e < c.E; ++e)
        if (c.routing != Case::skip_some || (e % 4 != 3)) pool.push_back(e);  // every 4th expert never chosen
    for (int64_t t = 0; t < c.T; ++t) {
        std::shuffle(pool.begin(), pool.end(), rng);  // distinct experts per token, in a random order
        for (int64_t j = 0; j < c.top_k; ++j)
            ids[size_t(t * c.top_k + j)] = c.routing == Case::one_expert ? int32_t(c.E / 2) : pool[size_t(j)];
    }
    return ids;
}

// x rounded once to bf16: what a bf16 product that lost its mid and lo parts would read.
std::vector<float> rounded_to_bf16(const float* x, int64_t n) {
    std::vector<float> out(static_cast<size_t>(n));
    for (int64_t i = 0; i < n; ++i) out[size_t(i)] = bf16_to_float(float_to_bf16(x[i]));
    return out;
}

struct Reference {
    std::vector<double> out, bound;
    int64_t uncertain_codes = 0;  // down-input codes that may legitimately differ by one
};

Reference reference(const Case& c, const std::vector<float>& x, const std::vector<int32_t>& ids,
                    const std::vector<float>& p, const std::vector<float>& scale, const std::vector<float>& shared,
                    const std::vector<float>& shared_gate, const ExpertMatrix& gate, const ExpertMatrix& up,
                    const ExpertMatrix& down, bool tensor_cores, bool bf16_inputs_rounded_once = false) {
    const int64_t T = c.T, D = c.D, F = c.F;
    const bool gelu = c.act == cuda::GluActivation::gelu_tanh;
    const double c_up = product_bound_terms(c.gate_type, D, tensor_cores);
    const double c_down = product_bound_terms(c.down_type, F, tensor_cores);
    Reference r{std::vector<double>(size_t(T * D), 0.0), std::vector<double>(size_t(T * D), 0.0)};
    std::vector<float> g(static_cast<size_t>(F)), v(static_cast<size_t>(F)), act(static_cast<size_t>(F)), y(static_cast<size_t>(D));
    std::vector<double> delta(static_cast<size_t>(F)), carried(static_cast<size_t>(F));
    std::vector<double> combine_mass(static_cast<size_t>(D));
    for (int64_t t = 0; t < T; ++t) {
        if (!c.checked(t)) continue;
        const float* xt = x.data() + t * D;
        const std::vector<double> xr = rounded_input(xt, D, c.gate_type);
        std::fill(combine_mass.begin(), combine_mass.end(), 0.0);
        for (int64_t j = 0; j < c.top_k; ++j) {
            const int64_t e = ids[size_t(t * c.top_k + j)];
            const std::vector<float> x_in = bf16_inputs_rounded_once && c.gate_type == DType::BF16
                                                ? rounded_to_bf16(xt, D)
                                                : std::vector<float>(xt, xt + D);
            reference_matmul(x_in.data(), gate, e * F, F, g.data());
            reference_matmul(x_in.data(), up, e * F, F, v.data());
            if (gelu) cpu::gelu_glu(g.data(), v.data(), F, act.data());
            else cpu::swiglu(g.data(), v.data(), F, act.data());
            for (int64_t n = 0; n < F; ++n) {
                double sg = 0, sv = 0;
                for (int64_t k = 0; k < D; ++k) {
                    sg += std::fabs(gate.values[size_t((e * F + n) * D + k)] * xr[size_t(k)]);
                    sv += std::fabs(up.values[size_t((e * F + n) * D + k)] * xr[size_t(k)]);
                }
                const double dg = c_up * kU * sg + kU * std::fabs(g[size_t(n)]);
                const double dv = c_up * kU * sv + kU * std::fabs(v[size_t(n)]);
                const double fg = gelu ? cpu::gelu_tanh(g[size_t(n)]) : cpu::silu(g[size_t(n)]);
                delta[size_t(n)] = kMaxGluSlope * dg * std::fabs(v[size_t(n)]) + std::fabs(fg) * dv + dg * dv +
                                   8 * kU * std::fabs(act[size_t(n)]);
            }
            // What down reads, and how far the GPU's copy of it can be from the reference's.
            const std::vector<double> ar = rounded_input(act.data(), F, c.down_type);
            if (gemv_layout_supports(c.down_type)) {
                const test::HostQuantized q = test::quantize_on_host(act);
                for (int64_t g0 = 0; g0 < F; g0 += 128) {
                    const int64_t g1 = std::min(F, g0 + 128);
                    double amax = 0, d_amax = 0;
                    for (int64_t k = g0; k < g1; ++k) {
                        amax = std::max(amax, std::fabs(double(act[size_t(k)])));
                        d_amax = std::max(d_amax, delta[size_t(k)]);
                    }
                    const double s = double(q.scale[size_t(g0 / 128)]);
                    for (int64_t k = g0; k < g1; ++k) {
                        double c_k = d_amax + 127 * kU * s;
                        if (amax > 0) {
                            const double z = double(act[size_t(k)]) * 127.0 / amax;
                            const double dz = 127.0 * (delta[size_t(k)] + d_amax) / std::max(amax - d_amax, 1e-30) +
                                              8 * kU * (std::fabs(z) + 127.0);
                            if (std::floor(z - dz + 0.5) != std::floor(z + dz + 0.5)) {
                                c_k += 1.001 * (amax + d_amax) / 127.0;
                                ++r.uncertain_codes;
                            }
                        }
                        carried[size_t(k)] = c_k;
                    }
                }
            } else {
                carried = delta;
            }
            const std::vector<float> act_in = bf16_inputs_rounded_once && c.down_type == DType::BF16
                                                  ? rounded_to_bf16(act.data(), F)
                                                  : act;
            reference_matmul(act_in.data(), down, e * D, D, y.data());
            const double weight = double(p[size_t(t * c.top_k + j)]) * (c.expert_scale ? double(scale[size_t(e)]) : 1.0);
            for (int64_t i = 0; i < D; ++i) {
                double mass = 0, moved = 0;
                for (int64_t k = 0; k < F; ++k) {
                    const double w = std::fabs(down.values[size_t((e * D + i) * F + k)]);
                    mass += w * std::fabs(ar[size_t(k)]);
                    moved += w * carried[size_t(k)];
                }
                const double d_down = c_down * kU * mass + kU * std::fabs(y[size_t(i)]) + moved;
                r.out[size_t(t * D + i)] += weight * double(y[size_t(i)]);
                r.bound[size_t(t * D + i)] += std::fabs(weight) * d_down;
                combine_mass[size_t(i)] += std::fabs(weight * double(y[size_t(i)]));
            }
        }
        for (int64_t i = 0; i < D; ++i) {
            double& b = r.bound[size_t(t * D + i)];
            b += double(c.top_k + 3) * kU * combine_mass[size_t(i)];
            if (c.shared) {
                const double term = cpu::sigmoid(shared_gate[size_t(t)]) * double(shared[size_t(t * D + i)]);
                r.out[size_t(t * D + i)] += term;
                b += 6 * kU * std::fabs(term) + kU * std::fabs(r.out[size_t(t * D + i)]);
            }
        }
    }
    return r;
}

class MoeExpertsCuda : public ::testing::TestWithParam<Case> {};

TEST_P(MoeExpertsCuda, MatchesCpuReferenceWithinTheArithmeticBound) {
    DELTABIT_REQUIRE_GPU();
    const Case& c = GetParam();
    std::mt19937 rng(1234);
    std::uniform_real_distribution<float> u(-1.0f, 1.0f);
    const ExpertMatrix gate = make_matrix(c.gate_type, c.E * c.F, c.D, rng);
    const ExpertMatrix up = make_matrix(c.gate_type, c.E * c.F, c.D, rng);
    const ExpertMatrix down = make_matrix(c.down_type, c.E * c.D, c.F, rng);
    std::vector<float> x(size_t(c.T * c.D)), p(size_t(c.T * c.top_k)), scale(size_t(c.E)),
        shared(size_t(c.T * c.D)), shared_gate(size_t(c.T));
    for (float& v : x) v = u(rng);
    for (float& v : p) v = 0.5f + 0.5f * u(rng);
    for (float& v : scale) v = 1.0f + 0.5f * u(rng);
    for (float& v : shared) v = u(rng);
    for (float& v : shared_gate) v = 4.0f * u(rng);
    const std::vector<int32_t> ids = make_routing(c, rng);

    const test::GuardedDeviceArray<float> d_x(x), d_p(p), d_scale(scale), d_shared(shared), d_gate(shared_gate);
    const test::GuardedDeviceArray<int32_t> d_ids(ids);
    cuda::MoeExpertsArgs a;
    a.x = d_x.get();
    a.n_tokens = c.T;
    a.dim = c.D;
    a.n_expert = c.E;
    a.expert_ff = c.F;
    a.top_k = c.top_k;
    a.ids = d_ids.get();
    a.weights = d_p.get();
    a.expert_scale = c.expert_scale ? d_scale.get() : nullptr;
    a.gate = gate.device();
    a.up = up.device();
    a.down = down.device();
    a.activation = c.act;
    if (c.shared) {
        a.shared = d_shared.get();
        a.shared_gate = d_gate.get();
    }
    const bool mma_enabled = env_switch("DELTABIT_MOE_MMA", true);
    const auto mma_takes = [&](DType t) { return gemv_layout_supports(t) || t == DType::BF16; };
    const bool plain_bf16 = c.gate_type == DType::BF16 || c.down_type == DType::BF16;
    Reference ref;  // the bound differs between the paths only for BF16 products
    // BF16 products: beside the worst-case bound (which grows with K faster than real errors), the mean error is
    // held to fp32's class, as tests/cuda/test_plain_gemm_cuda.cpp does. Against the error of bf16 products whose
    // inputs were rounded once to bf16 (each input within 2⁻⁸), an fp32-class path errs ~2⁻¹⁶ as much (2⁻²⁴ per
    // input and per rounding, act's and the combine's included), one that dropped the lo part (inputs within
    // 2⁻¹⁶) ~2⁻⁸ as much; the H200's cuBLAS products measured 5e-5 to 1.7e-4 with three parts and 1.3e-3 to
    // 1.9e-3 with two (docs/notes/diffusion-speed.md). The gate, 2⁻¹¹ ≈ 4.9e-4, lies between the classes.
    // (Only where both products are BF16: an int8 code of down's input flipped by an fp32 rounding moves an output
    // by a quantum, which the worst-case bound allows for and this mean would not.)
    const bool all_bf16 = c.gate_type == DType::BF16 && c.down_type == DType::BF16;
    const Reference once = all_bf16 ? reference(c, x, ids, p, scale, shared, shared_gate, gate, up, down, true, true)
                                      : Reference{};
    for (const bool tensor_cores : {true, false}) {
        const std::string name = c.name + (tensor_cores ? " (tensor cores)" : " (CUDA cores)");
        if (tensor_cores || plain_bf16 || ref.out.empty())
            ref = reference(c, x, ids, p, scale, shared, shared_gate, gate, up, down, tensor_cores);
        a.tensor_cores = tensor_cores;
        const test::GuardedDeviceArray<float> d_out(size_t(c.T * c.D));  // NaN until written
        a.out = d_out.get();
        const test::GuardedDeviceArray<uint8_t> scratch(cuda::moe_experts_scratch_bytes(a));
        const cuda::MoeLaunchReport report = cuda::moe_experts(a, scratch.get(), nullptr);
        const std::vector<float> got = d_out.download(name + " out");
        scratch.download(name + " scratch");  // its guard band
        const int quantized_products = int(gemv_layout_supports(c.gate_type)) + int(gemv_layout_supports(c.down_type));
        EXPECT_EQ(report.launches, 4 + quantized_products) << "sort, gate+up, down, combine, + a row quantiser each";
        const int want_mma = tensor_cores && mma_enabled ? int(mma_takes(c.gate_type)) + int(mma_takes(c.down_type)) : 0;
        EXPECT_EQ(report.mma_products, want_mma) << name << ": products on tensor cores";

        double worst_ratio = 0, worst = 0, biggest = 0, loosest = 0;
        int64_t over = 0, unwritten = 0;
        for (size_t i = 0; i < got.size(); ++i) {
            if (!std::isfinite(got[i])) ++unwritten;
            if (!c.checked(int64_t(i) / c.D)) continue;
            const double err = std::isnan(got[i]) ? INFINITY : std::fabs(double(got[i]) - ref.out[i]);
            worst = std::max(worst, err);
            biggest = std::max(biggest, std::fabs(ref.out[i]));
            worst_ratio = std::max(worst_ratio, err / ref.bound[i]);
            loosest = std::max(loosest, ref.bound[i]);
            if (!(err <= ref.bound[i])) {
                if (over++ < 5)
                    ADD_FAILURE() << name << ": out[" << i / size_t(c.D) << "][" << i % size_t(c.D) << "] = " << got[i]
                                  << ", reference " << ref.out[i] << ", bound " << ref.bound[i];
            }
        }
        EXPECT_EQ(over, 0) << name;
        if (all_bf16) {
            double mean_error = 0, mean_rounded_once = 0;
            for (size_t i = 0; i < got.size(); ++i) {
                if (!c.checked(int64_t(i) / c.D)) continue;
                mean_error += std::fabs(double(got[i]) - ref.out[i]);
                mean_rounded_once += std::fabs(once.out[i] - ref.out[i]);
            }
            std::printf("[ moe ] %-46s mean error %.3g of bf16-rounded inputs'\n", name.c_str(),
                        mean_error / mean_rounded_once);
            EXPECT_LT(mean_error, 0x1.0p-11 * mean_rounded_once) << name << ": not fp32 class (a part of the split lost?)";
        }
        EXPECT_EQ(unwritten, 0) << name << ": outputs left NaN or not finite (every token, checked or not)";
        std::printf("[ moe ] %-46s max|out| %.3g, worst |err| %.3g = %.4f of its bound (bounds <= %.3g); %lld uncertain codes\n",
                    name.c_str(), biggest, worst, worst_ratio, loosest, (long long)ref.uncertain_codes);

        // The same routing again: bit for bit the same output (no float atomics, a fixed order).
        cuda::moe_experts(a, scratch.get(), nullptr);
        const std::vector<float> again = d_out.download(name + " out, second run");
        EXPECT_EQ(std::memcmp(got.data(), again.data(), got.size() * sizeof(float)), 0) << name << ": two runs differ";
    }
}

using R = Case::Routing;
constexpr auto kSilu = cuda::GluActivation::silu;
constexpr auto kGelu = cuda::GluActivation::gelu_tanh;
INSTANTIATE_TEST_SUITE_P(
    Shapes, MoeExpertsCuda,
    ::testing::Values(
        Case{"q1_0_every_token_to_one_expert", DType::Q1_0, DType::Q1_0, 33, 256, 256, 8, 1, R::one_expert, kSilu, false, true},
        Case{"q1_0_T1_top8_of_64", DType::Q1_0, DType::Q1_0, 1, 384, 128, 64, 8, R::random, kSilu, false, true},
        Case{"q1_0_T67_top8_gaps", DType::Q1_0, DType::Q1_0, 67, 256, 384, 12, 8, R::skip_some, kSilu, false, false},
        Case{"q4_0_F96_partial_group_gelu", DType::Q4_0, DType::Q4_0, 19, 160, 96, 10, 2, R::skip_some, kGelu, true, false},
        Case{"q8_0_T130_top4_scale", DType::Q8_0, DType::Q8_0, 130, 96, 160, 32, 4, R::random, kGelu, true, true},
        Case{"q2_0_gate_q8_0_down", DType::Q2_0, DType::Q8_0, 17, 256, 64, 6, 3, R::random, kSilu, false, true},
        Case{"q2_0_g64_top8_of_8", DType::Q2_0_G64, DType::Q2_0_G64, 5, 192, 128, 8, 8, R::random, kSilu, false, false},
        Case{"bf16_F40_D72_gaps", DType::BF16, DType::BF16, 19, 72, 40, 5, 2, R::skip_some, kSilu, false, true},
        Case{"f16_T1_top1_gelu_scale", DType::F16, DType::F16, 1, 40, 24, 3, 1, R::random, kGelu, true, false},
        Case{"f32_gate_q4_0_down", DType::F32, DType::Q4_0, 9, 56, 64, 8, 8, R::one_expert, kSilu, false, true},
        // Tensor-core edges: T below one n8 tile of pairs, every pair on one expert, odd K for the bf16 pairs.
        Case{"q8_0_T5_top8_gaps", DType::Q8_0, DType::Q8_0, 5, 224, 96, 16, 8, R::skip_some, kSilu, false, true},
        Case{"q4_0_T13_all_to_one_of_128", DType::Q4_0, DType::Q4_0, 13, 2816, 704, 128, 8, R::one_expert, kGelu, true, false},
        Case{"bf16_T29_all_to_one_gelu", DType::BF16, DType::BF16, 29, 264, 88, 16, 4, R::one_expert, kGelu, true, true},
        Case{"bf16_odd_K_gaps", DType::BF16, DType::BF16, 21, 37, 21, 6, 2, R::skip_some, kSilu, false, false},
        Case{"bf16_gate_q8_0_down", DType::BF16, DType::Q8_0, 11, 128, 64, 8, 3, R::random, kSilu, true, false},
        // DiffusionGemma-26B-A4B's experts (E 128, top-8, D 2816, F 704, GELU, per-expert scale): the canvas
        // (T 256, ~16 pairs an expert) and the encoder (T 1024, ~64), tokens sampled for the reference.
        Case{"q4_0_dg_canvas_T256", DType::Q4_0, DType::Q4_0, 256, 2816, 704, 128, 8, R::random, kGelu, true, false, 8},
        Case{"q4_0_dg_encoder_T1024", DType::Q4_0, DType::Q4_0, 1024, 2816, 704, 128, 8, R::random, kGelu, true, false, 32},
        Case{"q8_0_dg_canvas_T256", DType::Q8_0, DType::Q8_0, 256, 2816, 704, 128, 8, R::random, kGelu, true, false, 8},
        Case{"q8_0_dg_encoder_T1024_gaps", DType::Q8_0, DType::Q8_0, 1024, 2816, 704, 128, 8, R::skip_some, kGelu, true, false, 32},
        Case{"bf16_dg_canvas_T256", DType::BF16, DType::BF16, 256, 2816, 704, 128, 8, R::random, kGelu, true, false, 8},
        Case{"bf16_dg_encoder_T1024", DType::BF16, DType::BF16, 1024, 2816, 704, 128, 8, R::random, kGelu, true, false, 32}),
    [](const auto& info) { return info.param.name; });

// Shapes that disagree are refused before anything is launched (host-only: runs without a GPU too).
TEST(MoeExpertsCudaShapes, RefusesMismatchedMatrices) {
    cuda::MoeExpertsArgs a;
    a.n_tokens = 1;
    a.dim = 64;
    a.n_expert = 4;
    a.expert_ff = 32;
    a.top_k = 2;
    const int dummy = 0;
    auto plain = [&](int64_t rows, int64_t cols) {
        cuda::ExpertMatrixView v;
        v.plain = {&dummy, DType::F32, rows, cols};
        return v;
    };
    a.gate = plain(4 * 32, 64);
    a.up = plain(4 * 32, 64);
    a.down = plain(4 * 64 - 1, 32);
    try {
        cuda::moe_experts(a, nullptr, nullptr);
        FAIL() << "a down matrix one row short was accepted";
    } catch (const Error& e) {
        EXPECT_NE(std::string(e.what()).find("down is 255x32, expected 256x32"), std::string::npos) << e.what();
    }
    a.down = plain(4 * 64, 32);
    a.top_k = 5;
    EXPECT_THROW(cuda::moe_experts(a, nullptr, nullptr), Error);
    a.top_k = 2;
    a.up.plain.dtype = DType::F16;
    EXPECT_THROW(cuda::moe_experts(a, nullptr, nullptr), Error);
}

}  // namespace
}  // namespace deltabit

#endif  // DELTABIT_HAVE_CUDA
