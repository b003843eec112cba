// Rung 5 of the correctness ladder (DESIGN.md §6) for the lossy KV cache formats: f16 and kivi4
// against the exact f32 cache on fixture models fed real English text (bytes are the fixtures' token
// ids), teacher-forced one token per call, as decoding reads the cache. Per depth bin: mean KL(f32 ‖
// format) < 0.005, p99 KL < 0.05, top-1 agreement ≥ 96.5%. The thresholds are DESIGN.md's, fixed
// before the first run; never widen them. The measured table is printed (docs/kv_cache.md keeps it).
//
// One hybrid family (qwen3_5) runs 4096 tokens, the depth the bins are written for; the other families
// run 512 (the first two bins; KIVI quantises from position 168 on) to keep the test's time modest.
//
// kivi4 here is the format as sequences store it, layer by layer (layer_kv_format, models/kv_format.h):
// on qwen3_float layer 0 is full attention and stays f16, layers 1-3 are quantised; the hybrids'
// attention layers follow DeltaNet layers and are all quantised. Quantising qwen3's layer 0 as well
// fails this gate (mean KL 6.9e-3, top-1 91.9% at depth 128-511; docs/kv_cache.md has the measurements
// behind the rule). A rule that kept more layers exact would pass the gate without testing KIVI, so the
// test also checks that every layer the rule quantises holds quantised groups, and
// LayerKvFormat.Kivi4KeepsAnAttendingLayer0InF16 (test_kv_cache.cpp) pins the rule to layer 0 alone.
#include "distribution_gates.h"
#include "english_text.h"
#include "fixture.h"

#include "models/kv_cache.h"
#include "models/model.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <functional>
#include <future>
#include <ostream>
#include <string>
#include <vector>

