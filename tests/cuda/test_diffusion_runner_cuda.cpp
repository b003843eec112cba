// DiffusionRunner on CUDA (runtime/diffusion_runner.h) on the DiffusionGemma fixture: the same tokens and
// steps_per_block as the CPU runner for the same prompt and seed (also after the cache was reset and
// regrown), `stop` ending a run early with `stopped` set and the unfinished block not committed, and a
// CUDA recording holding the CPU run's steps and replaying bit for bit on CUDA.
//
// Rounding must not decide the compared runs: the GPU's logits are within kBound·max|logit| of the CPU's
// (tests/cuda/test_diffusion_gemma_cuda.cpp derives that bound and holds the model to it), and a draw, an
// argmax, an acceptance or the stop rule close enough to a boundary could go the other way on correct
// code. So the runs compared here are checked on the host first (RunsAreNotDecidedByRounding, in every
// build, no GPU needed): every decision of the CPU run clears the change that a logit error of kBound
// could make:
//   - argmax: the top logit leads the runner-up by more than 2·kBound·M (M = max|logit| of that call);
//   - a sample: u·Σp lies farther from both running-sum boundaries s of its pick than they can move:
//     Δz = kBound·M / T bounds the error of the scaled logits, which scales each probability by a factor
//     within e^±2Δz, so a running sum s moves by at most (e^2Δz − 1)·min(s, Σp − s) (the sums below and
//     above it); 2^-22 more covers the device's own rounding (diffusion_step_cuda.h);
//   - entropies move by at most δH = 2·Δz·sd_p(log p) (to first order dH = −Cov_p(Δz, log p); Cauchy–Schwarz,
//     doubled for the higher orders);
//     every prefix sum of the ranked entropies lies farther from the bound than the δH of its terms, and
//     the mean entropy farther than the mean δH from the stop rule's threshold.
// Over transformers' 48 steps a block makes ~400 such decisions and some always lie that close; with 3
// steps (and the last step's draws deciding nothing) about one seed in five clears them all, and the two
// runs compared use such seeds (the host check names the closest decision and its margin). The settings
// (generation_config.json of copies of the fixture): max_new_tokens 16 (two blocks of 8) and
// max_denoising_steps 3 for the compared runs; the stop test runs transformers' 48 steps, where only the
// step counts are compared across backends, and those no rounding can change (the mean entropy stays
// ~80 times above the stop rule's threshold; checked on the host too).
#include <gtest/gtest.h>

#include "models/diffusion_gemma.h"
#include "models/model.h"
#include "runtime/diffusion_generate.h"
#include "runtime/diffusion_generation_config.h"
#include "runtime/diffusion_step.h"
#include "sampling/rng.h"

#include <nlohmann/json.hpp>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <limits>
#include <system_error>
#include <string>
#include <vector>

