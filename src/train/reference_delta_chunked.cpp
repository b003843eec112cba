#include "train/reference_delta_chunked.h"

#include <algorithm>
#include <cmath>
#include <vector>

namespace deltabit::train::ref {

namespace {

using Vec = std::vector<double>;

Vec doubles(int64_t n) { return Vec(static_cast<size_t>(n), 0.0); }

double dot(const double* a, const double* b, int64_t n) {
    double sum = 0.0;
    for (int64_t i = 0; i < n; ++i) sum += a[i] * b[i];
    return sum;
}

// One value head's rows of the inputs (and of the gradients' outputs).
struct Head {
    const DeltaRuleShape& s;
    int64_t vh, kh;
    const double *q_, *k_, *v_, *g_, *beta_;
    const double* q(int64_t t) const { return q_ + (t * s.n_key_heads + kh) * s.key_dim; }
    const double* k(int64_t t) const { return k_ + (t * s.n_key_heads + kh) * s.key_dim; }
    const double* v(int64_t t) const { return v_ + (t * s.n_value_heads + vh) * s.value_dim; }
    double g(int64_t t) const { return g_[t * s.n_value_heads + vh]; }
    double beta(int64_t t) const { return beta_[t * s.n_value_heads + vh]; }
    int64_t key_row(int64_t t) const { return (t * s.n_key_heads + kh) * s.key_dim; }
    int64_t value_row(int64_t t) const { return (t * s.n_value_heads + vh) * s.value_dim; }
    int64_t gate(int64_t t) const { return t * s.n_value_heads + vh; }
};

Head head(const double* q, const double* k, const double* v, const double* g, const double* beta,
          const DeltaRuleShape& s, int64_t vh) {
    return {s, vh, vh / (s.n_value_heads / s.n_key_heads), q, k, v, g, beta};
}

// What a chunk [t0, t0 + len) computes without the state: the decays and the matrices A, T, M
// (each [len][len], row-major).
struct ChunkFactors {
    int64_t t0, len;
    Vec gamma, e, f;  // γ_i, e^{γ_i}, e^{γ_ℓ−γ_i}
    double lambda;    // e^{γ_ℓ}
    Vec A, T, M;
    double decay(int64_t i, int64_t j) const { return std::exp(gamma[size_t(i)] - gamma[size_t(j)]); }
};

ChunkFactors chunk_factors(const Head& h, int64_t t0, int64_t len) {
    const int64_t dk = h.s.key_dim;
    ChunkFactors c{t0, len, doubles(len), doubles(len), doubles(len), 0.0,
                   doubles(len * len), doubles(len * len), doubles(len * len)};
    double sum = 0.0;
    for (int64_t i = 0; i < len; ++i) c.gamma[size_t(i)] = sum += h.g(t0 + i);
    const double last = c.gamma[size_t(len - 1)];
    c.lambda = std::exp(last);
    for (int64_t i = 0; i < len; ++i) {
        c.e[size_t(i)] = std::exp(c.gamma[size_t(i)]);
        c.f[size_t(i)] = std::exp(last - c.gamma[size_t(i)]);
    }
    for (int64_t i = 0; i < len; ++i)
        for (int64_t j = 0; j <= i; ++j) {
            if (j < i) c.A[size_t(i * len + j)] = h.beta(t0 + i) * dot(h.k(t0 + i), h.k(t0 + j), dk) * c.decay(i, j);
            c.M[size_t(i * len + j)] = dot(h.q(t0 + i), h.k(t0 + j), dk) * c.decay(i, j);
        }
    // (I + A) T = I by forward substitution, column by column.
    for (int64_t col = 0; col < len; ++col)
        for (int64_t i = col; i < len; ++i) {
            double x = i == col ? 1.0 : 0.0;
            for (int64_t j = col; j < i; ++j) x -= c.A[size_t(i * len + j)] * c.T[size_t(j * len + col)];
            c.T[size_t(i * len + col)] = x;
        }
    return c;
}

// The chunk's products with the state S entering it, each [len][dv]: K S, Q S, R = V − e^γ ⊙ K S and
// V' = T (β ⊙ R).
struct ChunkValues {
    Vec ks, qs, r, v_new;
};

ChunkValues chunk_values(const Head& h, const ChunkFactors& c, const Vec& S) {
    const int64_t dk = h.s.key_dim, dv = h.s.value_dim, len = c.len;
    ChunkValues x{doubles(len * dv), doubles(len * dv), doubles(len * dv), doubles(len * dv)};
    for (int64_t i = 0; i < len; ++i)
        for (int64_t y = 0; y < dv; ++y) {
            double ks = 0.0, qs = 0.0;
            for (int64_t d = 0; d < dk; ++d) {
                ks += h.k(c.t0 + i)[d] * S[size_t(d * dv + y)];
                qs += h.q(c.t0 + i)[d] * S[size_t(d * dv + y)];
            }
            x.ks[size_t(i * dv + y)] = ks;
            x.qs[size_t(i * dv + y)] = qs;
            x.r[size_t(i * dv + y)] = h.v(c.t0 + i)[y] - c.e[size_t(i)] * ks;
        }
    for (int64_t i = 0; i < len; ++i)
        for (int64_t y = 0; y < dv; ++y) {
            double sum = 0.0;
            for (int64_t j = 0; j <= i; ++j) sum += c.T[size_t(i * len + j)] * h.beta(c.t0 + j) * x.r[size_t(j * dv + y)];
            x.v_new[size_t(i * dv + y)] = sum;
        }
    return x;
}

// S ← e^{γ_ℓ} S + Kᵀ (e^{γ_ℓ−γ} ⊙ V').
void advance_state(const Head& h, const ChunkFactors& c, const ChunkValues& x, Vec& S) {
    const int64_t dk = h.s.key_dim, dv = h.s.value_dim;
    for (int64_t d = 0; d < dk; ++d)
        for (int64_t y = 0; y < dv; ++y) {
            double sum = c.lambda * S[size_t(d * dv + y)];
            for (int64_t i = 0; i < c.len; ++i) sum += h.k(c.t0 + i)[d] * c.f[size_t(i)] * x.v_new[size_t(i * dv + y)];
            S[size_t(d * dv + y)] = sum;
        }
}

// The states entering each chunk of value head h: [chunks][dk][dv], the first zero.
std::vector<Vec> chunk_states(const Head& h, int64_t chunk) {
    const int64_t dk = h.s.key_dim, dv = h.s.value_dim;
    std::vector<Vec> states;
    Vec S = doubles(dk * dv);
    for (int64_t t0 = 0; t0 < h.s.T; t0 += chunk) {
        states.push_back(S);
        const ChunkFactors c = chunk_factors(h, t0, std::min(chunk, h.s.T - t0));
        advance_state(h, c, chunk_values(h, c, S), S);
    }
    return states;
}

}  // namespace

void delta_rule_chunked_forward(const double* q, const double* k, const double* v, const double* g,
                                const double* beta, const DeltaRuleShape& s, int64_t chunk, double* o) {
    const int64_t dv = s.value_dim;
    for (int64_t vh = 0; vh < s.n_value_heads; ++vh) {
        const Head h = head(q, k, v, g, beta, s, vh);
        const std::vector<Vec> states = chunk_states(h, chunk);
        for (int64_t t0 = 0, n = 0; t0 < s.T; t0 += chunk, ++n) {
            const ChunkFactors c = chunk_factors(h, t0, std::min(chunk, s.T - t0));
            const ChunkValues x = chunk_values(h, c, states[size_t(n)]);
            // O = e^γ ⊙ Q S + M V'.
            for (int64_t i = 0; i < c.len; ++i)
                for (int64_t y = 0; y < dv; ++y) {
                    double sum = c.e[size_t(i)] * x.qs[size_t(i * dv + y)];
                    for (int64_t j = 0; j <= i; ++j) sum += c.M[size_t(i * c.len + j)] * x.v_new[size_t(j * dv + y)];
                    o[h.value_row(t0 + i) + y] = sum;
                }
        }
    }
}

// Per chunk, walking back with dS = ∂L/∂S at the chunk's end (docs/notes/delta-rule-chunked-backward.md):
//   dV'   = Mᵀ dO + e^{γ_ℓ−γ} ⊙ K dS                 W = Tᵀ dV'      dR = β ⊙ W
//   dM    = dO V'ᵀ (j ≤ i)                           dA = −W V'ᵀ (j < i)
//   dv    = dR;   dβ_i = W_i·R_i + Σ_j dA_ij (k_i·k_j) e^{γ_i−γ_j}
//   dq_i  = e^{γ_i} S dO_i + Σ_{j≤i} dM_ij e^{γ_i−γ_j} k_j
//   dk_i  = −e^{γ_i} S dR_i + e^{γ_ℓ−γ_i} dS V'_i + Σ_{j≥i} dM_ji e^{γ_j−γ_i} q_j
//           + Σ_{j<i} dA_ij β_i e^{γ_i−γ_j} k_j + Σ_{j>i} dA_ji β_j e^{γ_j−γ_i} k_j
//   dg_m  = Σ_{i≥m} e^{γ_i} (QS_i·dO_i − KS_i·dR_i) + Σ_{i<m} e^{γ_ℓ−γ_i} (K dS)_i·V'_i
//           + Σ_{i≥m>j} (dM_ij M_ij + dA_ij A_ij) + e^{γ_ℓ} ⟨S, dS⟩
//   (g_m enters every decay whose span covers it: e^{γ_i} spans (0, i], e^{γ_ℓ−γ_i} spans (i, ℓ],
//   e^{γ_i−γ_j} spans (j, i]. Summed this way no term cancels another, where the route through
//   dγ_i and a suffix sum adds and subtracts the same products, which lost 1e-11 of the result when
//   the decays were strong and dg tiny.)
//   dS   ← e^{γ_ℓ} dS + Qᵀ (e^γ ⊙ dO) − Kᵀ (e^γ ⊙ dR)
void delta_rule_chunked_backward(const double* q, const double* k, const double* v, const double* g,
                                 const double* beta, const double* dout, const DeltaRuleShape& s, int64_t chunk,
                                 double* dq, double* dk, double* dv, double* dg, double* dbeta) {
    const int64_t Dk = s.key_dim, Dv = s.value_dim;
    for (int64_t vh = 0; vh < s.n_value_heads; ++vh) {
        const Head h = head(q, k, v, g, beta, s, vh);
        const std::vector<Vec> states = chunk_states(h, chunk);
        Vec dS = doubles(Dk * Dv);
        for (int64_t n = int64_t(states.size()) - 1; n >= 0; --n) {
            const int64_t t0 = n * chunk, len = std::min(chunk, s.T - t0);
            const Vec& S = states[size_t(n)];
            const ChunkFactors c = chunk_factors(h, t0, len);
            const ChunkValues x = chunk_values(h, c, S);
            const auto dO = [&](int64_t i, int64_t y) { return dout[h.value_row(t0 + i) + y]; };
            const auto at = [&](const Vec& m, int64_t i, int64_t j) { return m[size_t(i * len + j)]; };

            Vec kds = doubles(len * Dv), dv_new = doubles(len * Dv), w = doubles(len * Dv), dr = doubles(len * Dv);
            for (int64_t i = 0; i < len; ++i)
                for (int64_t y = 0; y < Dv; ++y) {
                    double kd = 0.0;
                    for (int64_t d = 0; d < Dk; ++d) kd += h.k(t0 + i)[d] * dS[size_t(d * Dv + y)];
                    kds[size_t(i * Dv + y)] = kd;
                    double sum = c.f[size_t(i)] * kd;
                    for (int64_t j = i; j < len; ++j) sum += at(c.M, j, i) * dO(j, y);
                    dv_new[size_t(i * Dv + y)] = sum;
                }
            for (int64_t i = 0; i < len; ++i)
                for (int64_t y = 0; y < Dv; ++y) {
                    double sum = 0.0;
                    for (int64_t j = i; j < len; ++j) sum += at(c.T, j, i) * dv_new[size_t(j * Dv + y)];
                    w[size_t(i * Dv + y)] = sum;
                    dr[size_t(i * Dv + y)] = h.beta(t0 + i) * sum;
                }
            Vec dM = doubles(len * len), dA = doubles(len * len);
            for (int64_t i = 0; i < len; ++i)
                for (int64_t j = 0; j <= i; ++j)
                    for (int64_t y = 0; y < Dv; ++y) {
                        dM[size_t(i * len + j)] += dO(i, y) * x.v_new[size_t(j * Dv + y)];
                        if (j < i) dA[size_t(i * len + j)] -= w[size_t(i * Dv + y)] * x.v_new[size_t(j * Dv + y)];
                    }

            Vec from_start = doubles(len), to_end = doubles(len);  // e^{γ_i}·de_i, e^{γ_ℓ−γ_i}·df_i
            for (int64_t i = 0; i < len; ++i) {
                const int64_t t = t0 + i;
                const double ei = c.e[size_t(i)], fi = c.f[size_t(i)];
                double de = 0.0, df = 0.0;
                for (int64_t y = 0; y < Dv; ++y) {
                    const size_t iy = size_t(i * Dv + y);
                    dv[h.value_row(t) + y] += dr[iy];
                    dbeta[h.gate(t)] += w[iy] * x.r[iy];
                    de += x.qs[iy] * dO(i, y) - x.ks[iy] * dr[iy];
                    df += kds[iy] * x.v_new[iy];
                }
                from_start[size_t(i)] = ei * de;
                to_end[size_t(i)] = fi * df;
                for (int64_t d = 0; d < Dk; ++d) {
                    double sq = 0.0, sk = 0.0;
                    for (int64_t y = 0; y < Dv; ++y) {
                        sq += S[size_t(d * Dv + y)] * dO(i, y);
                        sk += -ei * S[size_t(d * Dv + y)] * dr[size_t(i * Dv + y)] +
                              fi * dS[size_t(d * Dv + y)] * x.v_new[size_t(i * Dv + y)];
                    }
                    dq[h.key_row(t) + d] += ei * sq;
                    dk[h.key_row(t) + d] += sk;
                }
            }
            // Through M_ij = (q_i·k_j) e^{γ_i−γ_j} and A_ij = β_i (k_i·k_j) e^{γ_i−γ_j}.
            Vec span = doubles(len * len);  // dM_ij M_ij + dA_ij A_ij
            for (int64_t i = 0; i < len; ++i)
                for (int64_t j = 0; j <= i; ++j) {
                    const double decay = c.decay(i, j), dm = at(dM, i, j), da = at(dA, i, j);
                    const double bi = h.beta(t0 + i);
                    span[size_t(i * len + j)] = dm * at(c.M, i, j) + da * at(c.A, i, j);
                    dbeta[h.gate(t0 + i)] += da * dot(h.k(t0 + i), h.k(t0 + j), Dk) * decay;
                    for (int64_t d = 0; d < Dk; ++d) {
                        dq[h.key_row(t0 + i) + d] += dm * decay * h.k(t0 + j)[d];
                        dk[h.key_row(t0 + j) + d] += dm * decay * h.q(t0 + i)[d];
                        dk[h.key_row(t0 + i) + d] += da * bi * decay * h.k(t0 + j)[d];
                        dk[h.key_row(t0 + j) + d] += da * bi * decay * h.k(t0 + i)[d];
                    }
                }
            const double carried = c.lambda * dot(S.data(), dS.data(), Dk * Dv);  // e^{γ_ℓ} spans the chunk
            for (int64_t m = 0; m < len; ++m) {
                double sum = carried;
                for (int64_t i = m; i < len; ++i) sum += from_start[size_t(i)];
                for (int64_t i = 0; i < m; ++i) sum += to_end[size_t(i)];
                for (int64_t i = m; i < len; ++i)
                    for (int64_t j = 0; j < m; ++j) sum += at(span, i, j);
                dg[h.gate(t0 + m)] += sum;
            }

            for (int64_t d = 0; d < Dk; ++d)
                for (int64_t y = 0; y < Dv; ++y) {
                    double sum = c.lambda * dS[size_t(d * Dv + y)];
                    for (int64_t i = 0; i < len; ++i)
                        sum += c.e[size_t(i)] * (h.q(t0 + i)[d] * dO(i, y) - h.k(t0 + i)[d] * dr[size_t(i * Dv + y)]);
                    dS[size_t(d * Dv + y)] = sum;
                }
        }
    }
}

}  // namespace deltabit::train::ref
