// What the attention prefill tests share: the CPU reference over a prompt (threads over slices of query
// tokens) and, per (token, head), the magnitudes their error bounds are built from. Host code only.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <functional>
#include <thread>
#include <vector>

#include "ops/attention.h"

namespace deltabit::test {

// Runs fn(t) for every query token t, spread over the machine's threads.
inline void for_each_token(int64_t n_tokens, const std::function<void(int64_t)>& fn) {
    const int64_t threads = std::max<unsigned>(1, std::thread::hardware_concurrency());
    std::vector<std::thread> pool;
    for (int64_t w = 0; w < threads; ++w)
        pool.emplace_back([&, w] {
            for (int64_t t = w; t < n_tokens; t += threads) fn(t);
        });
    for (auto& th : pool) th.join();
}

// cpu::attention over the whole prompt, one token at a time in parallel (each token a prompt of one,
// continuing at its own n_past over the same k, v).
inline std::vector<float> reference_attention(const cpu::AttentionDims& dims, const std::vector<float>& q,
                                              const std::vector<float>& k, const std::vector<float>& v,
                                              const float* gate) {
    std::vector<float> want(q.size());
    for_each_token(dims.n_tokens, [&](int64_t t) {
        cpu::AttentionDims one = dims;
        one.n_tokens = 1;
        one.n_past = dims.n_past + t;
        const size_t off = size_t(t * dims.n_head * dims.head_dim);
        cpu::attention(q.data() + off, k.data(), v.data(), gate != nullptr ? gate + off : nullptr, one,
                       want.data() + off);
    });
    return want;
}

// Of one query row (token t, head h) against the keys it sees: A = max_p Σ_j |q_j k_pj| / sqrt(d), the
// largest |score| (natural-log domain), the largest |v| element, and the number of visible keys.
struct AttentionRowStats {
    double a_max = 0, s_max = 0, v_max = 0;
    int64_t n_visible = 0;
};

inline AttentionRowStats attention_row_stats(const cpu::AttentionDims& dims, const std::vector<float>& q,
                                             const std::vector<float>& k, const std::vector<float>& v, int64_t t,
                                             int64_t h) {
    const int64_t d = dims.head_dim, kvh = h / (dims.n_head / dims.n_kv_head);
    const double inv_sqrt_d = 1.0 / std::sqrt(double(d));
    AttentionRowStats r;
    r.n_visible = dims.n_past + t + 1;
    for (int64_t p = 0; p < r.n_visible; ++p) {
        double a = 0, s = 0;
        for (int64_t j = 0; j < d; ++j) {
            const double qj = q[size_t((t * dims.n_head + h) * d + j)];
            const double kj = k[size_t((p * dims.n_kv_head + kvh) * d + j)];
            a += std::fabs(qj * kj);
            s += qj * kj;
            r.v_max = std::max(r.v_max, double(std::fabs(v[size_t((p * dims.n_kv_head + kvh) * d + j)])));
        }
        r.a_max = std::max(r.a_max, a * inv_sqrt_d);
        r.s_max = std::max(r.s_max, std::fabs(s * inv_sqrt_d));
    }
    return r;
}

// Per output element: bound(stats of its row) + 8u·|want| (the gate's sigmoid and product).
inline std::vector<double> attention_bounds(const cpu::AttentionDims& dims, const std::vector<float>& q,
                                            const std::vector<float>& k, const std::vector<float>& v,
                                            const std::vector<double>& want,
                                            const std::function<double(const AttentionRowStats&)>& bound) {
    constexpr double kU = 1.0 / 16777216.0;
    std::vector<double> tol(want.size());
    for_each_token(dims.n_tokens, [&](int64_t t) {
        for (int64_t h = 0; h < dims.n_head; ++h) {
            const double b = bound(attention_row_stats(dims, q, k, v, t, h));
            for (int64_t j = 0; j < dims.head_dim; ++j) {
                const size_t i = size_t((t * dims.n_head + h) * dims.head_dim + j);
                tol[i] = b + 8.0 * kU * std::fabs(want[i]);
            }
        }
    });
    return tol;
}

}  // namespace deltabit::test
