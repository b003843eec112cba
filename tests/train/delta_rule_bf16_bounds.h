// The chunked gated delta rule's forward in double (the formulas of train/reference_delta_chunked.h)
// with, for every output element, the error bound that the bf16 tensor-core forward's arithmetic implies
// (train/cuda/delta_rule_chunked_mma_kernels.cu). Layouts as the kernels: q, k [B·T][Hk][dk];
// v, o [B·T][Hv][dv]; g, beta [B·T][Hv]; value head h reads key head h / (Hv / Hk).
//
// The arithmetic, u = 2⁻⁹ (bf16's unit roundoff), w = 2u + u²: a product of two operands each rounded
// to bf16 errs by w·|ab|, and an operand that already carries an error Δ adds (1 + u)²·|a|·|Δ|. Per
// chunk, with S the exact state entering it and E_S the bound on its error (0 at the first chunk):
//   K Kᵀ, Q Kᵀ: (w + a)·Σ_x |k_ix k_jx| (resp. |q_ix k_jx|), a the accumulation constant below;
//     δA_ij = β_i e^{γ_i−γ_j}·that + a·(|A_ij| + [i = j]): the fp32 forming of A and the forward
//     substitution (backward error ≤ 64·2⁻²⁴·|I + A| per column) ride in a·|I + A|.
//   T = (I + A)^{-1}: T̃ − T = −T δA T̃, so |ΔT| ≤ |T|·δA·(|T| + |ΔT|), evaluated by three passes of that
//     fixed point from 0 (the first pass is the first-order term; the passes add the higher orders,
//     each smaller by the factor ‖|T|·δA‖ ≈ 1e-2 on the tests' shapes).
//   K S, Q S: (w + a)·Σ_x |k_ix S_xc| + (1 + u)²·Σ_x |k_ix|·E_S,xc.
//   x = β ⊙ (V − e^γ ⊙ K S) in fp32: β_i e_i·Δ(K S) + a·β_i(|v| + e_i |K S|).
//   V' = T x: (w + a)·Σ_j |T_ij x_j| + (1 + u)²·Σ_j (|ΔT_ij|(|x_j| + Δx_j) + |T_ij|·Δx_j).
//   O = e^γ ⊙ Q S + M V': e_i·Δ(Q S) + a·(e_i |Q S| + Σ_j |M_ij V'_j|) + w·Σ_j |M_ij V'_j|
//     + (1 + u)²·Σ_j (|ΔM_ij|(|V'_j| + ΔV'_j) + |M_ij|·ΔV'_j).
//   S ← λ S + Kᵀ (f ⊙ V'): E_S ← λ E_S + a·λ|S| + (w + a)·Σ_j |k_jx| f_j |V'_jc|
//     + (1 + u)²(1 + a)·Σ_j |k_jx| f_j ΔV'_jc.
// a = 4e-5 covers the fp32 arithmetic around the bf16 rounding: the tensor cores add the 16 products of
// a k-step and the accumulator as one block aligned to the largest and truncated (≤ 17·2⁻²² of the
// block's largest term a step, ops/cuda/tensor_core.cuh), 8 k-steps at dk = 128: 3.2e-5 of Σ|terms|; the
// rest (fp32 elementwise steps, e^γ rounded to fp32) is a few 2⁻²⁴.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

