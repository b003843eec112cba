// The GPU sampler chain (sampling/sampler_cuda.h) against the CPU chain (Sampler::sample): the same
// token and the same RNG advance for the same logits, seed and history, over random logit vectors of
// four vocabulary sizes and random settings (penalties and DRY on a recorded history, the disabled
// values of every stage, ties), plus edge cases, a chi-square check of the GPU's draws, proof of which
// path ran, and µs per sample at vocab 248320. Raw logits with NaN or ±inf are not sampled but reported
// (core/non_finite_choice.h), on every path, with the RNG untouched.
//
// The host half (the stage 1–2 list equals apply_penalties + apply_dry bit for bit) runs everywhere;
// the rest skips without a GPU.
#include <gtest/gtest.h>

#include <bit>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <limits>
#include <map>
#include <optional>
#include <random>
#include <vector>

#include "sampling/sampler.h"

#ifdef DELTABIT_HAVE_CUDA
#include "backend/cuda_buffer.h"
#include "op_parity_cuda.h"
#include "core/non_finite_choice.h"
#include "sampling/sampler_cuda.h"
#endif

using namespace deltabit;

namespace {

constexpr float kInf = std::numeric_limits<float>::infinity();

// A recorded history: a prompt, then generated text that falls into a loop (so DRY fires), with a
// negative id and one past the vocabulary (both stages must drop them).
struct RecordedHistory {
    std::vector<int32_t> tokens;
    std::vector<uint8_t> generated;
    TokenHistory view() const { return {tokens, generated}; }
};

RecordedHistory record_history(std::mt19937_64& rng, int32_t n_vocab) {
    RecordedHistory h;
    std::uniform_int_distribution<int32_t> any(0, n_vocab - 1);
    const int prompt = 40 + int(rng() % 60);
    for (int i = 0; i < prompt; ++i) h.tokens.push_back(any(rng));
    h.tokens.push_back(-1);
    h.tokens.push_back(n_vocab + 5);
    while (int(h.generated.size()) < int(h.tokens.size())) h.generated.push_back(0);
    std::vector<int32_t> loop(size_t(4 + rng() % 6));
    for (int32_t& t : loop) t = any(rng);
    const int generated = 30 + int(rng() % 100);
    for (int i = 0; i < generated; ++i) {
        h.tokens.push_back(loop[size_t(i) % loop.size()]);
        h.generated.push_back(1);
    }
    return h;
}

SamplingParams random_params(std::mt19937_64& rng) {
    auto pick = [&](std::initializer_list<double> values) { return *(values.begin() + rng() % values.size()); };
    SamplingParams p;
    p.temperature = float(pick({0.0, 0.5, 0.8, 1.0, 1.3}));
    p.top_k = int(pick({0, 0, 1, 20, 40, 200}));
    p.top_p = float(pick({1.0, 1.0, 0.95, 0.8, 0.5}));
    p.min_p = float(pick({0.0, 0.0, 0.05, 0.1}));
    p.repeat_penalty = float(pick({1.0, 1.0, 1.1, 1.3}));
    p.presence_penalty = float(pick({0.0, 0.4}));
    p.frequency_penalty = float(pick({0.0, 0.1}));
    p.penalty_last_n = int(pick({64, -1, 16, 0}));
    p.dry_multiplier = float(pick({0.0, 0.8}));
    p.dry_allowed_length = int(pick({2, 3}));
    p.seed = rng();
    return p;
}

// Logit vectors of several shapes: flat, peaked like a language model, on a coarse grid (ties
// everywhere), with NaN and −inf holes (which the GPU reports); history tokens are pushed up so the
// penalties decide things.
std::vector<float> random_logits(std::mt19937_64& rng, int32_t n_vocab, const RecordedHistory& history, int shape) {
    std::normal_distribution<float> normal(0.0f, 1.0f);
    std::vector<float> logits(static_cast<size_t>(n_vocab));
    const float scale = shape == 0 ? 1.0f : shape == 2 ? 2.0f : 2.5f;
    for (float& x : logits) x = normal(rng) * scale;
    if (shape == 2) {
        for (float& x : logits) x = std::round(x * 2.0f) / 2.0f;
    }
    if (shape == 3) {
        for (int i = 0; i < n_vocab / 100 + 1; ++i) logits[rng() % size_t(n_vocab)] = -kInf;
        for (int i = 0; i < 3; ++i) logits[rng() % size_t(n_vocab)] = std::numeric_limits<float>::quiet_NaN();
    }
    if (shape == 1 || shape == 4) {
        for (int i = 0; i < 20; ++i) logits[rng() % size_t(n_vocab)] += 8.0f + float(rng() % 8);
        for (int32_t t : history.tokens) {
            if (t >= 0 && t < n_vocab && rng() % 2 == 0) logits[size_t(t)] = 10.0f + float(rng() % 6);
        }
    }
    return logits;
}

}  // namespace

