// The trainer's optimizer (train/optimizer.h): the schedule at its edges, AdamW against the formula
// worked by hand, decoupled decay only where it belongs, and clipping by global norm.
#include "train/optimizer.h"

#include <gtest/gtest.h>

#include <cmath>

namespace deltabit::train {
namespace {

OptimizerSection schedule(double lr, double min_lr, int64_t warmup) {
    OptimizerSection o;
    o.lr = lr;
    o.min_lr = min_lr;
    o.warmup_steps = warmup;
    return o;
}

TEST(Schedule, WarmupThenCosineEndingAtTheLastStep) {
    const OptimizerSection o = schedule(1e-3, 1e-4, 10);
    const int64_t total = 111;  // steps 10..110 decay: 100 intervals
    EXPECT_DOUBLE_EQ(learning_rate(o, 0, total), 1e-4);        // (0 + 1) / 10 of lr
    EXPECT_DOUBLE_EQ(learning_rate(o, 9, total), 1e-3);        // end of warmup: the full lr
    EXPECT_DOUBLE_EQ(learning_rate(o, 10, total), 1e-3);       // cosine starts at lr
    EXPECT_DOUBLE_EQ(learning_rate(o, total - 1, total), 1e-4);  // ends exactly at min_lr on the last step
    EXPECT_NEAR(learning_rate(o, 10 + 50, total), 0.55e-3, 1e-15);  // half way: the mean
    for (int64_t s = 10; s + 1 < total; ++s) EXPECT_GE(learning_rate(o, s, total), learning_rate(o, s + 1, total));
}

TEST(Schedule, CountsOptimizerStepsNotMicroBatches) {
    // With gradient accumulation the schedule is a function of optimizer steps only: 100 steps of 4
    // micro-batches reach min_lr at step 99, not at micro-batch 99.
    const OptimizerSection o = schedule(2e-3, 0.0, 0);
    EXPECT_DOUBLE_EQ(learning_rate(o, 0, 100), 2e-3);
    EXPECT_NEAR(learning_rate(o, 99, 100), 0.0, 1e-18);
    EXPECT_GT(learning_rate(o, 98, 100), 0.0);
}

TEST(Schedule, NoDecayWhenWarmupIsEverything) {
    const OptimizerSection o = schedule(1e-3, 1e-4, 5);
    EXPECT_DOUBLE_EQ(learning_rate(o, 4, 5), 1e-3);
    EXPECT_DOUBLE_EQ(learning_rate(schedule(1e-3, 1e-4, 0), 0, 1), 1e-3);
}

ModelConfig one_matrix_model() {
    ModelConfig c;
    c.arch = Arch::qwen3;
    c.n_vocab = 2;
    c.n_embd = 1;
    c.n_ff = 1;
    c.n_head = 1;
    c.n_head_kv = 1;
    c.head_dim = 2;
    c.rope_dim = 2;
    c.tied_embeddings = true;
    c.layers = {LayerKind::full_attention};
    c.layer_is_moe = {false};
    return c;
}

TEST(AdamW, FirstTwoStepsByHand) {
    const ParameterLayout layout(one_matrix_model());
    OptimizerSection o = schedule(0.1, 0.0, 0);
    o.beta1 = 0.9;
    o.beta2 = 0.99;
    o.eps = 1e-8;
    o.weight_decay = 0.5;
    o.clip = 0;
    std::vector<float> params(size_t(layout.total()), 1.0f), grads(params.size(), 0.0f);
    const ParameterInfo& embed = layout.get("model.embed_tokens.weight");
    const ParameterInfo& norm = layout.get("model.norm.weight");
    grads[size_t(embed.offset)] = 2.0f;
    grads[size_t(norm.offset)] = 2.0f;
    AdamState state;
    adamw_step(layout, o, 0.1, params, grads, state);
    // Step 1: m̂ = g, v̂ = g², update = g/|g| = 1 (+ decay 0.5·θ for the embedding, none for the norm).
    EXPECT_NEAR(params[size_t(embed.offset)], 1.0 - 0.1 * (1.0 + 0.5), 1e-6);
    EXPECT_NEAR(params[size_t(norm.offset)], 1.0 - 0.1 * 1.0, 1e-6);
    EXPECT_NEAR(params[size_t(embed.offset + 1)], 1.0 - 0.1 * 0.5, 1e-6);  // zero gradient: decay only
    // Step 2 with g = −2 on the norm: m = 0.9·0.2 − 0.2 = −0.02; v = 0.99·0.04 + 0.04 = 0.0796;
    // m̂ = −0.02/0.19, v̂ = 0.0796/0.0199.
    std::fill(grads.begin(), grads.end(), 0.0f);
    grads[size_t(norm.offset)] = -2.0f;
    const double before = params[size_t(norm.offset)];
    adamw_step(layout, o, 0.1, params, grads, state);
    const double m_hat = -0.02 / 0.19, v_hat = 0.0796 / (1 - 0.99 * 0.99);
    EXPECT_NEAR(params[size_t(norm.offset)], before - 0.1 * m_hat / (std::sqrt(v_hat) + 1e-8), 1e-6);
    EXPECT_EQ(state.step, 2);
}

TEST(AdamW, ClipsByGlobalNorm) {
    const ParameterLayout layout(one_matrix_model());
    OptimizerSection o = schedule(0.1, 0.0, 0);
    o.clip = 1.0;
    std::vector<float> params(size_t(layout.total()), 0.0f), grads(params.size(), 0.0f);
    grads[0] = 3.0f;
    grads[1] = 4.0f;
    AdamState state;
    EXPECT_DOUBLE_EQ(adamw_step(layout, o, 0.1, params, grads, state), 5.0);
    EXPECT_FLOAT_EQ(grads[0], 0.6f);  // clipped in place to norm 1
    EXPECT_FLOAT_EQ(grads[1], 0.8f);
    EXPECT_NEAR(global_norm(grads), 1.0, 1e-7);
}

}  // namespace
}  // namespace deltabit::train
