// The block-diffusion geometries (bench/synthetic_model.h) and their cost model (models/diffusion_cost.h):
// the released checkpoint's shapes and parameter counts, a tiny one that runs through the CPU passes, and
// FLOPs and bytes counted by hand.
#include "bench/synthetic_model.h"
#include "tensor_specs.h"
#include "core/error.h"
#include "models/diffusion_cost.h"
#include "models/diffusion_gemma.h"
#include "models/model.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <map>
#include <numeric>

namespace deltabit {
namespace {

using test::by_name;
using test::elements;

TEST(DiffusionGeometry, TheReleasedCheckpointsShapeAndSize) {
    const Geometry& g = find_geometry("diffusiongemma-26b-a4b");
    const ModelConfig& c = g.config;
    EXPECT_EQ(g.default_type, DType::BF16);
    ASSERT_EQ(c.arch, Arch::diffusion_gemma);
    ASSERT_EQ(c.n_layer(), 30);
    EXPECT_EQ(c.canvas_length, 256);
    EXPECT_EQ(c.n_vocab, 262144);
    EXPECT_FLOAT_EQ(c.final_logit_softcap, 30.0f);
    for (int64_t l = 0; l < 30; ++l) {
        const LayerAttention& a = c.layer_attention[size_t(l)];
        const bool full = l % 6 == 5;  // [sliding×5, full]×5
        EXPECT_EQ(c.layers[size_t(l)] == LayerKind::full_attention, full) << "layer " << l;
        EXPECT_EQ(a.head_dim, full ? 512 : 256) << "layer " << l;
        EXPECT_EQ(a.n_head_kv, full ? 2 : 8) << "layer " << l;
        EXPECT_EQ(a.window, full ? 0 : 1024) << "layer " << l;
        EXPECT_EQ(a.rope_pairs, full ? 64 : 128) << "layer " << l;  // proportional 0.25 of 512 / 2; all of 256 / 2
        EXPECT_EQ(a.value_is_key, full) << "layer " << l;
    }
    const std::vector<TensorSpec> specs = geometry_tensors(c, DType::Q4_0);
    const auto t = by_name(specs);
    // ggml order {cols, rows[, experts]}.
    EXPECT_EQ(t.at("blk.0.attn_q.weight").shape, (std::vector<int64_t>{2816, 16 * 256}));
    EXPECT_EQ(t.at("blk.5.attn_q.weight").shape, (std::vector<int64_t>{2816, 16 * 512}));
    EXPECT_EQ(t.at("blk.5.attn_k.weight").shape, (std::vector<int64_t>{2816, 2 * 512}));
    EXPECT_EQ(t.count("blk.5.attn_v.weight"), 0u);  // V = K on full layers
    EXPECT_EQ(t.at("blk.0.attn_v.weight").shape, (std::vector<int64_t>{2816, 8 * 256}));
    EXPECT_EQ(t.at("blk.0.ffn_gate_exps.weight").shape, (std::vector<int64_t>{2816, 704, 128}));
    EXPECT_EQ(t.at("blk.0.ffn_down_exps.weight").shape, (std::vector<int64_t>{704, 2816, 128}));
    EXPECT_EQ(t.at("blk.0.ffn_down_exps.weight").dtype, DType::Q4_0);  // --type: the experts
    EXPECT_EQ(t.at("blk.0.ffn_up.weight").dtype, DType::BF16);          // the rest as the checkpoint
    EXPECT_EQ(t.at("blk.0.ffn_gate_inp.weight").dtype, DType::F32);     // the router as convert keeps it
    EXPECT_EQ(t.count("output.weight"), 0u);                            // tied
    // "26B-A4B": about 26B parameters in all and 4B active a token (8 of 128 experts). Counted from the
    // shapes above: 25.25B and 3.84B (the text model; the checkpoint's vision tower is not part of it).
    double all = 0, experts = 0;
    for (const TensorSpec& s : specs) {
        all += elements(s);
        if (s.name.ends_with("_exps.weight")) experts += elements(s);
    }
    const double active = all - experts + experts * 8 / 128;
    EXPECT_NEAR(all, 25.25e9, 0.01e9) << all;
    EXPECT_NEAR(active, 3.84e9, 0.01e9) << active;
}

TEST(DiffusionGeometry, TheTinyOneRunsThroughTheCpuPasses) {
    const Geometry& g = find_geometry("tiny-diffusiongemma");
    const Model model(synthetic_weights(g.config, g.name, {.matrix_dtype = DType::BF16}));
    const DiffusionGemma diffusion(model);
    DiffusionCache cache = diffusion.new_cache();
    std::vector<int32_t> prompt(20);
    for (size_t i = 0; i < prompt.size(); ++i) prompt[i] = int32_t(i * 37 % 512);
    diffusion.encode(cache, prompt);
    const std::vector<int32_t> canvas(size_t(g.config.canvas_length), 7);
    const std::vector<float> logits = diffusion.denoise(cache, canvas);
    ASSERT_EQ(logits.size(), size_t(16 * 512));
    double sum_sq = 0, largest = 0;
    for (float v : logits) {
        ASSERT_TRUE(std::isfinite(v));
        sum_sq += double(v) * v;
        largest = std::max(largest, double(std::fabs(v)));
    }
    // Unit-RMS products and norms near 1 keep the logits O(1), under the softcap of 30.
    const double rms = std::sqrt(sum_sq / double(logits.size()));
    EXPECT_GT(rms, 0.05);
    EXPECT_LT(largest, 30.0);
}

TEST(DiffusionGeometry, PlainFloatMatricesHaveUnitRmsProducts) {
    // bf16 values uniform in ±√3/√cols: a row's sum of squares is about 1.
    const ModelWeights w =
        synthetic_weights(find_geometry("tiny-diffusiongemma").config, "tiny", {.matrix_dtype = DType::BF16});
    const WeightTensor* q = w.find("blk.0.attn_q.weight");
    ASSERT_NE(q, nullptr);
    ASSERT_EQ(q->dtype, DType::BF16);
    const auto* bits = static_cast<const uint16_t*>(q->data);
    double sum_sq = 0;
    const int64_t rows = q->shape[1], cols = q->shape[0];
    for (int64_t i = 0; i < rows * cols; ++i) {
        uint32_t f = uint32_t(bits[i]) << 16;
        float v;
        std::memcpy(&v, &f, 4);
        sum_sq += double(v) * v;
    }
    EXPECT_NEAR(sum_sq / double(rows), 1.0, 0.1);
}

// ---- DiffusionCost, counted by hand ----
//
// tiny-diffusiongemma: vocab 512, hidden 128, dense MLP 128, layers [s, s, s, f], 4 heads; sliding 2 KV heads
// of 32 (window 8), full 1 KV head of 64 (V = K); 8 experts top-2 of 64. Matrices bf16 (2 bytes), the router
// f32, vectors f32.
//   sliding layer matrices: q 128·128 + k 64·128 + v 64·128 + o 128·128 = 49152; dense MLP 3·128·128 = 49152;
//                           router 8·128 = 1024                                                   → 99328
//   full layer matrices:    q 256·128 + k 64·128 + o 128·256 = 73728; dense 49152; router 1024     → 123904
//   one expert, one layer:  3·64·128 = 24576; four layers 98304
//   layer bytes but experts: sliding (49152 + 49152)·2 + 1024·4 + (7·128 + 2·32 + 128 + 8 + 2)·4 = 205096;
//                            full (73728 + 49152)·2 + 4096 + (7·128 + 2·64 + 138)·4 = 254504
//   expert stacks: 4 layers · 8 · 24576 · 2 bytes = 1572864; embedding 512·128·2 = 131072 (a row 256)
//   output_norm 512 bytes; the SC MLP 3·128·128 weights, with its pre-norm (49152·2 + 128·4) = 98816 bytes
constexpr double kLayerMatrices = 3 * 99328.0 + 123904.0;
constexpr double kOneExpertAllLayers = 98304.0;
constexpr double kLayerBytes = 3 * 205096.0 + 254504.0;
constexpr double kExpertStacks = 1572864.0;

const DiffusionCost& tiny_cost() {
    static const ModelWeights w =
        synthetic_weights(find_geometry("tiny-diffusiongemma").config, "tiny", {.matrix_dtype = DType::BF16});
    static const DiffusionCost cost(w);
    return cost;
}

TEST(DiffusionCost, EncodingCountedByHand) {
    // 10 tokens after none. Sliding (W 8, nothing cached): queries see 1..8, 8, 8 keys = 36 + 16 = 52 pairs,
    // 4·4·32 = 512 FLOPs a pair; full: 1..10 = 55 pairs at 4·4·64 = 1024.
    const PassCost e = tiny_cost().encode(0, 10);
    EXPECT_DOUBLE_EQ(e.flops,
                     2.0 * 10 * (kLayerMatrices + 2.0 / 8 * kOneExpertAllLayers) + 3 * 52 * 512.0 + 55 * 1024.0);
    const double touched = 1.0 - std::pow(0.75, 10);
    EXPECT_DOUBLE_EQ(e.weight_bytes, kLayerBytes + touched * kExpertStacks + 512 + 10 * 256.0);
    // K and V rows written: sliding 2·2·32·4 = 512 bytes a token, full 2·1·64·4 = 512.
    EXPECT_DOUBLE_EQ(e.kv_bytes, 4 * 10 * 512.0);
    EXPECT_EQ(e.logit_bytes, 0.0);

    // 5 tokens after 20: a sliding layer holds 7 rows, so every query sees the whole window of 8 (40 pairs)
    // and reads the 7 rows; a full one sees 21..25 keys (115 pairs) and reads 20 rows.
    const PassCost later = tiny_cost().encode(20, 5);
    EXPECT_DOUBLE_EQ(later.flops - 2.0 * 5 * (kLayerMatrices + 2.0 / 8 * kOneExpertAllLayers),
                     3 * 40 * 512.0 + 115 * 1024.0);
    EXPECT_DOUBLE_EQ(later.kv_bytes, 3 * (7 + 5) * 512.0 + (20 + 5) * 512.0);
}

TEST(DiffusionCost, DenoisingStepCountedByHand) {
    // A canvas of 16 after 20: every query sees the cached rows and the canvas, sliding 7 + 16 = 23 keys, full
    // 20 + 16 = 36; the LM head 512·128 a token; self-conditioned, the soft embedding (another 512·128) and
    // the SC MLP (3·128·128).
    const double L = 16, table = 512 * 128.0, sc = 3 * 128 * 128.0;
    const double layers =
        2.0 * L * (kLayerMatrices + 2.0 / 8 * kOneExpertAllLayers) + 3 * L * 23 * 512.0 + L * 36 * 1024.0;
    const PassCost first = tiny_cost().denoise(20, 16, false);
    EXPECT_DOUBLE_EQ(first.flops, layers + 2.0 * L * table);
    const PassCost later = tiny_cost().denoise(20, 16, true);
    EXPECT_DOUBLE_EQ(later.flops, layers + 2.0 * L * (2 * table + sc));
    // Bytes: the layers, the touched experts, output_norm, 16 embedding rows and the table once as the LM head
    // (and once more for the soft embedding, with the SC MLP); cached rows read, the canvas's written and read.
    const double touched = 1.0 - std::pow(0.75, 16);
    EXPECT_DOUBLE_EQ(first.weight_bytes, kLayerBytes + touched * kExpertStacks + 512 + 16 * 256.0 + 131072);
    EXPECT_DOUBLE_EQ(later.weight_bytes - first.weight_bytes, 131072 + 98816.0);
    EXPECT_DOUBLE_EQ(first.kv_bytes, 3 * (7 + 32) * 512.0 + (20 + 32) * 512.0);
    // Logits [16][512] f32 written, read, scaled copy written; and the previous copy read when self-conditioned.
    EXPECT_DOUBLE_EQ(first.logit_bytes, 3 * 16 * 512 * 4.0);
    EXPECT_DOUBLE_EQ(later.logit_bytes, 4 * 16 * 512 * 4.0);
}

TEST(DiffusionCost, RefusesAnAutoregressiveModel) {
    const ModelWeights w = synthetic_weights(find_geometry("tiny-qwen3").config, "tiny-qwen3");
    try {
        DiffusionCost cost(w);
        FAIL() << "accepted a qwen3 model";
    } catch (const Error& e) {
        EXPECT_NE(std::string(e.what()).find("not a block-diffusion model"), std::string::npos) << e.what();
    }
}

}  // namespace
}  // namespace deltabit