TEST(SamplerAdjustments, ListReproducesPenaltiesAndDryBitForBit) {
    std::mt19937_64 rng(20261129);
    int checked = 0;
    for (int trial = 0; trial < 300; ++trial) {
        const int32_t n_vocab = 200;
        const RecordedHistory history = record_history(rng, n_vocab);
        SamplingParams p = random_params(rng);
        if (trial % 2 == 0) {  // make sure both stages are on half the time
            p.repeat_penalty = 1.25f;
            p.frequency_penalty = 0.3f;
            p.dry_multiplier = 0.7f;
        }
        std::vector<float> logits = random_logits(rng, n_vocab, history, int(trial % 5));
        logits[1] = 0.0f;
        logits[2] = -0.0f;
        std::vector<float> expected = logits;
        apply_penalties(expected, history.view(), p);
        apply_dry(expected, history.view(), p);
        std::vector<float> actual = logits;
        const std::vector<LogitAdjustment> list = logit_adjustments(history.view(), p, size_t(n_vocab));
        for (size_t j = 0; j < list.size(); ++j) {
            ASSERT_GE(list[j].token, 0);
            ASSERT_LT(list[j].token, n_vocab);
            if (j > 0) {
                ASSERT_LT(list[j - 1].token, list[j].token) << "sorted, one entry per token";
            }
            actual[size_t(list[j].token)] = apply_logit_adjustment(actual[size_t(list[j].token)], list[j], p.repeat_penalty);
        }
        for (int32_t t = 0; t < n_vocab; ++t) {
            ASSERT_EQ(std::bit_cast<uint32_t>(actual[size_t(t)]), std::bit_cast<uint32_t>(expected[size_t(t)]))
                << "trial " << trial << " token " << t << ": " << actual[size_t(t)] << " vs " << expected[size_t(t)];
        }
        checked += int(list.size());
    }
    EXPECT_GT(checked, 1000);  // the loop really exercised adjusted tokens
}

TEST(SamplerAdjustments, EmptyWhenEveryStageIsOff) {
    const std::vector<int32_t> tokens = {1, 2, 1, 2, 1, 2, 1, 2};
    const std::vector<uint8_t> generated(tokens.size(), 1);
    SamplingParams p;
    p.repeat_penalty = 1.0f;
    p.presence_penalty = 0.0f;
    p.frequency_penalty = 0.0f;
    p.dry_multiplier = 0.0f;
    EXPECT_TRUE(logit_adjustments({tokens, generated}, p, 10).empty());
    p.presence_penalty = 0.5f;
    p.penalty_last_n = 3;  // sees 2, 1, 2
    const auto list = logit_adjustments({tokens, generated}, p, 10);
    ASSERT_EQ(list.size(), 2u);
    EXPECT_EQ(list[0].token, 1);
    EXPECT_EQ(list[0].penalty, 0.5f);
    EXPECT_EQ(list[1].token, 2);
}

#ifndef DELTABIT_HAVE_CUDA
TEST(GpuSampler, SkippedWithoutCuda) { GTEST_SKIP() << "built without CUDA"; }
#else

