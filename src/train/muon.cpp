#include "train/muon.h"

#include <algorithm>
#include <cmath>

namespace deltabit::train {

std::vector<double> newton_schulz(std::span<const double> u, int64_t rows, int64_t cols, int64_t steps) {
    // Work on the wide orientation X[r][c], r ≤ c, so that A = X·Xᵀ is r × r.
    const bool transposed = rows > cols;
    const int64_t r = transposed ? cols : rows, c = transposed ? rows : cols;
    double sum_sq = 0.0;
    for (double x : u) sum_sq += x * x;
    const double inverse = 1.0 / (std::sqrt(sum_sq) + kNewtonSchulzEps);
    std::vector<double> x(size_t(r * c));
    for (int64_t i = 0; i < r; ++i)
        for (int64_t j = 0; j < c; ++j)
            x[size_t(i * c + j)] = (transposed ? u[size_t(j * cols + i)] : u[size_t(i * cols + j)]) * inverse;

    std::vector<double> a(size_t(r * r)), b(size_t(r * r)), next(size_t(r * c));
    for (int64_t step = 0; step < steps; ++step) {
        for (int64_t i = 0; i < r; ++i)  // A = X·Xᵀ
            for (int64_t k = 0; k < r; ++k) {
                double sum = 0.0;
                for (int64_t j = 0; j < c; ++j) sum += x[size_t(i * c + j)] * x[size_t(k * c + j)];
                a[size_t(i * r + k)] = sum;
            }
        for (int64_t i = 0; i < r; ++i)  // B = b·A + c·A·A
            for (int64_t k = 0; k < r; ++k) {
                double sum = 0.0;
                for (int64_t j = 0; j < r; ++j) sum += a[size_t(i * r + j)] * a[size_t(j * r + k)];
                b[size_t(i * r + k)] = kNewtonSchulzB * a[size_t(i * r + k)] + kNewtonSchulzC * sum;
            }
        for (int64_t i = 0; i < r; ++i)  // X ← a·X + B·X
            for (int64_t j = 0; j < c; ++j) {
                double sum = 0.0;
                for (int64_t k = 0; k < r; ++k) sum += b[size_t(i * r + k)] * x[size_t(k * c + j)];
                next[size_t(i * c + j)] = kNewtonSchulzA * x[size_t(i * c + j)] + sum;
            }
        x.swap(next);
    }
    if (!transposed) return x;
    std::vector<double> out(size_t(rows * cols));
    for (int64_t i = 0; i < rows; ++i)
        for (int64_t j = 0; j < cols; ++j) out[size_t(i * cols + j)] = x[size_t(j * c + i)];
    return out;
}

double muon_update_scale(int64_t rows, int64_t cols) { return 0.2 * std::sqrt(double(std::max(rows, cols))); }

double muon_learning_rate(const OptimizerSection& o, double lr) { return lr * (o.muon_lr / o.lr); }

void muon_update_matrix(std::span<float> w, std::span<const float> g, std::span<float> momentum, int64_t rows,
                        int64_t cols, const OptimizerSection& o, double muon_lr) {
    const size_t n = size_t(rows * cols);
    const float mu = float(o.muon_momentum);
    std::vector<double> u(n);
    for (size_t i = 0; i < n; ++i) {
        // fp32, one rounding per operation, in the order the CUDA kernel uses.
        momentum[i] = mu * momentum[i] + g[i];
        u[i] = o.muon_nesterov ? double(g[i] + mu * momentum[i]) : double(momentum[i]);
    }
    const std::vector<double> orthogonal = newton_schulz(u, rows, cols, o.muon_ns_steps);
    const double scale = muon_update_scale(rows, cols);
    for (size_t i = 0; i < n; ++i) {
        const double update = scale * orthogonal[i] + o.muon_weight_decay * double(w[i]);
        w[i] = float(double(w[i]) - muon_lr * update);
    }
}

double muon_step(const ParameterLayout& layout, const OptimizerSection& o, double lr, std::span<float> params,
                 std::span<float> grads, AdamState& state) {
    const double norm = begin_step(o, params, grads, state);
    const double matrix_lr = muon_learning_rate(o, lr);
    for (const ParameterInfo& p : layout.all()) {
        if (!p.hidden_matrix) {
            adamw_update_parameter(p, o, lr, params, grads, state);
            continue;
        }
        const size_t offset = size_t(p.offset), n = size_t(p.size);
        muon_update_matrix(params.subspan(offset, n), std::span<const float>(grads).subspan(offset, n),
                           std::span(state.m).subspan(offset, n), p.shape[0], p.shape[1], o, matrix_lr);
    }
    return norm;
}

}  // namespace deltabit::train
