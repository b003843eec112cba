// DiffusionGemma on the CPU: the transformers fixture (tests/fixtures/diffusion_gemma, made by
// tools/fixtures/make_diffusion_fixture.py) replayed call by call — encoder KV caches and decoder logits at
// every position — and, without the fixture, the config rules and the passes' own invariants on a random
// model written as a Hugging Face folder.
#include "diffusion_gemma_folder.h"
#include "fixture.h"

#include "core/error.h"
#include "formats/safetensors.h"
#include "models/config_loader.h"
#include "models/diffusion_gemma.h"
#include "models/model.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>

namespace deltabit {
namespace {

namespace fs = std::filesystem;

// DESIGN.md §6 rung 2 / issue 37: every logit within 1e-4 of the largest |logit| (fixed before the first run).
constexpr double kRelativeTolerance = 1e-4;

fs::path fixture_dir() { return test::fixtures_dir() / "diffusion_gemma"; }

bool fixture_present() { return fs::exists(fixture_dir() / "diffusion.json") && fs::exists(fixture_dir() / "reference.safetensors"); }

#define SKIP_WITHOUT_FIXTURE()                                                                                    \
    if (!fixture_present())                                                                                       \
    GTEST_SKIP() << "no DiffusionGemma fixture in " << fixture_dir().string()                                     \
                 << ": run tools/fixtures/make_diffusion_fixture.py where torch and transformers 5.17 are installed"

// The reference outputs, read independently of the loader under test.
class Reference {
public:
    Reference() : file_(safetensors::File::open(fixture_dir() / "reference.safetensors")) {
        std::ifstream in(fixture_dir() / "diffusion.json");
        meta_ = nlohmann::json::parse(in);
    }
    const nlohmann::json& meta() const { return meta_; }