namespace {

class DeviceLogits {
public:
    explicit DeviceLogits(const std::vector<float>& host) : buffer_(host.size() * sizeof(float)) {
        buffer_.upload(host.data(), host.size() * sizeof(float));
    }
    const float* get() const { return buffer_.get<float>(); }
    std::vector<float> download(size_t n) const {
        std::vector<float> host(n);
        buffer_.download(host.data(), n * sizeof(float));
        return host;
    }

private:
    cuda::DeviceBuffer buffer_;
};

struct Stream {
    cudaStream_t stream = nullptr;
    Stream() { cuda::cuda_check(cudaStreamCreate(&stream), "stream"); }
    ~Stream() { cudaStreamDestroy(stream); }
};

std::string describe(const SamplingParams& p, int shape) {
    char text[256];
    std::snprintf(text, sizeof(text), "shape %d T %.2f top_k %d top_p %.2f min_p %.2f rep %.2f pres %.2f freq %.2f last_n %d dry %.2f/%d",
                  shape, p.temperature, p.top_k, p.top_p, p.min_p, p.repeat_penalty, p.presence_penalty,
                  p.frequency_penalty, p.penalty_last_n, p.dry_multiplier, p.dry_allowed_length);
    return text;
}

// What the GPU answers for raw logits with a NaN or ±inf: the lowest such index, reported; nullopt when
// every logit is finite.
std::optional<int32_t> non_finite_report(const std::vector<float>& logits) {
    for (size_t i = 0; i < logits.size(); ++i)
        if (!std::isfinite(logits[i])) return non_finite_choice(int64_t(i));
    return std::nullopt;
}

// Draws `draws` tokens from the same logits with both chains; returns how many differed and fails on
// an RNG that advanced differently. Logits with a non-finite value: every GPU answer must be the report
// and its RNG must not move (the CPU engine refuses such logits before its chain runs).
int compare_draws(cuda::GpuSampler& gpu, const std::vector<float>& logits, const DeviceLogits& device,
                  const SamplingParams& p, const TokenHistory& history, int draws, cudaStream_t stream,
                  const std::string& what) {
    Sampler cpu_sampler(p), gpu_sampler(p);
    const std::optional<int32_t> report = non_finite_report(logits);
    int differ = 0;
    for (int d = 0; d < draws; ++d) {
        const int32_t expected = report ? *report : cpu_sampler.sample(logits, history);
        const int32_t actual = gpu.sample(device.get(), gpu_sampler, history, stream);
        if (expected != actual) {
            ++differ;
            ADD_FAILURE() << what << " draw " << d << ": GPU " << actual << ", CPU " << expected;
        }
    }
    EXPECT_EQ(cpu_sampler.rng().next_u64(), gpu_sampler.rng().next_u64()) << what << ": RNG advanced differently";
    return differ;
}

}  // namespace

TEST(GpuSampler, MatchesCpuChainOnRandomLogits) {
    DELTABIT_REQUIRE_GPU();
    Stream stream;
    std::mt19937_64 rng(6);
    // ≥ 2000 logit vectors in all; fewer at the large sizes, where the CPU reference sorts the whole
    // vocabulary per draw.
    const std::vector<std::pair<int32_t, int>> sizes = {{256, 700}, {1000, 700}, {151936, 320}, {248320, 320}};
    int vectors = 0, draws = 0, differ = 0;
    for (const auto& [n_vocab, trials] : sizes) {
        cuda::GpuSampler gpu(n_vocab);
        gpu.set_use_graphs(n_vocab != 1000);  // one size launches kernel by kernel
        for (int trial = 0; trial < trials; ++trial) {
            const RecordedHistory history = record_history(rng, n_vocab);
            const SamplingParams p = random_params(rng);
            const int shape = int(rng() % 5);
            const std::vector<float> logits = random_logits(rng, n_vocab, history, shape);
            const DeviceLogits device(logits);
            const std::string what = "vocab " + std::to_string(n_vocab) + " trial " + std::to_string(trial) + " (" +
                                     describe(p, shape) + ")";
            differ += compare_draws(gpu, logits, device, p, history.view(), 2, stream.stream, what);
            draws += 2;
            ++vectors;
        }
        std::printf("vocab %d: greedy %lld, shortlist %lld, histogram draw %lld, full sort %lld, CPU-order sums %lld\n",
                    n_vocab, (long long)gpu.stats().greedy, (long long)gpu.stats().shortlist,
                    (long long)gpu.stats().histogram_draw, (long long)gpu.stats().full_sort,
                    (long long)gpu.stats().sequential_sums);
    }
    std::printf("%d logit vectors, %d draws, %d differ\n", vectors, draws, differ);
    RecordProperty("draws_differing", differ);
    EXPECT_GE(vectors, 2000);
    EXPECT_EQ(differ, 0);
}