namespace deltabit {
namespace {

namespace fs = std::filesystem;

constexpr double kBound = 1e-4;  // relative logit error of the GPU model; see the header comment

// The compared runs: (prompt, seed) pairs, the seeds chosen by the host check (margins 4.3 and 6.2 times
// the change). The second prompt is longer, so the runner's cache regrows.
const std::vector<int32_t> kPromptA = {5, 61, 200, 7};
const std::vector<int32_t> kPromptB = {9, 300, 12, 44, 101, 2, 77, 410, 31, 8, 256, 19};
constexpr uint64_t kSeedA = 126, kSeedB = 17;

// Copies of the fixture with this test's generation_config.json: one folder per process, removed at exit.
struct FixtureCopies {
    fs::path dir = fs::temp_directory_path() / ("deltabit_test_runner_cuda_" + std::to_string(::getpid()));
    fs::path compared = dir / "three_steps", long_run = dir / "48_steps";
    FixtureCopies() {
        const fs::path fixture = fs::path(DELTABIT_SOURCE_DIR) / "tests" / "fixtures" / "diffusion_gemma";
        for (const auto& [folder, settings] :
             {std::pair{compared, nlohmann::json{{"max_new_tokens", 16}, {"max_denoising_steps", 3}}},
              std::pair{long_run, nlohmann::json{{"max_new_tokens", 16}}}}) {
            fs::create_directories(folder);
            for (const char* f : {"config.json", "model.safetensors"})
                fs::copy_file(fixture / f, folder / f, fs::copy_options::overwrite_existing);
            std::ofstream(folder / "generation_config.json") << settings.dump();
        }
    }
    ~FixtureCopies() {
        std::error_code ignored;
        fs::remove_all(dir, ignored);
    }
};
const FixtureCopies& fixture_copies() {
    static const FixtureCopies copies;
    return copies;
}

// The worst decision of a run: its margin over what rounding could change (> 1: rounding cannot decide).
struct Worst {
    double ratio = std::numeric_limits<double>::infinity();
    std::string where;
    void see(double margin, double change, const std::string& what) {
        const double r = change > 0 ? margin / change : std::numeric_limits<double>::infinity();
        if (r < ratio) ratio = r, where = what;
    }
};

// SeededDiffusionRandomness's draws (the same SamplerRng in the same order; the run's tokens are compared
// with the runner's to prove it), keeping each sample's distance to its pick's running-sum boundaries.
class MeasuredDraws : public DiffusionRandomness {
public:
    explicit MeasuredDraws(uint64_t seed) : rng_(seed) {}
    void uniform_tokens(int64_t n_vocab, std::span<int32_t> out) override {
        for (int32_t& t : out) t = uniform_token(rng_.next_unit(), n_vocab);
    }
    void sample(std::span<const float> probs, int64_t n_vocab, std::span<int32_t> out) override {
        distances.assign(out.size(), 0.0);
        sides.assign(out.size(), 0.0);
        for (size_t r = 0; r < out.size(); ++r) {
            const std::span<const float> p = probs.subspan(r * size_t(n_vocab), size_t(n_vocab));
            const double unit = rng_.next_unit();
            out[r] = categorical_pick(p, unit);
            double total = 0.0;
            for (float x : p) total += x;
            double below = 0.0;  // the running sum before the pick
            for (int32_t v = 0; v < out[r]; ++v) below += p[size_t(v)];
            const double u = unit * total;
            const double above = below + p[size_t(out[r])];
            distances[r] = std::min(u - below, above - u);
            sides[r] = std::max(std::min(below, total - below), std::min(above, total - above));
        }
    }
    // The last step's, per position: u·Σp's distance to the nearer boundary of its pick, and the larger
    // of min(s, Σp − s) over the two boundaries s (what bounds their shift, header comment).
    std::vector<double> distances, sides;

private:
    SamplerRng rng_;
};

struct CheckedRun {
    DiffusionGeneration generation;
    Worst worst;
};

CheckedRun check_rounding(const DiffusionGemma& model, const DiffusionGenerationConfig& g, std::span<const int32_t> prompt,
                          uint64_t seed) {
    const int64_t L = model.config().canvas_length, V = model.config().n_vocab, N = g.max_denoising_steps;
    MeasuredDraws draws(seed);
    CheckedRun out;
    const DiffusionStepCallback on_step = [&](const DiffusionStep& s) {
        const float T = diffusion_step_temperature(g, N - s.step + 1, N);
        double M = 0.0;
        for (float x : s.logits) M = std::max(M, double(std::abs(x)));
        const double dz = kBound * M / double(T);
        const DiffusionStepStats st = scale_and_measure(s.logits, L, V, T);
        const std::string at = "block " + std::to_string(s.block) + " step " + std::to_string(s.step);
        // A block's last step commits its argmax; its draws, acceptance and stop rule decide nothing.
        const bool last = s.step == N;
        std::vector<double> dH(static_cast<size_t>(L));
        for (int64_t i = 0; i < L; ++i) {
            const float* row = s.logits.data() + i * V;
            float top = -INFINITY, second = -INFINITY;
            for (int64_t v = 0; v < V; ++v) {
                if (row[v] > top) second = top, top = row[v];
                else if (row[v] > second) second = row[v];
            }
            out.worst.see(double(top) - double(second), 2 * kBound * M, at + ": argmax lead at " + std::to_string(i));
            if (last) continue;
            out.worst.see(draws.distances[size_t(i)], std::expm1(2 * dz) * draws.sides[size_t(i)] + 0x1p-22,
                          at + ": sample at " + std::to_string(i));
            // sd_p(log p), with log p = z − max − log Σ exp(z − max) as the step computes it.
            const float* z = st.scaled.data() + i * V;
            const double zmax = *std::max_element(z, z + V);
            double denom = 0.0;
            for (int64_t v = 0; v < V; ++v) denom += std::exp(double(z[v]) - zmax);
            double mean = 0.0, square = 0.0;
            for (int64_t v = 0; v < V; ++v) {
                const double logp = double(z[v]) - zmax - std::log(denom), p = std::exp(logp);
                mean += p * logp;
                square += p * logp * logp;
            }
            dH[size_t(i)] = 2 * dz * std::sqrt(std::max(0.0, square - mean * mean));
        }
        if (last) return true;
        std::vector<int64_t> rank(static_cast<size_t>(L));
        for (int64_t i = 0; i < L; ++i) rank[size_t(i)] = i;
        std::stable_sort(rank.begin(), rank.end(), [&](int64_t a, int64_t b) { return st.entropy[size_t(a)] < st.entropy[size_t(b)]; });
        // A prefix moves by its terms' changes, and by a swap of ranks at its end (at most the largest δH twice).
        const double swap = 2 * *std::max_element(dH.begin(), dH.end());
        double prefix = 0.0, prefix_change = swap;
        for (int64_t r = 1; r < L; ++r) {
            prefix += st.entropy[size_t(rank[size_t(r - 1)])];
            prefix_change += dH[size_t(rank[size_t(r - 1)])];
            out.worst.see(std::abs(prefix - g.entropy_bound), prefix_change, at + ": acceptance at rank " + std::to_string(r));
        }
        double mean_change = 0.0;
        for (double d : dH) mean_change += d / double(L);
        out.worst.see(std::abs(mean_entropy(st.entropy) - g.confidence_threshold), mean_change, at + ": mean entropy");
        return true;
    };
    out.generation = generate_diffusion(model, prompt, g, draws, {}, {}, on_step);
    return out;
}

TEST(DiffusionRunnerCudaFixture, RunsAreNotDecidedByRounding) {
    const fs::path folder = fixture_copies().compared;
    const Model model = Model::load(folder);
    const DiffusionGemma dg(model);
    const DiffusionGenerationConfig g = load_diffusion_generation_config(folder, model.config());
    ASSERT_EQ(g.max_denoising_steps, 3);
    for (const auto& [prompt, seed] : {std::pair{kPromptA, kSeedA}, std::pair{kPromptB, kSeedB}}) {
        const CheckedRun run = check_rounding(dg, g, prompt, seed);
        SeededDiffusionRandomness random(seed);
        EXPECT_EQ(run.generation.tokens, generate_diffusion(dg, prompt, g, random).tokens) << "the measured draws are not the seeded ones";
        std::printf("  seed %llu: worst margin %.3g times what rounding could change (%s)\n", (unsigned long long)seed,
                    run.worst.ratio, run.worst.where.c_str());
        EXPECT_GT(run.worst.ratio, 1.0) << "seed " << seed << ": rounding could decide " << run.worst.where
                                        << "; pick another seed for the CPU–GPU comparison";
    }

    // The stop test's 48-step run: no step comes near the stop rule, so every block runs all 48 steps on
    // either backend.
    const fs::path long_folder = fixture_copies().long_run;
    const DiffusionGenerationConfig long_g = load_diffusion_generation_config(long_folder, model.config());
    const int64_t L = model.config().canvas_length, V = model.config().n_vocab, N = long_g.max_denoising_steps;
    double lowest = std::numeric_limits<double>::infinity();
    SeededDiffusionRandomness random(kSeedA);
    const DiffusionGeneration long_run = generate_diffusion(dg, kPromptA, long_g, random, {}, {}, [&](const DiffusionStep& s) {
        const float T = diffusion_step_temperature(long_g, N - s.step + 1, N);
        lowest = std::min(lowest, mean_entropy(scale_and_measure(s.logits, L, V, T).entropy));
        return true;
    });
    EXPECT_EQ(long_run.steps_per_block, (std::vector<int64_t>{48, 48}));
    EXPECT_GT(lowest, 10 * long_g.confidence_threshold) << "the 48-step run comes near the stop rule";
}

}  // namespace
}  // namespace deltabit

