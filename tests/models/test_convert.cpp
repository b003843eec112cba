// `deltabit convert` end to end on the transformers fixtures (tests/fixtures/README.md): every float
// fixture to f32 (must be lossless) and f16, every binary fixture to q1_0 (must be lossless: the
// weights are sign·mean|w| per 128-group). The written file is read back with gguf::File and checked
// against the raw safetensors with expectations computed here by hand (names, shapes, types,
// metadata, each convention), and its logits against the transformers logits stored in the fixture —
// checks that do not go through the converter's own proofs.
#include "fixture.h"

#include "core/error.h"
#include "core/half.h"
#include "core/quant.h"
#include "formats/gguf.h"
#include "formats/safetensors.h"
#include "convert/convert.h"
#include "models/model.h"

#ifdef DELTABIT_HAVE_TEXT
#include "text/tokenizer_load.h"
#endif

#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <ostream>
#include <set>
#include <span>

namespace deltabit {
namespace {

namespace fs = std::filesystem;

fs::path temp_path(const std::string& name) { return fs::temp_directory_path() / ("deltabit_test_convert_" + name); }

// Source values straight from the fixture's safetensors (BF16), PyTorch row-major.
std::vector<float> hf_values(const std::string& fixture, const std::string& name) {
    const safetensors::File file = safetensors::File::open(test::fixtures_dir() / fixture / "model.safetensors");
    const safetensors::TensorInfo* t = file.find(name);
    if (!t) throw std::runtime_error("fixture " + fixture + " has no tensor " + name);
    EXPECT_EQ(t->dtype_name, "BF16");
    std::vector<float> v(static_cast<size_t>(t->n_elements()));
    for (size_t i = 0; i < v.size(); ++i) {
        uint16_t bits;
        std::memcpy(&bits, t->data + 2 * i, 2);
        v[i] = bf16_to_float(bits);
    }
    return v;
}

std::vector<float> gguf_values(const gguf::File& file, const std::string& name) {
    const gguf::TensorInfo& t = file.require_tensor(name);
    std::vector<float> v(static_cast<size_t>(t.n_elements()));
    const uint64_t row_bytes = dtype_bytes(t.dtype, uint64_t(t.row_length()));
    for (uint64_t r = 0; r < t.n_rows(); ++r)
        dequantize_row(t.dtype, t.data + r * row_bytes, v.data() + r * uint64_t(t.row_length()), t.row_length());
    return v;
}

struct Converted {
    ConvertReport report;
    fs::path path;
};

Converted convert(const std::string& fixture, DType type, TensorTamper tamper = nullptr) {
    ConvertOptions options;
    options.type = type;
    options.tamper = std::move(tamper);
    const fs::path out = temp_path(fixture + "." + std::string(dtype_name(type)) + ".gguf");
    fs::remove(out);
    return {convert_hf_folder(test::fixtures_dir() / fixture, out, options), out};
}

// The written GGUF through the engine's GGUF path against transformers' own logits (prompt mode, the
// 5-token case), within the bound the other fixture tests use (1e-4 × max |logit|, DESIGN.md §6).
double worst_vs_transformers(const fs::path& gguf_path, const test::Fixture& f) {
    const Model model = Model::load(gguf_path);
    double worst = 0.0;
    for (const test::FixtureCase& c : f.cases) {
        if (c.length != 5) continue;
        SequenceState state = model.new_sequence();
        const std::vector<float> got = model.forward(state, c.tokens);
        const std::vector<float>& want = c.logits.at("prompt");
        EXPECT_EQ(got.size(), want.size());
        for (size_t i = 0; i < got.size() && i < want.size(); ++i) worst = std::max(worst, double(std::abs(got[i] - want[i])));
    }
    return worst;
}

// ---- every fixture, the types the brief asks for ----

struct Case {
    std::string fixture;
    DType type;
    bool must_be_lossless;
};

void PrintTo(const Case& c, std::ostream* os) { *os << c.fixture << " → " << dtype_name(c.type); }

class ConvertFixture : public ::testing::TestWithParam<Case> {};

TEST_P(ConvertFixture, ProvenLosslessWhereExactAndMatchesTransformers) {
    const Case& c = GetParam();
    const Converted result = convert(c.fixture, c.type);
    const ConvertReport& r = result.report;
    ASSERT_TRUE(fs::exists(result.path));
    EXPECT_FALSE(fs::exists(result.path.string() + ".tmp"));
    if (c.must_be_lossless) {
        EXPECT_TRUE(r.lossless);
        EXPECT_EQ(r.max_abs, 0.0);
    }
    // Every matrix is stored in the requested type (no fixture row needs a fallback).
    EXPECT_EQ(r.fallbacks, 0);
    int64_t in_requested_type = 0;
    for (const TensorReport& t : r.tensors) in_requested_type += t.type == c.type;
    EXPECT_GT(in_requested_type, 10);
    ASSERT_TRUE(r.logits.ran);
    EXPECT_TRUE(r.logits.passed);
    EXPECT_EQ(r.logits.top1_agree, int64_t(r.logits.tokens.size()));
    if (r.lossless) EXPECT_EQ(r.logits.max_abs_diff, 0.0);  // same numbers, same engine: bit-identical

    const test::Fixture f = test::load_fixture(c.fixture);
    const double worst = worst_vs_transformers(result.path, f);
    std::printf("[ convert ] %-22s %-5s %-8s HF-vs-GGUF max|dlogit| %.3g, GGUF-vs-transformers %.3g (max|logit| %.3g)\n",
                c.fixture.c_str(), std::string(dtype_name(c.type)).c_str(), r.lossless ? "lossless" : "lossy",
                r.logits.max_abs_diff, worst, f.max_abs_logit);
    EXPECT_LE(worst, 1e-4 * f.max_abs_logit);
    fs::remove(result.path);
}

std::vector<Case> all_cases() {
    std::vector<Case> cases;
    for (const char* family : {"qwen3_5", "qwen3_5_moe", "qwen3_next", "qwen3"}) {
        const std::string base = family;
        cases.push_back({base + "_float", DType::F32, true});
        // The fixture weights are bf16 values; a few are below fp16's normal range and lose bits, so
        // f16 is not asserted lossless (the report says which).
        cases.push_back({base + "_float", DType::F16, false});
        cases.push_back({base + "_binary", DType::Q1_0, true});
    }
    return cases;
}

INSTANTIATE_TEST_SUITE_P(Fixtures, ConvertFixture, ::testing::ValuesIn(all_cases()),
                         [](const ::testing::TestParamInfo<Case>& info) {
                             return info.param.fixture + "_" + std::string(dtype_name(info.param.type));
                         });

// ---- names, shapes, types, metadata ----

TEST(Convert, Qwen35LayoutTypesAndMetadata) {
    const Converted result = convert("qwen3_5_float", DType::F16);
    const gguf::File file = gguf::File::open(result.path.string());
    EXPECT_EQ(file.require_string("general.architecture"), "qwen35");
    EXPECT_EQ(file.require_string("general.name"), "qwen3_5_float");
    EXPECT_EQ(file.require_u32("general.file_type"), 1u);  // LLAMA_FTYPE_MOSTLY_F16
    EXPECT_EQ(file.require_u32("general.quantization_version"), 2u);
    EXPECT_EQ(file.require_u64("qwen35.block_count"), 3u);
    EXPECT_EQ(file.require_u64("qwen35.ssm.group_count"), 2u);
    EXPECT_EQ(file.require_u64("qwen35.ssm.time_step_rank"), 4u);
    EXPECT_EQ(file.require_u64("qwen35.ssm.inner_size"), 4u * 128u);

    // Hand-computed from the fixture geometry: D 128, H_k 2, d_k 32, H_v 4, d_v 128 → conv channels
    // 2·2·32 + 4·128 = 640; 4 query heads × 64 × 2 (query + gate) = 512; 2 KV heads × 64 = 128.
    struct Expect {
        const char* name;
        std::vector<int64_t> shape;
        DType type;
    };
    const Expect expected[] = {
        {"token_embd.weight", {128, 256}, DType::F16},      {"output.weight", {128, 256}, DType::F16},
        {"output_norm.weight", {128}, DType::F32},          {"blk.0.attn_norm.weight", {128}, DType::F32},
        {"blk.0.post_attention_norm.weight", {128}, DType::F32},
        {"blk.0.attn_qkv.weight", {128, 640}, DType::F16},  {"blk.0.attn_gate.weight", {128, 512}, DType::F16},
        {"blk.0.ssm_conv1d.weight", {4, 640}, DType::F32},  {"blk.0.ssm_a", {4}, DType::F32},
        {"blk.0.ssm_dt.bias", {4}, DType::F32},             {"blk.0.ssm_alpha.weight", {128, 4}, DType::F16},
        {"blk.0.ssm_beta.weight", {128, 4}, DType::F16},    {"blk.0.ssm_norm.weight", {128}, DType::F32},
        {"blk.0.ssm_out.weight", {512, 128}, DType::F16},   {"blk.0.ffn_gate.weight", {128, 256}, DType::F16},
        {"blk.0.ffn_down.weight", {256, 128}, DType::F16},  {"blk.2.attn_q.weight", {128, 512}, DType::F16},
        {"blk.2.attn_k.weight", {128, 128}, DType::F16},    {"blk.2.attn_output.weight", {256, 128}, DType::F16},
        {"blk.2.attn_q_norm.weight", {64}, DType::F32},     {"blk.2.attn_k_norm.weight", {64}, DType::F32},
    };
    for (const Expect& e : expected) {
        const gguf::TensorInfo* t = file.find_tensor(e.name);
        ASSERT_NE(t, nullptr) << e.name;
        EXPECT_EQ(t->shape, e.shape) << e.name;
        EXPECT_EQ(t->dtype, e.type) << e.name;
    }
    // 2 linear layers × 14 + 1 attention layer × 11 + token_embd, output_norm, output.
    EXPECT_EQ(file.tensors().size(), 2u * 14u + 11u + 3u);
    EXPECT_EQ(file.tensors().front().name, "token_embd.weight");  // llama.cpp's order
    fs::remove(result.path);
}

TEST(Convert, MoeExpertsStackedRouterKeptF32) {
    const Converted result = convert("qwen3_5_moe_binary", DType::Q1_0);
    const gguf::File file = gguf::File::open(result.path.string());
    EXPECT_EQ(file.require_u32("general.file_type"), 40u);  // LLAMA_FTYPE_MOSTLY_Q1_0
    EXPECT_EQ(file.require_u64("qwen35moe.expert_count"), 4u);
    const auto check = [&](const char* name, std::vector<int64_t> shape, DType type) {
        const gguf::TensorInfo& t = file.require_tensor(name);
        EXPECT_EQ(t.shape, shape) << name;
        EXPECT_EQ(t.dtype, type) << name;
    };
    check("blk.0.ffn_gate_exps.weight", {128, 128, 4}, DType::Q1_0);
    check("blk.0.ffn_up_exps.weight", {128, 128, 4}, DType::Q1_0);
    check("blk.0.ffn_down_exps.weight", {128, 128, 4}, DType::Q1_0);
    check("blk.0.ffn_gate_inp.weight", {128, 4}, DType::F32);     // router: never quantised
    check("blk.0.ffn_gate_inp_shexp.weight", {128}, DType::F32);  // [1, D] squeezed
    check("blk.0.ffn_gate_shexp.weight", {128, 128}, DType::Q1_0);

    // Expert 2's up rows = rows I..2I−1 of HF gate_up_proj[2] (gate first, then up).
    const std::vector<float> hf = hf_values("qwen3_5_moe_binary", "model.layers.0.mlp.experts.gate_up_proj");
    const std::vector<float> up = gguf_values(file, "blk.0.ffn_up_exps.weight");
    const int64_t I = 128, D = 128;
    for (int64_t i = 0; i < I; ++i)
        for (int64_t k = 0; k < D; ++k)
            ASSERT_EQ(up[size_t((2 * I + i) * D + k)], hf[size_t(((2 * 2 * I) + I + i) * D + k)]) << i << "," << k;
    fs::remove(result.path);
}

// ---- the conventions, against the raw safetensors ----

TEST(Convert, Qwen35ConventionsNormsSsmAAndTiledValueHeads) {
    const Converted result = convert("qwen3_5_float", DType::F32);
    const gguf::File file = gguf::File::open(result.path.string());
    const std::string fx = "qwen3_5_float";

    // 1+w norms stored added; the gated ssm_norm as is.
    const std::vector<float> norm = gguf_values(file, "blk.0.attn_norm.weight");
    const std::vector<float> hf_norm = hf_values(fx, "model.layers.0.input_layernorm.weight");
    for (size_t i = 0; i < norm.size(); ++i) ASSERT_EQ(norm[i], 1.0f + hf_norm[i]) << i;
    const std::vector<float> qn = gguf_values(file, "blk.2.attn_q_norm.weight");
    const std::vector<float> hf_qn = hf_values(fx, "model.layers.2.self_attn.q_norm.weight");
    for (size_t i = 0; i < qn.size(); ++i) ASSERT_EQ(qn[i], 1.0f + hf_qn[i]) << i;
    EXPECT_EQ(gguf_values(file, "blk.0.ssm_norm.weight"), hf_values(fx, "model.layers.0.linear_attn.norm.weight"));

    // Tiled value heads: H_k = 2, r = 2, so file head h' holds HF head (h' % 2)·2 + h' / 2:
    // 0 ← 0, 1 ← 2, 2 ← 1, 3 ← 3.
    const int64_t hf_head_of[4] = {0, 2, 1, 3};
    const int64_t D = 128, dv = 128, key_dim = 64, value_dim = 512;
    const std::vector<float> a = gguf_values(file, "blk.0.ssm_a");
    const std::vector<float> a_log = hf_values(fx, "model.layers.0.linear_attn.A_log");
    for (int64_t h = 0; h < 4; ++h) EXPECT_EQ(a[size_t(h)], -std::exp(a_log[size_t(hf_head_of[h])])) << h;

    const std::vector<float> qkv = gguf_values(file, "blk.0.attn_qkv.weight");
    const std::vector<float> hf_qkv = hf_values(fx, "model.layers.0.linear_attn.in_proj_qkv.weight");
    const std::vector<float> gate = gguf_values(file, "blk.0.attn_gate.weight");
    const std::vector<float> hf_z = hf_values(fx, "model.layers.0.linear_attn.in_proj_z.weight");
    const std::vector<float> out = gguf_values(file, "blk.0.ssm_out.weight");
    const std::vector<float> hf_out = hf_values(fx, "model.layers.0.linear_attn.out_proj.weight");
    const std::vector<float> conv = gguf_values(file, "blk.0.ssm_conv1d.weight");
    const std::vector<float> hf_conv = hf_values(fx, "model.layers.0.linear_attn.conv1d.weight");  // [640, 1, 4]
    for (int64_t h = 0; h < 4; ++h) {
        const int64_t src = hf_head_of[h];
        for (int64_t i = 0; i < dv; ++i) {
            for (int64_t k = 0; k < D; ++k) {
                ASSERT_EQ(qkv[size_t((2 * key_dim + h * dv + i) * D + k)], hf_qkv[size_t((2 * key_dim + src * dv + i) * D + k)]);
                ASSERT_EQ(gate[size_t((h * dv + i) * D + k)], hf_z[size_t((src * dv + i) * D + k)]);
                ASSERT_EQ(out[size_t(k * value_dim + h * dv + i)], hf_out[size_t(k * value_dim + src * dv + i)]);
            }
            for (int64_t j = 0; j < 4; ++j)
                ASSERT_EQ(conv[size_t((2 * key_dim + h * dv + i) * 4 + j)], hf_conv[size_t((2 * key_dim + src * dv + i) * 4 + j)]);
        }
    }
    // q and k rows are untouched.
    for (int64_t r = 0; r < 2 * key_dim; ++r) ASSERT_EQ(qkv[size_t(r * D)], hf_qkv[size_t(r * D)]) << r;
    fs::remove(result.path);
}

TEST(Convert, Qwen3NextKeepsGroupedOrderAndFusedBa) {
    const Converted result = convert("qwen3_next_float", DType::F32);
    const gguf::File file = gguf::File::open(result.path.string());
    const std::string fx = "qwen3_next_float";
    EXPECT_EQ(file.find_tensor("blk.0.ssm_beta.weight"), nullptr);
    // llama.cpp writes in_proj_ba as ssm_ba unchanged ([b_g | a_g] per key head).
    EXPECT_EQ(gguf_values(file, "blk.0.ssm_ba.weight"), hf_values(fx, "model.layers.0.linear_attn.in_proj_ba.weight"));
    EXPECT_EQ(file.require_tensor("blk.0.ssm_ba.weight").shape, (std::vector<int64_t>{128, 8}));
    // in_proj_qkvz per key head g: [q_g 32 | k_g 32 | v_g 2·128 | z_g 2·128] (576 rows). attn_qkv =
    // [q_0 q_1 | k_0 k_1 | v_0 v_1], attn_gate = [z_0 z_1], value heads still grouped.
    const std::vector<float> qkvz = hf_values(fx, "model.layers.0.linear_attn.in_proj_qkvz.weight");
    const std::vector<float> qkv = gguf_values(file, "blk.0.attn_qkv.weight");
    const std::vector<float> gate = gguf_values(file, "blk.0.attn_gate.weight");
    const int64_t D = 128, group = 576;
    auto hf_row = [&](int64_t r) { return std::span<const float>(qkvz).subspan(size_t(r * D), size_t(D)); };
    auto row = [&](const std::vector<float>& m, int64_t r) { return std::span<const float>(m).subspan(size_t(r * D), size_t(D)); };
    auto same = [](std::span<const float> a, std::span<const float> b) { return std::equal(a.begin(), a.end(), b.begin()); };
    EXPECT_TRUE(same(row(qkv, 32), hf_row(group)));               // q of key head 1
    EXPECT_TRUE(same(row(qkv, 64 + 5), hf_row(32 + 5)));          // k of key head 0
    EXPECT_TRUE(same(row(qkv, 128 + 256 + 7), hf_row(group + 64 + 7)));  // v of key head 1 (value head 2)
    EXPECT_TRUE(same(row(gate, 256 + 3), hf_row(group + 64 + 256 + 3)));  // z of value head 2
    EXPECT_EQ(file.require_string("general.architecture"), "qwen3next");
    fs::remove(result.path);
}

TEST(Convert, Qwen3PlainNormsAndTiedEmbeddings) {
    const Converted result = convert("qwen3_float", DType::F32);
    const gguf::File file = gguf::File::open(result.path.string());
    EXPECT_EQ(file.find_tensor("output.weight"), nullptr);  // tied: llama.cpp reuses token_embd
    EXPECT_EQ(gguf_values(file, "blk.0.attn_norm.weight"), hf_values("qwen3_float", "model.layers.0.input_layernorm.weight"));
    EXPECT_EQ(gguf_values(file, "blk.0.ffn_norm.weight"),
              hf_values("qwen3_float", "model.layers.0.post_attention_layernorm.weight"));
    fs::remove(result.path);
}

// ---- a wrong convention is caught by the whole-model check ----

TEST(Convert, SkippedOnePlusIsCaughtByWholeModelCheck) {
    // Undo the +1 of one norm after the conventions: the per-tensor proofs compare the file with these
    // (wrong) values and pass; only the logits can notice.
    const fs::path out = temp_path("wrong_norm.gguf");
    fs::remove(out);
    ConvertOptions options;
    options.type = DType::F32;
    options.tamper = [](const std::string& name, std::vector<float>& v) {
        if (name == "blk.1.attn_norm.weight")
            for (float& x : v) x -= 1.0f;
    };
    try {
        convert_hf_folder(test::fixtures_dir() / "qwen3_5_float", out, options);
        FAIL() << "the wrong convention was not caught";
    } catch (const Error& e) {
        EXPECT_NE(std::string(e.what()).find("whole-model check failed"), std::string::npos) << e.what();
    }
    EXPECT_FALSE(fs::exists(out));
    EXPECT_FALSE(fs::exists(out.string() + ".tmp"));
}

TEST(Convert, UntiledValueHeadsAreCaughtByWholeModelCheck) {
    // Put ssm_a back in grouped order (heads 1 and 2 swapped back) in a qwen35 file.
    const fs::path out = temp_path("wrong_heads.gguf");
    fs::remove(out);
    ConvertOptions options;
    options.type = DType::Q1_0;
    options.tamper = [](const std::string& name, std::vector<float>& v) {
        if (name == "blk.0.ssm_a") std::swap(v[1], v[2]);
    };
    EXPECT_THROW(convert_hf_folder(test::fixtures_dir() / "qwen3_5_binary", out, options), Error);
    EXPECT_FALSE(fs::exists(out));
}

// ---- refusals ----

TEST(Convert, RefusesUnknownTypeUnsupportedModelAndUnwritableOutput) {
    try {
        parse_convert_type("q4_k");
        FAIL();
    } catch (const Error& e) {
        EXPECT_NE(std::string(e.what()).find("q1_0"), std::string::npos) << e.what();  // lists what is accepted
    }
    EXPECT_THROW(parse_convert_type("i32"), Error);

    ConvertOptions options;
    options.type = DType::F32;
    const fs::path fixture = test::fixtures_dir() / "qwen3_5_float";
    try {
        convert_hf_folder(fixture, "/nonexistent-deltabit-dir/out.gguf", options);
        FAIL();
    } catch (const Error& e) {
        EXPECT_NE(std::string(e.what()).find("does not exist"), std::string::npos) << e.what();
    }
    EXPECT_THROW(convert_hf_folder(fixture, fs::temp_directory_path(), options), Error);  // a folder

    // A model_type the engine does not know.
    const fs::path dir = temp_path("llama_folder");
    fs::create_directories(dir);
    std::ofstream(dir / "config.json") << R"({"model_type": "llama", "hidden_size": 64})";
    try {
        convert_hf_folder(dir, temp_path("llama.gguf"), options);
        FAIL();
    } catch (const Error& e) {
        EXPECT_NE(std::string(e.what()).find("llama"), std::string::npos) << e.what();
    }
    fs::remove_all(dir);

    // Dense layers between MoE layers have no GGUF key: refused before anything is written.
    const fs::path out = temp_path("next_moe.gguf");
    try {
        convert_hf_folder(test::fixtures_dir() / "qwen3_next_moe_float", out, options);
        FAIL();
    } catch (const Error& e) {
        EXPECT_NE(std::string(e.what()).find("MoE and dense"), std::string::npos) << e.what();
    }
    EXPECT_FALSE(fs::exists(out));
    EXPECT_FALSE(fs::exists(out.string() + ".tmp"));
}

// ---- lossy types report their error and pass the proofs ----

TEST(Convert, LossyQuantisedTypesReportErrorWithinTheirBounds) {
    for (DType type : {DType::Q8_0, DType::Q4_0}) {
        const Converted result = convert("qwen3_float", type);
        const ConvertReport& r = result.report;
        EXPECT_FALSE(r.lossless);
        EXPECT_GT(r.max_abs, 0.0);
        EXPECT_EQ(r.logits.tolerance, 0.0);  // reported, not enforced
        int64_t scales = 0;
        for (const TensorReport& t : r.tensors) scales += t.scales_checked;
        // token_embd (256 × 128) + 4 layers × (q 256·128 + k 128·128 + v 128·128 + o 128·256 + gate/up
        // 256·128 ×2 + down 128·256) weights, 32 per block.
        const int64_t weights = 256 * 128 + 4 * (256 * 128 + 2 * 128 * 128 + 128 * 256 + 2 * 256 * 128 + 128 * 256);
        EXPECT_EQ(scales, weights / 32) << dtype_name(type);
        std::printf("[ convert ] qwen3_float %-5s lossy max|err| %.3g rms rel %.3g, max|dlogit| %.3g, top-1 %lld/%zu\n",
                    std::string(dtype_name(type)).c_str(), r.max_abs, r.rms_rel, r.logits.max_abs_diff,
                    (long long)r.logits.top1_agree, r.logits.tokens.size());
        fs::remove(result.path);
    }
}

// More bits must give less error, on real (float) weights: Q2_0's reference quantiser (d = amax, never
// the +2 level) lost to Q1_0 on this fixture (rms rel 0.733 vs 0.582); the least-squared-error scale
// (core/quant.cpp) must beat it. The figures printed here are the table in docs/convert.md.
TEST(Convert, MoreBitsGiveLessErrorOnFloatWeights) {
    std::vector<std::pair<DType, double>> errors;
    for (DType type : {DType::Q8_0, DType::Q4_0, DType::Q2_0, DType::Q1_0}) {
        const Converted result = convert("qwen3_5_float", type);
        std::printf("[ convert ] qwen3_5_float %-5s rms rel %.3f max|err| %.3g, max|dlogit| %.3g, top-1 %lld/%zu\n",
                    std::string(dtype_name(type)).c_str(), result.report.rms_rel, result.report.max_abs,
                    result.report.logits.max_abs_diff, (long long)result.report.logits.top1_agree,
                    result.report.logits.tokens.size());
        errors.push_back({type, result.report.rms_rel});
        fs::remove(result.path);
    }
    for (size_t i = 1; i < errors.size(); ++i)
        EXPECT_LT(errors[i - 1].second, errors[i].second)
            << dtype_name(errors[i - 1].first) << " vs " << dtype_name(errors[i].first);
}

// ---- the command line ----

TEST(Convert, CommandLineJsonAndRefusal) {
    const fs::path out = temp_path("cli.gguf");
    const fs::path json = temp_path("cli.json");
    const std::string cmd = std::string(DELTABIT_BINARY) + " convert " + (test::fixtures_dir() / "qwen3_next_binary").string() +
                            " -o " + out.string() + " --type q1_0 --json -q > " + json.string();
    ASSERT_EQ(std::system(cmd.c_str()), 0);
    std::ifstream in(json);
    const nlohmann::json j = nlohmann::json::parse(in);
    EXPECT_EQ(j.at("architecture"), "qwen3next");
    EXPECT_EQ(j.at("file_type"), 40);
    EXPECT_EQ(j.at("lossless"), true);
    EXPECT_EQ(j.at("logits_check").at("passed"), true);
    EXPECT_TRUE(fs::exists(out));

    const std::string bad = std::string(DELTABIT_BINARY) + " convert " + (test::fixtures_dir() / "qwen3_5_float").string() +
                            " -o " + out.string() + ".2 --type q5_k 2> " + json.string();
    EXPECT_NE(std::system(bad.c_str()), 0);
    std::ifstream err(json);
    const std::string message((std::istreambuf_iterator<char>(err)), std::istreambuf_iterator<char>());
    EXPECT_NE(message.find("q5_k"), std::string::npos) << message;
    fs::remove(out);
    fs::remove(json);
}

// ---- tokenizer.json → tokenizer.ggml.* ----

TEST(Convert, WritesTokenizerMetadataFromTokenizerJson) {
    const fs::path dir = temp_path("with_tokenizer");
    fs::remove_all(dir);
    fs::create_directories(dir);
    for (const char* f : {"config.json", "model.safetensors"})
        fs::copy_file(test::fixtures_dir() / "qwen3_5_binary" / f, dir / f);
    // A byte-level BPE in the GPT-2 alphabet ("Ġ" is the space byte).
    std::ofstream(dir / "tokenizer.json") << R"({
      "pre_tokenizer": {"type": "ByteLevel", "add_prefix_space": false, "trim_offsets": false, "use_regex": true},
      "decoder": {"type": "ByteLevel"},
      "model": {"type": "BPE", "vocab": {"a": 0, "b": 1, "ab": 2, "Ġ": 3, "Ġa": 4, "Ġab": 5},
                "merges": ["Ġ a", "a b", "Ġa b"]},
      "added_tokens": [{"id": 250, "content": "<|im_end|>", "special": true},
                       {"id": 251, "content": "<think>", "special": false}]})";
    std::ofstream(dir / "tokenizer_config.json") << R"({"pad_token": "<|im_end|>", "chat_template": "{{ x }}"})";
    ConvertOptions options;
    options.type = DType::Q1_0;
    const fs::path out = temp_path("with_tokenizer.gguf");
    const ConvertReport r = convert_hf_folder(dir, out, options);
    EXPECT_TRUE(r.tokenizer_written);
    const gguf::File file = gguf::File::open(out.string());
    EXPECT_EQ(file.require_string("tokenizer.ggml.model"), "gpt2");
    EXPECT_EQ(file.require_string("tokenizer.ggml.pre"), "qwen35");
    const std::vector<std::string> tokens = file.require_string_array("tokenizer.ggml.tokens");
    ASSERT_EQ(tokens.size(), 256u);  // padded to the model's vocab_size
    EXPECT_EQ(tokens[2], "ab");
    EXPECT_EQ(tokens[3], "Ġ");
    EXPECT_EQ(tokens[6], "[PAD6]");
    EXPECT_EQ(tokens[250], "<|im_end|>");
    const std::vector<int64_t> types = file.require_i64_array("tokenizer.ggml.token_type");
    EXPECT_EQ(types[0], 1);    // normal
    EXPECT_EQ(types[6], 5);    // unused
    EXPECT_EQ(types[250], 3);  // control
    EXPECT_EQ(types[251], 4);  // user-defined
    EXPECT_EQ(file.require_string_array("tokenizer.ggml.merges"), (std::vector<std::string>{"Ġ a", "a b", "Ġa b"}));
    EXPECT_EQ(file.require_u32("tokenizer.ggml.padding_token_id"), 250u);
    EXPECT_EQ(file.require_string("tokenizer.chat_template"), "{{ x }}");
#ifdef DELTABIT_HAVE_TEXT
    // The text engineer's GGUF reader gives the same tokens as their tokenizer.json reader.
    const text::Tokenizer from_json = text::load_tokenizer((dir / "tokenizer.json").string());
    const text::Tokenizer from_gguf = text::load_tokenizer(out.string());
    EXPECT_EQ(from_gguf.encode("ab ab<|im_end|>"), (std::vector<int32_t>{2, 5, 250}));
    EXPECT_EQ(from_gguf.encode("ab ab<|im_end|>"), from_json.encode("ab ab<|im_end|>"));
#endif
    fs::remove_all(dir);
    fs::remove(out);
}

}  // namespace
}  // namespace deltabit
