#include "train/optimizer.h"

#include "train/muon.h"

#include <cmath>
#include <numbers>

namespace deltabit::train {

double learning_rate(const OptimizerSection& o, int64_t step, int64_t total) {
    if (step < o.warmup_steps) return o.lr * double(step + 1) / double(o.warmup_steps);
    const int64_t decay_steps = total - 1 - o.warmup_steps;  // the last step is total − 1
    if (decay_steps <= 0) return o.lr;
    const double progress = double(step - o.warmup_steps) / double(decay_steps);
    return o.min_lr + 0.5 * (o.lr - o.min_lr) * (1.0 + std::cos(std::numbers::pi * progress));
}

double global_norm(std::span<const float> grads) {
    double sum = 0.0;
    for (float g : grads) sum += double(g) * double(g);
    return std::sqrt(sum);
}

double clip_by_global_norm(const OptimizerSection& o, std::span<float> grads) {
    const double norm = global_norm(grads);
    if (o.clip > 0 && norm > o.clip) {
        const float factor = float(o.clip / norm);
        for (float& g : grads) g *= factor;
    }
    return norm;
}

void adamw_update_parameter(const ParameterInfo& p, const OptimizerSection& o, double lr, std::span<float> params,
                            std::span<const float> grads, AdamState& state) {
    const double correction1 = 1.0 - std::pow(o.beta1, double(state.step));
    const double correction2 = 1.0 - std::pow(o.beta2, double(state.step));
    const float b1 = float(o.beta1), b2 = float(o.beta2);
    const bool decay = p.role == ParameterRole::matrix || p.role == ParameterRole::embedding;
    for (int64_t i = p.offset; i < p.offset + p.size; ++i) {
        const float g = grads[size_t(i)];
        float& m = state.m[size_t(i)];
        float& v = state.v[size_t(i)];
        m = b1 * m + (1.0f - b1) * g;
        v = b2 * v + (1.0f - b2) * g * g;
        const double m_hat = double(m) / correction1, v_hat = double(v) / correction2;
        double update = m_hat / (std::sqrt(v_hat) + o.eps);
        if (decay) update += o.weight_decay * double(params[size_t(i)]);
        params[size_t(i)] = float(double(params[size_t(i)]) - lr * update);
    }
}

double begin_step(const OptimizerSection& o, std::span<float> params, std::span<float> grads, AdamState& state) {
    if (state.m.empty()) {
        state.m.assign(params.size(), 0.0f);
        state.v.assign(params.size(), 0.0f);
    }
    const double norm = clip_by_global_norm(o, grads);
    ++state.step;
    return norm;
}

double adamw_step(const ParameterLayout& layout, const OptimizerSection& o, double lr, std::span<float> params,
                  std::span<float> grads, AdamState& state) {
    const double norm = begin_step(o, params, grads, state);
    for (const ParameterInfo& p : layout.all()) adamw_update_parameter(p, o, lr, params, grads, state);
    return norm;
}

double optimizer_step(const ParameterLayout& layout, const OptimizerSection& o, double lr, std::span<float> params,
                      std::span<float> grads, AdamState& state) {
    if (o.kind == "muon") return muon_step(layout, o, lr, params, grads, state);
    return adamw_step(layout, o, lr, params, grads, state);
}

}  // namespace deltabit::train
