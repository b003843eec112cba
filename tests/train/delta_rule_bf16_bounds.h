// The chunked gated delta rule's forward, its backward's carry and its gradients in double (the formulas
// of train/reference_delta_chunked.h) with, for every output element, the error bound that the bf16
// tensor-core kernels' arithmetic implies (train/cuda/delta_rule_chunked_mma_kernels.cu). Layouts as the kernels: q, k [B·T][Hk][dk];
// v, o [B·T][Hv][dv]; g, beta [B·T][Hv]; value head h reads key head h / (Hv / Hk).
//
// The arithmetic, u = 2⁻⁸ (bf16's unit roundoff: 8 significant bits, so round to nearest errs by at most
// half of 2⁻⁷ relative; e.g. 1 + 2⁻⁸ rounds to 1), w = 2u + u²: a product of two operands each rounded
// to bf16 errs by w·|ab|, and an operand that already carries an error Δ adds (1 + u)²·|a|·|Δ|.
// Each chunk's own arithmetic, with the state S entering it exact:
//   K Kᵀ, Q Kᵀ: (w + a)·Σ_x |k_ix k_jx| (resp. |q_ix k_jx|), a the accumulation constant below;
//     δA_ij = β_i e^{γ_i−γ_j}·that + a·(|A_ij| + [i = j]): the fp32 forming of A and the forward
//     substitution (backward error ≤ 64·2⁻²⁴·|I + A| per column) ride in a·|I + A|.
//   T = (I + A)^{-1}: T̃ − T = −T δA T̃, so |ΔT| ≤ |T|·δA·(|T| + |ΔT|), evaluated by three passes of that
//     fixed point from 0 (the first pass is the first-order term; the next ones add the higher orders,
//     each smaller by the factor ‖|T|·δA‖).
//   K S, Q S: (w + a)·Σ_x |k_ix S_xc|.
//   x = β ⊙ (V − e^γ ⊙ K S) in fp32: β_i e_i·Δ(K S) + a·β_i(|v| + e_i |K S|).
//   V' = T x: (w + a)·Σ_j |T_ij x_j| + (1 + u)²·Σ_j (|ΔT_ij|(|x_j| + Δx_j) + |T_ij|·Δx_j).
//   O = e^γ ⊙ Q S + M V': e_i·Δ(Q S) + a·(e_i |Q S| + Σ_j |M_ij V'_j|) + w·Σ_j |M_ij V'_j|
//     + (1 + u)²·Σ_j (|ΔM_ij|(|V'_j| + ΔV'_j) + |M_ij|·ΔV'_j).
//   S ← λ S + Kᵀ (f ⊙ V'): a·λ|S| + (w + a)·Σ_j |k_jx| f_j |V'_jc| + (1 + u)²(1 + a)·Σ_j |k_jx| f_j ΔV'_jc.
// The state's error then travels on: to first order in u, an error ΔS entering a chunk leaves it as
// P ΔS and adds G ΔS to its o (the derivatives of the chunk's formulas in S: forward_propagation), so
// chunk c's o carries Σ_{j<c} |G_c P_{c−1} ⋯ P_{j+1}|·L_j, L_j the bound of chunk j's own error in the
// state. Taking |·| of the product, not the product of |·|, keeps the cancellation the recurrence has
// (a componentwise carry of |P| grew the bound to 4,000× the values over four weakly decaying chunks).
// The terms dropped are O(u²) relative. The bounds stay worst cases: where the decay is weak (γ ≈ 0
// across a chunk) T sums 64 × 64 worst-case errors of K Kᵀ and the bound reaches the values' own size,
// so the tests also hold these outputs to the bf16 products' relative tolerance.
// a = 4e-5 covers the fp32 arithmetic around the bf16 rounding: the tensor cores add the 16 products of
// a k-step and the accumulator as one block aligned to the largest and truncated (≤ 17·2⁻²² of the
// block's largest term a step, ops/cuda/tensor_core.cuh), 8 k-steps at dk = 128: 3.2e-5 of Σ|terms|; the
// rest (fp32 elementwise steps, e^γ rounded to fp32) is a few 2⁻²⁴.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <vector>