TEST(GpuSampler, CpuOrderSumsMatchCpuChain) {
    DELTABIT_REQUIRE_GPU();
    Stream stream;
    std::mt19937_64 rng(7);
    int differ = 0;
    for (const auto& [n_vocab, trials] : std::vector<std::pair<int32_t, int>>{{1000, 200}, {151936, 10}}) {
        cuda::GpuSampler gpu(n_vocab);
        gpu.set_force_sequential_sums(true);
        gpu.set_use_graphs(false);
        for (int trial = 0; trial < trials; ++trial) {
            const RecordedHistory history = record_history(rng, n_vocab);
            SamplingParams p = random_params(rng);
            if (p.temperature == 0.0f) p.temperature = 1.0f;
            const int shape = int(rng() % 5);
            const std::vector<float> logits = random_logits(rng, n_vocab, history, shape);
            const DeviceLogits device(logits);
            differ += compare_draws(gpu, logits, device, p, history.view(), 2, stream.stream,
                                    "sequential vocab " + std::to_string(n_vocab) + " " + describe(p, shape));
        }
        EXPECT_GT(gpu.stats().sequential_sums, 0);
    }
    EXPECT_EQ(differ, 0);
}

TEST(GpuSampler, UntruncatedDrawThroughTheHistogramMatchesCpuChain) {
    DELTABIT_REQUIRE_GPU();
    Stream stream;
    std::mt19937_64 rng(9);
    int differ = 0;
    for (const int32_t n_vocab : {151936, 248320}) {
        cuda::GpuSampler gpu(n_vocab);
        for (int trial = 0; trial < 25; ++trial) {
            const RecordedHistory history = record_history(rng, n_vocab);
            SamplingParams p = random_params(rng);
            p.temperature = trial % 2 == 0 ? 1.0f : 0.7f;
            p.top_k = 0;
            p.top_p = 1.0f;
            p.min_p = 0.0f;
            const int shape = trial % 3 == 0 ? 1 : 4;  // peaked: the target's bin is small
            const std::vector<float> logits = random_logits(rng, n_vocab, history, shape);
            const DeviceLogits device(logits);
            differ += compare_draws(gpu, logits, device, p, history.view(), 4, stream.stream,
                                    "histogram draw vocab " + std::to_string(n_vocab) + " " + describe(p, shape));
        }
        std::printf("vocab %d: histogram draw %lld, full sort %lld\n", n_vocab, (long long)gpu.stats().histogram_draw,
                    (long long)gpu.stats().full_sort);
        EXPECT_GT(gpu.stats().histogram_draw, 50);
    }
    EXPECT_EQ(differ, 0);
}

TEST(GpuSampler, GreedyIsArgmaxOfPenalisedLogitsTiesToLowestId) {
    DELTABIT_REQUIRE_GPU();
    Stream stream;
    const int32_t n_vocab = 5000;
    cuda::GpuSampler gpu(n_vocab);
    SamplingParams p;
    p.temperature = 0.0f;
    std::vector<float> logits(size_t(n_vocab), -1.0f);
    logits[4000] = 3.0f;
    logits[1200] = 3.0f;
    logits[3000] = 2.9f;
    Sampler s(p);
    EXPECT_EQ(gpu.sample(DeviceLogits(logits).get(), s, {}, stream.stream), 1200);
    // A repeat penalty on both tied tokens' history pushes them below 2.9: 3 / 1.5 = 2.
    p.repeat_penalty = 1.5f;
    const std::vector<int32_t> tokens = {4000, 1200};
    const std::vector<uint8_t> generated = {1, 1};
    Sampler penalised(p);
    EXPECT_EQ(gpu.sample(DeviceLogits(logits).get(), penalised, {tokens, generated}, stream.stream), 3000);
    EXPECT_EQ(gpu.stats().greedy, 2);
}

