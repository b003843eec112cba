// The KV cache stores of models/kv_cache.h: which position lives where, the f16 and KIVI 4-bit
// roundings against hand-computed values, the grouping axes, chunk sizes and bytes per token, and how
// the attention block reads a kivi4 cache.
#include "cli_command.h"
#include "fixture.h"

#include "core/error.h"
#include "core/half.h"
#include "models/kv_cache.h"
#include "models/model.h"
#include "models/sequence_state.h"

#include <gtest/gtest.h>

#include <cmath>
#include <vector>

namespace deltabit {
namespace {

TEST(KiviSplit, HandCountedBoundaries) {
    // 8 sinks first; the first group of 32 leaves the window when 128 newer positions remain exact.
    EXPECT_EQ(kivi_split(0), (KiviSplit{0, 0, 0}));
    EXPECT_EQ(kivi_split(5), (KiviSplit{5, 0, 0}));
    EXPECT_EQ(kivi_split(8), (KiviSplit{8, 0, 0}));
    EXPECT_EQ(kivi_split(9), (KiviSplit{8, 0, 1}));
    EXPECT_EQ(kivi_split(8 + 128 + 31), (KiviSplit{8, 0, 159}));
    EXPECT_EQ(kivi_split(8 + 128 + 32), (KiviSplit{8, 32, 128}));
    EXPECT_EQ(kivi_split(8 + 128 + 63), (KiviSplit{8, 32, 159}));
    EXPECT_EQ(kivi_split(8 + 128 + 64), (KiviSplit{8, 64, 128}));
    EXPECT_EQ(kivi_split(4096), (KiviSplit{8, 3936, 152}));  // 4088 − 128 = 3960 → 123 whole groups
}

TEST(KiviSplit, PartsAlwaysMakeTheSequence) {
    for (int64_t n = 0; n < 2000; ++n) {
        const KiviSplit s = kivi_split(n);
        ASSERT_EQ(s.sinks + s.quantised + s.residual, n) << n;
        ASSERT_EQ(s.quantised % kKiviGroup, 0) << n;
        if (n >= kKiviSinks + kKiviResidual) {
            ASSERT_GE(s.residual, kKiviResidual) << n;
            ASSERT_LT(s.residual, kKiviResidual + kKiviGroup) << n;
        }
    }
}

TEST(KvStore, F16RoundsToNearestEvenOnAppend) {
    KvStore store(KvFormat::f16, KvSide::keys, 1, 4);
    // 1 + 2^-11 lies halfway between 1 and the next half 1 + 2^-10: ties go to the even mantissa (1);
    // 1 + 3·2^-11 lies halfway between 1 + 2^-10 (odd) and 1 + 2^-9 (even).
    const float row[4] = {1.0f / 3.0f, 1.0f + 0x1p-11f, 1.0f + 3 * 0x1p-11f, -70000.0f};
    store.append(row, 1);
    const std::vector<float> got = store.read();
    ASSERT_EQ(got.size(), 4u);
    EXPECT_EQ(got[0], 0.333251953125f);  // 0x3555 = 1.0101010101b · 2^-2
    EXPECT_EQ(got[1], 1.0f);
    EXPECT_EQ(got[2], 1.0f + 0x1p-9f);
    EXPECT_EQ(got[3], -INFINITY);  // past 65504: f16 has no finite value for it
}

TEST(KvStore, Kivi4RefusesHeadDimOutsideItsGroups) {
    EXPECT_THROW(KvStore(KvFormat::kivi4, KvSide::values, 2, 48), Error);
    EXPECT_NO_THROW(KvStore(KvFormat::kivi4, KvSide::values, 2, 64));
    EXPECT_NO_THROW(KvStore(KvFormat::f16, KvSide::values, 2, 48));
}

// Fills a kivi4 store with n rows made by value(t, c) (t = position) and compresses.
KvStore kivi_store(KvSide side, int64_t row, int64_t n, float (*value)(int64_t t, int64_t c)) {
    KvStore store(KvFormat::kivi4, side, 1, row);
    std::vector<float> x(static_cast<size_t>(row));
    for (int64_t t = 0; t < n; ++t) {
        for (int64_t c = 0; c < row; ++c) x[size_t(c)] = value(t, c);
        store.append(x.data(), 1);
        store.compress();
    }
    return store;
}

// Keys on a grid that is exact per channel: channel c of the first quantised group (positions 8..39)
// takes c + 0.5·k, k = 0..15 cycling, so per channel min = c, scale = 0.5 and every code is exact. Per
// token (the wrong axis) the 32 channels of one position span 31, scale 31/15, and nothing is exact.
float key_on_channel_grid(int64_t t, int64_t c) { return float(c) + 0.5f * float((t - 8) % 16); }

TEST(KvStore, Kivi4KeysAreGroupedPerChannel) {
    const int64_t row = 32, n = 8 + 128 + 32;
    const KvStore store = kivi_store(KvSide::keys, row, n, key_on_channel_grid);
    ASSERT_EQ(store.split(), (KiviSplit{8, 32, 128}));
    const std::vector<float> got = store.read();
    for (int64_t t = 0; t < n; ++t)
        for (int64_t c = 0; c < row; ++c)
            ASSERT_EQ(got[size_t(t * row + c)], key_on_channel_grid(t, c)) << "position " << t << " channel " << c;
}

// Values exact per token and per 32 channels: position t, channel c holds t + 0.25·(c % 16), so each
// group of 32 channels has min t, scale 0.25. Per channel (the wrong axis) a group spans 31 positions.
float value_on_token_grid(int64_t t, int64_t c) { return float(t) + 0.25f * float(c % 16); }

TEST(KvStore, Kivi4ValuesAreGroupedPerTokenIn32Channels) {
    const int64_t row = 64, n = 8 + 128 + 32;
    const KvStore store = kivi_store(KvSide::values, row, n, value_on_token_grid);
    ASSERT_EQ(store.split(), (KiviSplit{8, 32, 128}));
    const std::vector<float> got = store.read();
    for (int64_t t = 0; t < n; ++t)
        for (int64_t c = 0; c < row; ++c)
            ASSERT_EQ(got[size_t(t * row + c)], value_on_token_grid(t, c)) << "position " << t << " channel " << c;
}

// One value channel group with min 0 and max 1.5: s = 1.5/15 = 0.1, stored as the half 0x2E66 =
// 0.0999755859375. 0.25/s = 2.5006 → code 3 → 0.2999267578125; 0.04/s = 0.4001 → code 0 → 0;
// 0.7/s = 7.0017 → code 7 → 0.6998291015625; the maximum 1.5/s = 15.0037 → code 15 → 1.4996337890625.
float value_with_rounding(int64_t t, int64_t c) {
    if (t < 8 || t >= 40) return 0.0f;
    const float picks[4] = {0.25f, 0.04f, 0.7f, 1.5f};
    return c < 4 ? picks[c] : 0.0f;
}

TEST(KvStore, Kivi4RoundsToTheNearestStoredLevel) {
    const KvStore store = kivi_store(KvSide::values, 32, 8 + 128 + 32, value_with_rounding);
    const std::vector<float> got = store.read();
    const int64_t t = 20;  // inside the quantised group
    EXPECT_EQ(got[size_t(t * 32 + 0)], 0.2999267578125f);
    EXPECT_EQ(got[size_t(t * 32 + 1)], 0.0f);
    EXPECT_EQ(got[size_t(t * 32 + 2)], 0.6998291015625f);
    EXPECT_EQ(got[size_t(t * 32 + 3)], 1.4996337890625f);
    EXPECT_EQ(got[size_t(t * 32 + 4)], 0.0f);
}

// Sinks and the residual window come back bit for bit whatever the values; only the middle moves.
TEST(KvStore, Kivi4KeepsSinksAndResidualExact) {
    const int64_t row = 64, n = 300;
    auto value = [](int64_t t, int64_t c) {
        return std::sin(0.37f * float(t) + 0.11f * float(c)) * 3.0f + 0.001f * float(t);
    };
    KvStore store(KvFormat::kivi4, KvSide::keys, 2, 32);
    std::vector<float> all;
    for (int64_t t = 0; t < n; ++t) {
        for (int64_t c = 0; c < row; ++c) all.push_back(value(t, c));
        store.append(all.data() + t * row, 1);
        store.compress();
        ASSERT_EQ(store.split(), kivi_split(t + 1));
    }
    const KiviSplit s = store.split();
    ASSERT_EQ(s, (KiviSplit{8, 160, 132}));
    const std::vector<float> got = store.read();
    int64_t moved = 0;
    double worst = 0.0;
    for (int64_t t = 0; t < n; ++t)
        for (int64_t c = 0; c < row; ++c) {
            const float want = all[size_t(t * row + c)], have = got[size_t(t * row + c)];
            const bool exact_part = t < s.sinks || t >= s.sinks + s.quantised;
            if (exact_part) ASSERT_EQ(have, want) << t << " " << c;
            moved += have != want;
            worst = std::max(worst, double(std::abs(have - want)));
        }
    EXPECT_GT(moved, 0);
    // Half a step of the widest group (range ≤ 6.3 over 15 levels) plus the f16 rounding of min and scale.
    EXPECT_LE(worst, 0.5 * 6.3 / 15 + 0.01);
}

TEST(KvStore, ChunkSizesMatchTheLayoutAndBytesPerToken) {
    for (KvFormat format : {KvFormat::f32, KvFormat::f16, KvFormat::kivi4})
        for (int64_t n : {0, 7, 8, 100, 167, 168, 250, 1000}) {
            int64_t saved = 0;
            for (KvSide side : {KvSide::keys, KvSide::values}) {
                KvStore store(format, side, 2, 64);
                std::vector<float> x(size_t(n * 128), 0.5f);
                store.append(x.data(), n);
                store.compress();
                std::vector<StateChunk> chunks;
                store.save("p", chunks);
                const auto layout = KvStore::image_layout(format, side, 2, 64, n, "p");
                ASSERT_EQ(chunks.size(), layout.size());
                for (size_t i = 0; i < chunks.size(); ++i) {
                    EXPECT_EQ(chunks[i].name, layout[i].name);
                    EXPECT_EQ(chunks[i].bytes.size(), layout[i].bytes) << layout[i].name << " n=" << n;
                    saved += int64_t(chunks[i].bytes.size());
                }
            }
            EXPECT_EQ(saved, kv_layer_bytes(format, 2, 64, n)) << kv_format_name(format) << " n=" << n;
        }
    // Per position and per layer, keys and values: 2 × 128 values × 4 bytes, × 2 bytes.
    EXPECT_EQ(kv_layer_bytes(KvFormat::f32, 2, 64, 1000), 1000 * 2 * 128 * 4);
    EXPECT_EQ(kv_layer_bytes(KvFormat::f16, 2, 64, 1000), 1000 * 2 * 128 * 2);
    // kivi4 once settled: each further group of 32 positions adds, per side, 32·128/2 bytes of codes and
    // 128 (m, s) f16 pairs = 512 bytes (keys: per channel; values: 32 positions × 4 groups): 5 bits a value.
    EXPECT_EQ(kv_layer_bytes(KvFormat::kivi4, 2, 64, 1000 + 32) - kv_layer_bytes(KvFormat::kivi4, 2, 64, 1000),
              2 * (32 * 128 / 2 + 128 * 4));
    // At 1000: 8 sinks + 864 quantised + 128 residual.
    EXPECT_EQ(kv_layer_bytes(KvFormat::kivi4, 2, 64, 1000),
              2 * ((8 + 128) * 128 * 4 + 864 * 128 / 2 + 864 / 32 * 128 * 4));
}

// A 64-layer hybrid with full attention every 4th layer, 4 KV heads × 256, DeltaNet H_k 16 × 128,
// H_v 48 × 128, conv kernel 4 (Bonsai-27B's geometry): the totals `deltabit info --kv` prints, counted
// by hand. Layer 0 is DeltaNet, so every attention layer is quantised under kivi4.
TEST(KvStore, SequenceTotalsForARealGeometry) {
    ModelConfig c;
    for (int64_t l = 0; l < 64; ++l)
        c.layers.push_back(l % 4 == 3 ? LayerKind::full_attention : LayerKind::linear_attention);
    c.n_head_kv = 4;
    c.head_dim = 256;
    c.ssm_n_key_heads = 16;
    c.ssm_key_dim = 128;
    c.ssm_n_value_heads = 48;
    c.ssm_value_dim = 128;
    c.ssm_conv_kernel = 4;
    EXPECT_EQ(kv_cache_bytes(c, KvFormat::f32, 1024), int64_t(16) * 2 * 1024 * 4 * 1024);
    EXPECT_EQ(kv_cache_bytes(c, KvFormat::f16, 32768), int64_t(16) * 2 * 1024 * 2 * 32768);
    // 1024 positions: 8 sinks, 27 groups = 864 quantised, 152 residual; per side and layer
    // 8·4096 + 864·512 + 27·1024·4 + 152·4096 = 1208320 bytes.
    EXPECT_EQ(kv_cache_bytes(c, KvFormat::kivi4, 1024), int64_t(16) * 2 * 1208320);
    EXPECT_EQ(kv_bytes_per_token(c, KvFormat::f32), 16.0 * 2 * 1024 * 4);
    EXPECT_EQ(kv_bytes_per_token(c, KvFormat::kivi4), 16.0 * 2 * 1024 * 0.625);
    // Per DeltaNet layer: conv 3 · (2·16·128 + 48·128) f32, state 48·128·128 f32.
    EXPECT_EQ(deltanet_state_bytes(c), int64_t(48) * (3 * 10240 + 48 * 128 * 128) * 4);
}

// Which format each attention layer stores: kivi4 keeps layer 0 in f16 only when layer 0 attends.
TEST(LayerKvFormat, Kivi4KeepsAnAttendingLayer0InF16) {
    ModelConfig plain;  // qwen3: every layer full attention
    plain.layers.assign(4, LayerKind::full_attention);
    ModelConfig hybrid;  // qwen3_5: DeltaNet first, attention every 4th layer
    for (int64_t l = 0; l < 8; ++l)
        hybrid.layers.push_back(l % 4 == 3 ? LayerKind::full_attention : LayerKind::linear_attention);
    EXPECT_EQ(layer_kv_format(plain, KvFormat::kivi4, 0), KvFormat::f16);
    for (int64_t l : {1, 2, 3}) EXPECT_EQ(layer_kv_format(plain, KvFormat::kivi4, l), KvFormat::kivi4) << l;
    // The hybrid's first attention layer (3) has DeltaNet layers before it: quantised like the others.
    for (int64_t l : {3, 7}) EXPECT_EQ(layer_kv_format(hybrid, KvFormat::kivi4, l), KvFormat::kivi4) << l;
    for (KvFormat f : {KvFormat::f32, KvFormat::f16}) {
        EXPECT_EQ(layer_kv_format(plain, f, 0), f);
        EXPECT_EQ(layer_kv_format(hybrid, f, 3), f);
    }
    // And a sequence builds its stores that way.
    plain.n_head_kv = 1;
    plain.head_dim = 32;
    const SequenceState s(plain, KvFormat::kivi4);
    EXPECT_EQ(s.layer(0).k.format(), KvFormat::f16);
    EXPECT_EQ(s.layer(0).v.format(), KvFormat::f16);
    EXPECT_EQ(s.layer(1).k.format(), KvFormat::kivi4);
    EXPECT_EQ(s.layer(3).v.format(), KvFormat::kivi4);
}

// Qwen3-8B's geometry: 36 layers, all full attention, 8 KV heads × 128. Under kivi4 layer 0 costs f16's
// 2 × 1024 values × 2 bytes per token and the other 35 layers 2 × 1024 × 0.625.
TEST(KvStore, SequenceTotalsWhenLayer0Attends) {
    ModelConfig c;
    c.layers.assign(36, LayerKind::full_attention);
    c.n_head_kv = 8;
    c.head_dim = 128;
    EXPECT_EQ(kv_bytes_per_token(c, KvFormat::f16), 36.0 * 2 * 1024 * 2);
    EXPECT_EQ(kv_bytes_per_token(c, KvFormat::kivi4), 2 * 1024 * 2 + 35.0 * 2 * 1024 * 0.625);  // 48896
    // 1024 positions: layer 0 1024 f16 rows per side; every other layer per side 8 sinks + 864 quantised
    // + 152 residual of a 1024-value row = 8·4096 + 864·512 + 27·1024·4 + 152·4096 = 1208320 bytes.
    EXPECT_EQ(kv_cache_bytes(c, KvFormat::kivi4, 1024), int64_t(2) * 1024 * 2048 + int64_t(35) * 2 * 1208320);
    EXPECT_EQ(deltanet_state_bytes(c), 0);
}

// `deltabit info MODEL --kv` as a user runs it: the JSON numbers are the state layout's, counted by hand
// for the fixture (1 attention layer, 2 KV heads × 64), and the text form carries the same.
TEST(KvStore, InfoKvPrintsBytesPerTokenAndContextTotals) {
    const std::string dir = (test::fixtures_dir() / "qwen3_5_float").string();
    const test::CommandResult json_run = test::run_deltabit("info " + dir + " --kv --json", test::Stderr::discard);
    ASSERT_EQ(json_run.exit_code, 0) << json_run.output;
    const nlohmann::json r = nlohmann::json::parse(json_run.output).at("kv_cache");
    EXPECT_EQ(r.at("full_attention_layers"), 1);
    const nlohmann::json& f = r.at("formats");
    ASSERT_EQ(f.size(), 3u);
    EXPECT_EQ(f[0].at("format"), "f32");
    EXPECT_EQ(f[0].at("bytes_per_token").get<double>(), 2 * 128 * 4);
    EXPECT_EQ(f[0].at("bytes_32k").get<int64_t>(), 32768 * 2 * 128 * 4);
    EXPECT_EQ(f[1].at("bytes_1k").get<int64_t>(), 1024 * 2 * 128 * 2);
    EXPECT_EQ(f[2].at("format"), "kivi4");
    EXPECT_EQ(f[2].at("bytes_per_token").get<double>(), 2 * 128 * 0.625);
    // 1024: 8 sinks + 864 quantised + 152 residual, per side 136+16 exact rows of 512 bytes + codes + (m, s).
    EXPECT_EQ(f[2].at("bytes_1k").get<int64_t>(), 2 * ((8 + 152) * 512 + 864 * 64 + 27 * 128 * 4));

    EXPECT_EQ(r.at("kivi4_f16_layers"), nlohmann::json::array());  // layer 0 is DeltaNet

    const test::CommandResult text = test::run_deltabit("info " + dir + " --kv");
    ASSERT_EQ(text.exit_code, 0) << text.output;
    EXPECT_NE(text.output.find("1 full-attention layer,"), std::string::npos) << text.output;
    EXPECT_NE(text.output.find("  kivi4             160"), std::string::npos) << text.output;
    EXPECT_EQ(text.output.find("in f16"), std::string::npos) << text.output;
}

// qwen3_float: 4 attention layers of 2 KV heads × 64, layer 0 kept in f16 under kivi4: per token
// 2 × 128 values × 2 bytes for layer 0 and 2 × 128 × 0.625 for each of the other three.
TEST(KvStore, InfoKvCountsTheF16Layer0OfKivi4) {
    const std::string dir = (test::fixtures_dir() / "qwen3_float").string();
    const test::CommandResult json_run = test::run_deltabit("info " + dir + " --kv --json", test::Stderr::discard);
    ASSERT_EQ(json_run.exit_code, 0) << json_run.output;
    const nlohmann::json r = nlohmann::json::parse(json_run.output).at("kv_cache");
    EXPECT_EQ(r.at("kivi4_f16_layers"), nlohmann::json::array({0}));
    const nlohmann::json& kivi = r.at("formats")[2];
    EXPECT_EQ(kivi.at("bytes_per_token").get<double>(), 2 * 128 * 2 + 3 * 2 * 128 * 0.625);  // 992
    // 1024: layer 0 1024 f16 rows of 256 bytes per side; layers 1-3 as in the hybrid's test above.
    EXPECT_EQ(kivi.at("bytes_1k").get<int64_t>(),
              2 * 1024 * 256 + 3 * 2 * ((8 + 152) * 512 + 864 * 64 + 27 * 128 * 4));

    const test::CommandResult text = test::run_deltabit("info " + dir + " --kv");
    ASSERT_EQ(text.exit_code, 0) << text.output;
    EXPECT_NE(text.output.find("  kivi4             992"), std::string::npos) << text.output;
    EXPECT_NE(text.output.find("kivi4 keeps layer 0 in f16"), std::string::npos) << text.output;
}

// A whole prompt attends to its own keys in their per-token form, so on a kivi4 cache a prompt's
// logits are those of f32 exactly; the next call reads the quantised middle and must differ.
TEST(KvStore, Kivi4PromptIsAttendedExactlyAndLaterCallsReadTheQuantisedCache) {
    const Model model = Model::load(test::fixtures_dir() / "qwen3_5_float");
    std::vector<int32_t> prompt(200);  // two groups (positions 8..71) quantised when the call ends
    for (size_t i = 0; i < prompt.size(); ++i) prompt[i] = int32_t((i * 37 + 11) % 256);
    const std::vector<int32_t> next = {65, 66, 67};
    SequenceState exact = model.new_sequence(KvFormat::f32), kivi = model.new_sequence(KvFormat::kivi4);
    EXPECT_EQ(model.forward(kivi, prompt), model.forward(exact, prompt));
    const int64_t attention_layer = 2;  // qwen3_5 fixture: linear, linear, full
    EXPECT_EQ(kivi.layer(attention_layer).k.split(), (KiviSplit{8, 64, 128}));
    EXPECT_NE(model.forward(kivi, next), model.forward(exact, next));
}

}  // namespace
}  // namespace deltabit