    std::vector<float> floats(const std::string& name) const {
        const safetensors::TensorInfo& t = require(name, "F32");
        std::vector<float> out(t.n_elements());
        std::memcpy(out.data(), t.data, out.size() * 4);
        return out;
    }
    std::vector<int32_t> ints(const std::string& name) const {
        const safetensors::TensorInfo& t = require(name, "I32");
        std::vector<int32_t> out(t.n_elements());
        std::memcpy(out.data(), t.data, out.size() * 4);
        return out;
    }
    std::vector<int64_t> shape(const std::string& name) const { return require(name, "").shape; }

private:
    const safetensors::TensorInfo& require(const std::string& name, const std::string& dtype) const {
        const safetensors::TensorInfo* t = file_.find(name);
        if (!t) throw std::runtime_error("reference.safetensors: no tensor " + name);
        if (!dtype.empty() && t->dtype_name != dtype)
            throw std::runtime_error("reference.safetensors: " + name + " is " + t->dtype_name + ", not " + dtype);
        return *t;
    }
    safetensors::File file_;
    nlohmann::json meta_;
};

double max_abs(const std::vector<float>& v) {
    double m = 0.0;
    for (float x : v) m = std::max(m, double(std::abs(x)));
    return m;
}

int64_t argmax(const float* row, int64_t n) {
    return std::max_element(row, row + n) - row;
}

TEST(DiffusionGemmaFixture, ConfigReadsAsTransformersResolvedIt) {
    SKIP_WITHOUT_FIXTURE();
    const Reference ref;
    const ModelConfig c = load_hf_config(fixture_dir());
    const nlohmann::json& m = ref.meta();
    ASSERT_EQ(c.arch, Arch::diffusion_gemma);
    EXPECT_EQ(c.n_vocab, m.at("vocab_size").get<int64_t>());
    EXPECT_EQ(c.canvas_length, m.at("canvas_length").get<int64_t>());
    EXPECT_EQ(c.final_logit_softcap, 30.0f);  // not in config.json: the class attribute's value
    const auto types = m.at("layer_types").get<std::vector<std::string>>();
    ASSERT_EQ(size_t(c.n_layer()), types.size());
    const auto& per_layer = m.at("per_layer_config");
    for (size_t l = 0; l < types.size(); ++l) {
        const LayerAttention& a = c.layer_attention[l];
        const bool full = types[l] == "full_attention";
        EXPECT_EQ(c.layers[l], full ? LayerKind::full_attention : LayerKind::sliding_attention) << l;
        const std::string key = std::to_string(l);
        const int64_t head_dim = per_layer.contains(key) ? per_layer[key].at("head_dim").get<int64_t>() : c.head_dim;
        EXPECT_EQ(a.head_dim, head_dim) << l;
        EXPECT_EQ(a.window, full ? 0 : m.at("sliding_window").get<int64_t>()) << l;
        EXPECT_EQ(a.value_is_key, full) << l;
        // Sliding: default RoPE (every pair, θ 1e4); full: proportional 0.25 (θ 1e6).
        EXPECT_EQ(a.rope_pairs, full ? int64_t(0.25 * double(head_dim) / 2) : head_dim / 2) << l;
        EXPECT_EQ(a.rope_theta, full ? 1e6f : 1e4f) << l;
    }
}

// The forward script: each encoder call's K/V cache, each decoder call's logits at every position.
TEST(DiffusionGemmaFixture, EncoderCacheAndDecoderLogitsMatchTransformers) {
    SKIP_WITHOUT_FIXTURE();
    const Reference ref;
    const Model model = Model::load(fixture_dir());
    const DiffusionGemma dg(model);
    const ModelConfig& c = model.config();
    const double logit_tolerance = kRelativeTolerance * ref.meta().at("max_abs_logit").get<double>();
    DiffusionCache cache = dg.new_cache();
    int64_t decodes = 0, encodes = 0;
    double worst_logit = 0.0;
    for (const nlohmann::json& op : ref.meta().at("forward")) {
        const std::string kind = op.at("op");
        ASSERT_EQ(cache.length, op.at("position").get<int64_t>()) << kind;
        if (kind == "encode") {
            const std::vector<int32_t> ids = ref.ints(op.at("ids"));
            dg.encode(cache, ids);
            const auto& kv = op.at("kv");
            ASSERT_EQ(int64_t(kv.size()), c.n_layer());
            for (int64_t l = 0; l < c.n_layer(); ++l) {
                const DiffusionCache::Layer& got = cache.layers[size_t(l)];
                ASSERT_EQ(got.rows, kv[size_t(l)].at("rows").get<int64_t>()) << "encode " << encodes << " layer " << l;
                for (const char* part : {"k", "v"}) {
                    const std::vector<float> want = ref.floats(kv[size_t(l)].at(part));
                    const std::vector<float>& have = part[0] == 'k' ? got.k : got.v;
                    ASSERT_EQ(have.size(), want.size()) << "encode " << encodes << " layer " << l << " " << part;
                    // Same bound as the logits, relative to the largest cached value.
                    const double tolerance = kRelativeTolerance * max_abs(want);
                    double worst = 0.0;
                    for (size_t i = 0; i < want.size(); ++i) worst = std::max(worst, double(std::abs(have[i] - want[i])));
                    EXPECT_LE(worst, tolerance) << "encode " << encodes << " layer " << l << " " << part;
                }
            }
            ++encodes;
        } else {
            ASSERT_EQ(kind, "decode");
            const std::vector<int32_t> canvas = ref.ints(op.at("canvas"));
            const std::vector<float> sc =
                op.at("self_conditioning").is_null() ? std::vector<float>{} : ref.floats(op.at("self_conditioning"));
            const std::vector<float> want = ref.floats(op.at("logits"));
            const DiffusionCache before = cache;
            const std::vector<float> got = dg.denoise(cache, canvas, sc);
            ASSERT_EQ(got.size(), want.size());
            const int64_t V = c.n_vocab;
            for (size_t t = 0; t < canvas.size(); ++t) {
                double row_worst = 0.0;
                for (int64_t i = 0; i < V; ++i)
                    row_worst = std::max(row_worst, std::abs(double(got[t * V + i]) - want[t * V + i]));
                worst_logit = std::max(worst_logit, row_worst);
                EXPECT_LE(row_worst, logit_tolerance) << "decode " << decodes << " position " << t
                                                      << (sc.empty() ? " (step 1)" : " (self-conditioned)");
                EXPECT_EQ(argmax(got.data() + t * V, V), argmax(want.data() + t * V, V))
                    << "decode " << decodes << " position " << t;
            }
            EXPECT_EQ(cache.length, before.length);
            ++decodes;
        }
    }
    EXPECT_GE(encodes, 3);
    EXPECT_GE(decodes, 5);
    std::printf("[ parity ] diffusion_gemma  %lld encoder calls, %lld decoder calls, max|dlogit| %.3g (%.2g of max|logit|)\n",
                static_cast<long long>(encodes), static_cast<long long>(decodes), worst_logit,
                worst_logit / ref.meta().at("max_abs_logit").get<double>());
}

// ---- without the fixture: a random model written by the test ----

class DiffusionGemmaRandom : public ::testing::Test {
protected:
    static fs::path folder(const std::string& name) { return fs::temp_directory_path() / ("deltabit_test_dg_" + name); }
};

TEST_F(DiffusionGemmaRandom, ConfigRulesOfTransformers) {
    test::TinyDiffusionGemma tiny;
    tiny.layer_types = {"sliding_attention", "full_attention", "sliding_attention"};  // last forced to full
    const ModelConfig c = model_config_from_hf_json(tiny.config(), "tiny");
    ASSERT_EQ(c.n_layer(), 3);
    EXPECT_EQ(c.layers[2], LayerKind::full_attention);
    EXPECT_EQ(c.layers[0], LayerKind::sliding_attention);
    EXPECT_EQ(c.layer_attention[1].head_dim, 16);
    EXPECT_EQ(c.layer_attention[1].n_head_kv, 1);
    EXPECT_EQ(c.layer_attention[1].rope_pairs, 2);  // int(0.25 · 16 // 2)
    EXPECT_EQ(c.layer_attention[0].rope_pairs, 4);  // default RoPE: all 8 / 2
    // Layer 2 became full without a per-layer entry (per_layer_config given, so no global default applies).
    EXPECT_EQ(c.layer_attention[2].head_dim, 8);
    EXPECT_TRUE(c.layer_attention[2].value_is_key);
    EXPECT_EQ(c.layer_attention[0].window, 4);
    EXPECT_EQ(c.layer_attention[2].window, 0);
    EXPECT_EQ(c.final_logit_softcap, 30.0f);
    EXPECT_EQ(c.canvas_length, 5);

    // Without per_layer_config, full layers take global_head_dim (default 512) and the default pattern
    // puts full attention on every 6th layer.
    nlohmann::json j = tiny.config();
    j["text_config"].erase("per_layer_config");
    j["text_config"].erase("layer_types");
    j["text_config"]["num_hidden_layers"] = 7;
    const ModelConfig d = model_config_from_hf_json(j, "tiny");
    for (int64_t l = 0; l < 7; ++l)
        EXPECT_EQ(d.layers[size_t(l)], l == 5 || l == 6 ? LayerKind::full_attention : LayerKind::sliding_attention) << l;
    EXPECT_EQ(d.layer_attention[5].head_dim, 512);
    EXPECT_EQ(d.layer_attention[5].rope_pairs, 64);
    EXPECT_EQ(d.layer_attention[5].n_head_kv, 2);

    j["text_config"]["final_logit_softcapping"] = nullptr;  // an explicit null turns the cap off
    EXPECT_EQ(model_config_from_hf_json(j, "tiny").final_logit_softcap, 0.0f);
}

TEST_F(DiffusionGemmaRandom, ConfigErrorsNameTheField) {
    const test::TinyDiffusionGemma tiny;
    auto message = [](const nlohmann::json& j) -> std::string {
        try {
            model_config_from_hf_json(j, "cfg");
        } catch (const Error& e) {
            return e.what();
        }
        return "";
    };
    nlohmann::json all = tiny.config();
    all["text_config"]["use_bidirectional_attention"] = "all";
    EXPECT_NE(message(all).find("text_config.use_bidirectional_attention"), std::string::npos) << message(all);
    nlohmann::json no_experts = tiny.config();
    no_experts["text_config"].erase("num_experts");
    EXPECT_NE(message(no_experts).find("text_config.num_experts"), std::string::npos) << message(no_experts);
    nlohmann::json bad_key = tiny.config();
    bad_key["text_config"]["per_layer_config"]["9"] = {{"head_dim", 8}};
    EXPECT_NE(message(bad_key).find("per_layer_config.9"), std::string::npos) << message(bad_key);
    nlohmann::json odd = tiny.config();
    odd["text_config"]["per_layer_config"]["1"]["sliding_window"] = 3;
    EXPECT_NE(message(odd).find("sliding_window"), std::string::npos) << message(odd);
    nlohmann::json rope = tiny.config();
    rope["text_config"]["rope_parameters"] = {{"full_attention", {{"rope_type", "yarn"}}}};
    EXPECT_NE(message(rope).find("rope_parameters.full_attention.rope_type"), std::string::npos) << message(rope);
}

TEST_F(DiffusionGemmaRandom, EncodingInPiecesEqualsOneCallAndSlidingCachesKeepWindowMinusOne) {
    const test::TinyDiffusionGemma tiny;
    const fs::path dir = folder("pieces");
    tiny.write(dir);
    const Model model = Model::load(dir);
    const DiffusionGemma dg(model);
    const std::vector<int32_t> prompt = {3, 17, 5, 9, 33, 21, 8, 2, 30, 11, 19};
    const std::vector<int32_t> canvas = {4, 4, 38, 0, 12};

    DiffusionCache whole = dg.new_cache(), pieces = dg.new_cache();
    dg.encode(whole, prompt);
    dg.encode(pieces, std::span(prompt).first(3));
    dg.encode(pieces, std::span(prompt).subspan(3, 5));
    dg.encode(pieces, std::span(prompt).subspan(8));
    ASSERT_EQ(whole.length, 11);
    ASSERT_EQ(pieces.length, 11);
    for (size_t l = 0; l < 4; ++l) {
        const bool sliding = l % 2 == 0;
        EXPECT_EQ(whole.layers[l].rows, sliding ? tiny.window - 1 : 11) << l;
        EXPECT_EQ(pieces.layers[l].rows, whole.layers[l].rows) << l;
        ASSERT_EQ(pieces.layers[l].k.size(), whole.layers[l].k.size());
        for (size_t i = 0; i < whole.layers[l].k.size(); ++i) {
            EXPECT_NEAR(pieces.layers[l].k[i], whole.layers[l].k[i], 1e-5) << l;
            EXPECT_NEAR(pieces.layers[l].v[i], whole.layers[l].v[i], 1e-5) << l;
        }
    }
    const std::vector<float> a = dg.denoise(whole, canvas), b = dg.denoise(pieces, canvas);
    ASSERT_EQ(a.size(), size_t(5 * tiny.vocab));
    double worst = 0.0, biggest = 0.0;
    for (size_t i = 0; i < a.size(); ++i) {
        worst = std::max(worst, double(std::abs(a[i] - b[i])));
        biggest = std::max(biggest, double(std::abs(a[i])));
    }
    EXPECT_LE(worst, 1e-5 * biggest);
    EXPECT_LT(biggest, 30.0);  // softcapped
    EXPECT_GT(biggest, 1.0);   // and not degenerate
    fs::remove_all(dir);
}

TEST_F(DiffusionGemmaRandom, SelfConditioningAndTheEncoderScalarsMatter) {
    test::TinyDiffusionGemma tiny;
    const fs::path dir = folder("sc");
    tiny.write(dir);
    const Model model = Model::load(dir);
    const DiffusionGemma dg(model);
    DiffusionCache cache = dg.new_cache();
    const std::vector<int32_t> prompt = {3, 17, 5, 9, 33, 21, 8};
    const std::vector<int32_t> canvas = {4, 4, 38, 0, 12};
    dg.encode(cache, prompt);
    const std::vector<float> step1 = dg.denoise(cache, canvas);
    std::vector<float> sc(step1.size());
    for (size_t i = 0; i < sc.size(); ++i) sc[i] = step1[i] / 0.8f;
    const std::vector<float> step2 = dg.denoise(cache, canvas, sc);
    double moved = 0.0;
    for (size_t i = 0; i < step1.size(); ++i) moved = std::max(moved, double(std::abs(step2[i] - step1[i])));
    EXPECT_GT(moved, 1e-2);  // the self-conditioning branch reaches the logits

    // Equal encoder and decoder layer scalars change the cache (the encoder reads its own copy).
    tiny.equal_layer_scalars = true;
    const fs::path dir2 = folder("sc_equal");
    tiny.write(dir2);
    const Model equal(Model::load(dir2));
    const DiffusionGemma dg2(equal);
    DiffusionCache cache2 = dg2.new_cache();
    dg2.encode(cache2, prompt);
    double k_moved = 0.0;
    for (size_t i = 0; i < cache.layers[2].k.size(); ++i)
        k_moved = std::max(k_moved, double(std::abs(cache.layers[2].k[i] - cache2.layers[2].k[i])));
    EXPECT_GT(k_moved, 1e-3);
    fs::remove_all(dir);
    fs::remove_all(dir2);
}

TEST_F(DiffusionGemmaRandom, BadInputIsRefusedWithTheCacheUnchanged) {
    const test::TinyDiffusionGemma tiny;
    const fs::path dir = folder("bad");
    tiny.write(dir);
    const Model model = Model::load(dir);
    const DiffusionGemma dg(model);
    DiffusionCache cache = dg.new_cache();
    const std::vector<int32_t> prompt = {3, 17, 5};
    dg.encode(cache, prompt);
    const DiffusionCache before = cache;
    const std::vector<int32_t> bad = {3, int32_t(tiny.vocab)};
    EXPECT_THROW(dg.encode(cache, bad), Error);
    EXPECT_EQ(cache.length, before.length);
    EXPECT_EQ(cache.layers[1].k, before.layers[1].k);
    EXPECT_THROW(dg.denoise(cache, bad), Error);
    const std::vector<int32_t> canvas = {1, 2};
    EXPECT_THROW(dg.denoise(cache, canvas, std::vector<float>(size_t(tiny.vocab))), Error);  // 1 row for 2
    // An image placeholder is encoded as pad (no vision tower in a text-only engine).
    ASSERT_EQ(dg.config().image_token_id, tiny.vocab - 1);
    DiffusionCache image = dg.new_cache(), pad = dg.new_cache(), other = dg.new_cache();
    dg.encode(image, std::vector<int32_t>{3, int32_t(tiny.vocab - 1), 5});
    dg.encode(pad, std::vector<int32_t>{3, int32_t(dg.config().pad_id), 5});
    dg.encode(other, std::vector<int32_t>{3, int32_t(tiny.vocab - 2), 5});
    EXPECT_EQ(image.layers[1].k, pad.layers[1].k);
    EXPECT_NE(image.layers[1].k, other.layers[1].k);
    // The left-to-right forward refuses a diffusion model, and DiffusionGemma refuses the others.
    SequenceState state = model.new_sequence();
    EXPECT_THROW(model.forward(state, prompt), Error);
    fs::remove_all(dir);
}

}  // namespace
}  // namespace deltabit