TEST(GpuSampler, NoCandidateFallsBackToRawArgmaxWithoutDrawing) {
    DELTABIT_REQUIRE_GPU();
    Stream stream;
    const int32_t n_vocab = 300;
    cuda::GpuSampler gpu(n_vocab);
    // Finite raw logits, every token in the history and an infinite presence penalty: every adjusted
    // logit is −inf, no candidate remains, and the CPU returns the argmax of the raw logits.
    std::vector<float> logits(size_t(n_vocab), -1.0f);
    logits[7] = 1.0f;
    logits[200] = 1.0f;
    SamplingParams p;
    p.temperature = 1.0f;
    p.presence_penalty = kInf;
    p.penalty_last_n = -1;
    std::vector<int32_t> tokens(static_cast<size_t>(n_vocab));
    for (int32_t t = 0; t < n_vocab; ++t) tokens[size_t(t)] = t;
    const std::vector<uint8_t> generated(tokens.size(), 1);
    Sampler cpu(p), s(p);
    EXPECT_EQ(cpu.sample(logits, {tokens, generated}), 7);
    EXPECT_EQ(gpu.sample(DeviceLogits(logits).get(), s, {tokens, generated}, stream.stream), 7);
    EXPECT_EQ(s.rng().next_u64(), Sampler(p).rng().next_u64()) << "no draw, so the RNG is untouched";
    EXPECT_EQ(gpu.stats().non_finite, 0) << "−inf made by a penalty is not a broken logit";
}

// Raw logits holding a NaN, +inf or −inf are reported — non_finite_choice of the lowest such index —
// on every path the chain can take (greedy, shortlist, histogram draw, full sort; graphs on and off),
// without touching the RNG; the next call on finite logits is sampled as usual. (Before the report, NaN
// and −inf were skipped and +inf won: a broken forward pass sampled to tokens.)
TEST(GpuSampler, ReportsNonFiniteRawLogitsOnEveryPath) {
    DELTABIT_REQUIRE_GPU();
    Stream stream;
    const float nan = std::numeric_limits<float>::quiet_NaN();
    std::mt19937_64 rng(21);
    for (const int32_t n_vocab : {300, 151936}) {
        for (const bool graphs : {true, false}) {
            cuda::GpuSampler gpu(n_vocab);
            gpu.set_use_graphs(graphs);
            const RecordedHistory history = record_history(rng, n_vocab);
            const std::vector<float> finite = random_logits(rng, n_vocab, history, 1);
            struct Path {
                const char* name;
                SamplingParams p;
                bool force_sequential;
            };
            std::vector<Path> paths(5);
            paths[0] = {"greedy", {}, false};
            paths[0].p.temperature = 0.0f;
            paths[1] = {"greedy with penalties", {}, false};
            paths[1].p.temperature = 0.0f;
            paths[1].p.repeat_penalty = 1.3f;
            paths[1].p.dry_multiplier = 0.8f;
            paths[2] = {"shortlist", {}, false};
            paths[3] = {"histogram draw", {}, false};
            paths[4] = {"full sort", {}, true};
            for (Path* path : {&paths[3], &paths[4]}) {
                path->p.top_k = 0;
                path->p.top_p = 1.0f;
                path->p.min_p = 0.0f;
            }
            for (const Path& path : paths) {
                gpu.set_force_sequential_sums(path.force_sequential);
                for (const float bad : {nan, kInf, -kInf}) {
                    // The bad value at a history token (what counts is the raw logit, not its penalised
                    // value), a NaN after it, the opposite sign at the end of the vocabulary.
                    std::vector<float> logits = finite;
                    const int32_t first = history.tokens.front();
                    logits[size_t(first)] = bad;
                    logits[size_t(n_vocab - 1)] = -bad;
                    logits[size_t(std::min(n_vocab - 1, first + 17))] = nan;
                    const std::string what = std::string(path.name) + " " + std::to_string(bad) + " vocab " +
                                             std::to_string(n_vocab) + (graphs ? "" : " (no graphs)");
                    Sampler s(path.p);
                    const int64_t reports = gpu.stats().non_finite;
                    EXPECT_EQ(gpu.sample(DeviceLogits(logits).get(), s, history.view(), stream.stream),
                              non_finite_choice(std::min(first, n_vocab - 1)))
                        << what;
                    EXPECT_EQ(gpu.stats().non_finite, reports + 1) << what;
                    EXPECT_EQ(s.rng().next_u64(), Sampler(path.p).rng().next_u64()) << what << ": RNG moved";
                    // Every value bad, the first one included.
                    Sampler all(path.p);
                    EXPECT_EQ(gpu.sample(DeviceLogits(std::vector<float>(size_t(n_vocab), bad)).get(), all,
                                         history.view(), stream.stream),
                              non_finite_choice(0))
                        << "all " << what;
                }
                // The report does not outlive its call: finite logits are sampled as the CPU does.
                EXPECT_EQ(compare_draws(gpu, finite, DeviceLogits(finite), path.p, history.view(), 2, stream.stream,
                                        std::string(path.name) + " after a report"),
                          0);
            }
            // The parameters decide the pass (histogram draw: no truncating stage; full sort: that with
            // CPU-order sums, past the shortlist's 4096); the finite draws show the passes ran.
            if (n_vocab > 4096) {
                EXPECT_GT(gpu.stats().full_sort, 0);
            }
            EXPECT_GT(gpu.stats().shortlist, 0);
            EXPECT_GT(gpu.stats().greedy, 0);
        }
    }
}

