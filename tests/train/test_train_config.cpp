// `deltabit train`'s config (train/train_config.h): the committed example parses to the geometry it
// states, and every kind of bad input is refused with one line naming the file and the key.
#include "train/train_config.h"
#include "train/parameters.h"

#include "core/error.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <string>

namespace deltabit::train {
namespace {

const std::string kMinimal = R"(
[data]
train = "a.txt"
heldout = "b.txt"
)";

std::string error_of(const std::string& text) {
    try {
        parse_train_config(text, "t.toml");
    } catch (const Error& e) {
        return e.what();
    }
    return "";
}

TEST(TrainConfig, ExampleConfigParses) {
    const TrainConfig c = load_train_config(std::filesystem::path(DELTABIT_SOURCE_DIR) / "configs" / "bytelm-hybrid.toml");
    const ModelConfig m = model_config_of(c);
    EXPECT_EQ(m.n_vocab, 259);
    EXPECT_EQ(m.n_embd, 512);
    ASSERT_EQ(m.n_layer(), 8);
    for (int64_t l = 0; l < 8; ++l)
        EXPECT_EQ(m.layers[size_t(l)], (l == 3 || l == 7) ? LayerKind::full_attention : LayerKind::linear_attention) << l;
    EXPECT_EQ(m.rope_dim, 16);
    EXPECT_TRUE(m.attn_output_gate);
    EXPECT_TRUE(c.qat.enabled);
    EXPECT_EQ(c.tokens_per_step(), 512 * 32);
    // Data paths are resolved against the config's folder.
    EXPECT_EQ(std::filesystem::path(c.data.train).filename(), "train.txt");
    EXPECT_NE(c.data.train.find("data/text"), std::string::npos);
}

// Every config shipped in configs/ is one the trainer accepts, and the throughput geometry is the size the
// issue names (about 100M parameters), so its MFU figure is of that size.
TEST(TrainConfig, EveryShippedConfigLoadsAndTheThroughputGeometryIsAbout100M) {
    const std::filesystem::path dir = std::filesystem::path(DELTABIT_SOURCE_DIR) / "configs";
    int loaded = 0;
    for (const auto& entry : std::filesystem::directory_iterator(dir)) {
        if (entry.path().extension() != ".toml") continue;
        SCOPED_TRACE(entry.path().string());
        EXPECT_NO_THROW(load_train_config(entry.path()));
        ++loaded;
    }
    EXPECT_GE(loaded, 4);
    const int64_t params = ParameterLayout(model_config_of(load_train_config(dir / "qwen35-100m.toml"))).total();
    EXPECT_GT(params, 95'000'000);
    EXPECT_LT(params, 115'000'000);
}

// The default model's bf16 twin is its config with QAT off and its own out_dir, nothing else changed: the
// difference of the two runs' held-out bpb is the cost of 1 bit.
TEST(TrainConfig, TheBf16TwinIsTheDefaultModelsRunWithoutQat) {
    const std::filesystem::path root(DELTABIT_SOURCE_DIR);
    TrainConfig one_bit = load_train_config(root / "models" / "bytelm-hybrid-14m.toml");
    TrainConfig twin = load_train_config(root / "configs" / "bytelm-hybrid-14m-bf16.toml");
    EXPECT_TRUE(one_bit.qat.enabled);
    EXPECT_FALSE(twin.qat.enabled);
    EXPECT_NE(one_bit.run.out_dir, twin.run.out_dir);
    EXPECT_EQ(one_bit.data.train, twin.data.train);  // both resolve to data/text in the source tree
    EXPECT_EQ(one_bit.data.heldout, twin.data.heldout);
    twin.qat = one_bit.qat;
    twin.run.out_dir = one_bit.run.out_dir;
    const ModelConfig a = model_config_of(one_bit), b = model_config_of(twin);
    EXPECT_EQ(a.n_embd, b.n_embd);
    EXPECT_EQ(a.layers, b.layers);
    EXPECT_EQ(a.n_ff, b.n_ff);
    EXPECT_EQ(ParameterLayout(a).total(), ParameterLayout(b).total());
    EXPECT_EQ(one_bit.run.steps, twin.run.steps);
    EXPECT_EQ(one_bit.run.seed, twin.run.seed);
    EXPECT_EQ(one_bit.tokens_per_step(), twin.tokens_per_step());
    EXPECT_EQ(one_bit.optimizer.lr, twin.optimizer.lr);
    EXPECT_EQ(one_bit.optimizer.min_lr, twin.optimizer.min_lr);
    EXPECT_EQ(one_bit.optimizer.warmup_steps, twin.optimizer.warmup_steps);
    EXPECT_EQ(one_bit.eval.every, twin.eval.every);
    EXPECT_EQ(one_bit.eval.bytes, twin.eval.bytes);
}

// The Muon example is the small config with only the optimizer changed (and its own out_dir).
TEST(TrainConfig, MuonExampleIsTheSmallConfigWithMuon) {
    const std::filesystem::path dir = std::filesystem::path(DELTABIT_SOURCE_DIR) / "configs";
    const TrainConfig adamw = load_train_config(dir / "bytelm-hybrid-small.toml");
    TrainConfig muon = load_train_config(dir / "bytelm-hybrid-small-muon.toml");
    EXPECT_EQ(muon.optimizer.kind, "muon");
    EXPECT_EQ(muon.optimizer.muon_lr, adamw.optimizer.lr);
    EXPECT_EQ(muon.optimizer.muon_weight_decay, adamw.optimizer.weight_decay);
    EXPECT_NE(muon.run.out_dir, adamw.run.out_dir);
    const ModelConfig a = model_config_of(adamw), m = model_config_of(muon);
    EXPECT_EQ(a.n_embd, m.n_embd);
    EXPECT_EQ(a.layers, m.layers);
    EXPECT_EQ(a.n_ff, m.n_ff);
    EXPECT_EQ(muon.tokens_per_step(), adamw.tokens_per_step());
    EXPECT_EQ(muon.run.steps, adamw.run.steps);
    EXPECT_EQ(muon.optimizer.lr, adamw.optimizer.lr);
    EXPECT_EQ(muon.optimizer.warmup_steps, adamw.optimizer.warmup_steps);
    EXPECT_EQ(muon.qat.enabled, adamw.qat.enabled);
}

TEST(TrainConfig, DefaultsAndExplicitLayers) {
    const TrainConfig c = parse_train_config(kMinimal + "[model]\nlayers = 3\nfull_attention_layers = [0, 2]\n", "t.toml");
    const ModelConfig m = model_config_of(c);
    EXPECT_EQ(m.layers, (std::vector{LayerKind::full_attention, LayerKind::linear_attention, LayerKind::full_attention}));
    EXPECT_EQ(c.run.seq_len, 256);
    EXPECT_EQ(c.optimizer.kind, "adamw");
    EXPECT_EQ(c.run.activations, "auto");
    EXPECT_EQ(parse_train_config(kMinimal + "[run]\nactivations = \"keep\"\n", "t.toml").run.activations, "keep");
    const ModelConfig dense = model_config_of(parse_train_config(kMinimal + "[model]\narch = \"qwen3\"\n", "t.toml"));
    EXPECT_EQ(dense.rope_dim, 64);
    EXPECT_FALSE(dense.attn_output_gate);
    for (LayerKind k : dense.layers) EXPECT_EQ(k, LayerKind::full_attention);
}

TEST(TrainConfig, BadInputNamesTheKey) {
    struct Case {
        std::string text, expected;
    };
    const std::vector<Case> cases = {
        {kMinimal + "[model]\nhiden = 3\n", "t.toml: model.hiden: unknown key"},
        {kMinimal + "[modle]\n", "t.toml: modle: unknown section"},
        {kMinimal + "[model]\nhidden = \"big\"\n", "t.toml: model.hidden: expected an integer, got string"},
        {kMinimal + "[model]\nhidden = 0\n", "t.toml: model.hidden: must be in 1..65536, got 0"},
        {kMinimal + "[model]\nheads = 6\nkv_heads = 4\n", "t.toml: model.kv_heads: must divide model.heads (6), got 4"},
        {kMinimal + "[model]\ndeltanet_value_heads = 3\n", "t.toml: model.deltanet_value_heads: must be a multiple"},
        {kMinimal + "[model]\nfull_attention_layers = [9]\n", "t.toml: model.full_attention_layers: layer 9 is outside 0..7"},
        {kMinimal + "[model]\nfull_attention_layers = [1]\nfull_attention_interval = 2\n",
         "t.toml: model.full_attention_layers: give it or model.full_attention_interval, not both"},
        {kMinimal + "[model]\nvocab = \"bpe\"\n", "t.toml: model.vocab: expected bytelm, got 'bpe'"},
        {kMinimal + "[optimizer]\nlr = -1\n", "t.toml: optimizer.lr: must be > 0, got -1"},
        {kMinimal + "[optimizer]\nwarmup_steps = 5000\n", "t.toml: optimizer.warmup_steps: must be in 0..run.steps (1000)"},
        {kMinimal + "[optimizer]\nbeta2 = 1.0\n", "t.toml: optimizer.beta2: must be in [0, 1), got 1"},
        {kMinimal + "[optimizer]\nkind = \"sgd\"\n", "t.toml: optimizer.kind: expected adamw or muon, got 'sgd'"},
        {kMinimal + "[optimizer]\nmuon_lr = 0.01\n",
         "t.toml: optimizer.muon_lr: applies only with optimizer.kind = \"muon\" (kind is 'adamw')"},
        {kMinimal + "[optimizer]\nkind = \"adamw\"\nmuon_ns_steps = 5\n", "t.toml: optimizer.muon_ns_steps: applies only"},
        {kMinimal + "[optimizer]\nkind = \"muon\"\nmuon_lr = 0\n", "t.toml: optimizer.muon_lr: must be > 0, got 0"},
        {kMinimal + "[optimizer]\nkind = \"muon\"\nmuon_momentum = 1\n",
         "t.toml: optimizer.muon_momentum: must be in [0, 1), got 1"},
        {kMinimal + "[optimizer]\nkind = \"muon\"\nmuon_ns_steps = 0\n",
         "t.toml: optimizer.muon_ns_steps: must be in 1..100, got 0"},
        {kMinimal + "[optimizer]\nkind = \"muon\"\nmuon_ns_steps = 5.0\n",
         "t.toml: optimizer.muon_ns_steps: expected an integer, got floating-point"},
        {kMinimal + "[optimizer]\nkind = \"muon\"\nmuon_nesterov = \"yes\"\n",
         "t.toml: optimizer.muon_nesterov: expected true or false, got string"},
        {kMinimal + "[optimizer]\nkind = \"muon\"\nmuon_weight_decay = -0.1\n",
         "t.toml: optimizer.muon_weight_decay: must be ≥ 0, got -0.1"},
        {kMinimal + "[optimizer]\nkind = \"muon\"\nmuon_betas = 1\n", "t.toml: optimizer.muon_betas: unknown key"},
        {kMinimal + "[run]\nbackend = \"tpu\"\n", "t.toml: run.backend: expected cpu"},
        {kMinimal + "[run]\nactivations = \"never\"\n",
         "t.toml: run.activations: expected auto, keep or recompute, got 'never'"},
        {kMinimal + "[run]\nseed = -3\n", "t.toml: run.seed: must be ≥ 0, got -3"},
        {kMinimal + "[qat]\nenabled = 1\n", "t.toml: qat.enabled: expected true or false, got integer"},
        {"[data]\ntrain = \"a.txt\"\n", "t.toml: data.heldout: required"},
        {kMinimal + "[model\n", "t.toml: line"},
    };
    for (const Case& c : cases) {
        const std::string error = error_of(c.text);
        EXPECT_EQ(error.rfind(c.expected, 0), 0u) << "got: " << error << "\nwanted: " << c.expected;
        EXPECT_EQ(error.find('\n'), std::string::npos) << error;
    }
}

TEST(TrainConfig, MuonKeysAndTheirDefaults) {
    // Unset, Muon's rate and decay are AdamW's (the scale rule in train/muon.h makes them fit).
    const TrainConfig plain =
        parse_train_config(kMinimal + "[optimizer]\nkind = \"muon\"\nlr = 0.02\nweight_decay = 0.05\n", "t.toml");
    EXPECT_EQ(plain.optimizer.kind, "muon");
    EXPECT_EQ(plain.optimizer.muon_lr, 0.02);
    EXPECT_EQ(plain.optimizer.muon_weight_decay, 0.05);
    EXPECT_EQ(plain.optimizer.muon_momentum, 0.95);
    EXPECT_TRUE(plain.optimizer.muon_nesterov);
    EXPECT_EQ(plain.optimizer.muon_ns_steps, 5);
    const TrainConfig set = parse_train_config(kMinimal + R"([optimizer]
kind = "muon"
muon_lr = 0.03
muon_momentum = 0.9
muon_nesterov = false
muon_ns_steps = 6
muon_weight_decay = 0
)",
                                               "t.toml");
    EXPECT_EQ(set.optimizer.muon_lr, 0.03);
    EXPECT_EQ(set.optimizer.muon_momentum, 0.9);
    EXPECT_FALSE(set.optimizer.muon_nesterov);
    EXPECT_EQ(set.optimizer.muon_ns_steps, 6);
    EXPECT_EQ(set.optimizer.muon_weight_decay, 0.0);
    EXPECT_EQ(set.optimizer.lr, 3e-3);  // AdamW's own keep their defaults
}

TEST(TrainConfig, MissingFileIsNamed) {
    try {
        load_train_config("/nonexistent/x.toml");
        FAIL();
    } catch (const Error& e) {
        EXPECT_STREQ(e.what(), "train: /nonexistent/x.toml: cannot open the config file");
    }
}

}  // namespace
}  // namespace deltabit::train
