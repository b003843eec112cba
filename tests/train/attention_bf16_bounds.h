// The double reference of causal GQA attention (forward and backward) with, for every output element,
// the error bound that the bf16 flash kernels' arithmetic implies (train/cuda/attention_flash_kernels.cu).
// Layouts as the kernels: q, o, dout [B·T][Hq][dh]; k, v [B·T][Hkv][dh].
//
// The arithmetic, u = 2⁻⁸ (bf16's unit roundoff: 8 significant bits, so 1 + 2⁻⁸ rounds to 1), every operand of a product rounded to bf16:
//   score s = scale·q·k: both operands rounded, so |Δs| ≤ (2u + u²)·scale·Σ_d |q_d k_d| (+ fp32 sums);
//     E = the row's worst such error. lse = log Σ exp s moves by at most E too, so a recomputed weight
//     exp(s − lse), and the forward's exp(s − m) / l, is within a factor e^{±2E} of the exact one.
//   o = Σ_s p·v with p and v rounded: |Δo| ≤ ρ·Σ_s p|v|, ρ = e^{2E}(1 + u)² − 1.
//   dv = Σ_t p·dO: likewise ρ·Σ_t p|dO|.
//   dS = p·(dP − Dr), dP = dO·v with rounded operands (2u + u² of Σ|dO·v|), Dr = Σ dO·o from the computed
//     o (|ΔDr| ≤ Σ_d |dO|·|Δo|), dS rounded to bf16 before its products:
//     |ΔdS| ≤ p·[(e^{2E}(1 + u))·(ΔdP + ΔDr) + (e^{2E}(1 + u) − 1)·|dP − Dr|].
//   dq = scale·Σ_s dS·k, dk = scale·Σ_t dS·q, k and q rounded: scale·Σ (|ΔdS|·|x|(1 + u) + u·|dS·x|).
// Every relative term also carries fp32 = 1e-5 of its magnitude: fp32 sums over ≤ a few hundred terms,
// exp2f / log2f (≤ 2 ulp), and the tensor cores' accumulation (aligned to the largest term and truncated,
// ≲ 2⁻²² per step over dh / 16 steps).
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

namespace deltabit::train::testing {

struct AttentionWithBounds {
    std::vector<double> o, dq, dk, dv;  // exact
    std::vector<double> o_bound, dq_bound, dk_bound, dv_bound;
};

inline AttentionWithBounds attention_with_bf16_bounds(const std::vector<double>& q, const std::vector<double>& k,
                                                      const std::vector<double>& v, const std::vector<double>& dout,
                                                      int64_t B, int64_t T, int64_t Hq, int64_t Hkv, int64_t dh,
                                                      double scale) {
    const double u = std::ldexp(1.0, -8);
    const double fp32 = 1e-5;
    AttentionWithBounds r;
    for (auto* x : {&r.o, &r.dq, &r.o_bound, &r.dq_bound}) x->assign(q.size(), 0.0);
    for (auto* x : {&r.dk, &r.dv, &r.dk_bound, &r.dv_bound}) x->assign(k.size(), 0.0);
    const int64_t G = Hq / Hkv;
    const size_t n = static_cast<size_t>(T);
    std::vector<double> p(n), ds(n), ds_bound(n);
    for (int64_t b = 0; b < B; ++b)
        for (int64_t t = 0; t < T; ++t)
            for (int64_t h = 0; h < Hq; ++h) {
                const int64_t kvh = h / G, row = (b * T + t) * Hq + h;
                const double* qr = &q[size_t(row * dh)];
                const double* dor = &dout[size_t(row * dh)];
                auto at = [&](int64_t s, int64_t d) { return size_t(((b * T + s) * Hkv + kvh) * dh + d); };
                double m = -INFINITY, worst = 0.0;
                for (int64_t s = 0; s <= t; ++s) {
                    double dot = 0.0, magnitude = 0.0;
                    for (int64_t d = 0; d < dh; ++d) {
                        dot += qr[d] * k[at(s, d)];
                        magnitude += std::fabs(qr[d] * k[at(s, d)]);
                    }
                    p[size_t(s)] = dot * scale;
                    worst = std::max(worst, (2 * u + u * u + fp32) * magnitude * scale);
                    m = std::max(m, p[size_t(s)]);
                }
                double l = 0.0;
                for (int64_t s = 0; s <= t; ++s) l += (p[size_t(s)] = std::exp(p[size_t(s)] - m));
                for (int64_t s = 0; s <= t; ++s) p[size_t(s)] /= l;
                const double shift = std::expm1(2 * worst);  // e^{2E} − 1
                const double rho = (1 + shift) * (1 + u) * (1 + u) - 1 + fp32;
                double D = 0.0, D_error = 0.0;
                for (int64_t d = 0; d < dh; ++d) {
                    double acc = 0.0, magnitude = 0.0;
                    for (int64_t s = 0; s <= t; ++s) {
                        acc += p[size_t(s)] * v[at(s, d)];
                        magnitude += p[size_t(s)] * std::fabs(v[at(s, d)]);
                    }
                    r.o[size_t(row * dh + d)] = acc;
                    r.o_bound[size_t(row * dh + d)] = rho * magnitude;
                    D += dor[d] * acc;
                    D_error += std::fabs(dor[d]) * (rho * magnitude + fp32 * std::fabs(acc));
                }
                for (int64_t s = 0; s <= t; ++s) {
                    double dp = 0.0, magnitude = 0.0;
                    for (int64_t d = 0; d < dh; ++d) {
                        dp += dor[d] * v[at(s, d)];
                        magnitude += std::fabs(dor[d] * v[at(s, d)]);
                    }
                    const double P = p[size_t(s)], factor = (1 + shift) * (1 + u);
                    ds[size_t(s)] = P * (dp - D);
                    ds_bound[size_t(s)] =
                        P * (factor * ((2 * u + u * u + fp32) * magnitude + D_error) + (factor - 1) * std::fabs(dp - D));
                }
                for (int64_t d = 0; d < dh; ++d) {
                    double acc = 0.0, error = 0.0;
                    for (int64_t s = 0; s <= t; ++s) {
                        const double kd = k[at(s, d)], dS = ds[size_t(s)], P = p[size_t(s)];
                        acc += dS * kd;
                        error += ds_bound[size_t(s)] * std::fabs(kd) * (1 + u) + (u + fp32) * std::fabs(dS * kd);
                        r.dk[at(s, d)] += scale * dS * qr[d];
                        r.dk_bound[at(s, d)] +=
                            scale * (ds_bound[size_t(s)] * std::fabs(qr[d]) * (1 + u) + (u + fp32) * std::fabs(dS * qr[d]));
                        r.dv[at(s, d)] += P * dor[d];
                        r.dv_bound[at(s, d)] += rho * P * std::fabs(dor[d]);
                    }
                    r.dq[size_t(row * dh + d)] = scale * acc;
                    r.dq_bound[size_t(row * dh + d)] = scale * error;
                }
            }
    return r;
}

}  // namespace deltabit::train::testing