TEST(GpuSampler, SingleSurvivorDoesNotDraw) {
    DELTABIT_REQUIRE_GPU();
    Stream stream;
    const int32_t n_vocab = 248320;
    cuda::GpuSampler gpu(n_vocab);
    std::mt19937_64 rng(3);
    const RecordedHistory history = record_history(rng, n_vocab);
    std::vector<float> logits = random_logits(rng, n_vocab, history, 1);
    SamplingParams p;
    p.temperature = 0.7f;
    p.top_k = 1;
    Sampler s(p);
    const int32_t expected = Sampler(p).sample(logits, history.view());
    EXPECT_EQ(gpu.sample(DeviceLogits(logits).get(), s, history.view(), stream.stream), expected);
    EXPECT_EQ(s.rng().next_u64(), Sampler(p).rng().next_u64());
}

TEST(GpuSampler, LeavesTheLogitsUnchanged) {
    DELTABIT_REQUIRE_GPU();
    Stream stream;
    const int32_t n_vocab = 151936;
    cuda::GpuSampler gpu(n_vocab);
    std::mt19937_64 rng(4);
    const RecordedHistory history = record_history(rng, n_vocab);
    const std::vector<float> logits = random_logits(rng, n_vocab, history, 4);
    SamplingParams p;
    p.repeat_penalty = 1.3f;
    p.frequency_penalty = 0.2f;
    p.dry_multiplier = 0.8f;
    p.dry_allowed_length = 2;
    const DeviceLogits device(logits);
    Sampler s(p);
    for (int i = 0; i < 3; ++i) gpu.sample(device.get(), s, history.view(), stream.stream);
    const std::vector<float> after = device.download(logits.size());
    for (size_t i = 0; i < logits.size(); ++i) {
        ASSERT_EQ(std::bit_cast<uint32_t>(after[i]), std::bit_cast<uint32_t>(logits[i])) << "logit " << i;
    }
}

TEST(GpuSampler, EqualLogitsEverywhere) {
    DELTABIT_REQUIRE_GPU();
    Stream stream;
    // 248320 equal logits: one bin holds everything; top_k 0, top_p 1, min_p 0 keeps all of them.
    for (const int32_t n_vocab : {1000, 248320}) {
        cuda::GpuSampler gpu(n_vocab);
        const std::vector<float> logits(size_t(n_vocab), 0.25f);
        const DeviceLogits device(logits);
        for (const float top_p : {1.0f, 0.5f}) {
            SamplingParams p;
            p.temperature = 1.0f;
            p.top_k = 0;
            p.top_p = top_p;
            p.min_p = 0.0f;
            p.seed = 99;
            EXPECT_EQ(compare_draws(gpu, logits, device, p, {}, 4, stream.stream, "equal logits"), 0);
        }
    }
}