namespace deltabit::train::testing {

struct DeltaRuleWithBounds {
    std::vector<double> o, o_bound;
};

inline DeltaRuleWithBounds delta_rule_with_bf16_bounds(const std::vector<double>& q, const std::vector<double>& k,
                                                        const std::vector<double>& v, const std::vector<double>& g,
                                                        const std::vector<double>& beta, int64_t B, int64_t T,
                                                        int64_t Hk, int64_t Hv, int64_t dk, int64_t dv) {
    using Vec = std::vector<double>;
    const double u = std::ldexp(1.0, -9), w = 2 * u + u * u, a = 4e-5, grow = (1 + u) * (1 + u);
    constexpr int64_t L = 64;
    DeltaRuleWithBounds r{Vec(v.size(), 0.0), Vec(v.size(), 0.0)};
    auto sz = [](int64_t n) { return static_cast<size_t>(n); };
    for (int64_t b = 0; b < B; ++b)
        for (int64_t h = 0; h < Hv; ++h) {
            const int64_t kh = h / (Hv / Hk);
            auto kx = [&](int64_t t, int64_t x) { return k[sz(((b * T + t) * Hk + kh) * dk + x)]; };
            auto qx = [&](int64_t t, int64_t x) { return q[sz(((b * T + t) * Hk + kh) * dk + x)]; };
            auto vc = [&](int64_t t, int64_t c) { return v[sz(((b * T + t) * Hv + h) * dv + c)]; };
            auto gate = [&](const Vec& x, int64_t t) { return x[sz((b * T + t) * Hv + h)]; };
            auto out = [&](int64_t t, int64_t c) { return sz(((b * T + t) * Hv + h) * dv + c); };
            Vec S(sz(dk * dv), 0.0), ES(sz(dk * dv), 0.0);
            for (int64_t t0 = 0; t0 < T; t0 += L) {
                const int64_t n = std::min(L, T - t0);
                Vec gamma(sz(n)), e(sz(n)), f(sz(n));
                double sum = 0.0;
                for (int64_t i = 0; i < n; ++i) gamma[sz(i)] = sum += gate(g, t0 + i);
                for (int64_t i = 0; i < n; ++i) {
                    e[sz(i)] = std::exp(gamma[sz(i)]);
                    f[sz(i)] = std::exp(gamma[sz(n - 1)] - gamma[sz(i)]);
                }
                const double lambda = std::exp(gamma[sz(n - 1)]);
                // A, M and their bounds; T = (I + A)^{-1} by forward substitution in double.
                Vec A(sz(n * n), 0.0), dA(sz(n * n), 0.0), M(sz(n * n), 0.0), dM(sz(n * n), 0.0), Tm(sz(n * n), 0.0);
                for (int64_t i = 0; i < n; ++i) {
                    dA[sz(i * n + i)] = a;
                    for (int64_t j = 0; j <= i; ++j) {
                        double kk = 0.0, kk_mag = 0.0, qk = 0.0, qk_mag = 0.0;
                        for (int64_t x = 0; x < dk; ++x) {
                            kk += kx(t0 + i, x) * kx(t0 + j, x);
                            kk_mag += std::fabs(kx(t0 + i, x) * kx(t0 + j, x));
                            qk += qx(t0 + i, x) * kx(t0 + j, x);
                            qk_mag += std::fabs(qx(t0 + i, x) * kx(t0 + j, x));
                        }
                        const double decay = std::exp(gamma[sz(i)] - gamma[sz(j)]), bi = gate(beta, t0 + i);
                        M[sz(i * n + j)] = qk * decay;
                        dM[sz(i * n + j)] = decay * (w + a) * qk_mag + a * std::fabs(M[sz(i * n + j)]);
                        if (j < i) {
                            A[sz(i * n + j)] = bi * kk * decay;
                            dA[sz(i * n + j)] = bi * decay * (w + a) * kk_mag + a * std::fabs(A[sz(i * n + j)]);
                        }
                    }
                }
                for (int64_t col = 0; col < n; ++col)
                    for (int64_t i = col; i < n; ++i) {
                        double x = i == col ? 1.0 : 0.0;
                        for (int64_t j = col; j < i; ++j) x -= A[sz(i * n + j)] * Tm[sz(j * n + col)];
                        Tm[sz(i * n + col)] = x;
                    }
                // |ΔT| ≤ |T| δA (|T| + |ΔT|), three passes from 0.
                Vec dT(sz(n * n), 0.0), right(sz(n * n)), left(sz(n * n));
                for (int pass = 0; pass < 3; ++pass) {
                    for (int64_t i = 0; i < n * n; ++i) right[sz(i)] = std::fabs(Tm[sz(i)]) + dT[sz(i)];
                    for (int64_t i = 0; i < n; ++i)  // left = δA (|T| + |ΔT|)
                        for (int64_t c = 0; c < n; ++c) {
                            double s = 0.0;
                            for (int64_t j = 0; j < n; ++j) s += dA[sz(i * n + j)] * right[sz(j * n + c)];
                            left[sz(i * n + c)] = s;
                        }
                    for (int64_t i = 0; i < n; ++i)
                        for (int64_t c = 0; c < n; ++c) {
                            double s = 0.0;
                            for (int64_t j = 0; j < n; ++j) s += std::fabs(Tm[sz(i * n + j)]) * left[sz(j * n + c)];
                            dT[sz(i * n + c)] = s;
                        }
                }
                // The walk, one value column at a time (the columns of S evolve independently).
                Vec Snew(S.size()), ESnew(S.size());
                for (int64_t c = 0; c < dv; ++c) {
                    Vec x(sz(n)), dx(sz(n)), qs(sz(n)), dqs(sz(n)), vp(sz(n)), dvp(sz(n));
                    for (int64_t i = 0; i < n; ++i) {
                        double ks = 0.0, ks_mag = 0.0, ks_err = 0.0, qsum = 0.0, qs_mag = 0.0, qs_err = 0.0;
                        for (int64_t y = 0; y < dk; ++y) {
                            const double s = S[sz(y * dv + c)], es = ES[sz(y * dv + c)];
                            ks += kx(t0 + i, y) * s;
                            ks_mag += std::fabs(kx(t0 + i, y) * s);
                            ks_err += std::fabs(kx(t0 + i, y)) * es;
                            qsum += qx(t0 + i, y) * s;
                            qs_mag += std::fabs(qx(t0 + i, y) * s);
                            qs_err += std::fabs(qx(t0 + i, y)) * es;
                        }
                        const double bi = gate(beta, t0 + i), dks = (w + a) * ks_mag + grow * ks_err;
                        x[sz(i)] = bi * (vc(t0 + i, c) - e[sz(i)] * ks);
                        dx[sz(i)] = bi * e[sz(i)] * dks + a * bi * (std::fabs(vc(t0 + i, c)) + e[sz(i)] * std::fabs(ks));
                        qs[sz(i)] = qsum;
                        dqs[sz(i)] = (w + a) * qs_mag + grow * qs_err;
                    }
                    for (int64_t i = 0; i < n; ++i) {
                        double s = 0.0, mag = 0.0, err = 0.0;
                        for (int64_t j = 0; j <= i; ++j) {
                            const double t = Tm[sz(i * n + j)], et = dT[sz(i * n + j)];
                            s += t * x[sz(j)];
                            mag += std::fabs(t * x[sz(j)]);
                            err += et * (std::fabs(x[sz(j)]) + dx[sz(j)]) + std::fabs(t) * dx[sz(j)];
                        }
                        vp[sz(i)] = s;
                        dvp[sz(i)] = (w + a) * mag + grow * err;
                    }
                    for (int64_t i = 0; i < n; ++i) {
                        double s = e[sz(i)] * qs[sz(i)], mag = 0.0, err = 0.0;
                        for (int64_t j = 0; j <= i; ++j) {
                            const double m = M[sz(i * n + j)];
                            s += m * vp[sz(j)];
                            mag += std::fabs(m * vp[sz(j)]);
                            err += dM[sz(i * n + j)] * (std::fabs(vp[sz(j)]) + dvp[sz(j)]) + std::fabs(m) * dvp[sz(j)];
                        }
                        r.o[out(t0 + i, c)] = s;
                        r.o_bound[out(t0 + i, c)] = e[sz(i)] * dqs[sz(i)] + a * e[sz(i)] * std::fabs(qs[sz(i)]) +
                                                    (w + a) * mag + grow * err;
                    }
                    for (int64_t y = 0; y < dk; ++y) {
                        double s = lambda * S[sz(y * dv + c)], mag = 0.0, err = 0.0;
                        for (int64_t j = 0; j < n; ++j) {
                            const double kf = std::fabs(kx(t0 + j, y)) * f[sz(j)];
                            s += kx(t0 + j, y) * f[sz(j)] * vp[sz(j)];
                            mag += kf * std::fabs(vp[sz(j)]);
                            err += kf * dvp[sz(j)];
                        }
                        Snew[sz(y * dv + c)] = s;
                        ESnew[sz(y * dv + c)] = lambda * ES[sz(y * dv + c)] + a * lambda * std::fabs(S[sz(y * dv + c)]) +
                                                (w + a) * mag + grow * (1 + a) * err;
                    }
                }
                S.swap(Snew);
                ES.swap(ESnew);
            }
        }
    return r;
}

}  // namespace deltabit::train::testing
