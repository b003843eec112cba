// DiffusionGemma on the CPU: the transformers fixture (tests/fixtures/diffusion_gemma, made by
// tools/fixtures/make_diffusion_fixture.py) replayed call by call — encoder KV caches and decoder logits at
// every position — and, without the fixture, the config rules and the passes' own invariants on a random
// model written as a Hugging Face folder.
#include "diffusion_fixture.h"
#include "diffusion_gemma_folder.h"

#include "convert/convert.h"
#include "core/error.h"
#include "formats/safetensors.h"
#include "models/config_loader.h"
#include "models/config_summary.h"
#include "models/diffusion_gemma.h"
#include "models/model.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <deque>
#include <filesystem>
#include <fstream>

namespace deltabit {
namespace {

namespace fs = std::filesystem;

// DESIGN.md §6 rung 2 / issue 37: every logit within 1e-4 of the largest |logit| (fixed before the first run).
constexpr double kRelativeTolerance = 1e-4;

fs::path fixture_dir() { return test::diffusion_fixture_dir(); }

#define SKIP_WITHOUT_FIXTURE()                                                                                    \
    if (!test::diffusion_fixture_present())                                                                       \
    GTEST_SKIP() << "no DiffusionGemma fixture in " << fixture_dir().string()                                     \
                 << ": run tools/fixtures/make_diffusion_fixture.py where torch and transformers 5.17 are installed"

using Reference = test::DiffusionReference;
using test::max_abs;
using test::ScriptReplay;

// The CPU model as test::replay_forward_script's backend.
struct CpuBackend {
    const DiffusionGemma& dg;
    DiffusionCache new_cache() const { return dg.new_cache(); }
    void encode(DiffusionCache& cache, std::span<const int32_t> ids) const { dg.encode(cache, ids); }
    int64_t length(const DiffusionCache& cache) const { return cache.length; }
    int64_t rows(const DiffusionCache& cache, int64_t l) const { return cache.layers[size_t(l)].rows; }
    std::vector<float> k(const DiffusionCache& cache, int64_t l) const { return cache.layers[size_t(l)].k; }
    std::vector<float> v(const DiffusionCache& cache, int64_t l) const { return cache.layers[size_t(l)].v; }
    std::vector<float> denoise(const DiffusionCache& cache, std::span<const int32_t> canvas,
                               std::span<const float> sc) const {
        return dg.denoise(cache, canvas, sc);
    }
};

// The forward script of a fixture folder replayed on the CPU model loaded from the same folder, every
// argmax compared.
ScriptReplay replay_forward_script(const fs::path& dir) {
    const Model model = Model::load(dir);
    const DiffusionGemma dg(model);
    CpuBackend backend{dg};
    return test::replay_forward_script(dir, backend, model.config().n_layer(), model.config().n_vocab);
}

TEST(DiffusionGemmaFixture, ConfigReadsAsTransformersResolvedIt) {
    SKIP_WITHOUT_FIXTURE();
    const Reference ref(fixture_dir());
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
    const ScriptReplay r = replay_forward_script(fixture_dir());
    EXPECT_TRUE(r.problems.empty()) << r.problems.front();
    EXPECT_LE(r.worst_logit, kRelativeTolerance) << "at " << r.worst_logit_at;
    EXPECT_LE(r.worst_kv, kRelativeTolerance) << "at " << r.worst_kv_at;
    EXPECT_EQ(r.argmax_mismatches, 0);
    EXPECT_GE(r.encodes, 3);
    EXPECT_GE(r.decodes, 5);
    std::printf("[ parity ] diffusion_gemma  %lld encoder calls, %lld decoder calls, max|dlogit| %.2g of max|logit| "
                "(at %s), max|dKV| %.2g (at %s)\n",
                static_cast<long long>(r.encodes), static_cast<long long>(r.decodes), r.worst_logit,
                r.worst_logit_at.c_str(), r.worst_kv, r.worst_kv_at.c_str());
}

// ---- without the fixture: a random model written by the test ----

class DiffusionGemmaRandom : public ::testing::Test {
protected:
    // One folder per process: ctest runs each test in its own process, in parallel.
    static fs::path folder(const std::string& name) {
        return fs::temp_directory_path() / ("deltabit_test_dg_" + std::to_string(::getpid()) + "_" + name);
    }
};

// Writes a forward script in make_diffusion_fixture.py's format (tests/fixtures/README.md) into `dir` from
// this engine's own outputs, so that the replay above runs without transformers. `logit_bump` and
// `kv_bump` (relative to the largest value) move one logit of the second decoder call and one cached key
// of the first encoder call, to show the replay reports them.
void write_own_script(const fs::path& dir, const Model& model, double logit_bump, double kv_bump) {
    const DiffusionGemma dg(model);
    const ModelConfig& c = model.config();
    std::deque<std::vector<float>> floats;
    std::deque<std::vector<int32_t>> ints;
    std::vector<safetensors::TensorToWrite> tensors;
    auto add_floats = [&](const std::string& name, std::vector<float> v, std::vector<int64_t> shape) {
        floats.push_back(std::move(v));
        tensors.push_back({name, "F32", std::move(shape),
                           {reinterpret_cast<const uint8_t*>(floats.back().data()), floats.back().size() * 4}});
        return name;
    };
    auto add_ints = [&](const std::string& name, std::vector<int32_t> v) {
        ints.push_back(std::move(v));
        tensors.push_back({name, "I32", {int64_t(ints.back().size())},
                           {reinterpret_cast<const uint8_t*>(ints.back().data()), ints.back().size() * 4}});
        return name;
    };
    DiffusionCache cache = dg.new_cache();
    nlohmann::json ops = nlohmann::json::array();
    double max_logit = 0.0;
    auto encode = [&](std::vector<int32_t> ids) {
        const std::string i = std::to_string(ops.size());
        const int64_t position = cache.length;
        dg.encode(cache, ids);
        nlohmann::json op = {{"op", "encode"}, {"ids", add_ints("op" + i + ".ids", ids)}, {"position", position},
                             {"kv", nlohmann::json::array()}};
        for (int64_t l = 0; l < c.n_layer(); ++l) {
            const DiffusionCache::Layer& layer = cache.layers[size_t(l)];
            const LayerAttention& g = c.layer_attention[size_t(l)];
            std::vector<float> k = layer.k;
            if (ops.empty() && l == 1) k[3] += float(kv_bump * max_abs(k));
            const std::vector<int64_t> shape = {layer.rows, g.n_head_kv, g.head_dim};
            op["kv"].push_back({{"k", add_floats("op" + i + ".layer" + std::to_string(l) + ".k", k, shape)},
                                {"v", add_floats("op" + i + ".layer" + std::to_string(l) + ".v", layer.v, shape)},
                                {"rows", layer.rows}});
        }
        ops.push_back(op);
    };
    auto decode = [&](std::vector<int32_t> canvas, const std::vector<float>& sc) {
        const std::string i = std::to_string(ops.size());
        std::vector<float> logits = dg.denoise(cache, canvas, sc);
        max_logit = std::max(max_logit, max_abs(logits));
        const int64_t L = int64_t(canvas.size());
        nlohmann::json op = {{"op", "decode"}, {"canvas", add_ints("op" + i + ".canvas", canvas)}, {"position", cache.length}};
        op["self_conditioning"] = sc.empty() ? nlohmann::json(nullptr)
                                             : nlohmann::json(add_floats("op" + i + ".self_conditioning", sc, {L, c.n_vocab}));
        const std::vector<float> clean = logits;
        // Relative to the cap, which bounds every logit: at least logit_bump of the largest.
        if (ops.size() == 2) logits[7] += float(logit_bump * c.final_logit_softcap);
        op["logits"] = add_floats("op" + i + ".logits", logits, {L, c.n_vocab});
        ops.push_back(op);
        return clean;
    };
    encode({3, 17, 5, 9, 33, 21, 8, 2, 30, 11, 19});
    const std::vector<float> step1 = decode({4, 4, 38, 0, 12}, {});
    std::vector<float> sc(step1.size());
    for (size_t i = 0; i < sc.size(); ++i) sc[i] = step1[i] / 0.8f;
    decode({7, 1, 22, 22, 9}, sc);
    encode({6, 6, 13, 27, 1});
    decode({2, 3, 5, 7, 11}, {});
    safetensors::write(dir / "reference.safetensors", tensors);
    std::ofstream(dir / "diffusion.json") << nlohmann::json{{"format", 1}, {"max_abs_logit", max_logit}, {"forward", ops}}.dump(1);
}

TEST_F(DiffusionGemmaRandom, ForwardScriptReplayFindsNothingInItsOwnOutputsAndCatchesAChange) {
    const test::TinyDiffusionGemma tiny;
    const fs::path dir = folder("script");
    tiny.write(dir);
    const Model model = Model::load(dir);

    write_own_script(dir, model, 0.0, 0.0);
    const ScriptReplay same = replay_forward_script(dir);
    EXPECT_TRUE(same.problems.empty()) << same.problems.front();
    EXPECT_EQ(same.encodes, 2);
    EXPECT_EQ(same.decodes, 3);
    EXPECT_EQ(same.worst_logit, 0.0);  // the same deterministic reference twice
    EXPECT_EQ(same.worst_kv, 0.0);
    EXPECT_EQ(same.argmax_mismatches, 0);

    // Twice the tolerance on one logit, then on one cached key: each is reported where it is.
    write_own_script(dir, model, 2 * kRelativeTolerance, 0.0);
    const ScriptReplay logit = replay_forward_script(dir);
    EXPECT_GT(logit.worst_logit, kRelativeTolerance);
    EXPECT_NE(logit.worst_logit_at.find("decode 1 position 0"), std::string::npos) << logit.worst_logit_at;
    EXPECT_EQ(logit.worst_kv, 0.0);
    write_own_script(dir, model, 0.0, 2 * kRelativeTolerance);
    const ScriptReplay kv = replay_forward_script(dir);
    EXPECT_GT(kv.worst_kv, kRelativeTolerance);
    EXPECT_EQ(kv.worst_kv_at, "encode 0 layer 1 k");
    fs::remove_all(dir);
}

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
    // `deltabit info` shows what sets this model apart.
    std::string summary;
    for (const auto& [key, value] : model_config_summary(c)) summary += key + ": " + value + "\n";
    EXPECT_NE(summary.find("full layers: 1 kv heads, head dim 16, rope 2 of 8 pairs, theta 1e+06, values = keys"),
              std::string::npos) << summary;
    EXPECT_NE(summary.find("block diffusion: canvas 5, sliding window 4, logit softcap 30"), std::string::npos) << summary;

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
    // Written as GGUF (tests/models/test_convert_diffusion_gemma.cpp has the whole proof), the image
    // token and pad survive: the file's encoder reads the image token as pad too.
    const fs::path gguf = folder("bad.gguf");
    ConvertOptions f32;
    f32.type = DType::F32;
    convert_hf_folder(dir, gguf, f32);
    {
        const Model from_gguf = Model::load(gguf);
        const DiffusionGemma g(from_gguf);
        DiffusionCache g_image = g.new_cache();
        g.encode(g_image, std::vector<int32_t>{3, int32_t(g.config().image_token_id), 5});
        EXPECT_EQ(g.config().image_token_id, dg.config().image_token_id);
        EXPECT_EQ(g_image.layers[1].k, pad.layers[1].k);
    }
    fs::remove(gguf);
    // The left-to-right forward refuses a diffusion model, and DiffusionGemma refuses the others.
    SequenceState state = model.new_sequence();
    EXPECT_THROW(model.forward(state, prompt), Error);
    fs::remove_all(dir);
}

}  // namespace
}  // namespace deltabit
