// The Hugging Face → engine weight conversion: fused-layout splits (hand-computed row lists), the
// GGUF storage conventions applied to real fixture tensors, the pre-transformers-5 per-expert
// checkpoint layout, and the errors at the edge.
#include "fixture.h"

#include "core/error.h"
#include "core/half.h"
#include "formats/safetensors.h"
#include "models/fused_layouts.h"
#include "models/model.h"

#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>

namespace deltabit {
namespace {

using Rows = std::vector<int64_t>;

TEST(FusedLayouts, QkvzSplitsPerKeyHeadGroups) {
    // H_k = 2, d_k = 1, H_v = 4, d_v = 1: r = 2, each key head's group is [q k v v z z] (6 rows).
    const RowSplit s = qkvz_rows(2, 1, 4, 1);
    EXPECT_EQ(s.first, (Rows{0, 6, 1, 7, 2, 3, 8, 9}));  // q0 q1 | k0 k1 | v0 v1 v2 v3
    EXPECT_EQ(s.second, (Rows{4, 5, 10, 11}));           // z0 z1 z2 z3
}

TEST(FusedLayouts, QkvzWithWiderHeads) {
    // H_k = 1, d_k = 2, H_v = 2, d_v = 3: one group [q q k k v v v v v v z z z z z z] (16 rows).
    const RowSplit s = qkvz_rows(1, 2, 2, 3);
    EXPECT_EQ(s.first, (Rows{0, 1, 2, 3, 4, 5, 6, 7, 8, 9}));
    EXPECT_EQ(s.second, (Rows{10, 11, 12, 13, 14, 15}));
}

TEST(FusedLayouts, BaSplitsPerKeyHeadGroups) {
    // H_k = 2, H_v = 4: groups [b b a a] [b b a a].
    const RowSplit s = ba_rows(2, 4);
    EXPECT_EQ(s.first, (Rows{0, 1, 4, 5}));
    EXPECT_EQ(s.second, (Rows{2, 3, 6, 7}));
}

TEST(FusedLayouts, GateUpSplitsPerExpert) {
    const RowSplit s = gate_up_rows(2, 3);  // [g g g u u u] [g g g u u u]
    EXPECT_EQ(s.first, (Rows{0, 1, 2, 6, 7, 8}));
    EXPECT_EQ(s.second, (Rows{3, 4, 5, 9, 10, 11}));
}

// Reads one tensor of a fixture's safetensors as floats, independently of the loader under test.
std::vector<float> fixture_tensor(const std::string& fixture, const std::string& name) {
    const safetensors::File file = safetensors::File::open(test::fixtures_dir() / fixture / "model.safetensors");
    const safetensors::TensorInfo* t = file.find(name);
    if (!t || t->dtype_name != "BF16") throw std::runtime_error("fixture tensor " + name);
    std::vector<float> out(t->n_elements());
    for (size_t i = 0; i < out.size(); ++i) {
        uint16_t bits;
        std::memcpy(&bits, t->data + 2 * i, 2);
        out[i] = bf16_to_float(bits);
    }
    return out;
}

TEST(HfWeights, HybridConventions) {
    const Model model = Model::load(test::fixtures_dir() / "qwen3_5_float");
    const ModelWeights& w = model.weights();
    const ModelConfig& c = model.config();
    EXPECT_EQ(c.value_head_order, ValueHeadOrder::grouped);

    // 1+w norms get the 1 added...
    const std::vector<float> norm = fixture_tensor("qwen3_5_float", "model.layers.2.self_attn.q_norm.weight");
    const float* q_norm = w.floats("blk.2.attn_q_norm.weight", c.head_dim);
    for (int64_t i = 0; i < c.head_dim; ++i) EXPECT_EQ(q_norm[i], 1.0f + norm[size_t(i)]);
    // ...but not the gated DeltaNet norm, which is plain w.
    const std::vector<float> gated = fixture_tensor("qwen3_5_float", "model.layers.0.linear_attn.norm.weight");
    const float* ssm_norm = w.floats("blk.0.ssm_norm.weight", c.ssm_value_dim);
    for (int64_t i = 0; i < c.ssm_value_dim; ++i) EXPECT_EQ(ssm_norm[i], gated[size_t(i)]);
    // ssm_a = −exp(A_log).
    const std::vector<float> a_log = fixture_tensor("qwen3_5_float", "model.layers.1.linear_attn.A_log");
    const float* ssm_a = w.floats("blk.1.ssm_a", c.ssm_n_value_heads);
    for (int64_t h = 0; h < c.ssm_n_value_heads; ++h) EXPECT_FLOAT_EQ(ssm_a[h], -std::exp(a_log[size_t(h)]));
    // conv1d [C, 1, K] → {K, C}, same bytes order: channel c's taps at c·K.
    const WeightTensor& conv = w.require("blk.0.ssm_conv1d.weight");
    EXPECT_EQ(conv.shape, (std::vector<int64_t>{c.ssm_conv_kernel, c.ssm_conv_channels()}));
    const std::vector<float> taps = fixture_tensor("qwen3_5_float", "model.layers.0.linear_attn.conv1d.weight");
    EXPECT_EQ(static_cast<const float*>(conv.data)[5 * c.ssm_conv_kernel + 3], taps[size_t(5 * c.ssm_conv_kernel + 3)]);
    // Matrices keep their dtype and read in place, shape in ggml order {in, out}.
    const WeightTensor& out = w.require("blk.0.ssm_out.weight");
    EXPECT_EQ(out.dtype, DType::BF16);
    EXPECT_EQ(out.shape, (std::vector<int64_t>{c.ssm_n_value_heads * c.ssm_value_dim, c.n_embd}));
    EXPECT_NE(w.find("output.weight"), nullptr);
}

TEST(HfWeights, Qwen3NormsAreNotShiftedAndTiedHeadIsAbsent) {
    const Model model = Model::load(test::fixtures_dir() / "qwen3_float");
    const std::vector<float> norm = fixture_tensor("qwen3_float", "model.layers.1.post_attention_layernorm.weight");
    const float* ffn_norm = model.weights().floats("blk.1.ffn_norm.weight", model.config().n_embd);
    for (int64_t i = 0; i < model.config().n_embd; ++i) EXPECT_EQ(ffn_norm[i], norm[size_t(i)]);
    EXPECT_EQ(model.weights().find("output.weight"), nullptr);
    EXPECT_TRUE(model.config().tied_embeddings);
}

TEST(HfWeights, NextFusedProjectionsAreSplit) {
    const Model model = Model::load(test::fixtures_dir() / "qwen3_next_float");
    const ModelConfig& c = model.config();
    const std::vector<float> ba = fixture_tensor("qwen3_next_float", "model.layers.0.linear_attn.in_proj_ba.weight");
    const WeightTensor& alpha = model.weights().require("blk.0.ssm_alpha.weight");
    // alpha row 3 = value head 3 = key group 1, its 2nd head: fused row 1·(2r) + r + 1 = 7 (r = 2).
    ASSERT_EQ(alpha.dtype, DType::BF16);
    uint16_t bits;
    std::memcpy(&bits, static_cast<const uint8_t*>(alpha.data) + (3 * c.n_embd + 10) * 2, 2);
    EXPECT_EQ(bf16_to_float(bits), ba[size_t(7 * c.n_embd + 10)]);
}

// A scratch folder removed at the end of the test.
struct TempFolder {
    std::filesystem::path path;
    explicit TempFolder(const std::string& name) : path(std::filesystem::temp_directory_path() / name) {
        std::filesystem::remove_all(path);
        std::filesystem::create_directories(path);
    }
    ~TempFolder() { std::filesystem::remove_all(path); }
};

TEST(HfWeights, PerExpertCheckpointLoadsLikeFusedExperts) {
    const std::string name = "qwen3_5_moe_float";
    const TempFolder folder("deltabit_test_per_expert");
    std::filesystem::copy_file(test::fixtures_dir() / name / "config.json", folder.path / "config.json");
    const safetensors::File fused = safetensors::File::open(test::fixtures_dir() / name / "model.safetensors");
    std::vector<safetensors::TensorToWrite> tensors;
    auto span_of = [](const safetensors::TensorInfo& t, uint64_t offset, uint64_t bytes) {
        return std::span<const uint8_t>(t.data + offset, bytes);
    };
    for (const safetensors::TensorInfo& t : fused.tensors()) {
        const std::string stem = t.name.substr(0, t.name.rfind("experts.") + 8);
        if (t.name.ends_with("experts.gate_up_proj")) {  // [E, 2I, H] → per expert [I, H] gate, [I, H] up
            const int64_t E = t.shape[0], I = t.shape[1] / 2, H = t.shape[2];
            const uint64_t half = uint64_t(I * H * 2);
            for (int64_t e = 0; e < E; ++e) {
                const std::string p = stem + std::to_string(e) + ".";
                tensors.push_back({p + "gate_proj.weight", "BF16", {I, H}, span_of(t, 2 * half * e, half)});
                tensors.push_back({p + "up_proj.weight", "BF16", {I, H}, span_of(t, 2 * half * e + half, half)});
            }
        } else if (t.name.ends_with("experts.down_proj")) {  // [E, H, I]
            const int64_t E = t.shape[0], H = t.shape[1], I = t.shape[2];
            const uint64_t one = uint64_t(H * I * 2);
            for (int64_t e = 0; e < E; ++e)
                tensors.push_back({stem + std::to_string(e) + ".down_proj.weight", "BF16", {H, I}, span_of(t, one * e, one)});
        } else {
            tensors.push_back({t.name, t.dtype_name, t.shape, t.span()});
        }
    }
    safetensors::write(folder.path / "model.safetensors", tensors);

    const Model reference = Model::load(test::fixtures_dir() / name);
    const Model per_expert = Model::load(folder.path);
    const test::Fixture f = test::load_fixture(name);
    SequenceState a = reference.new_sequence(), b = per_expert.new_sequence();
    const std::vector<int32_t>& ids = f.cases.at(3).tokens;
    EXPECT_EQ(reference.forward(a, ids), per_expert.forward(b, ids));  // the same weights: bit-identical logits
}

TEST(HfWeights, UnknownTensorIsNamed) {
    const TempFolder folder("deltabit_test_unknown_tensor");
    std::filesystem::copy_file(test::fixtures_dir() / "qwen3_float" / "config.json", folder.path / "config.json");
    const safetensors::File good = safetensors::File::open(test::fixtures_dir() / "qwen3_float" / "model.safetensors");
    std::vector<safetensors::TensorToWrite> tensors;
    for (const safetensors::TensorInfo& t : good.tensors()) tensors.push_back({t.name, t.dtype_name, t.shape, t.span()});
    const std::vector<uint8_t> four(8, 0);
    tensors.push_back({"model.layers.1.self_attn.rotary_emb.inv_freq", "F32", {2}, four});
    safetensors::write(folder.path / "model.safetensors", tensors);
    try {
        (void)Model::load(folder.path);
        FAIL() << "loaded a folder with an unknown tensor";
    } catch (const Error& e) {
        EXPECT_NE(std::string(e.what()).find("model.layers.1.self_attn.rotary_emb.inv_freq"), std::string::npos) << e.what();
    }
}

TEST(HfWeights, MissingTensorIsNamed) {
    const TempFolder folder("deltabit_test_missing_tensor");
    std::filesystem::copy_file(test::fixtures_dir() / "qwen3_float" / "config.json", folder.path / "config.json");
    const safetensors::File good = safetensors::File::open(test::fixtures_dir() / "qwen3_float" / "model.safetensors");
    std::vector<safetensors::TensorToWrite> tensors;
    for (const safetensors::TensorInfo& t : good.tensors())
        if (t.name != "model.layers.2.self_attn.k_norm.weight") tensors.push_back({t.name, t.dtype_name, t.shape, t.span()});
    safetensors::write(folder.path / "model.safetensors", tensors);
    try {
        (void)Model::load(folder.path);
        FAIL() << "loaded a folder with a missing tensor";
    } catch (const Error& e) {
        EXPECT_NE(std::string(e.what()).find("blk.2.attn_k_norm.weight"), std::string::npos) << e.what();
    }
}

}  // namespace
}  // namespace deltabit
