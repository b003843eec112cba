#include "ops/delta_rule.h"

#include <cmath>
#include <vector>

namespace deltabit::cpu {

namespace {

// Row pointers into the [T][heads][dim] inputs.
struct HeadRows {
    const float* base;
    int64_t heads, dim;
    const float* at(int64_t t, int64_t h) const { return base + (t * heads + h) * dim; }
};

}  // namespace

void gated_delta_rule_recurrent(const float* q, const float* k, const float* v, const float* g, const float* beta,
                                const DeltaRuleDims& dims, float* state, float* out) {
    const int64_t dk = dims.key_dim, dv = dims.value_dim, hv = dims.n_value_heads;
    const HeadRows qs{q, dims.n_key_heads, dk}, ks{k, dims.n_key_heads, dk}, vs{v, hv, dv};
    const double q_scale = 1.0 / std::sqrt(double(dk));
    std::vector<double> s(size_t(dk * dv));
    std::vector<double> delta(static_cast<size_t>(dv));

    for (int64_t h = 0; h < hv; ++h) {
        const int64_t kh = key_head_of(h, dims);
        float* state_h = state + h * dk * dv;  // S[i][j], i over keys, j over values
        for (int64_t t = 0; t < dims.n_tokens; ++t) {
            const float* kt = ks.at(t, kh);
            const float* qt = qs.at(t, kh);
            const float* vt = vs.at(t, h);
            const double decay = std::exp(double(g[t * hv + h]));
            const double b = beta[t * hv + h];

            for (int64_t i = 0; i < dk * dv; ++i) s[i] = decay * double(state_h[i]);
            for (int64_t j = 0; j < dv; ++j) {
                double read = 0.0;  // (Sᵀ k)_j
                for (int64_t i = 0; i < dk; ++i) read += s[i * dv + j] * double(kt[i]);
                delta[j] = b * (double(vt[j]) - read);
            }
            for (int64_t i = 0; i < dk; ++i)
                for (int64_t j = 0; j < dv; ++j) s[i * dv + j] += double(kt[i]) * delta[j];
            for (int64_t j = 0; j < dv; ++j) {
                double o = 0.0;
                for (int64_t i = 0; i < dk; ++i) o += s[i * dv + j] * double(qt[i]) * q_scale;
                out[(t * hv + h) * dv + j] = float(o);
            }
            for (int64_t i = 0; i < dk * dv; ++i) state_h[i] = float(s[i]);  // the state lives in fp32
        }
    }
}

// The chunked (WY) form, per chunk of L tokens with cumulative log-decay γ_i = Σ_{j<=i} g_j:
//   A_ij = β_i (k_i·k_j) e^{γ_i−γ_j}  (j < i)          strictly lower triangular
//   U = (I + A)^{-1} (β ⊙ V),  W = (I + A)^{-1} (β ⊙ e^γ ⊙ K)    by forward substitution
//   V' = U − W S                                          what each token writes, given the incoming S
//   O_i = e^{γ_i} q_iᵀ S + Σ_{j<=i} (q_i·k_j) e^{γ_i−γ_j} V'_j
//   S ← e^{γ_last} S + Σ_i e^{γ_last−γ_i} k_i V'_iᵀ
// (transformers' torch_chunk_gated_delta_rule; reference/qwen35-transformers.md §2.4.) A short last
// chunk needs no padding: zero-padded tokens neither write nor decay.
void gated_delta_rule_chunked(const float* q, const float* k, const float* v, const float* g, const float* beta,
                              const DeltaRuleDims& dims, float* state, float* out, int64_t chunk_size) {
    const int64_t dk = dims.key_dim, dv = dims.value_dim, hv = dims.n_value_heads;
    const HeadRows qs{q, dims.n_key_heads, dk}, ks{k, dims.n_key_heads, dk}, vs{v, hv, dv};
    const double q_scale = 1.0 / std::sqrt(double(dk));
    const int64_t c = chunk_size;
    std::vector<double> s(size_t(dk * dv)), s_next(size_t(dk * dv));
    std::vector<double> gamma(static_cast<size_t>(c)), a(size_t(c * c));
    std::vector<double> u(size_t(c * dv)), w(size_t(c * dk)), v_new(size_t(c * dv));

    auto dot_k = [&](const float* x, const float* y) {
        double sum = 0.0;
        for (int64_t i = 0; i < dk; ++i) sum += double(x[i]) * double(y[i]);
        return sum;
    };

    for (int64_t h = 0; h < hv; ++h) {
        const int64_t kh = key_head_of(h, dims);
        float* state_h = state + h * dk * dv;
        for (int64_t i = 0; i < dk * dv; ++i) s[i] = state_h[i];

        for (int64_t t0 = 0; t0 < dims.n_tokens; t0 += c) {
            const int64_t len = std::min(c, dims.n_tokens - t0);
            const auto kt = [&](int64_t i) { return ks.at(t0 + i, kh); };
            const auto qt = [&](int64_t i) { return qs.at(t0 + i, kh); };
            const auto vt = [&](int64_t i) { return vs.at(t0 + i, h); };
            const auto bt = [&](int64_t i) { return double(beta[(t0 + i) * hv + h]); };

            double cum = 0.0;
            for (int64_t i = 0; i < len; ++i) gamma[i] = cum += double(g[(t0 + i) * hv + h]);

            for (int64_t i = 0; i < len; ++i)
                for (int64_t j = 0; j < i; ++j)
                    a[i * c + j] = bt(i) * dot_k(kt(i), kt(j)) * std::exp(gamma[i] - gamma[j]);

            for (int64_t i = 0; i < len; ++i) {
                for (int64_t x = 0; x < dv; ++x) {
                    double sum = bt(i) * double(vt(i)[x]);
                    for (int64_t j = 0; j < i; ++j) sum -= a[i * c + j] * u[j * dv + x];
                    u[i * dv + x] = sum;
                }
                for (int64_t x = 0; x < dk; ++x) {
                    double sum = bt(i) * std::exp(gamma[i]) * double(kt(i)[x]);
                    for (int64_t j = 0; j < i; ++j) sum -= a[i * c + j] * w[j * dk + x];
                    w[i * dk + x] = sum;
                }
            }

            for (int64_t i = 0; i < len; ++i) {
                for (int64_t y = 0; y < dv; ++y) {
                    double ws = 0.0;
                    for (int64_t x = 0; x < dk; ++x) ws += w[i * dk + x] * s[x * dv + y];
                    v_new[i * dv + y] = u[i * dv + y] - ws;
                }
            }

            for (int64_t i = 0; i < len; ++i) {
                for (int64_t y = 0; y < dv; ++y) {
                    double from_state = 0.0;
                    for (int64_t x = 0; x < dk; ++x) from_state += double(qt(i)[x]) * s[x * dv + y];
                    double o = std::exp(gamma[i]) * from_state;
                    for (int64_t j = 0; j <= i; ++j)
                        o += dot_k(qt(i), kt(j)) * std::exp(gamma[i] - gamma[j]) * v_new[j * dv + y];
                    out[((t0 + i) * hv + h) * dv + y] = float(o * q_scale);
                }
            }

            const double g_last = gamma[len - 1];
            for (int64_t x = 0; x < dk; ++x) {
                for (int64_t y = 0; y < dv; ++y) {
                    double sum = std::exp(g_last) * s[x * dv + y];
                    for (int64_t i = 0; i < len; ++i)
                        sum += std::exp(g_last - gamma[i]) * double(kt(i)[x]) * v_new[i * dv + y];
                    s_next[x * dv + y] = sum;
                }
            }
            // The state lives in fp32 between chunks, as on every backend.
            for (int64_t i = 0; i < dk * dv; ++i) s[i] = double(float(s_next[i]));
        }
        for (int64_t i = 0; i < dk * dv; ++i) state_h[i] = float(s[i]);
    }
}

}  // namespace deltabit::cpu