namespace deltabit::train::testing {

namespace delta_rule_bounds {

using Vec = std::vector<double>;
inline size_t sz(int64_t n) { return static_cast<size_t>(n); }

// u, w, a and (1 + u)² of the header comment.
struct Constants {
    double u = std::ldexp(1.0, -8), w = 2 * u + u * u, a = 4e-5, grow = (1 + u) * (1 + u);
};

// One value head's view of the inputs.
struct Head {
    const Vec &q, &k, &v, &g, &beta;
    int64_t T, Hk, Hv, dk, dv, b, h;
    int64_t kh() const { return h / (Hv / Hk); }
    double kx(int64_t t, int64_t x) const { return k[sz(((b * T + t) * Hk + kh()) * dk + x)]; }
    double qx(int64_t t, int64_t x) const { return q[sz(((b * T + t) * Hk + kh()) * dk + x)]; }
    size_t value(int64_t t, int64_t c) const { return sz(((b * T + t) * Hv + h) * dv + c); }
    double gate(int64_t t) const { return g[sz((b * T + t) * Hv + h)]; }
    double beta_at(int64_t t) const { return beta[sz((b * T + t) * Hv + h)]; }
};

// A chunk's decays and factors, exact, with the bounds on the errors of the factors kernel's M and T.
struct Factors {
    int64_t t0, n;
    Vec e, f;
    double lambda;
    Vec M, dM, T, dT;  // [n][n]
};

inline Factors chunk_factors(const Head& hd, int64_t t0, int64_t n) {
    const Constants k;
    Factors c{t0, n, Vec(sz(n)), Vec(sz(n)), 0.0, Vec(sz(n * n), 0.0), Vec(sz(n * n), 0.0), Vec(sz(n * n), 0.0),
              Vec(sz(n * n), 0.0)};
    Vec gamma(sz(n));
    double sum = 0.0;
    for (int64_t i = 0; i < n; ++i) gamma[sz(i)] = sum += hd.gate(t0 + i);
    for (int64_t i = 0; i < n; ++i) {
        c.e[sz(i)] = std::exp(gamma[sz(i)]);
        c.f[sz(i)] = std::exp(gamma[sz(n - 1)] - gamma[sz(i)]);
    }
    c.lambda = std::exp(gamma[sz(n - 1)]);
    Vec A(sz(n * n), 0.0), dA(sz(n * n), 0.0);
    for (int64_t i = 0; i < n; ++i) {
        dA[sz(i * n + i)] = k.a;
        for (int64_t j = 0; j <= i; ++j) {
            double kk = 0.0, kk_mag = 0.0, qk = 0.0, qk_mag = 0.0;
            for (int64_t x = 0; x < hd.dk; ++x) {
                kk += hd.kx(t0 + i, x) * hd.kx(t0 + j, x);
                kk_mag += std::fabs(hd.kx(t0 + i, x) * hd.kx(t0 + j, x));
                qk += hd.qx(t0 + i, x) * hd.kx(t0 + j, x);
                qk_mag += std::fabs(hd.qx(t0 + i, x) * hd.kx(t0 + j, x));
            }
            const double decay = std::exp(gamma[sz(i)] - gamma[sz(j)]), bi = hd.beta_at(t0 + i);
            c.M[sz(i * n + j)] = qk * decay;
            c.dM[sz(i * n + j)] = decay * (k.w + k.a) * qk_mag + k.a * std::fabs(c.M[sz(i * n + j)]);
            if (j < i) {
                A[sz(i * n + j)] = bi * kk * decay;
                dA[sz(i * n + j)] = bi * decay * (k.w + k.a) * kk_mag + k.a * std::fabs(A[sz(i * n + j)]);
            }
        }
    }
    for (int64_t col = 0; col < n; ++col)
        for (int64_t i = col; i < n; ++i) {
            double x = i == col ? 1.0 : 0.0;
            for (int64_t j = col; j < i; ++j) x -= A[sz(i * n + j)] * c.T[sz(j * n + col)];
            c.T[sz(i * n + col)] = x;
        }
    // |ΔT| ≤ |T| δA (|T| + |ΔT|), three passes from 0.
    Vec right(sz(n * n)), left(sz(n * n));
    for (int pass = 0; pass < 3; ++pass) {
        for (int64_t i = 0; i < n * n; ++i) right[sz(i)] = std::fabs(c.T[sz(i)]) + c.dT[sz(i)];
        for (int64_t i = 0; i < n; ++i)
            for (int64_t col = 0; col < n; ++col) {
                double s = 0.0;
                for (int64_t j = 0; j < n; ++j) s += dA[sz(i * n + j)] * right[sz(j * n + col)];
                left[sz(i * n + col)] = s;
            }
        for (int64_t i = 0; i < n; ++i)
            for (int64_t col = 0; col < n; ++col) {
                double s = 0.0;
                for (int64_t j = 0; j < n; ++j) s += std::fabs(c.T[sz(i * n + j)]) * left[sz(j * n + col)];
                c.dT[sz(i * n + col)] = s;
            }
    }
    return c;
}

// Row-major dense products and absolute values for the propagation below.
inline Vec product(const Vec& a, const Vec& b, int64_t n, int64_t m, int64_t p) {  // [n][m] · [m][p]
    Vec c(sz(n * p), 0.0);
    for (int64_t i = 0; i < n; ++i)
        for (int64_t l = 0; l < m; ++l) {
            const double x = a[sz(i * m + l)];
            if (x != 0.0)
                for (int64_t j = 0; j < p; ++j) c[sz(i * p + j)] += x * b[sz(l * p + j)];
        }
    return c;
}
inline Vec absolute(Vec x) {
    for (double& e : x) e = std::fabs(e);
    return x;
}
inline Vec identity(int64_t n) {
    Vec x(sz(n * n), 0.0);
    for (int64_t i = 0; i < n; ++i) x[sz(i * n + i)] = 1.0;
    return x;
}

// How an error ΔS in the state entering a chunk moves what the chunk computes, to first order (the
// derivatives of the chunk's formulas in S, at the exact T and M), with X = T diag(β e^γ) K [n][dk]:
//   the state after it: P ΔS, P = λI − Kᵀ diag(f) X [dk][dk];   o: G ΔS, G = diag(e^γ) Q − M X [n][dk].
// The carry's, in dS at the chunk's end, with X' = Tᵀ diag(f) K: dS before it P' = λI − Kᵀ diag(e^γ β) X',
// W: G' = X'. The forward's V' moves by V ΔS, V = −X (the carry leaves V empty).
struct Propagation {
    Vec P, G, V;
};

inline Propagation forward_propagation(const Head& hd, const Factors& fc) {
    const int64_t n = fc.n, dk = hd.dk;
    Vec X(sz(n * dk), 0.0);
    for (int64_t i = 0; i < n; ++i)
        for (int64_t l = 0; l <= i; ++l) {
            const double t = fc.T[sz(i * n + l)] * hd.beta_at(fc.t0 + l) * fc.e[sz(l)];
            for (int64_t y = 0; y < dk; ++y) X[sz(i * dk + y)] += t * hd.kx(fc.t0 + l, y);
        }
    Propagation p{identity(dk), Vec(sz(n * dk), 0.0), X};
    for (double& x : p.V) x = -x;
    for (double& x : p.P) x *= fc.lambda;
    for (int64_t i = 0; i < n; ++i)
        for (int64_t x = 0; x < dk; ++x) {
            const double kf = hd.kx(fc.t0 + i, x) * fc.f[sz(i)];
            for (int64_t y = 0; y < dk; ++y) p.P[sz(x * dk + y)] -= kf * X[sz(i * dk + y)];
        }
    for (int64_t i = 0; i < n; ++i)
        for (int64_t y = 0; y < dk; ++y) {
            double g = fc.e[sz(i)] * hd.qx(fc.t0 + i, y);
            for (int64_t l = 0; l <= i; ++l) g -= fc.M[sz(i * n + l)] * X[sz(l * dk + y)];
            p.G[sz(i * dk + y)] = g;
        }
    return p;
}

inline Propagation carry_propagation(const Head& hd, const Factors& fc) {
    const int64_t n = fc.n, dk = hd.dk;
    Propagation p{identity(dk), Vec(sz(n * dk), 0.0), {}};
    for (int64_t i = 0; i < n; ++i)
        for (int64_t l = i; l < n; ++l) {
            const double t = fc.T[sz(l * n + i)] * fc.f[sz(l)];
            for (int64_t y = 0; y < dk; ++y) p.G[sz(i * dk + y)] += t * hd.kx(fc.t0 + l, y);
        }
    for (double& x : p.P) x *= fc.lambda;
    for (int64_t i = 0; i < n; ++i)
        for (int64_t x = 0; x < dk; ++x) {
            const double kb = hd.kx(fc.t0 + i, x) * fc.e[sz(i)] * hd.beta_at(fc.t0 + i);
            for (int64_t y = 0; y < dk; ++y) p.P[sz(x * dk + y)] -= kb * p.G[sz(i * dk + y)];
        }
    return p;
}

}  // namespace delta_rule_bounds

// o with its bound; and what the backward's gradients kernel reads of the forward's `saved`: the state
// entering every chunk [B][Hv][chunks][dk][dv] and V' per token [B·T][Hv][dv], exact, with the bounds of
// the walk's errors in them (its own chunk's for V', and the earlier chunks' carried in through the state).
struct DeltaRuleWithBounds {
    std::vector<double> o, o_bound, states, states_bound, v_new, v_new_bound;
};

inline DeltaRuleWithBounds delta_rule_with_bf16_bounds(const std::vector<double>& q, const std::vector<double>& k,
                                                        const std::vector<double>& v, const std::vector<double>& g,
                                                        const std::vector<double>& beta, int64_t B, int64_t T,
                                                        int64_t Hk, int64_t Hv, int64_t dk, int64_t dv) {
    using namespace delta_rule_bounds;
    const Constants K;
    const double w = K.w, a = K.a, grow = K.grow;
    constexpr int64_t L = 64;
    const int64_t chunks = (T + L - 1) / L;
    const size_t states = sz(B * Hv * chunks * dk * dv);
    DeltaRuleWithBounds r{Vec(v.size(), 0.0), Vec(v.size(), 0.0), Vec(states, 0.0),
                          Vec(states, 0.0),   Vec(v.size(), 0.0), Vec(v.size(), 0.0)};
    for (int64_t b = 0; b < B; ++b)
        for (int64_t h = 0; h < Hv; ++h) {
            const Head hd{q, k, v, g, beta, T, Hk, Hv, dk, dv, b, h};
            Vec S(sz(dk * dv), 0.0), Snew(S.size());
            // phi[j] = P of the chunks after j up to the current one: how chunk j's own state error
            // reaches the state entering the current chunk; local[j] bounds that error.
            std::vector<Vec> phi, local;
            for (int64_t t0 = 0; t0 < T; t0 += L) {
                const int64_t n = std::min(L, T - t0);
                const size_t at = sz(((b * Hv + h) * chunks + t0 / L) * dk * dv);
                std::copy(S.begin(), S.end(), r.states.begin() + std::ptrdiff_t(at));
                for (size_t j = 0; j < phi.size(); ++j) {
                    const Vec carried = product(absolute(phi[j]), local[j], dk, dk, dv);
                    for (size_t x = 0; x < carried.size(); ++x) r.states_bound[at + x] += carried[x];
                }
                const Factors fc = chunk_factors(hd, t0, n);
                const Vec &e = fc.e, &f = fc.f;
                Vec local_state(S.size());
                // The chunk's exact values and the errors of its own arithmetic (an exact S entering it).
                for (int64_t c = 0; c < dv; ++c) {
                    Vec x(sz(n)), dx(sz(n)), qs(sz(n)), dqs(sz(n)), vp(sz(n)), dvp(sz(n));
                    for (int64_t i = 0; i < n; ++i) {
                        double ks = 0.0, ks_mag = 0.0, qsum = 0.0, qs_mag = 0.0;
                        for (int64_t y = 0; y < dk; ++y) {
                            const double s = S[sz(y * dv + c)];
                            ks += hd.kx(t0 + i, y) * s;
                            ks_mag += std::fabs(hd.kx(t0 + i, y) * s);
                            qsum += hd.qx(t0 + i, y) * s;
                            qs_mag += std::fabs(hd.qx(t0 + i, y) * s);
                        }
                        const double bi = hd.beta_at(t0 + i), vi = v[hd.value(t0 + i, c)];
                        x[sz(i)] = bi * (vi - e[sz(i)] * ks);
                        dx[sz(i)] = bi * e[sz(i)] * (w + a) * ks_mag + a * bi * (std::fabs(vi) + e[sz(i)] * std::fabs(ks));
                        qs[sz(i)] = qsum;
                        dqs[sz(i)] = (w + a) * qs_mag;
                    }
                    for (int64_t i = 0; i < n; ++i) {
                        double s = 0.0, mag = 0.0, err = 0.0;
                        for (int64_t j = 0; j <= i; ++j) {
                            const double t = fc.T[sz(i * n + j)], et = fc.dT[sz(i * n + j)];
                            s += t * x[sz(j)];
                            mag += std::fabs(t * x[sz(j)]);
                            err += et * (std::fabs(x[sz(j)]) + dx[sz(j)]) + std::fabs(t) * dx[sz(j)];
                        }
                        vp[sz(i)] = s;
                        dvp[sz(i)] = (w + a) * mag + grow * err;
                        r.v_new[hd.value(t0 + i, c)] = s;
                        r.v_new_bound[hd.value(t0 + i, c)] = dvp[sz(i)];
                    }
                    for (int64_t i = 0; i < n; ++i) {
                        double s = e[sz(i)] * qs[sz(i)], mag = 0.0, err = 0.0;
                        for (int64_t j = 0; j <= i; ++j) {
                            const double m = fc.M[sz(i * n + j)];
                            s += m * vp[sz(j)];
                            mag += std::fabs(m * vp[sz(j)]);
                            err += fc.dM[sz(i * n + j)] * (std::fabs(vp[sz(j)]) + dvp[sz(j)]) + std::fabs(m) * dvp[sz(j)];
                        }
                        r.o[hd.value(t0 + i, c)] = s;
                        r.o_bound[hd.value(t0 + i, c)] =
                            e[sz(i)] * dqs[sz(i)] + a * e[sz(i)] * std::fabs(qs[sz(i)]) + (w + a) * mag + grow * err;
                    }
                    for (int64_t y = 0; y < dk; ++y) {
                        double s = fc.lambda * S[sz(y * dv + c)], mag = 0.0, err = 0.0;
                        for (int64_t j = 0; j < n; ++j) {
                            const double kf = std::fabs(hd.kx(t0 + j, y)) * f[sz(j)];
                            s += hd.kx(t0 + j, y) * f[sz(j)] * vp[sz(j)];
                            mag += kf * std::fabs(vp[sz(j)]);
                            err += kf * dvp[sz(j)];
                        }
                        Snew[sz(y * dv + c)] = s;
                        local_state[sz(y * dv + c)] =
                            a * fc.lambda * std::fabs(S[sz(y * dv + c)]) + (w + a) * mag + grow * (1 + a) * err;
                    }
                }
                // The earlier chunks' errors, carried into this chunk's state and through it into o.
                const Propagation pr = forward_propagation(hd, fc);
                for (size_t j = 0; j < phi.size(); ++j) {
                    const Vec into_o = product(absolute(product(pr.G, phi[j], n, dk, dk)), local[j], n, dk, dv);
                    const Vec into_v = product(absolute(product(pr.V, phi[j], n, dk, dk)), local[j], n, dk, dv);
                    for (int64_t i = 0; i < n; ++i)
                        for (int64_t c = 0; c < dv; ++c) {
                            r.o_bound[hd.value(t0 + i, c)] += into_o[sz(i * dv + c)];
                            r.v_new_bound[hd.value(t0 + i, c)] += into_v[sz(i * dv + c)];
                        }
                    phi[j] = product(pr.P, phi[j], dk, dk, dk);
                }
                phi.push_back(identity(dk));
                local.push_back(local_state);
                S.swap(Snew);
            }
        }
    return r;
}

// The backward's carry (its first kernel) with bounds: dS at every chunk's end, [B][Hv][chunks][dk][dv],
// and W = Tᵀ dV' per token, [B·T][Hv][dv], as the carry kernels leave them in delta_rule_backward's
// scratch (delta_rule_chunked_kernels.cu: BackwardScratch). The factors carry the forward's bounds
// (chunk_factors); per chunk, from the last, the errors of its own arithmetic with dS exact:
//   K dS: (w + a)·Σ_x |k_ix dS_xc|
//   dV' = f ⊙ K dS + Mᵀ dO: f_i·Δ(K dS) + a·f_i|K dS| + (w + a)·Σ_j |M_ji dO_j| + (1 + u)²·Σ_j |ΔM_ji||dO_j|
//   W = Tᵀ dV': (w + a)·Σ_j |T_ji dV'_j| + (1 + u)²·Σ_j (|ΔT_ji|(|dV'_j| + ΔdV'_j) + |T_ji|·ΔdV'_j)
//   dS ← λ dS + Qᵀ (e ⊙ dO) − Kᵀ (e ⊙ β ⊙ W): a·λ|dS| + (w + a)·Σ_j (|q_jx| e_j |dO_j| +
//     |k_jx| e_j β_j |W_j|) + (1 + u)²(1 + a)·Σ_j |k_jx| e_j β_j ΔW_j
// and the later chunks' dS errors carried in through P' and G' (carry_propagation), as the forward.
struct DeltaRuleCarryWithBounds {
    std::vector<double> dstates, dstates_bound, w, w_bound;
};

inline DeltaRuleCarryWithBounds delta_rule_carry_with_bf16_bounds(
    const std::vector<double>& q, const std::vector<double>& k, const std::vector<double>& g,
    const std::vector<double>& beta, const std::vector<double>& dout, int64_t B, int64_t T, int64_t Hk, int64_t Hv,
    int64_t dk, int64_t dv) {
    using namespace delta_rule_bounds;
    const Constants K;
    const double w = K.w, a = K.a, grow = K.grow;
    constexpr int64_t L = 64;
    const int64_t chunks = (T + L - 1) / L;
    const size_t states = sz(B * Hv * chunks * dk * dv);
    DeltaRuleCarryWithBounds r{Vec(states, 0.0), Vec(states, 0.0), Vec(dout.size(), 0.0), Vec(dout.size(), 0.0)};
    for (int64_t b = 0; b < B; ++b)
        for (int64_t h = 0; h < Hv; ++h) {
            const Head hd{q, k, dout, g, beta, T, Hk, Hv, dk, dv, b, h};
            Vec dS(sz(dk * dv), 0.0), dSnew(dS.size());
            std::vector<Vec> phi, local;  // as the forward's, over the later chunks
            for (int64_t ci = chunks - 1; ci >= 0; --ci) {
                const int64_t t0 = ci * L, n = std::min(L, T - t0);
                const size_t at = sz(((b * Hv + h) * chunks + ci) * dk * dv);
                std::copy(dS.begin(), dS.end(), r.dstates.begin() + std::ptrdiff_t(at));
                for (size_t j = 0; j < phi.size(); ++j) {
                    const Vec carried = product(absolute(phi[j]), local[j], dk, dk, dv);
                    for (size_t x = 0; x < carried.size(); ++x) r.dstates_bound[at + x] += carried[x];
                }
                const Factors fc = chunk_factors(hd, t0, n);
                const Vec &e = fc.e, &f = fc.f;
                Vec local_dstate(dS.size());
                for (int64_t c = 0; c < dv; ++c) {
                    Vec dvp(sz(n)), edvp(sz(n)), wv(sz(n)), ew(sz(n)), dO(sz(n));
                    for (int64_t i = 0; i < n; ++i) dO[sz(i)] = dout[hd.value(t0 + i, c)];
                    for (int64_t i = 0; i < n; ++i) {
                        double kds = 0.0, mag = 0.0;
                        for (int64_t y = 0; y < dk; ++y) {
                            kds += hd.kx(t0 + i, y) * dS[sz(y * dv + c)];
                            mag += std::fabs(hd.kx(t0 + i, y) * dS[sz(y * dv + c)]);
                        }
                        double s = f[sz(i)] * kds, mmag = 0.0, merr = 0.0;
                        for (int64_t j = i; j < n; ++j) {
                            s += fc.M[sz(j * n + i)] * dO[sz(j)];
                            mmag += std::fabs(fc.M[sz(j * n + i)] * dO[sz(j)]);
                            merr += fc.dM[sz(j * n + i)] * std::fabs(dO[sz(j)]);
                        }
                        dvp[sz(i)] = s;
                        edvp[sz(i)] = f[sz(i)] * (w + a) * mag + a * f[sz(i)] * std::fabs(kds) + (w + a) * mmag + grow * merr;
                    }
                    for (int64_t i = 0; i < n; ++i) {
                        double s = 0.0, mag = 0.0, err = 0.0;
                        for (int64_t j = i; j < n; ++j) {
                            const double t = fc.T[sz(j * n + i)], et = fc.dT[sz(j * n + i)];
                            s += t * dvp[sz(j)];
                            mag += std::fabs(t * dvp[sz(j)]);
                            err += et * (std::fabs(dvp[sz(j)]) + edvp[sz(j)]) + std::fabs(t) * edvp[sz(j)];
                        }
                        wv[sz(i)] = s;
                        ew[sz(i)] = (w + a) * mag + grow * err;
                        r.w[hd.value(t0 + i, c)] = s;
                        r.w_bound[hd.value(t0 + i, c)] = ew[sz(i)];
                    }
                    for (int64_t y = 0; y < dk; ++y) {
                        double s = fc.lambda * dS[sz(y * dv + c)], mag = 0.0, err = 0.0;
                        for (int64_t j = 0; j < n; ++j) {
                            const double ebj = e[sz(j)] * hd.beta_at(t0 + j);
                            s += hd.qx(t0 + j, y) * e[sz(j)] * dO[sz(j)] - hd.kx(t0 + j, y) * ebj * wv[sz(j)];
                            mag += std::fabs(hd.qx(t0 + j, y)) * e[sz(j)] * std::fabs(dO[sz(j)]) +
                                   std::fabs(hd.kx(t0 + j, y)) * ebj * std::fabs(wv[sz(j)]);
                            err += std::fabs(hd.kx(t0 + j, y)) * ebj * ew[sz(j)];
                        }
                        dSnew[sz(y * dv + c)] = s;
                        local_dstate[sz(y * dv + c)] =
                            a * fc.lambda * std::fabs(dS[sz(y * dv + c)]) + (w + a) * mag + grow * (1 + a) * err;
                    }
                }
                const Propagation pr = carry_propagation(hd, fc);
                for (size_t j = 0; j < phi.size(); ++j) {
                    const Vec into_w = product(absolute(product(pr.G, phi[j], n, dk, dk)), local[j], n, dk, dv);
                    for (int64_t i = 0; i < n; ++i)
                        for (int64_t c = 0; c < dv; ++c) r.w_bound[hd.value(t0 + i, c)] += into_w[sz(i * dv + c)];
                    phi[j] = product(pr.P, phi[j], dk, dk, dk);
                }
                phi.push_back(identity(dk));
                local.push_back(local_dstate);
                dS.swap(dSnew);
            }
        }
    return r;
}

// The backward's gradients kernel with bounds: dq, dk [B·T][Hk][dk], dv [B·T][Hv][dv], dg, dβ [B·T][Hv],
// exact (the formulas of ref::delta_rule_chunked_backward, per chunk) with the bound of the tensor-core
// gradients kernel's error, given what it reads: the forward's states S and V' and the carry's dS and W
// with their bounds σ, ν, δ, ω (delta_rule_with_bf16_bounds, delta_rule_carry_with_bf16_bounds); q, k, v,
// g, β, dO are exact. To first order in u, per chunk, with the header's w, a and (1 + u)² and a_n the
// accumulation constant of an mma chain of n k-steps (below):
//   K S, Q S, K dS: (w + a)·Σ_x |k_ix S_xc| + (1 + u)²·Σ_x |k_ix| σ_xc (δ for K dS)
//   r = v − e ⊙ K S: e_i·Δ(K S) + a(|v| + e_i|K S|);   dv = dR = β ⊙ W: β_i ω + a·β_i|W|
//   dβ's Σ_c W r, dg's de = Σ_c (Q S dO − K S dR) and df = Σ_c K dS V' (fp32 sums of exact-operand
//     products): each factor's error times the other's magnitude (plus their product), + a·Σ|terms|
//   dM = dO V'ᵀ, dA = −W V'ᵀ (dv/16 k-steps): (w + a_n)·Σ_c |dO_ic V'_jc| + (1 + u)²·Σ_c |dO_ic| ν_jc;
//     dA adds (1 + u)²·Σ_c ω_ic (|V'_jc| + ν_jc)
//   K Kᵀ, Q Kᵀ: (w + a)·Σ_x |k_ix k_jx|;   N = dM decay, P = dA β_i decay: decay·ΔdM (β_i decay·ΔdA) + a|N|
//   span = (dM qk + dA β kk) decay, dβ's pairs Σ_j dA kk decay: as the sums above
//   dq_i = Σ_c (e_i dO_ic) S_xc + Σ_j N_ij k_jx: (w + a_n)·Σ|terms| + (1 + u)²·(Σ_c e_i|dO_ic| σ_xc +
//     Σ_j ΔN_ij |k_jx|), n = dv/16 + 4 k-steps
//   dk_i = Σ_c (f_i V'_ic dS_xc − e_i β_i W_ic S_xc) + Σ_j (N_ji q_jx + (P_ij + P_ji) k_jx): the same, with
//     the operands' bounds ν, δ, ω, σ, ΔN, ΔP (and their products), n = 2·dv/16 + 8 k-steps
//   dg_m = λ⟨S, dS⟩ + Σ_{i≥m} e_i de_i + Σ_{i<m} f_i df_i + Σ_{i≥m>j} span_ij: the terms' bounds + a·Σ|terms|
// and the reduction of a key head's value heads into dq, dk: Σ bounds + a·Σ|parts|. An mma chain of n
// k-steps truncates ≤ 17·2⁻²² of Σ|terms| a step (the header's a for 8 steps), so a_n = max(a, n·17·2⁻²²
// + 16·2⁻²⁴): dk's chain at dv = 128 is 24 k-steps long.
struct DeltaRuleGradientsWithBounds {
    std::vector<double> dq, dq_bound, dk, dk_bound, dv, dv_bound, dg, dg_bound, dbeta, dbeta_bound;
};

inline DeltaRuleGradientsWithBounds delta_rule_gradients_with_bf16_bounds(
    const std::vector<double>& q, const std::vector<double>& k, const std::vector<double>& v,
    const std::vector<double>& g, const std::vector<double>& beta, const std::vector<double>& dout, int64_t B,
    int64_t T, int64_t Hk, int64_t Hv, int64_t dk, int64_t dv, const DeltaRuleWithBounds& fwd,
    const DeltaRuleCarryWithBounds& carry) {
    using namespace delta_rule_bounds;
    const Constants K;
    const double w = K.w, a = K.a, grow = K.grow;
    constexpr int64_t L = 64;
    const int64_t chunks = (T + L - 1) / L, tiles = (dv + 31) / 32;
    auto chain = [&](int64_t k_steps) {
        return std::max(a, double(k_steps) * 17 * std::ldexp(1.0, -22) + std::ldexp(16.0, -24));
    };
    const double a_dm = chain(2 * tiles), a_q = chain(2 * tiles + 4), a_k = chain(4 * tiles + 8);
    DeltaRuleGradientsWithBounds r{Vec(q.size(), 0.0), Vec(q.size(), 0.0), Vec(k.size(), 0.0), Vec(k.size(), 0.0),
                                   Vec(v.size(), 0.0), Vec(v.size(), 0.0), Vec(g.size(), 0.0), Vec(g.size(), 0.0),
                                   Vec(g.size(), 0.0), Vec(g.size(), 0.0)};
    // Per value head before the reduction: dq, dk and the magnitudes |part| [B·T][Hv][dk].
    const size_t parts = sz(B * T * Hv * dk);
    Vec dq_part(parts), dq_part_bound(parts), dk_part(parts), dk_part_bound(parts);
    for (int64_t b = 0; b < B; ++b)
        for (int64_t h = 0; h < Hv; ++h) {
            const Head hd{q, k, v, g, beta, T, Hk, Hv, dk, dv, b, h};
            for (int64_t ci = 0; ci < chunks; ++ci) {
                const int64_t t0 = ci * L, n = std::min(L, T - t0);
                const size_t st = sz(((b * Hv + h) * chunks + ci) * dk * dv);
                const double* S = fwd.states.data() + st;
                const double* sig = fwd.states_bound.data() + st;
                const double* dS = carry.dstates.data() + st;
                const double* del = carry.dstates_bound.data() + st;
                const Factors fc = chunk_factors(hd, t0, n);
                const Vec &e = fc.e, &f = fc.f;
                Vec gamma(sz(n));
                double sum = 0.0;
                for (int64_t i = 0; i < n; ++i) gamma[sz(i)] = sum += hd.gate(t0 + i);
                auto decay = [&](int64_t i, int64_t j) { return std::exp(gamma[sz(i)] - gamma[sz(j)]); };
                auto at = [&](int64_t i, int64_t c) { return hd.value(t0 + i, c); };
                auto Vp = [&](int64_t i, int64_t c) { return fwd.v_new[at(i, c)]; };
                auto nu = [&](int64_t i, int64_t c) { return fwd.v_new_bound[at(i, c)]; };
                auto Wv = [&](int64_t i, int64_t c) { return carry.w[at(i, c)]; };
                auto om = [&](int64_t i, int64_t c) { return carry.w_bound[at(i, c)]; };
                auto dO = [&](int64_t i, int64_t c) { return dout[at(i, c)]; };
                // Per token: dβ's Σ W r, de, df, with their bounds and magnitudes.
                Vec dbr(sz(n)), dbr_err(sz(n)), fs(sz(n)), fs_err(sz(n)), te(sz(n)), te_err(sz(n));
                for (int64_t i = 0; i < n; ++i) {
                    const double bi = hd.beta_at(t0 + i), ei = e[sz(i)], fi = f[sz(i)];
                    double sb = 0.0, sb_err = 0.0, sb_mag = 0.0, de = 0.0, de_err = 0.0, de_mag = 0.0, df = 0.0,
                           df_err = 0.0, df_mag = 0.0;
                    for (int64_t c = 0; c < dv; ++c) {
                        double ks = 0.0, ks_mag = 0.0, ks_in = 0.0, qs = 0.0, qs_mag = 0.0, qs_in = 0.0, kd = 0.0,
                               kd_mag = 0.0, kd_in = 0.0;
                        for (int64_t y = 0; y < dk; ++y) {
                            const double kx = hd.kx(t0 + i, y), qx = hd.qx(t0 + i, y), s = S[y * dv + c],
                                         ds = dS[y * dv + c];
                            ks += kx * s;
                            ks_mag += std::fabs(kx * s);
                            ks_in += std::fabs(kx) * sig[y * dv + c];
                            qs += qx * s;
                            qs_mag += std::fabs(qx * s);
                            qs_in += std::fabs(qx) * sig[y * dv + c];
                            kd += kx * ds;
                            kd_mag += std::fabs(kx * ds);
                            kd_in += std::fabs(kx) * del[y * dv + c];
                        }
                        const double eks = (w + a) * ks_mag + grow * ks_in, eqs = (w + a) * qs_mag + grow * qs_in,
                                     ekd = (w + a) * kd_mag + grow * kd_in;
                        const double vi = v[at(i, c)], wi = Wv(i, c), rr = vi - ei * ks, dr = bi * wi;
                        const double err_r = ei * eks + a * (std::fabs(vi) + ei * std::fabs(ks));
                        const double err_dr = bi * om(i, c) + a * bi * std::fabs(wi);
                        r.dv[at(i, c)] = dr;
                        r.dv_bound[at(i, c)] = err_dr;
                        sb += wi * rr;
                        sb_mag += std::fabs(wi * rr);
                        sb_err += om(i, c) * (std::fabs(rr) + err_r) + std::fabs(wi) * err_r;
                        de += qs * dO(i, c) - ks * dr;
                        de_mag += std::fabs(qs * dO(i, c)) + std::fabs(ks * dr);
                        de_err += eqs * std::fabs(dO(i, c)) + eks * (std::fabs(dr) + err_dr) + std::fabs(ks) * err_dr;
                        df += kd * Vp(i, c);
                        df_mag += std::fabs(kd * Vp(i, c));
                        df_err += ekd * (std::fabs(Vp(i, c)) + nu(i, c)) + std::fabs(kd) * nu(i, c);
                    }
                    dbr[sz(i)] = sb;
                    dbr_err[sz(i)] = sb_err + a * sb_mag;
                    fs[sz(i)] = ei * de;
                    fs_err[sz(i)] = ei * (de_err + a * de_mag) + a * std::fabs(ei * de);
                    te[sz(i)] = fi * df;
                    te_err[sz(i)] = fi * (df_err + a * df_mag) + a * std::fabs(fi * df);
                }
                // dM, dA, N, P, the span sums and dβ's pairs.
                Vec N(sz(n * n), 0.0), N_err(sz(n * n), 0.0), P(sz(n * n), 0.0), P_err(sz(n * n), 0.0),
                    span(sz(n * n), 0.0), span_err(sz(n * n), 0.0), span_mag(sz(n * n), 0.0);
                for (int64_t i = 0; i < n; ++i) {
                    const double bi = hd.beta_at(t0 + i);
                    double pairs = 0.0, pairs_err = 0.0, pairs_mag = 0.0;
                    for (int64_t j = 0; j <= i; ++j) {
                        double dm = 0.0, dm_mag = 0.0, dm_in = 0.0, da = 0.0, da_mag = 0.0, da_in = 0.0;
                        for (int64_t c = 0; c < dv; ++c) {
                            dm += dO(i, c) * Vp(j, c);
                            dm_mag += std::fabs(dO(i, c) * Vp(j, c));
                            dm_in += std::fabs(dO(i, c)) * nu(j, c);
                            da -= Wv(i, c) * Vp(j, c);
                            da_mag += std::fabs(Wv(i, c) * Vp(j, c));
                            da_in += om(i, c) * (std::fabs(Vp(j, c)) + nu(j, c)) + std::fabs(Wv(i, c)) * nu(j, c);
                        }
                        if (j == i) da = da_mag = da_in = 0.0;  // dA is strictly lower triangular
                        const double edm = (w + a_dm) * dm_mag + grow * dm_in, eda = (w + a_dm) * da_mag + grow * da_in;
                        double kk = 0.0, kk_mag = 0.0, qk = 0.0, qk_mag = 0.0;
                        for (int64_t y = 0; y < dk; ++y) {
                            kk += hd.kx(t0 + i, y) * hd.kx(t0 + j, y);
                            kk_mag += std::fabs(hd.kx(t0 + i, y) * hd.kx(t0 + j, y));
                            qk += hd.qx(t0 + i, y) * hd.kx(t0 + j, y);
                            qk_mag += std::fabs(hd.qx(t0 + i, y) * hd.kx(t0 + j, y));
                        }
                        const double ekk = (w + a) * kk_mag, eqk = (w + a) * qk_mag, dc = decay(i, j);
                        const size_t ij = sz(i * n + j);
                        N[ij] = dm * dc;
                        N_err[ij] = dc * edm + a * std::fabs(N[ij]);
                        P[ij] = da * bi * dc;
                        P_err[ij] = bi * dc * eda + a * std::fabs(P[ij]);
                        span[ij] = dm * qk * dc + da * bi * kk * dc;
                        span_mag[ij] = (std::fabs(dm * qk) + bi * std::fabs(da * kk)) * dc;
                        span_err[ij] = dc * (edm * (std::fabs(qk) + eqk) + std::fabs(dm) * eqk) +
                                       bi * dc * (eda * (std::fabs(kk) + ekk) + std::fabs(da) * ekk) + a * span_mag[ij];
                        pairs += da * kk * dc;
                        pairs_mag += std::fabs(da * kk) * dc;
                        pairs_err += dc * (eda * (std::fabs(kk) + ekk) + std::fabs(da) * ekk);
                    }
                    const int64_t gi = (b * T + t0 + i) * Hv + h;
                    r.dbeta[sz(gi)] = dbr[sz(i)] + pairs;
                    r.dbeta_bound[sz(gi)] = dbr_err[sz(i)] + pairs_err + a * pairs_mag +
                                            a * (std::fabs(dbr[sz(i)]) + std::fabs(pairs));
                }
                // dq and dk of this value head.
                for (int64_t i = 0; i < n; ++i) {
                    const double ei = e[sz(i)], fi = f[sz(i)], ebi = ei * hd.beta_at(t0 + i);
                    for (int64_t x = 0; x < dk; ++x) {
                        double sq = 0.0, sq_mag = 0.0, sq_in = 0.0, sk = 0.0, sk_mag = 0.0, sk_in = 0.0;
                        for (int64_t c = 0; c < dv; ++c) {
                            const double s = S[x * dv + c], sg = sig[x * dv + c], ds = dS[x * dv + c],
                                         dl = del[x * dv + c];
                            sq += ei * dO(i, c) * s;
                            sq_mag += ei * std::fabs(dO(i, c) * s);
                            sq_in += ei * std::fabs(dO(i, c)) * sg;
                            sk += fi * Vp(i, c) * ds - ebi * Wv(i, c) * s;
                            sk_mag += fi * std::fabs(Vp(i, c) * ds) + ebi * std::fabs(Wv(i, c) * s);
                            sk_in += fi * (nu(i, c) * (std::fabs(ds) + dl) + std::fabs(Vp(i, c)) * dl) +
                                     ebi * (om(i, c) * (std::fabs(s) + sg) + std::fabs(Wv(i, c)) * sg);
                        }
                        for (int64_t j = 0; j < n; ++j) {
                            const double kj = hd.kx(t0 + j, x), qj = hd.qx(t0 + j, x);
                            if (j <= i) {
                                sq += N[sz(i * n + j)] * kj;
                                sq_mag += std::fabs(N[sz(i * n + j)] * kj);
                                sq_in += N_err[sz(i * n + j)] * std::fabs(kj);
                            }
                            if (j >= i) {
                                sk += N[sz(j * n + i)] * qj;
                                sk_mag += std::fabs(N[sz(j * n + i)] * qj);
                                sk_in += N_err[sz(j * n + i)] * std::fabs(qj);
                            }
                            const double ps = (j < i ? P[sz(i * n + j)] : 0.0) + (j > i ? P[sz(j * n + i)] : 0.0);
                            const double ps_err = (j < i ? P_err[sz(i * n + j)] : 0.0) +
                                                  (j > i ? P_err[sz(j * n + i)] : 0.0) + a * std::fabs(ps);
                            sk += ps * kj;
                            sk_mag += std::fabs(ps * kj);
                            sk_in += ps_err * std::fabs(kj);
                        }
                        const size_t px = sz(((b * T + t0 + i) * Hv + h) * dk + x);
                        dq_part[px] = sq;
                        dq_part_bound[px] = (w + a_q) * sq_mag + grow * sq_in;
                        dk_part[px] = sk;
                        dk_part_bound[px] = (w + a_k) * sk_mag + grow * sk_in;
                    }
                }
                // dg.
                double carried = 0.0, carried_err = 0.0, carried_mag = 0.0;
                for (int64_t x = 0; x < dk * dv; ++x) {
                    carried += S[x] * dS[x];
                    carried_mag += std::fabs(S[x] * dS[x]);
                    carried_err += sig[x] * (std::fabs(dS[x]) + del[x]) + std::fabs(S[x]) * del[x];
                }
                carried *= fc.lambda;
                carried_err = fc.lambda * (carried_err + a * carried_mag);
                for (int64_t m = 0; m < n; ++m) {
                    double s = carried, err = carried_err, mag = std::fabs(carried);
                    for (int64_t i = m; i < n; ++i) {
                        s += fs[sz(i)];
                        err += fs_err[sz(i)];
                        mag += std::fabs(fs[sz(i)]);
                        for (int64_t j = 0; j < m; ++j) {
                            s += span[sz(i * n + j)];
                            err += span_err[sz(i * n + j)];
                            mag += span_mag[sz(i * n + j)];
                        }
                    }
                    for (int64_t i = 0; i < m; ++i) {
                        s += te[sz(i)];
                        err += te_err[sz(i)];
                        mag += std::fabs(te[sz(i)]);
                    }
                    const size_t gm = sz((b * T + t0 + m) * Hv + h);
                    r.dg[gm] = s;
                    r.dg_bound[gm] = err + a * mag;
                }
            }
        }
    // The reduction over a key head's value heads.
    const int64_t group = Hv / Hk;
    for (int64_t t = 0; t < B * T; ++t)
        for (int64_t kh = 0; kh < Hk; ++kh)
            for (int64_t x = 0; x < dk; ++x) {
                const size_t out = sz((t * Hk + kh) * dk + x);
                for (int64_t h = kh * group; h < (kh + 1) * group; ++h) {
                    const size_t px = sz((t * Hv + h) * dk + x);
                    r.dq[out] += dq_part[px];
                    r.dq_bound[out] += dq_part_bound[px] + a * std::fabs(dq_part[px]);
                    r.dk[out] += dk_part[px];
                    r.dk_bound[out] += dk_part_bound[px] + a * std::fabs(dk_part[px]);
                }
            }
    return r;
}

}  // namespace deltabit::train::testing
