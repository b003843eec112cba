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

constexpr double kMaxMeanKl = 0.005;
constexpr double kMaxP99Kl = 0.05;
constexpr double kMinTop1 = 0.965;

struct DepthBin {
    int64_t first, end;  // positions [first, end)
};
constexpr DepthBin kBins[] = {{0, 128}, {128, 512}, {512, 1024}, {1024, 2048}, {2048, 4096}};

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

std::vector<double> log_softmax(const float* logits, int64_t n) {
    const double top = *std::max_element(logits, logits + n);
    double sum = 0.0;
    for (int64_t i = 0; i < n; ++i) sum += std::exp(double(logits[i]) - top);
    std::vector<double> out(static_cast<size_t>(n));
    for (int64_t i = 0; i < n; ++i) out[size_t(i)] = double(logits[i]) - top - std::log(sum);
    return out;
}

int64_t argmax(const float* row, int64_t n) { return std::max_element(row, row + n) - row; }

struct BinResult {
    DepthBin bin;
    int64_t n = 0;
    double mean_kl = 0.0, p99_kl = 0.0, top1 = 0.0;
};

// Per depth bin over one or more windows (`window` positions each, every window a fresh sequence from
// depth 0; 0: one window of every position).
std::vector<BinResult> compare_by_depth(const std::vector<float>& exact, const std::vector<float>& lossy,
                                        int64_t vocab, int64_t window = 0) {
    const int64_t total = int64_t(exact.size()) / vocab;
    const int64_t length = window > 0 ? window : total;
    std::vector<BinResult> out;
    for (const DepthBin& bin : kBins) {
        if (bin.first >= length) break;
        std::vector<double> kl;
        int64_t agree = 0;
        for (int64_t w = 0; w < total; w += length)
        for (int64_t t = w + bin.first; t < w + std::min(bin.end, length); ++t) {
            const float* p = exact.data() + t * vocab;
            const float* q = lossy.data() + t * vocab;
            const std::vector<double> lp = log_softmax(p, vocab), lq = log_softmax(q, vocab);
            double d = 0.0;
            for (int64_t i = 0; i < vocab; ++i) d += std::exp(lp[size_t(i)]) * (lp[size_t(i)] - lq[size_t(i)]);
            kl.push_back(std::max(d, 0.0));  // a sum of tiny terms can land a hair below zero
            agree += argmax(p, vocab) == argmax(q, vocab);
        }
        BinResult r{bin, int64_t(kl.size())};
        for (double d : kl) r.mean_kl += d / double(kl.size());
        std::sort(kl.begin(), kl.end());
        r.p99_kl = kl[size_t(std::ceil(0.99 * double(kl.size()))) - 1];  // nearest rank
        r.top1 = double(agree) / double(kl.size());
        out.push_back(r);
    }
    return out;
}

void print_table(const std::string& family, KvFormat format, const std::vector<BinResult>& bins) {
    for (const BinResult& r : bins)
        std::printf("[ gate ] %-20s %-6s depth %4lld-%-4lld  n %4lld  mean KL %.2e  p99 KL %.2e  top-1 %6.2f%%\n",
                    family.c_str(), std::string(kv_format_name(format)).c_str(), static_cast<long long>(r.bin.first),
                    static_cast<long long>(r.bin.end - 1), static_cast<long long>(r.n), r.mean_kl, r.p99_kl,
                    100.0 * r.top1);
}

void expect_gates(const std::string& family, KvFormat format, const std::vector<BinResult>& bins) {
    for (const BinResult& r : bins) {
        const std::string where = family + " " + std::string(kv_format_name(format)) + " depth " +
                                  std::to_string(r.bin.first) + "-" + std::to_string(r.bin.end - 1);
        EXPECT_LT(r.mean_kl, kMaxMeanKl) << where;
        EXPECT_LT(r.p99_kl, kMaxP99Kl) << where;
        EXPECT_GE(r.top1, kMinTop1) << where;
    }
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
    print_table(gc.family, KvFormat::f16, f16_bins);
    expect_gates(gc.family, KvFormat::f16, f16_bins);
    print_table(gc.family, KvFormat::kivi4, kivi_bins);
    expect_gates(gc.family, KvFormat::kivi4, kivi_bins);

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
    print_table("bytelm-hybrid-14m", KvFormat::f16, f16_bins);
    expect_gates("bytelm-hybrid-14m", KvFormat::f16, f16_bins);
    print_table("bytelm-hybrid-14m", KvFormat::kivi4, kivi_bins);
    expect_gates("bytelm-hybrid-14m", KvFormat::kivi4, kivi_bins);
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
