// AdamW with fp32 master weights and state, global-norm gradient clipping, and the learning-rate
// schedule (linear warmup, then cosine to min_lr ending exactly at the last optimizer step). The same
// code serves every backend: a backend hands in fp32 gradients in the parameter layout's order.
// Muon, the other optimizer.kind, is train/muon.h; it reuses the clipping and the AdamW update here.
#pragma once

#include "train/parameters.h"
#include "train/train_config.h"

#include <cstdint>
#include <span>
#include <vector>

namespace deltabit::train {

// LR of optimizer step `step` (0-based) of `total`: step < warmup: lr·(step + 1)/warmup; after that a
// cosine from lr at the first post-warmup step to min_lr at the last step (step = total − 1). With
// total = warmup the schedule ends at lr·1 and never decays.
double learning_rate(const OptimizerSection& o, int64_t step, int64_t total);

// √(Σ g²) over every gradient, accumulated in double.
double global_norm(std::span<const float> grads);

struct AdamState {
    // First and second moments, fp32, parameter layout order. With optimizer.kind = "muon" the slots of
    // the hidden matrices hold Muon's momentum buffer in m and stay 0 in v (train/muon.h).
    std::vector<float> m, v;
    int64_t step = 0;         // optimizer steps taken (bias correction uses step + 1 on the next)
};

// Scales grads in place to norm o.clip when their global norm exceeds it (o.clip > 0); returns the norm
// before clipping.
double clip_by_global_norm(const OptimizerSection& o, std::span<float> grads);
// What every optimizer step does first: the state sized on the first step, the gradients clipped (the
// returned pre-clip norm), the step counted.
double begin_step(const OptimizerSection& o, std::span<float> params, std::span<float> grads, AdamState& state);

// The AdamW update of one tensor, after the step counter was advanced (state.step = t, moments sized).
void adamw_update_parameter(const ParameterInfo& p, const OptimizerSection& o, double lr, std::span<float> params,
                            std::span<const float> grads, AdamState& state);

// One AdamW step in place: clips the gradient to o.clip by global norm (when o.clip > 0), then
// m ← β1 m + (1−β1) g; v ← β2 v + (1−β2) g²; θ ← θ − lr·(m̂/(√v̂ + ε) + wd·θ) with m̂ = m/(1−β1^t),
// v̂ = v/(1−β2^t), and decoupled decay only on matrices and embeddings (ParameterRole). Returns the
// gradient norm before clipping.
double adamw_step(const ParameterLayout& layout, const OptimizerSection& o, double lr, std::span<float> params,
                  std::span<float> grads, AdamState& state);

// The step o.kind names: adamw_step, or muon_step (train/muon.h). `lr` is the scheduled AdamW rate.
double optimizer_step(const ParameterLayout& layout, const OptimizerSection& o, double lr, std::span<float> params,
                      std::span<float> grads, AdamState& state);

}  // namespace deltabit::train
