#include "train/reference_ops.h"

#include <algorithm>
#include <cmath>
#include <vector>

namespace deltabit::train::ref {

namespace {

std::vector<double> doubles(int64_t n) { return std::vector<double>(static_cast<size_t>(n), 0.0); }

double silu(double x) { return x * sigmoid(x); }
double silu_derivative(double x) {
    const double s = sigmoid(x);
    return s * (1.0 + x * (1.0 - s));
}
// torch.nn.functional.softplus with its default threshold 20: the identity above it.
double softplus(double x) { return x > 20.0 ? x : std::log1p(std::exp(x)); }
double softplus_derivative(double x) { return x > 20.0 ? 1.0 : sigmoid(x); }

double inverse_rms(const double* x, int64_t dim, double eps) {
    double sum = 0.0;
    for (int64_t i = 0; i < dim; ++i) sum += x[i] * x[i];
    return 1.0 / std::sqrt(sum / double(dim) + eps);
}

}  // namespace

void linear_forward(const double* x, const double* w, int64_t n, int64_t in, int64_t out, double* y) {
    for (int64_t t = 0; t < n; ++t)
        for (int64_t o = 0; o < out; ++o) {
            double sum = 0.0;
            for (int64_t i = 0; i < in; ++i) sum += x[t * in + i] * w[o * in + i];
            y[t * out + o] = sum;
        }
}

void linear_backward(const double* x, const double* w, const double* dy, int64_t n, int64_t in, int64_t out,
                     double* dx, double* dw) {
    for (int64_t t = 0; t < n; ++t)
        for (int64_t o = 0; o < out; ++o) {
            const double g = dy[t * out + o];
            for (int64_t i = 0; i < in; ++i) {
                if (dx) dx[t * in + i] += g * w[o * in + i];
                if (dw) dw[o * in + i] += g * x[t * in + i];
            }
        }
}

void rms_norm_forward(const double* x, const double* w, int64_t rows, int64_t dim, double eps, bool one_plus,
                      double* y) {
    for (int64_t r = 0; r < rows; ++r) {
        const double inv = inverse_rms(x + r * dim, dim, eps);
        for (int64_t i = 0; i < dim; ++i) y[r * dim + i] = x[r * dim + i] * inv * ((one_plus ? 1.0 : 0.0) + w[i]);
    }
}

void rms_norm_backward(const double* x, const double* w, const double* dy, int64_t rows, int64_t dim, double eps,
                       bool one_plus, double* dx, double* dw) {
    for (int64_t r = 0; r < rows; ++r) {
        const double* xr = x + r * dim;
        const double* dyr = dy + r * dim;
        const double inv = inverse_rms(xr, dim, eps);
        // y_i = x_i · inv · w'_i with inv = (mean x² + eps)^(−1/2): ∂inv/∂x_j = −inv³ · x_j / dim.
        double dot = 0.0;
        for (int64_t i = 0; i < dim; ++i) {
            const double wi = (one_plus ? 1.0 : 0.0) + w[i];
            dot += dyr[i] * wi * xr[i];
            if (dw) dw[i] += dyr[i] * xr[i] * inv;
        }
        if (dx)
            for (int64_t j = 0; j < dim; ++j) {
                const double wj = (one_plus ? 1.0 : 0.0) + w[j];
                dx[r * dim + j] += inv * wj * dyr[j] - xr[j] * inv * inv * inv * dot / double(dim);
            }
    }
}

void swiglu_forward(const double* gate, const double* up, int64_t n, double* out) {
    for (int64_t i = 0; i < n; ++i) out[i] = silu(gate[i]) * up[i];
}

void swiglu_backward(const double* gate, const double* up, const double* dout, int64_t n, double* dgate,
                     double* dup) {
    for (int64_t i = 0; i < n; ++i) {
        dgate[i] += dout[i] * up[i] * silu_derivative(gate[i]);
        dup[i] += dout[i] * silu(gate[i]);
    }
}

namespace {

void rope_rotate(double* x, int64_t T, int64_t heads, int64_t head_dim, int64_t rope_dim, float theta,
                 double direction) {
    const int64_t half = rope_dim / 2;
    for (int64_t t = 0; t < T; ++t)
        for (int64_t j = 0; j < half; ++j) {
            // fp32 inverse frequency and angle, as transformers forms them (and ops/reference/rope_cpu.cpp).
            const float exponent = float(2 * j) / float(rope_dim);
            const float inv_freq = 1.0f / float(std::pow(double(theta), double(exponent)));
            const float angle = float(t) * inv_freq;
            const double c = std::cos(double(angle)), s = direction * std::sin(double(angle));
            for (int64_t h = 0; h < heads; ++h) {
                double* head = x + (t * heads + h) * head_dim;
                const double x0 = head[j], x1 = head[j + half];
                head[j] = x0 * c - x1 * s;
                head[j + half] = x1 * c + x0 * s;
            }
        }
}

}  // namespace

void rope_forward(double* x, int64_t T, int64_t heads, int64_t head_dim, int64_t rope_dim, float theta) {
    rope_rotate(x, T, heads, head_dim, rope_dim, theta, 1.0);
}

void rope_backward(double* dy, int64_t T, int64_t heads, int64_t head_dim, int64_t rope_dim, float theta) {
    rope_rotate(dy, T, heads, head_dim, rope_dim, theta, -1.0);  // the transpose of a rotation
}

namespace {

// Causal softmax row of query (t, h): p[0..t].
void attention_probabilities(const double* q, const double* k, const AttentionShape& s, int64_t t, int64_t h,
                             std::vector<double>& p) {
    const int64_t group = s.n_head / s.n_head_kv, kvh = h / group, dh = s.head_dim;
    const double* qi = q + (t * s.n_head + h) * dh;
    p.assign(size_t(t + 1), 0.0);
    double max_score = -INFINITY;
    for (int64_t j = 0; j <= t; ++j) {
        const double* kj = k + (j * s.n_head_kv + kvh) * dh;
        double dot = 0.0;
        for (int64_t d = 0; d < dh; ++d) dot += qi[d] * kj[d];
        p[size_t(j)] = dot * s.scale;
        max_score = std::max(max_score, p[size_t(j)]);
    }
    double sum = 0.0;
    for (double& v : p) sum += (v = std::exp(v - max_score));
    for (double& v : p) v /= sum;
}

}  // namespace

void attention_forward(const double* q, const double* k, const double* v, const AttentionShape& s, double* o) {
    const int64_t group = s.n_head / s.n_head_kv, dh = s.head_dim;
    std::vector<double> p;
    for (int64_t t = 0; t < s.T; ++t)
        for (int64_t h = 0; h < s.n_head; ++h) {
            attention_probabilities(q, k, s, t, h, p);
            double* oi = o + (t * s.n_head + h) * dh;
            std::fill(oi, oi + dh, 0.0);
            for (int64_t j = 0; j <= t; ++j) {
                const double* vj = v + (j * s.n_head_kv + h / group) * dh;
                for (int64_t d = 0; d < dh; ++d) oi[d] += p[size_t(j)] * vj[d];
            }
        }
}

void attention_backward(const double* q, const double* k, const double* v, const double* dout,
                        const AttentionShape& s, double* dq, double* dk, double* dv) {
    const int64_t group = s.n_head / s.n_head_kv, dh = s.head_dim;
    std::vector<double> p, dp;
    for (int64_t t = 0; t < s.T; ++t)
        for (int64_t h = 0; h < s.n_head; ++h) {
            const int64_t kvh = h / group;
            attention_probabilities(q, k, s, t, h, p);
            const double* doi = dout + (t * s.n_head + h) * dh;
            dp.assign(size_t(t + 1), 0.0);
            double p_dot_dp = 0.0;
            for (int64_t j = 0; j <= t; ++j) {
                const double* vj = v + (j * s.n_head_kv + kvh) * dh;
                double* dvj = dv + (j * s.n_head_kv + kvh) * dh;
                for (int64_t d = 0; d < dh; ++d) {
                    dp[size_t(j)] += doi[d] * vj[d];
                    dvj[d] += p[size_t(j)] * doi[d];
                }
                p_dot_dp += p[size_t(j)] * dp[size_t(j)];
            }
            const double* qi = q + (t * s.n_head + h) * dh;
            double* dqi = dq + (t * s.n_head + h) * dh;
            for (int64_t j = 0; j <= t; ++j) {
                const double dscore = p[size_t(j)] * (dp[size_t(j)] - p_dot_dp) * s.scale;
                const double* kj = k + (j * s.n_head_kv + kvh) * dh;
                double* dkj = dk + (j * s.n_head_kv + kvh) * dh;
                for (int64_t d = 0; d < dh; ++d) {
                    dqi[d] += dscore * kj[d];
                    dkj[d] += dscore * qi[d];
                }
            }
        }
}

namespace {

double conv_pre_activation(const double* x, const double* w, int64_t t, int64_t c, int64_t C, int64_t K) {
    double sum = 0.0;
    for (int64_t j = 0; j < K; ++j) {
        const int64_t src = t - (K - 1) + j;
        if (src >= 0) sum += w[c * K + j] * x[src * C + c];
    }
    return sum;
}

}  // namespace

void conv_silu_forward(const double* x, const double* w, int64_t T, int64_t C, int64_t K, double* y) {
    for (int64_t t = 0; t < T; ++t)
        for (int64_t c = 0; c < C; ++c) y[t * C + c] = silu(conv_pre_activation(x, w, t, c, C, K));
}

void conv_silu_backward(const double* x, const double* w, const double* dy, int64_t T, int64_t C, int64_t K,
                        double* dx, double* dw) {
    for (int64_t t = 0; t < T; ++t)
        for (int64_t c = 0; c < C; ++c) {
            const double dpre = dy[t * C + c] * silu_derivative(conv_pre_activation(x, w, t, c, C, K));
            for (int64_t j = 0; j < K; ++j) {
                const int64_t src = t - (K - 1) + j;
                if (src < 0) continue;
                if (dw) dw[c * K + j] += dpre * x[src * C + c];
                if (dx) dx[src * C + c] += dpre * w[c * K + j];
            }
        }
}

void l2_norm_forward(const double* x, int64_t rows, int64_t dim, double eps, double scale, double* y) {
    for (int64_t r = 0; r < rows; ++r) {
        double sum = 0.0;
        for (int64_t i = 0; i < dim; ++i) sum += x[r * dim + i] * x[r * dim + i];
        const double inv = 1.0 / std::sqrt(sum + eps);
        for (int64_t i = 0; i < dim; ++i) y[r * dim + i] = x[r * dim + i] * inv * scale;
    }
}

void l2_norm_backward(const double* x, const double* dy, int64_t rows, int64_t dim, double eps, double scale,
                      double* dx) {
    for (int64_t r = 0; r < rows; ++r) {
        const double* xr = x + r * dim;
        const double* dyr = dy + r * dim;
        double sum = 0.0, dot = 0.0;
        for (int64_t i = 0; i < dim; ++i) {
            sum += xr[i] * xr[i];
            dot += dyr[i] * xr[i];
        }
        const double inv = 1.0 / std::sqrt(sum + eps);
        for (int64_t j = 0; j < dim; ++j) dx[r * dim + j] += scale * (dyr[j] * inv - xr[j] * dot * inv * inv * inv);
    }
}

void gdn_gates_forward(const double* b, const double* a, const double* a_log, const double* dt_bias, int64_t T,
                       int64_t Hv, double* beta, double* g) {
    for (int64_t t = 0; t < T; ++t)
        for (int64_t h = 0; h < Hv; ++h) {
            const int64_t i = t * Hv + h;
            beta[i] = sigmoid(b[i]);
            g[i] = -std::exp(a_log[h]) * softplus(a[i] + dt_bias[h]);
        }
}

void gdn_gates_backward(const double* b, const double* a, const double* a_log, const double* dt_bias,
                        const double* dbeta, const double* dg, int64_t T, int64_t Hv, double* db, double* da,
                        double* da_log, double* ddt_bias) {
    for (int64_t t = 0; t < T; ++t)
        for (int64_t h = 0; h < Hv; ++h) {
            const int64_t i = t * Hv + h;
            const double s = sigmoid(b[i]);
            db[i] += dbeta[i] * s * (1.0 - s);
            const double x = a[i] + dt_bias[h];
            const double g = -std::exp(a_log[h]) * softplus(x);
            da_log[h] += dg[i] * g;  // ∂g/∂A_log = g
            const double dx = dg[i] * -std::exp(a_log[h]) * softplus_derivative(x);
            da[i] += dx;
            ddt_bias[h] += dx;
        }
}

namespace {

// States S_0 .. S_T of value head `vh` (S_0 = 0), each [dk][dv].
std::vector<double> delta_rule_states(const double* k, const double* v, const double* g, const double* beta,
                                      const DeltaRuleShape& s, int64_t vh) {
    const int64_t dk = s.key_dim, dv = s.value_dim, kh = vh / (s.n_value_heads / s.n_key_heads);
    std::vector<double> states = doubles((s.T + 1) * dk * dv);
    std::vector<double> delta = doubles(dv);
    for (int64_t t = 0; t < s.T; ++t) {
        const double* prev = states.data() + t * dk * dv;
        double* S = states.data() + (t + 1) * dk * dv;
        const double decay = std::exp(g[t * s.n_value_heads + vh]);
        for (int64_t i = 0; i < dk * dv; ++i) S[i] = decay * prev[i];
        const double* kt = k + (t * s.n_key_heads + kh) * dk;
        const double* vt = v + (t * s.n_value_heads + vh) * dv;
        const double b = beta[t * s.n_value_heads + vh];
        for (int64_t e = 0; e < dv; ++e) {
            double read = 0.0;
            for (int64_t d = 0; d < dk; ++d) read += kt[d] * S[d * dv + e];
            delta[size_t(e)] = b * (vt[e] - read);
        }
        for (int64_t d = 0; d < dk; ++d)
            for (int64_t e = 0; e < dv; ++e) S[d * dv + e] += kt[d] * delta[size_t(e)];
    }
    return states;
}

}  // namespace

void delta_rule_forward(const double* q, const double* k, const double* v, const double* g, const double* beta,
                        const DeltaRuleShape& s, double* o) {
    const int64_t dk = s.key_dim, dv = s.value_dim, r = s.n_value_heads / s.n_key_heads;
    for (int64_t vh = 0; vh < s.n_value_heads; ++vh) {
        const std::vector<double> states = delta_rule_states(k, v, g, beta, s, vh);
        for (int64_t t = 0; t < s.T; ++t) {
            const double* S = states.data() + (t + 1) * dk * dv;
            const double* qt = q + (t * s.n_key_heads + vh / r) * dk;
            double* ot = o + (t * s.n_value_heads + vh) * dv;
            for (int64_t e = 0; e < dv; ++e) {
                double sum = 0.0;
                for (int64_t d = 0; d < dk; ++d) sum += qt[d] * S[d * dv + e];
                ot[e] = sum;
            }
        }
    }
}

void delta_rule_backward(const double* q, const double* k, const double* v, const double* g, const double* beta,
                         const double* dout, const DeltaRuleShape& s, double* dq, double* dk, double* dv,
                         double* dg, double* dbeta) {
    const int64_t Dk = s.key_dim, Dv = s.value_dim, Hv = s.n_value_heads, r = Hv / s.n_key_heads;
    std::vector<double> dS = doubles(Dk * Dv), decayed = doubles(Dk * Dv), delta = doubles(Dv), read = doubles(Dv),
                        ddelta = doubles(Dv);
    for (int64_t vh = 0; vh < Hv; ++vh) {
        const int64_t kh = vh / r;
        const std::vector<double> states = delta_rule_states(k, v, g, beta, s, vh);
        std::fill(dS.begin(), dS.end(), 0.0);  // ∂L/∂S_t, carried back from later tokens
        for (int64_t t = s.T - 1; t >= 0; --t) {
            const double* prev = states.data() + t * Dk * Dv;
            const double* S = states.data() + (t + 1) * Dk * Dv;
            const double* qt = q + (t * s.n_key_heads + kh) * Dk;
            const double* kt = k + (t * s.n_key_heads + kh) * Dk;
            const double* vt = v + (t * Hv + vh) * Dv;
            const double* dot = dout + (t * Hv + vh) * Dv;
            const double decay = std::exp(g[t * Hv + vh]), b = beta[t * Hv + vh];
            double* dqt = dq + (t * s.n_key_heads + kh) * Dk;
            double* dkt = dk + (t * s.n_key_heads + kh) * Dk;
            double* dvt = dv + (t * Hv + vh) * Dv;

            // o_t = S_tᵀ q_t.
            for (int64_t d = 0; d < Dk; ++d)
                for (int64_t e = 0; e < Dv; ++e) {
                    dqt[d] += S[d * Dv + e] * dot[e];
                    dS[size_t(d * Dv + e)] += qt[d] * dot[e];
                }
            // Recompute this step's decayed state, read and delta.
            for (int64_t i = 0; i < Dk * Dv; ++i) decayed[size_t(i)] = decay * prev[i];
            for (int64_t e = 0; e < Dv; ++e) {
                double sum = 0.0;
                for (int64_t d = 0; d < Dk; ++d) sum += kt[d] * decayed[size_t(d * Dv + e)];
                read[size_t(e)] = sum;
                delta[size_t(e)] = b * (vt[e] - sum);
            }
            // S_t = S' + k δᵀ: ∂δ = dSᵀ k, ∂k += dS δ; dS passes to S' unchanged.
            for (int64_t e = 0; e < Dv; ++e) {
                double sum = 0.0;
                for (int64_t d = 0; d < Dk; ++d) sum += dS[size_t(d * Dv + e)] * kt[d];
                ddelta[size_t(e)] = sum;
            }
            for (int64_t d = 0; d < Dk; ++d)
                for (int64_t e = 0; e < Dv; ++e) dkt[d] += dS[size_t(d * Dv + e)] * delta[size_t(e)];
            // δ = β (v − read), read = S'ᵀ k.
            for (int64_t e = 0; e < Dv; ++e) {
                dbeta[t * Hv + vh] += ddelta[size_t(e)] * (vt[e] - read[size_t(e)]);
                dvt[e] += b * ddelta[size_t(e)];
            }
            for (int64_t d = 0; d < Dk; ++d)
                for (int64_t e = 0; e < Dv; ++e) {
                    const double dread = -b * ddelta[size_t(e)];
                    dkt[d] += decayed[size_t(d * Dv + e)] * dread;
                    dS[size_t(d * Dv + e)] += kt[d] * dread;
                }
            // S' = e^g S_{t−1}: ∂g = ⟨dS', S'⟩, ∂S_{t−1} = e^g dS'.
            double dot_decay = 0.0;
            for (int64_t i = 0; i < Dk * Dv; ++i) dot_decay += dS[size_t(i)] * decayed[size_t(i)];
            dg[t * Hv + vh] += dot_decay;
            for (double& x : dS) x *= decay;
        }
    }
}

void gated_rms_norm_forward(const double* x, const double* z, const double* w, int64_t rows, int64_t dim,
                            double eps, double* y) {
    for (int64_t r = 0; r < rows; ++r) {
        const double inv = inverse_rms(x + r * dim, dim, eps);
        for (int64_t i = 0; i < dim; ++i) y[r * dim + i] = w[i] * x[r * dim + i] * inv * silu(z[r * dim + i]);
    }
}

void gated_rms_norm_backward(const double* x, const double* z, const double* w, const double* dy, int64_t rows,
                             int64_t dim, double eps, double* dx, double* dz, double* dw) {
    std::vector<double> dn = doubles(dim);
    for (int64_t r = 0; r < rows; ++r) {
        const double* xr = x + r * dim;
        const double* zr = z + r * dim;
        const double* dyr = dy + r * dim;
        const double inv = inverse_rms(xr, dim, eps);
        double dot = 0.0;
        for (int64_t i = 0; i < dim; ++i) {
            const double n = xr[i] * inv;
            dw[i] += dyr[i] * n * silu(zr[i]);
            dz[r * dim + i] += dyr[i] * w[i] * n * silu_derivative(zr[i]);
            dn[size_t(i)] = dyr[i] * w[i] * silu(zr[i]);
            dot += dn[size_t(i)] * xr[i];
        }
        for (int64_t j = 0; j < dim; ++j)
            dx[r * dim + j] += inv * dn[size_t(j)] - xr[j] * inv * inv * inv * dot / double(dim);
    }
}

namespace {

// Logits of positions [begin, end) into logits[(t−begin)][V], then each row turned into softmax
// probabilities; returns Σ −log p[target] over the rows with a target.
double softmax_chunk(const double* x, const double* w, const int32_t* targets, int64_t begin, int64_t end,
                     int64_t D, int64_t V, std::vector<double>& probs, int64_t* n_counted) {
    probs.assign(size_t((end - begin) * V), 0.0);
    linear_forward(x + begin * D, w, end - begin, D, V, probs.data());
    double loss = 0.0;
    for (int64_t t = begin; t < end; ++t) {
        double* row = probs.data() + (t - begin) * V;
        const double max_logit = *std::max_element(row, row + V);
        double sum = 0.0;
        for (int64_t i = 0; i < V; ++i) sum += std::exp(row[i] - max_logit);
        const double log_sum = max_logit + std::log(sum);
        if (targets[t] >= 0) {
            loss += log_sum - row[targets[t]];
            ++*n_counted;
        }
        for (int64_t i = 0; i < V; ++i) row[i] = std::exp(row[i] - log_sum);
    }
    return loss;
}

}  // namespace

double lm_head_cross_entropy_forward(const double* x, const double* w, const int32_t* targets, int64_t n, int64_t D,
                                     int64_t V, int64_t chunk, int64_t* n_counted) {
    std::vector<double> probs;
    double loss = 0.0;
    *n_counted = 0;
    for (int64_t begin = 0; begin < n; begin += chunk)
        loss += softmax_chunk(x, w, targets, begin, std::min(n, begin + chunk), D, V, probs, n_counted);
    return loss;
}

void lm_head_cross_entropy_backward(const double* x, const double* w, const int32_t* targets, int64_t n, int64_t D,
                                    int64_t V, int64_t chunk, double scale, double* dx, double* dw) {
    std::vector<double> probs;
    int64_t counted = 0;
    for (int64_t begin = 0; begin < n; begin += chunk) {
        const int64_t end = std::min(n, begin + chunk);
        softmax_chunk(x, w, targets, begin, end, D, V, probs, &counted);
        // ∂(−log p_target)/∂logit_i = p_i − [i = target]; positions without a target contribute nothing.
        for (int64_t t = begin; t < end; ++t) {
            double* row = probs.data() + (t - begin) * V;
            if (targets[t] < 0) {
                std::fill(row, row + V, 0.0);
                continue;
            }
            row[targets[t]] -= 1.0;
            for (int64_t i = 0; i < V; ++i) row[i] *= scale;
        }
        linear_backward(x + begin * D, w, probs.data(), end - begin, D, V, dx ? dx + begin * D : nullptr, dw);
    }
}

}  // namespace deltabit::train::ref