TEST(GpuSampler, TakesTheShortlistForTruncatingSettingsAndSortsOnlyWhenItMust) {
    DELTABIT_REQUIRE_GPU();
    Stream stream;
    const int32_t n_vocab = 248320;
    cuda::GpuSampler gpu(n_vocab);
    std::mt19937_64 rng(5);
    const RecordedHistory history = record_history(rng, n_vocab);
    const DeviceLogits device(random_logits(rng, n_vocab, history, 4));
    SamplingParams defaults;  // T 0.8, top_k 40, top_p 0.95, min_p 0.05
    Sampler s(defaults);
    for (int i = 0; i < 10; ++i) gpu.sample(device.get(), s, history.view(), stream.stream);
    EXPECT_EQ(gpu.stats().shortlist, 10);
    EXPECT_EQ(gpu.stats().full_sort, 0);
    EXPECT_EQ(gpu.stats().graph_launches, 10);
    SamplingParams pure;
    pure.top_k = 0;
    pure.top_p = 1.0f;
    pure.min_p = 0.0f;
    Sampler t(pure);
    gpu.sample(device.get(), t, history.view(), stream.stream);
    EXPECT_EQ(gpu.stats().histogram_draw, 1);
    EXPECT_EQ(gpu.stats().full_sort, 0);
    gpu.set_histogram_draw(false);
    gpu.sample(device.get(), t, history.view(), stream.stream);
    EXPECT_EQ(gpu.stats().full_sort, 1);
}

TEST(GpuSampler, DrawsFollowTheCpuChainsProbabilities) {
    DELTABIT_REQUIRE_GPU();
    Stream stream;
    const int32_t n_vocab = 1000;
    cuda::GpuSampler gpu(n_vocab);
    std::mt19937_64 rng(11);
    const RecordedHistory history = record_history(rng, n_vocab);
    std::vector<float> logits(static_cast<size_t>(n_vocab));
    std::normal_distribution<float> normal(0.0f, 1.0f);
    for (float& x : logits) x = normal(rng);
    for (int i = 0; i < 12; ++i) logits[size_t(i * 37)] = 2.0f + 0.25f * float(i);
    SamplingParams p;
    p.temperature = 0.9f;
    p.top_k = 0;
    p.top_p = 0.9f;
    p.min_p = 0.02f;
    p.repeat_penalty = 1.2f;
    p.dry_multiplier = 0.8f;
    p.dry_allowed_length = 2;
    p.seed = 12345;
    // The chain's distribution, from the CPU's surviving candidates.
    const std::vector<Candidate> kept = Sampler(p).candidates(logits, history.view());
    ASSERT_GT(kept.size(), 5u);
    double z = 0.0;
    for (const Candidate& c : kept) z += std::exp(double(c.logit) - double(kept.front().logit));
    const DeviceLogits device(logits);
    Sampler s(p);
    const int draws = 30000;
    std::map<int32_t, int> counts;
    for (int i = 0; i < draws; ++i) ++counts[gpu.sample(device.get(), s, history.view(), stream.stream)];
    // Pearson chi-square over the kept tokens, those expecting < 5 draws pooled into one cell.
    double chi2 = 0.0, pooled_expected = 0.0;
    int pooled_count = 0, cells = 0, seen = 0;
    for (const Candidate& c : kept) {
        const double expected = draws * std::exp(double(c.logit) - double(kept.front().logit)) / z;
        const int count = counts.count(c.token) ? counts[c.token] : 0;
        seen += count;
        if (expected < 5.0) {
            pooled_expected += expected;
            pooled_count += count;
            continue;
        }
        chi2 += (count - expected) * (count - expected) / expected;
        ++cells;
    }
    if (pooled_expected > 0.0) {
        chi2 += (pooled_count - pooled_expected) * (pooled_count - pooled_expected) / pooled_expected;
        ++cells;
    }
    EXPECT_EQ(seen, draws) << "a token outside the CPU chain's survivors was drawn";
    // 0.999 quantile of chi-square with df = cells − 1 (Wilson–Hilferty; z = 3.09): a correct sampler
    // fails with probability 0.001 for a random seed, and this seed is fixed.
    const double df = cells - 1;
    const double a = 2.0 / (9.0 * df);
    const double limit = df * std::pow(1.0 - a + 3.09 * std::sqrt(a), 3.0);
    std::printf("chi-square %.2f over %d cells (limit %.2f)\n", chi2, cells, limit);
    EXPECT_LT(chi2, limit);
}