#if DELTABIT_HAVE_CUDA

#include "core/error.h"
#include "op_parity_cuda.h"
#include "runtime/diffusion_record.h"
#include "runtime/diffusion_replay.h"
#include "runtime/diffusion_runner.h"

namespace deltabit {
namespace {

struct Streamed {
    std::vector<std::vector<int32_t>> blocks;
    std::vector<int64_t> steps;
    DiffusionBlockCallback callback() {
        return [this](std::span<const int32_t> block, int64_t s) {
            blocks.emplace_back(block.begin(), block.end());
            steps.push_back(s);
        };
    }
};

TEST(DiffusionRunnerCuda, GivesTheCpuRunnersTokensAndStepsAlsoAfterTheCacheRegrows) {
    DELTABIT_REQUIRE_GPU();
    const fs::path folder = fixture_copies().compared;
    DiffusionRunner cpu(folder.string(), "cpu", std::nullopt);
    DiffusionRunner gpu(folder.string(), "cuda", std::nullopt);
    EXPECT_EQ(cpu.backend(), "cpu");
    EXPECT_EQ(gpu.backend(), "cuda");
    EXPECT_EQ(gpu.backend_description().rfind("cuda: ", 0), 0u) << gpu.backend_description();
    // A, then B (a longer prompt: the cache is replaced), then A again (cleared in place).
    for (const auto& [prompt, seed] : {std::pair{kPromptA, kSeedA}, std::pair{kPromptB, kSeedB}, std::pair{kPromptA, kSeedA}}) {
        SCOPED_TRACE("seed " + std::to_string(seed));
        Streamed cpu_blocks, gpu_blocks;
        const DiffusionRun want = cpu.generate(prompt, seed, cpu_blocks.callback());
        const DiffusionRun got = gpu.generate(prompt, seed, gpu_blocks.callback());
        ASSERT_EQ(want.generation.steps_per_block.size(), 2u);
        EXPECT_EQ(got.generation.tokens, want.generation.tokens);
        EXPECT_EQ(got.generation.steps_per_block, want.generation.steps_per_block);
        EXPECT_EQ(got.generation.finished, want.generation.finished);
        EXPECT_FALSE(got.generation.stopped);
        EXPECT_EQ(gpu_blocks.blocks, cpu_blocks.blocks);
        EXPECT_EQ(gpu_blocks.steps, cpu_blocks.steps);
    }
}

TEST(DiffusionRunnerCuda, StopEndsTheRunAtASyncPointWithoutCommittingTheBlock) {
    DELTABIT_REQUIRE_GPU();
    const fs::path folder = fixture_copies().long_run;  // 48 steps a block, 2 blocks (RunsAreNotDecidedByRounding)
    DiffusionRunner cpu(folder.string(), "cpu", std::nullopt);
    DiffusionRunner gpu(folder.string(), "cuda", std::nullopt);
    const DiffusionRun full = gpu.generate(kPromptA, kSeedA, {});
    ASSERT_EQ(full.generation.steps_per_block, (std::vector<int64_t>{48, 48}));
    // The device loop polls every 4 steps (its default steps_per_sync): block 0 takes 12 polls; stopping
    // at the 14th ends the run 8 steps into block 1.
    int64_t polls = 0;
    Streamed streamed;
    const DiffusionRun got = gpu.generate(kPromptA, kSeedA, streamed.callback(), {}, [&] { return ++polls >= 14; });
    EXPECT_TRUE(got.generation.stopped);
    EXPECT_FALSE(got.generation.finished);
    EXPECT_EQ(polls, 14);
    EXPECT_EQ(got.generation.steps_per_block, (std::vector<int64_t>{48, 8}));
    const std::vector<int32_t> block_0(full.generation.tokens.begin(), full.generation.tokens.begin() + 8);
    EXPECT_EQ(got.generation.tokens, block_0);  // block 1 is not committed
    EXPECT_EQ(streamed.blocks, std::vector<std::vector<int32_t>>{block_0});

    // The CPU runner polls after every step: stopped after the same 56 steps, it reports the same steps.
    int64_t cpu_polls = 0;
    const DiffusionRun cpu_stopped = cpu.generate(kPromptA, kSeedA, {}, {}, [&] { return ++cpu_polls >= 56; });
    EXPECT_TRUE(cpu_stopped.generation.stopped);
    EXPECT_EQ(cpu_stopped.generation.steps_per_block, got.generation.steps_per_block);
    EXPECT_EQ(cpu_stopped.generation.tokens.size(), 8u);

    // Stopped at the first poll: nothing committed, the first sync's 4 steps counted.
    const DiffusionRun at_once = gpu.generate(kPromptA, kSeedA, {}, {}, [] { return true; });
    EXPECT_TRUE(at_once.generation.stopped);
    EXPECT_TRUE(at_once.generation.tokens.empty());
    EXPECT_EQ(at_once.generation.steps_per_block, std::vector<int64_t>{4});

    // A run after a stopped one starts afresh (the cache is reset): the full run again.
    EXPECT_EQ(gpu.generate(kPromptA, kSeedA, {}).generation.tokens, full.generation.tokens);
}

TEST(DiffusionRunnerCuda, ARecordingHoldsTheCpuStepsAndReplaysBitForBitOnCuda) {
    DELTABIT_REQUIRE_GPU();
    try {
        diffusion_logits_hash({});
    } catch (const Error&) {
        GTEST_SKIP() << "built without xxhash: no records (CMakeLists.txt says where it looks)";
    }
    const fs::path folder = fixture_copies().compared;
    const fs::path gpu_file = fixture_copies().dir / "gpu.rec", cpu_file = fixture_copies().dir / "cpu.rec";
    DiffusionRunner cpu(folder.string(), "cpu", std::nullopt);
    DiffusionRunner gpu(folder.string(), "cuda", std::nullopt);
    const DiffusionRun unrecorded = gpu.generate(kPromptA, kSeedA, {});
    const DiffusionRun recorded = gpu.generate(kPromptA, kSeedA, {}, gpu_file.string());
    cpu.generate(kPromptA, kSeedA, {}, cpu_file.string());
    // Waiting after every step changes nothing but the waits.
    EXPECT_EQ(recorded.generation.tokens, unrecorded.generation.tokens);
    EXPECT_EQ(recorded.generation.steps_per_block, unrecorded.generation.steps_per_block);

    const DiffusionRecord g = read_diffusion_record(gpu_file), c = read_diffusion_record(cpu_file);
    EXPECT_EQ(g.backend, "cuda");
    EXPECT_EQ(c.backend, "cpu");
    EXPECT_EQ(g.tokens, recorded.generation.tokens);
    ASSERT_EQ(g.steps.size(), c.steps.size());
    // Step by step the CPU's (the logits' hashes aside: fp32 against double sums): so the step callback
    // hands over each step's input canvas, its draws, acceptance and argmax, not a neighbour's.
    for (size_t i = 0; i < g.steps.size(); ++i) {
        SCOPED_TRACE("step " + std::to_string(i + 1));
        EXPECT_EQ(g.steps[i].block, c.steps[i].block);
        EXPECT_EQ(g.steps[i].step, c.steps[i].step);
        EXPECT_EQ(g.steps[i].canvas, c.steps[i].canvas);
        EXPECT_EQ(g.steps[i].sampled, c.steps[i].sampled);
        EXPECT_EQ(g.steps[i].noise, c.steps[i].noise);
        EXPECT_EQ(g.steps[i].accepted, c.steps[i].accepted);
        EXPECT_EQ(g.steps[i].argmax, c.steps[i].argmax);
    }

    const Model model = Model::load(folder);
    const DiffusionReplayResult same = replay_diffusion_cuda(model, g);
    EXPECT_FALSE(same.difference) << same.difference->what;
    EXPECT_EQ(same.steps_replayed, int64_t(g.steps.size()));

    // The CUDA replay makes its own draws: a changed recorded sample is found at its step.
    DiffusionRecord tampered = g;
    tampered.steps[2].sampled[1] = (tampered.steps[2].sampled[1] + 1) % int32_t(tampered.n_vocab);
    const DiffusionReplayResult changed = replay_diffusion_cuda(model, tampered);
    ASSERT_TRUE(changed.difference);
    EXPECT_EQ(changed.difference->index, 3);
    EXPECT_EQ(changed.difference->what.rfind("the sample differs at position 1", 0), 0u) << changed.difference->what;
    EXPECT_EQ(changed.steps_replayed, 2);
}

}  // namespace
}  // namespace deltabit

#endif  // DELTABIT_HAVE_CUDA
