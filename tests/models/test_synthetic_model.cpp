// Synthetic models of named geometries (bench/synthetic_model.h) and the per-token cost model
// (models/inference_cost.h): shapes against published configs, a tiny model that runs through the CPU
// forward pass, and bytes/FLOPs counted by hand.
#include "core/error.h"
#include "core/half.h"
#include "models/inference_cost.h"
#include "models/model.h"
#include "bench/synthetic_model.h"
#include "tensor_specs.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <map>
#include <numeric>

namespace deltabit {
namespace {

using test::by_name;

double parameters(const std::vector<TensorSpec>& specs, bool with_embeddings) {
    double n = 0;
    for (const TensorSpec& s : specs) {
        if (!with_embeddings && (s.name == "token_embd.weight" || s.name == "output.weight")) continue;
        n += test::elements(s);
    }
    return n;
}

TEST(SyntheticGeometry, Bonsai27bHasTheQwen35Shapes) {
    const ModelConfig& c = find_geometry("bonsai-27b").config;
    ASSERT_EQ(c.n_layer(), 64);
    for (int64_t l = 0; l < 64; ++l)
        EXPECT_EQ(c.layers[size_t(l)] == LayerKind::full_attention, l % 4 == 3) << "layer " << l;
    const auto t = by_name(geometry_tensors(c, DType::Q1_0));
    // ggml order {cols, rows}. q is 2× wide (per-head [q | gate]); qkv = 2·16·128 + 48·128 channels.
    EXPECT_EQ(t.at("blk.3.attn_q.weight").shape, (std::vector<int64_t>{5120, 2 * 24 * 256}));
    EXPECT_EQ(t.at("blk.3.attn_k.weight").shape, (std::vector<int64_t>{5120, 4 * 256}));
    EXPECT_EQ(t.at("blk.3.attn_output.weight").shape, (std::vector<int64_t>{24 * 256, 5120}));
    EXPECT_EQ(t.at("blk.0.attn_qkv.weight").shape, (std::vector<int64_t>{5120, 10240}));
    EXPECT_EQ(t.at("blk.0.attn_gate.weight").shape, (std::vector<int64_t>{5120, 6144}));
    EXPECT_EQ(t.at("blk.0.ssm_out.weight").shape, (std::vector<int64_t>{6144, 5120}));
    EXPECT_EQ(t.at("blk.0.ssm_conv1d.weight").shape, (std::vector<int64_t>{4, 10240}));
    EXPECT_EQ(t.at("blk.63.ffn_down.weight").shape, (std::vector<int64_t>{17408, 5120}));
    EXPECT_EQ(t.at("output.weight").shape, (std::vector<int64_t>{5120, 248320}));
    EXPECT_EQ(t.at("output.weight").dtype, DType::Q1_0);
    EXPECT_EQ(t.count("blk.0.attn_q.weight"), 0u);  // a DeltaNet layer
    EXPECT_EQ(t.count("blk.3.attn_qkv.weight"), 0u);
    // Qwen3.5-27B is a "27B" model (its vision tower adds about 0.4B to the 26.9B of text weights counted here).
    EXPECT_NEAR(parameters(geometry_tensors(c, DType::Q1_0), true), 26.9e9, 0.1e9);
}

TEST(SyntheticGeometry, QwenThreeParameterCountsMatchTheModelCards) {
    // Qwen3-8B's model card: 8.2B parameters, 6.95B non-embedding; Qwen3-4B's: 4.0B, 3.6B (tied).
    const auto b8 = geometry_tensors(find_geometry("bonsai-8b").config, DType::Q1_0);
    EXPECT_NEAR(parameters(b8, true), 8.2e9, 0.05e9);
    EXPECT_NEAR(parameters(b8, false), 6.95e9, 0.005e9);
    const auto b4 = geometry_tensors(find_geometry("bonsai-4b").config, DType::Q1_0);
    EXPECT_NEAR(parameters(b4, true), 4.0e9, 0.05e9);
    EXPECT_NEAR(parameters(b4, false), 3.6e9, 0.05e9);
    EXPECT_EQ(by_name(b4).count("output.weight"), 0u);  // tied
    EXPECT_EQ(by_name(b8).count("output.weight"), 1u);
}

TEST(SyntheticGeometry, UnknownNameListsTheKnownOnes) {
    try {
        find_geometry("bonsai-28b");
        FAIL() << "no error";
    } catch (const Error& e) {
        EXPECT_NE(std::string(e.what()).find("bonsai-28b"), std::string::npos);
        EXPECT_NE(std::string(e.what()).find("bonsai-27b, bonsai-8b, bonsai-4b, qwen35-0.8b"), std::string::npos);
    }
}

TEST(SyntheticGeometry, RowsThatAreNotWholeBlocksAreRefusedByName) {
    ModelConfig c = find_geometry("tiny-qwen3").config;
    c.n_ff = 200;  // ffn_down rows of 200 values: not a multiple of 128
    try {
        geometry_tensors(c, DType::Q1_0);
        FAIL() << "no error";
    } catch (const Error& e) {
        EXPECT_NE(std::string(e.what()).find("blk.0.ffn_down.weight"), std::string::npos) << e.what();
    }
    EXPECT_THROW(synthetic_weights(find_geometry("tiny-qwen3").config, "t", {DType::Q2_0_G64}), Error);
}

// Every block's fp16 scale of every matrix.
std::vector<float> all_scales(const ModelWeights& w) {
    std::vector<float> scales;
    for (const auto& [name, t] : w.tensors()) {
        if (!is_quantized(t.dtype)) continue;
        const auto* bytes = static_cast<const uint8_t*>(t.data);
        for (uint64_t off = 0; off < t.bytes; off += dtype_info(t.dtype).block_bytes) {
            uint16_t d;
            std::memcpy(&d, bytes + off, 2);
            scales.push_back(half_to_float(d));
        }
    }
    return scales;
}

TEST(SyntheticModel, ScalesAreFinitePositiveAndNormsNearOne) {
    for (DType t : {DType::Q1_0, DType::Q2_0, DType::Q4_0, DType::Q8_0}) {
        const ModelWeights w = synthetic_weights(find_geometry("tiny-qwen35").config, "tiny-qwen35", {t});
        for (float d : all_scales(w)) {
            ASSERT_TRUE(std::isfinite(d) && d > 0.0f) << dtype_name(t) << ": scale " << d;
            // 1/√cols · [0.75, 1.25] / rms level, cols 128 or 256: never above 1.25/√128.
            ASSERT_LT(d, 0.111f);
        }
        const float* norm = w.floats("blk.0.attn_norm.weight", 128);
        for (int i = 0; i < 128; ++i) ASSERT_NEAR(norm[i], 1.0f, 0.1f);
        const float* a = w.floats("blk.0.ssm_a", 4);
        for (int i = 0; i < 4; ++i) ASSERT_TRUE(a[i] <= -1.0f && a[i] >= -16.0f) << a[i];
    }
}

TEST(SyntheticModel, BytesDependOnTheSeedNotOnTheThreads) {
    const ModelConfig& c = find_geometry("tiny-qwen35").config;
    const ModelWeights one = synthetic_weights(c, "a", {DType::Q1_0, 7, 1});
    const ModelWeights three = synthetic_weights(c, "b", {DType::Q1_0, 7, 3});
    const ModelWeights other = synthetic_weights(c, "c", {DType::Q1_0, 8, 3});
    const WeightTensor& x = one.require("blk.1.ffn_up.weight");
    EXPECT_EQ(std::memcmp(x.data, three.require("blk.1.ffn_up.weight").data, x.bytes), 0);
    EXPECT_NE(std::memcmp(x.data, other.require("blk.1.ffn_up.weight").data, x.bytes), 0);
    // Two tensors of one model differ too (each has its own stream).
    EXPECT_NE(std::memcmp(x.data, one.require("blk.1.ffn_gate.weight").data, x.bytes), 0);
}

// Runs a few tokens through the CPU reference and returns the last position's logits.
std::vector<float> last_logits(const ModelConfig& config) {
    const Model model(synthetic_weights(config, "tiny"));
    SequenceState state = model.new_sequence();
    const std::vector<int32_t> prompt = {1, 5, 9, 200, 7, 3, 511, 0};
    model.forward(state, prompt);
    const std::vector<int32_t> next = {42};
    return model.forward(state, next);
}

void expect_sane(const std::vector<float>& logits, const char* what) {
    double sum_sq = 0;
    float lo = logits[0], hi = logits[0];
    for (float v : logits) {
        ASSERT_TRUE(std::isfinite(v)) << what;
        sum_sq += double(v) * v;
        lo = std::min(lo, v);
        hi = std::max(hi, v);
    }
    const double rms = std::sqrt(sum_sq / double(logits.size()));
    // Scales of 1/√cols make every product about unit RMS: logits near RMS 1, nowhere near 0 or
    // overflow. The window is wide on purpose (residual growth over layers), but a scale off by √cols
    // (×11 or ÷11 at 128 columns) falls out of it.
    EXPECT_GT(rms, 0.2) << what;
    EXPECT_LT(rms, 5.0) << what;
    EXPECT_GT(hi - lo, 0.5f) << what;  // not degenerate: the argmax means something
}

TEST(SyntheticModel, TinyModelsRunThroughTheCpuForward) {
    expect_sane(last_logits(find_geometry("tiny-qwen35").config), "tiny-qwen35");
    expect_sane(last_logits(find_geometry("tiny-qwen3").config), "tiny-qwen3");
}

ModelConfig tiny_moe() {
    ModelConfig c = find_geometry("tiny-qwen35").config;
    c.arch = Arch::qwen35moe;
    c.arch_name = "qwen35moe";
    c.n_ff = 0;
    c.n_expert = 4;
    c.n_expert_used = 2;
    c.expert_ff = 128;
    c.shared_expert_ff = 128;
    c.layer_is_moe.assign(c.layers.size(), true);
    return c;
}

TEST(SyntheticModel, TinyMoeRunsThroughTheCpuForward) { expect_sane(last_logits(tiny_moe()), "tiny moe"); }

// ---- InferenceCost, counted by hand ----
//
// tiny-qwen35: vocab 512, hidden 128, FFN 256, layers [linear, linear, linear, full], 2/1 heads of 64,
// DeltaNet 2/4 heads of 32 (conv channels 2·2·32 + 4·32 = 256), untied. Q1_0 = 18 bytes per 128 weights.
//   token_embd   one row of 128 (a lookup)                                   18
//   output       512 rows · 1 block                                         9216
//   output_norm  128 f32                                                     512
//   norms        4 layers · 2 · 128 f32                                     4096
// FFN per layer: gate 256 rows · 1 block + up 256 · 1 + down 128 rows · 2 blocks = 768 blocks = 13824 bytes.
// Full layer: q 256 rows + k 64 + v 64 + output 128 = 512 blocks = 9216, q/k norms 2 · 64 f32 = 512 → 9728.
// DeltaNet layer: qkv 256 + gate 128 + beta 4 + alpha 4 + out 128 = 520 blocks = 9360; conv 4·256 f32 =
//   4096; ssm_a, dt_bias 4 f32 each = 32; ssm_norm 32 f32 = 128 → 13616.
constexpr uint64_t kTinyHybridWeightBytes = 18 + 9216 + 512 + 4096 + 4 * 13824 + 9728 + 3 * 13616;

TEST(InferenceCost, DecodeBytesOfTheTinyHybridCountedByHand) {
    const ModelWeights w = synthetic_weights(find_geometry("tiny-qwen35").config, "tiny-qwen35");
    const InferenceCost cost(w);
    const DecodeTraffic at10 = cost.decode_traffic(10);
    EXPECT_EQ(at10.weight_bytes, kTinyHybridWeightBytes);
    // One full layer, 1 KV head of 64, f32: K and V of positions 0..10 read, position 10 written.
    EXPECT_EQ(at10.kv_bytes, 2u * 64 * 4 * 12);
    // Three DeltaNet layers: state 4·32·32 + conv window 3·256 floats, read and written.
    EXPECT_EQ(at10.state_bytes, 3u * 2 * 4 * (4 * 32 * 32 + 3 * 256));
    EXPECT_EQ(at10.total(), at10.weight_bytes + at10.kv_bytes + at10.state_bytes);
    EXPECT_EQ(cost.decode_traffic(0).kv_bytes, 2u * 64 * 4 * 2);
    const InferenceCost f16_cache(w, KvFormat::f16);
    EXPECT_EQ(f16_cache.decode_traffic(10).kv_bytes, 2u * 64 * 2 * 12);
    // kivi4 at depth 999 reads its 1000 stored positions and writes position 999's exact rows. Of 1000:
    // 8 sinks, 864 quantised (27 blocks of 32 past the window), 128 residual. Per side: sinks 8·64·4 = 2048,
    // codes 864·64/2 = 27648, (m, s) 1728 pairs · 4 bytes = 6912 (keys: 27 blocks × 64 channels; values:
    // 864 positions × 2 groups), residual 128·64·4 = 32768 → 69376; both sides 138752, + 2·64·4 written.
    const InferenceCost kivi_cache(w, KvFormat::kivi4);
    EXPECT_EQ(kivi_cache.decode_traffic(999).kv_bytes, 138752u + 512u);
}

TEST(InferenceCost, TiedEmbeddingsAreReadWholeOnceAndExpertsByTopK) {
    // tiny-qwen3, tied: token_embd (512·128 Q1_0 = 9216 bytes) is the LM head, read whole once.
    // Layers: norms 2·128 f32 = 1024; q 128 rows, k 64, v 64, output 128 = 384 blocks = 6912; q/k norms
    // 2·32 f32 = 256; FFN gate 384 + up 384 + down 128 rows · 3 blocks = 1152 blocks = 20736.
    const ModelWeights dense = synthetic_weights(find_geometry("tiny-qwen3").config, "tiny-qwen3");
    EXPECT_EQ(InferenceCost(dense).weight_bytes_per_token(), 9216u + 512 + 2 * (1024 + 6912 + 256 + 20736));

    // The tiny MoE: 4 experts of width 128, 2 used. Each stack is 4 · 128 rows · 1 block (gate, up) or
    // 4 · 128 rows · 1 block (down, 128 columns) = 9216 bytes; half of it is read.
    const ModelWeights moe = synthetic_weights(tiny_moe(), "tiny-moe");
    const InferenceCost cost(moe);
    uint64_t stacks = 0;
    for (const auto& [name, t] : moe.tensors())
        if (name.ends_with("_exps.weight")) stacks += t.bytes;
    EXPECT_EQ(stacks, 4u * 3 * 9216);
    EXPECT_EQ(cost.stored_weight_bytes() - cost.weight_bytes_per_token(), stacks / 2 + (9216 - 18));
}

TEST(InferenceCost, PrefillFlopsOfTheTinyQwen3CountedByHand) {
    // Per layer: q 128·128 + k 64·128 + v 64·128 + output 128·128 + FFN 3·384·128 = 196608 weights;
    // two layers. LM head 512·128. Attention: 4·H·d_h = 4·128 per (query, key) pair per layer; 3 queries
    // after 5 past tokens see 6, 7, 8 keys = 21 pairs.
    const InferenceCost cost(synthetic_weights(find_geometry("tiny-qwen3").config, "tiny-qwen3"));
    EXPECT_DOUBLE_EQ(cost.prefill_flops(5, 3, 1), 2.0 * 3 * 2 * 196608 + 2.0 * 512 * 128 + 2 * 512.0 * 21);
    EXPECT_DOUBLE_EQ(cost.prefill_flops(0, 1, 1) * 2 - cost.prefill_flops(0, 2, 2), -2 * 512.0 * 1);
}

}  // namespace
}  // namespace deltabit