namespace deltabit {
namespace {

using test::BinResult;
using test::compare_by_depth;
using test::expect_gates;
using test::print_table;

struct ForcedRun {
    std::vector<float> logits;  // [position][vocab]
    SequenceState state;        // after the last token
};

// Logits of every position, fed one token per call.
ForcedRun teacher_forced(const Model& model, KvFormat format, const std::vector<int32_t>& ids) {
    ForcedRun run{{}, model.new_sequence(format)};
    run.logits.reserve(ids.size() * size_t(model.config().n_vocab));
    for (int32_t id : ids) {
        const std::vector<float> row = model.forward(run.state, std::vector<int32_t>{id});
        run.logits.insert(run.logits.end(), row.begin(), row.end());
    }
    return run;
}

// Every attention layer stores what layer_kv_format says, and the kivi4 ones hold quantised groups.
// Returns whether some attention layer of the kivi4 sequence is stored as f16.
bool expect_layer_formats(const ModelConfig& config, const SequenceState& kivi) {
    bool some_f16 = false;
    for (int64_t l = 0; l < config.n_layer(); ++l) {
        if (config.layers[size_t(l)] != LayerKind::full_attention) continue;
        const KvFormat want = layer_kv_format(config, KvFormat::kivi4, l);
        some_f16 |= want == KvFormat::f16;
        for (const KvStore* store : {&kivi.layer(l).k, &kivi.layer(l).v}) {
            EXPECT_EQ(store->format(), want) << "layer " << l;
            if (want == KvFormat::kivi4) EXPECT_GT(store->split().quantised, 0) << "layer " << l;
        }
    }
    return some_f16;
}

struct GateCase {
    std::string family;
    size_t length;
};

void PrintTo(const GateCase& c, std::ostream* os) { *os << c.family << " × " << c.length << " tokens"; }

class KiviGates : public ::testing::TestWithParam<GateCase> {};

TEST_P(KiviGates, LossyKvFormatsAgreeWithF32ByDepth) {
    const GateCase& gc = GetParam();
    const Model model = Model::load(test::fixtures_dir() / gc.family);
    const int64_t vocab = model.config().n_vocab;
    ASSERT_EQ(vocab, 256);  // byte ids
    const std::vector<int32_t> ids = test::english_text_ids(gc.length);
    // The three runs are independent (forward() only reads the model): side by side they take a third
    // of the time on the two cores CI has.
    auto run = [&](KvFormat format) {
        return std::async(std::launch::async, teacher_forced, std::cref(model), format, std::cref(ids));
    };
    std::future<ForcedRun> half = run(KvFormat::f16), kivi = run(KvFormat::kivi4);
    const std::vector<float> exact = teacher_forced(model, KvFormat::f32, ids).logits;

    const ForcedRun f16_run = half.get(), kivi_run = kivi.get();
    const std::vector<BinResult> f16_bins = compare_by_depth(exact, f16_run.logits, vocab);
    const std::vector<BinResult> kivi_bins = compare_by_depth(exact, kivi_run.logits, vocab);
    print_table(gc.family + " f16", f16_bins);
    expect_gates(gc.family + " f16", f16_bins);
    print_table(gc.family + " kivi4", kivi_bins);
    expect_gates(gc.family + " kivi4", kivi_bins);

    const bool some_f16 = expect_layer_formats(model.config(), kivi_run.state);
    // No group leaves the residual window before position 168 (8 sinks + 128 + 32), so in the first bin
    // a kivi4 sequence differs from f32 only in the layers it keeps as f16. Without such a layer it is
    // the f32 run exactly. With one (qwen3: layer 0 of 4), its error is the f16 format's own size: that
    // layer's rounding is most of the f16 run's (measured: 3.56e-7 against the f16 run's 3.62e-7, while
    // one layer quantised gives 8.7e-6 to 6.6e-3 at depth 128-511), so twice the f16 run's bound
    // separates rounding from any quantisation that starts early.
    if (some_f16)
        EXPECT_LT(kivi_bins.front().mean_kl, 2.0 * f16_bins.front().mean_kl);
    else
        EXPECT_EQ(kivi_bins.front().mean_kl, 0.0);
    // Past it the quantised middle must show (else the gate measured f32 against itself).
    EXPECT_GT(kivi_bins.back().mean_kl, 0.0);
}

// The default model (models/, trained by deltabit on real text, 1-bit) on English it never saw: four
// windows of its 512-byte context, each a fresh sequence, 2,048 positions in all. Its two attention layers
// (3 and 7) follow DeltaNet layers and are quantised; the model card quotes the printed table.
TEST(KiviGatesDefaultModel, LossyKvFormatsAgreeWithF32OnTheTrainedModel) {
    const Model model = Model::load(std::filesystem::path(DELTABIT_SOURCE_DIR) / "models" / "bytelm-hybrid-14m.q1_0.gguf");
    const int64_t vocab = model.config().n_vocab, window = 512;
    ASSERT_GE(model.config().context_length, window);
    const std::vector<int32_t> text = test::english_text_ids(4 * size_t(window));
    auto run = [&](KvFormat format) {
        return std::async(std::launch::async, [&model, &text, format, window] {
            std::vector<float> logits;
            for (size_t w = 0; w < text.size(); w += size_t(window)) {
                ForcedRun r = teacher_forced(model, format, std::vector<int32_t>(text.begin() + w, text.begin() + w + size_t(window)));
                if (format == KvFormat::kivi4) expect_layer_formats(model.config(), r.state);
                logits.insert(logits.end(), r.logits.begin(), r.logits.end());
            }
            return logits;
        });
    };
    std::future<std::vector<float>> half = run(KvFormat::f16), kivi = run(KvFormat::kivi4);
    const std::vector<float> exact = run(KvFormat::f32).get();
    const std::vector<BinResult> f16_bins = compare_by_depth(exact, half.get(), vocab, window);
    const std::vector<BinResult> kivi_bins = compare_by_depth(exact, kivi.get(), vocab, window);
    print_table("bytelm-hybrid-14m f16", f16_bins);
    expect_gates("bytelm-hybrid-14m f16", f16_bins);
    print_table("bytelm-hybrid-14m kivi4", kivi_bins);
    expect_gates("bytelm-hybrid-14m kivi4", kivi_bins);
    ASSERT_EQ(kivi_bins.size(), 2u);
    EXPECT_EQ(kivi_bins[0].n + kivi_bins[1].n, 4 * window);
    EXPECT_EQ(kivi_bins.front().mean_kl, 0.0);  // no group leaves the window before position 168
    EXPECT_GT(kivi_bins.back().mean_kl, 0.0);   // past it the quantised middle shows
}

std::string case_name(const ::testing::TestParamInfo<GateCase>& info) { return info.param.family; }

INSTANTIATE_TEST_SUITE_P(Fixtures, KiviGates,
                         ::testing::Values(GateCase{"qwen3_5_float", 4096}, GateCase{"qwen3_5_moe_float", 512},
                                           GateCase{"qwen3_next_float", 512}, GateCase{"qwen3_next_moe_float", 512},
                                           GateCase{"qwen3_float", 512}),
                         case_name);

}  // namespace
}  // namespace deltabit
