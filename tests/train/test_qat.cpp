// 1-bit QAT (train/qat.h): which tensors are binarised, the Q1_0 weights against the definition worked
// independently here, the λ ramp, and a QAT run that learns with binary weights.
#include "train/qat.h"
#include "train/trainer.h"

#include "core/half.h"

#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <random>

namespace deltabit::train {
namespace {

ModelConfig config_128() {
    ModelConfig c;
    c.arch = Arch::qwen35;
    c.n_vocab = 259;
    c.n_embd = 128;
    c.n_ff = 64;  // down_proj rows of 64: not whole groups, stays latent
    c.n_head = 2;
    c.n_head_kv = 1;
    c.head_dim = 64;
    c.rope_dim = 16;
    c.attn_output_gate = true;
    c.ssm_n_key_heads = 1;
    c.ssm_n_value_heads = 1;
    c.ssm_key_dim = 16;
    c.ssm_value_dim = 128;
    c.ssm_conv_kernel = 4;
    c.layers = {LayerKind::linear_attention, LayerKind::full_attention};
    c.layer_is_moe = {false, false};
    return c;
}

TEST(Qat, BinarisesExactlyTheWholeGroupMatrices) {
    const ParameterLayout layout(config_128());
    for (const ParameterInfo& p : layout.all()) {
        const bool expect = (p.name.find("norm") == std::string::npos && p.name.find("conv1d") == std::string::npos &&
                             p.name.find("A_log") == std::string::npos && p.name.find("dt_bias") == std::string::npos &&
                             p.name.find("down_proj") == std::string::npos);
        EXPECT_EQ(is_binarised(p), expect) << p.name;
    }
}

TEST(Qat, WeightsAreTheQ1_0Definition) {
    const ParameterLayout layout(config_128());
    std::vector<float> w = initial_parameters(layout, 0.05, 3);
    const ParameterInfo& q = layout.get("model.layers.1.self_attn.q_proj.weight");
    w[size_t(q.offset)] = 0.0f;  // sign of 0 is +
    w[size_t(q.offset + 1)] = -0.0f;
    std::vector<float> out(w.size());
    qat_effective_weights(layout, w, 1.0, out);
    for (const ParameterInfo& p : layout.all()) {
        for (int64_t g = 0; g < p.size / kQatGroup; ++g) {
            const float* src = w.data() + p.offset + g * kQatGroup;
            const float* got = out.data() + p.offset + g * kQatGroup;
            if (!is_binarised(p)) {
                for (int64_t i = 0; i < kQatGroup; ++i) ASSERT_EQ(got[i], src[i]) << p.name;
                continue;
            }
            float sum = 0.0f;  // in order, in fp32
            for (int64_t i = 0; i < kQatGroup; ++i) sum += std::fabs(src[i]);
            const float d = half_to_float(float_to_half(sum / 128.0f));
            for (int64_t i = 0; i < kQatGroup; ++i) ASSERT_EQ(got[i], src[i] >= 0.0f ? d : -d) << p.name << " " << g;
        }
    }
    EXPECT_GT(out[size_t(q.offset)], 0.0f);
    EXPECT_GT(out[size_t(q.offset + 1)], 0.0f);
    // λ = 0 is the latent weights, λ = ½ half way.
    std::vector<float> none(w.size()), half(w.size());
    qat_effective_weights(layout, w, 0.0, none);
    EXPECT_EQ(none, w);
    qat_effective_weights(layout, w, 0.5, half);
    const int64_t i = q.offset + 5;
    EXPECT_FLOAT_EQ(half[size_t(i)], w[size_t(i)] + 0.5f * (out[size_t(i)] - w[size_t(i)]));
}

TEST(Qat, RampReachesOneHalfWay) {
    EXPECT_EQ(binarisation_weight(0, 100), 0.0);
    EXPECT_EQ(binarisation_weight(25, 100), 0.5);
    EXPECT_EQ(binarisation_weight(50, 100), 1.0);
    EXPECT_EQ(binarisation_weight(99, 100), 1.0);
}

TEST(Qat, BinaryRunLearns) {
    namespace fs = std::filesystem;
    const fs::path dir = fs::temp_directory_path() / "deltabit_test_qat_run";
    fs::create_directories(dir);
    std::string text;
    for (int i = 0; i < 40; ++i) text += "to be or not to be, that is the question.\n";
    std::ofstream(dir / "train.txt") << text;
    std::ofstream(dir / "heldout.txt") << text.substr(0, 90);
    const std::string toml = R"([model]
hidden = 128
layers = 2
full_attention_interval = 2
heads = 2
kv_heads = 1
head_dim = 64
ffn = 128
deltanet_key_heads = 1
deltanet_value_heads = 1
deltanet_key_dim = 16
deltanet_value_dim = 128
[data]
train = ")" + (dir / "train.txt").string() + R"("
heldout = ")" + (dir / "heldout.txt").string() + R"("
[run]
seq_len = 16
batch = 2
steps = 30
[optimizer]
lr = 3e-3
min_lr = 3e-4
warmup_steps = 3
weight_decay = 0.0
[eval]
bytes = 80
[qat]
enabled = true
)";
    Trainer trainer(parse_train_config(toml, "qat.toml"), toml);
    const double before = trainer.evaluate_bpb();
    while (!trainer.finished()) trainer.train_step();
    const double after = trainer.evaluate_bpb();
    std::printf("[ qat ] held-out BPB %.3f -> %.3f with binary weights\n", before, after);
    EXPECT_LT(after, before - 1.0);
    // At the end every binarised tensor the forward uses is ±d per group.
    const std::vector<float> used = trainer.forward_weights();
    const ParameterInfo& p = trainer.layout().get("model.layers.0.linear_attn.out_proj.weight");
    for (int64_t i = 1; i < kQatGroup; ++i)
        EXPECT_EQ(std::fabs(used[size_t(p.offset + i)]), std::fabs(used[size_t(p.offset)]));
}

}  // namespace
}  // namespace deltabit::train