TEST(GpuSampler, MicrosecondsPerSampleAtVocab248320) {
    DELTABIT_REQUIRE_GPU();
    Stream stream;
    const int32_t n_vocab = 248320;
    cuda::GpuSampler gpu(n_vocab);
    std::mt19937_64 rng(8);
    const RecordedHistory history = record_history(rng, n_vocab);
    const std::vector<float> logits = random_logits(rng, n_vocab, history, 4);
    const DeviceLogits device(logits);
    {  // the CPU chain on the same logits, for scale
        Sampler cpu(SamplingParams{});
        const auto start = std::chrono::steady_clock::now();
        for (int i = 0; i < 20; ++i) cpu.sample(logits, history.view());
        const double us = std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - start).count() / 20;
        std::printf("vocab %d, CPU Sampler::sample with the defaults: %.1f us/sample\n", n_vocab, us);
    }
    struct Setting {
        const char* name;
        float temperature;
        int top_k;
        float top_p;
        float min_p;
        float repeat_penalty;
        bool histogram_draw = true;
        bool graphs = true;
    };
    const Setting settings[] = {
        {"greedy", 0.0f, 40, 0.95f, 0.05f, 1.0f},
        {"greedy, kernel by kernel (no CUDA graph)", 0.0f, 40, 0.95f, 0.05f, 1.0f, true, false},
        {"defaults (T 0.8, top_k 40, top_p 0.95, min_p 0.05)", 0.8f, 40, 0.95f, 0.05f, 1.0f},
        {"defaults, kernel by kernel (no CUDA graph)", 0.8f, 40, 0.95f, 0.05f, 1.0f, true, false},
        {"defaults + repeat penalty 1.1 + DRY", 0.8f, 40, 0.95f, 0.05f, 1.1f},
        {"top_k 0, top_p 0.95, min_p 0.05", 0.8f, 0, 0.95f, 0.05f, 1.0f},
        {"top_k 0, top_p 0.95, min_p 0", 1.0f, 0, 0.95f, 0.0f, 1.0f},
        {"pure sampling (top_k 0, top_p 1, min_p 0)", 1.0f, 0, 1.0f, 0.0f, 1.0f},
        {"pure sampling, whole vocabulary sorted", 1.0f, 0, 1.0f, 0.0f, 1.0f, false},
    };
    for (const Setting& setting : settings) {
        SamplingParams p;
        p.temperature = setting.temperature;
        p.top_k = setting.top_k;
        p.top_p = setting.top_p;
        p.min_p = setting.min_p;
        p.repeat_penalty = setting.repeat_penalty;
        if (setting.repeat_penalty != 1.0f) p.dry_multiplier = 0.8f;
        gpu.set_histogram_draw(setting.histogram_draw);
        gpu.set_use_graphs(setting.graphs);
        Sampler s(p);
        for (int i = 0; i < 20; ++i) gpu.sample(device.get(), s, history.view(), stream.stream);
        const cuda::GpuSamplerStats before = gpu.stats();
        const int n = 300;
        const auto start = std::chrono::steady_clock::now();
        for (int i = 0; i < n; ++i) gpu.sample(device.get(), s, history.view(), stream.stream);
        const double us = std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - start).count() / n;
        std::printf("vocab %d, %-55s %8.1f us/sample (shortlist %lld, histogram draw %lld, full sort %lld, CPU-order sums %lld)\n",
                    n_vocab, setting.name, us, (long long)(gpu.stats().shortlist - before.shortlist),
                    (long long)(gpu.stats().histogram_draw - before.histogram_draw),
                    (long long)(gpu.stats().full_sort - before.full_sort),
                    (long long)(gpu.stats().sequential_sums - before.sequential_sums));
    }
}

#endif  // DELTABIT_HAVE_CUDA
