// The CUDA diffusion step (runtime/diffusion_step_cuda.h) against the CPU step (runtime/diffusion_step.h):
// the device's uniforms equal SamplerRng's bit for bit; each kernel on hostile logits (random, peaked,
// ties, one-hot, equal rows; tests/cuda/diffusion_step_cases.h) at L = 256 and V = 1000 and 262,144; the
// whole step against the CPU step fed the same seed, step by step and enqueued several steps ahead of one
// synchronisation; steps enqueued after the stop flag change nothing. Bounds are derived in
// diffusion_step_cases.h before any run: scaled logits, argmax, noise and (given equal entropies) the
// acceptance are exact; the entropy is within 8·V·2^-53·(1 + H); a pick may differ only when its draw
// lies within rounding of a running-sum boundary; acceptance and the stop decision are compared exactly
// whenever the CPU's own margins exceed the entropy bound (the test asserts they do for its data).
#include <gtest/gtest.h>

#include "cuda/diffusion_step_cases.h"
#include "runtime/diffusion_step.h"
#include "sampling/rng.h"

#include <cstdio>
#include <cstring>
#include <vector>

#ifndef DELTABIT_HAVE_CUDA
TEST(DiffusionStepCuda, SkippedWithoutCuda) { GTEST_SKIP() << "built without CUDA"; }
#else

#include "backend/cuda_buffer.h"
#include "op_parity_cuda.h"
#include "runtime/diffusion_step_cuda.h"

namespace deltabit {
namespace {

using test::CpuStep;
using test::LogitKind;

template <typename T>
cuda::DeviceBuffer upload(const std::vector<T>& host) {
    cuda::DeviceBuffer b(std::max<size_t>(host.size(), 1) * sizeof(T));
    if (!host.empty()) b.upload(host.data(), host.size() * sizeof(T));
    return b;
}

template <typename T>
std::vector<T> download(const T* device, size_t n) {
    std::vector<T> host(n);
    cuda::cuda_check(cudaMemcpy(host.data(), device, n * sizeof(T), cudaMemcpyDeviceToHost), "test download");
    return host;
}

std::vector<double> cpu_units(SamplerRng& rng, size_t n) {
    std::vector<double> u(n);
    for (double& x : u) x = rng.next_unit();
    return u;
}

struct Stream {
    cudaStream_t stream = nullptr;
    Stream() { cuda::cuda_check(cudaStreamCreate(&stream), "stream"); }
    ~Stream() { cudaStreamDestroy(stream); }
};

TEST(DiffusionStepCuda, DeviceUniformsEqualSamplerRng) {
    DELTABIT_REQUIRE_GPU();
    Stream s;
    cuda::DeviceBuffer go = upload(std::vector<int32_t>{0}), stop = upload(std::vector<int32_t>{1});
    for (uint64_t seed : {uint64_t(0), uint64_t(1), uint64_t(42), uint64_t(0x9e3779b97f4a7c15ull), ~uint64_t(0)}) {
        SamplerRng cpu(seed);
        const SamplerRng::State s0 = SamplerRng(seed).state();
        cuda::DeviceBuffer state = upload(std::vector<uint64_t>(s0.words, s0.words + 4));
        cuda::DeviceBuffer units(1024 * sizeof(double));
        for (int64_t n : {1, 256, 512, 3, 1000}) {
            cuda::diffusion_draw_units(state.get<uint64_t>(), n, units.get<double>(), go.get<int32_t>(), s.stream);
            const std::vector<double> got = download(units.get<double>(), size_t(n)), want = cpu_units(cpu, size_t(n));
            ASSERT_EQ(std::memcmp(got.data(), want.data(), size_t(n) * sizeof(double)), 0) << "seed " << seed << " n " << n;
        }
        const std::vector<uint64_t> before = download(state.get<uint64_t>(), 4);
        cuda::diffusion_draw_units(state.get<uint64_t>(), 9, units.get<double>(), stop.get<int32_t>(), s.stream);
        EXPECT_EQ(download(state.get<uint64_t>(), 4), before) << "a halted draw advanced the state";
        const SamplerRng::State c = cpu.state();
        EXPECT_EQ(before, std::vector<uint64_t>(c.words, c.words + 4)) << "seed " << seed;
    }
}

// measure + sample on one logit set, against scale_and_measure and categorical_pick on the same uniforms.
void check_rows(int64_t L, int64_t V, LogitKind kind, uint64_t seed) {
    SCOPED_TRACE(std::string(test::logit_kind_name(kind)) + " L " + std::to_string(L) + " V " + std::to_string(V));
    const float temperature = 0.7f;
    const std::vector<float> logits = test::diffusion_logits(L, V, kind, seed);
    SamplerRng rng(seed + 1);
    const std::vector<double> units = cpu_units(rng, size_t(2 * L));
    const CpuStep cpu = test::cpu_step(logits, L, V, temperature, units, 0.1);

    Stream s;
    cuda::DeviceBuffer halt = upload(std::vector<int32_t>{0}), d_logits = upload(logits), d_units = upload(units);
    cuda::DeviceBuffer scaled(size_t(L * V) * sizeof(float)), entropy(size_t(L) * sizeof(double)),
        argmax(size_t(L) * sizeof(int32_t)), sampled(size_t(L) * sizeof(int32_t)),
        stats(size_t(L) * sizeof(cuda::DiffusionRowStats));
    cuda::diffusion_measure_rows(d_logits.get<float>(), L, V, temperature, scaled.get<float>(), entropy.get<double>(),
                                 argmax.get<int32_t>(), stats.get<cuda::DiffusionRowStats>(), halt.get<int32_t>(), s.stream);
    cuda::diffusion_sample_rows(scaled.get<float>(), stats.get<cuda::DiffusionRowStats>(), L, V, d_units.get<double>(),
                                sampled.get<int32_t>(), halt.get<int32_t>(), s.stream);
    const std::vector<float> got_scaled = download(scaled.get<float>(), size_t(L * V));
    const std::vector<double> got_entropy = download(entropy.get<double>(), size_t(L));
    const std::vector<int32_t> got_argmax = download(argmax.get<int32_t>(), size_t(L));
    const std::vector<int32_t> got_sampled = download(sampled.get<int32_t>(), size_t(L));

    EXPECT_EQ(std::memcmp(got_scaled.data(), cpu.stats.scaled.data(), got_scaled.size() * sizeof(float)), 0);
    EXPECT_EQ(got_argmax, cpu.stats.argmax);
    double worst = 0.0;
    int excused = 0;
    for (int64_t r = 0; r < L; ++r) {
        const double h = cpu.stats.entropy[size_t(r)], bound = test::entropy_tolerance(V, h);
        EXPECT_LE(std::abs(got_entropy[size_t(r)] - h), bound) << "row " << r << ": " << got_entropy[size_t(r)] << " vs " << h;
        worst = std::max(worst, std::abs(got_entropy[size_t(r)] - h) / bound);
        if (kind == LogitKind::one_hot) EXPECT_EQ(got_entropy[size_t(r)], 0.0) << "row " << r;
        if (got_sampled[size_t(r)] != cpu.sampled[size_t(r)]) {
            const auto p = std::span<const float>(cpu.stats.probs).subspan(size_t(r * V), size_t(V));
            const bool ok = test::pick_within_rounding(p, units[size_t(r)], cpu.sampled[size_t(r)], got_sampled[size_t(r)]);
            excused += ok;
            EXPECT_TRUE(ok) << "row " << r << ": picked " << got_sampled[size_t(r)] << ", CPU " << cpu.sampled[size_t(r)];
        }
    }
    std::printf("  %-10s L %lld V %6lld: max |dH| %.2g of its bound, %d of %lld picks excused by rounding\n",
                test::logit_kind_name(kind), (long long)L, (long long)V, worst, excused, (long long)L);
}

TEST(DiffusionStepCuda, RowsMatchTheCpuAtVocabulary1000) {
    DELTABIT_REQUIRE_GPU();
    for (LogitKind k : {LogitKind::random, LogitKind::peaked, LogitKind::ties, LogitKind::one_hot, LogitKind::equal_rows})
        check_rows(256, 1000, k, 21);
    check_rows(5, 7, LogitKind::ties, 22);  // fewer elements than threads
}

TEST(DiffusionStepCuda, RowsMatchTheCpuAtVocabulary262144) {
    DELTABIT_REQUIRE_GPU();
    for (LogitKind k : {LogitKind::random, LogitKind::peaked, LogitKind::ties, LogitKind::one_hot, LogitKind::equal_rows})
        check_rows(256, 262144, k, 31);
}

// Draws exactly on a running-sum boundary (p = 1/8 exactly; u = k/8): the strict u < Σ decides.
TEST(DiffusionStepCuda, DrawsOnABoundaryFollowTheStrictRule) {
    DELTABIT_REQUIRE_GPU();
    const int64_t L = 4, V = 8;
    const std::vector<float> logits(size_t(L * V), 1.5f);
    const std::vector<double> units = {0.0, 0.25, 0.5, 0.75, 0.0, 0.0, 0.0, 0.0};
    const CpuStep cpu = test::cpu_step(logits, L, V, 0.5f, units, 0.1);
    ASSERT_EQ(cpu.sampled, (std::vector<int32_t>{0, 2, 4, 6}));
    Stream s;
    cuda::DeviceBuffer d_logits = upload(logits), d_units = upload(units);
    cuda::DeviceBuffer scaled(size_t(L * V) * sizeof(float)), entropy(size_t(L) * sizeof(double)),
        argmax(size_t(L) * sizeof(int32_t)), sampled(size_t(L) * sizeof(int32_t)),
        stats(size_t(L) * sizeof(cuda::DiffusionRowStats));
    cuda::diffusion_measure_rows(d_logits.get<float>(), L, V, 0.5f, scaled.get<float>(), entropy.get<double>(),
                                 argmax.get<int32_t>(), stats.get<cuda::DiffusionRowStats>(), nullptr, s.stream);
    cuda::diffusion_sample_rows(scaled.get<float>(), stats.get<cuda::DiffusionRowStats>(), L, V, d_units.get<double>(),
                                sampled.get<int32_t>(), nullptr, s.stream);
    EXPECT_EQ(download(sampled.get<int32_t>(), size_t(L)), cpu.sampled);
    EXPECT_EQ(download(argmax.get<int32_t>(), size_t(L)), (std::vector<int32_t>(size_t(L), 0)));  // all tie: the first
}

// The settle kernel on given entropies, over several steps, against accepted_positions and DiffusionStopRule.
void check_settle(const std::vector<double>& entropy, double bound, int64_t threshold, double confidence,
                  const std::vector<std::vector<int32_t>>& argmaxes, const char* what) {
    SCOPED_TRACE(what);
    const int64_t L = int64_t(entropy.size()), V = 97;
    SamplerRng rng{uint64_t(L)};
    DiffusionStopRule rule(threshold, L, confidence);
    Stream s;
    cuda::DeviceBuffer flags = upload(std::vector<cuda::DiffusionStepFlags>{{0, 0, 0, 0, 0.0}});
    cuda::DeviceBuffer history = upload(std::vector<int32_t>(size_t(threshold * L), -1));
    cuda::DeviceBuffer d_entropy = upload(entropy);
    bool cpu_finished = false;
    int steps = 0;
    for (const std::vector<int32_t>& argmax : argmaxes) {
        std::vector<int32_t> sampled(static_cast<size_t>(L));
        for (int32_t& t : sampled) t = int32_t(rng.next_u64() % V);
        const std::vector<double> units = cpu_units(rng, size_t(L));
        cuda::DeviceBuffer d_sampled = upload(sampled), d_argmax = upload(argmax), d_units = upload(units);
        cuda::DeviceBuffer d_accepted = upload(std::vector<uint8_t>(size_t(L), 7));
        cuda::DeviceBuffer d_noise = upload(std::vector<int32_t>(size_t(L), -7));
        cuda::DeviceBuffer d_canvas = upload(std::vector<int32_t>(size_t(L), -7));
        const cuda::DiffusionSettleArgs a{d_entropy.get<double>(), d_sampled.get<int32_t>(), d_argmax.get<int32_t>(),
                                          d_units.get<double>(), d_accepted.get<uint8_t>(), d_noise.get<int32_t>(),
                                          d_canvas.get<int32_t>(), history.get<int32_t>(),
                                          flags.get<cuda::DiffusionStepFlags>(), L, V, bound, threshold, confidence};
        cuda::diffusion_settle_step(a, s.stream);
        const cuda::DiffusionStepFlags got = download(flags.get<cuda::DiffusionStepFlags>(), 1)[0];
        if (!cpu_finished) {
            ++steps;
            const std::vector<uint8_t> accepted = accepted_positions(entropy, bound);
            std::vector<int32_t> noise(static_cast<size_t>(L)), canvas(static_cast<size_t>(L));
            for (int64_t i = 0; i < L; ++i) {
                noise[size_t(i)] = uniform_token(units[size_t(i)], V);
                canvas[size_t(i)] = accepted[size_t(i)] ? sampled[size_t(i)] : noise[size_t(i)];
            }
            EXPECT_EQ(download(d_accepted.get<uint8_t>(), size_t(L)), accepted) << "step " << steps;
            EXPECT_EQ(download(d_noise.get<int32_t>(), size_t(L)), noise) << "step " << steps;
            EXPECT_EQ(download(d_canvas.get<int32_t>(), size_t(L)), canvas) << "step " << steps;
            cpu_finished = rule.finished(argmax, entropy);
            rule.record(argmax);
            EXPECT_EQ(got.mean_entropy, mean_entropy(entropy));
        } else {
            EXPECT_EQ(download(d_canvas.get<int32_t>(), size_t(L)), std::vector<int32_t>(size_t(L), -7)) << "a halted step wrote";
        }
        EXPECT_EQ(got.finished, int32_t(cpu_finished)) << "after step " << steps;
        EXPECT_EQ(got.steps, steps);
    }
}

TEST(DiffusionStepCuda, SettleMatchesTheCpuRules) {
    DELTABIT_REQUIRE_GPU();
    const std::vector<int32_t> a = {1, 2, 3, 4, 5}, b = {1, 2, 3, 4, 6};
    check_settle({0.25, 0.1, 0.25, 0.9, 0.25}, 0.35, 1, 0.5, {a, a, a, a}, "ties keep position order");
    check_settle({0.5, 0.0, 0.7, 0.0, 0.0}, 0.0, 2, 0.3, {a, a, b, b}, "bound 0 accepts through the zeros, threshold 2");
    check_settle({0.001, 0.002, 0.0, 0.0, 0.0}, 0.1, 0, 0.005, {b, a, a, a}, "threshold 0 stops at once");
    check_settle({1.0, 1.0, 1.0, 1.0, 1.0}, 2.5, 1, 0.005, {a, a, a, a}, "all equal: a prefix, never confident");
    check_settle({0.3}, 0.0, 1, 0.5, {{9}, {9}, {9}}, "one position");
    // A full canvas of 256 and the largest one (1024), with many ties.
    for (int64_t L : {256, 1024}) {
        std::vector<double> entropy(static_cast<size_t>(L));
        for (size_t i = 0; i < entropy.size(); ++i) entropy[i] = double((i * 7919) % 13) * 0.001;
        const std::vector<int32_t> c(static_cast<size_t>(L), 3);
        check_settle(entropy, 0.2, 1, 1.0, {c, c, c}, L == 256 ? "256 positions, many ties" : "1024 positions, many ties");
    }
}

// The block-loop order around DiffusionStepCuda, mirrored on the CPU: per block L uniforms for the
// initial canvas, per step 2L. Steps: `logits` in order; the CPU stops at the step its rule says.
struct BlockScript {
    std::vector<std::vector<float>> logits;
    std::vector<float> temperatures;
};

BlockScript block_script(int64_t L, int64_t V, uint64_t seed) {
    BlockScript b;
    const std::vector<float> one_hot = test::diffusion_logits(L, V, LogitKind::one_hot, seed + 3);
    b.logits = {test::diffusion_logits(L, V, LogitKind::peaked, seed), test::diffusion_logits(L, V, LogitKind::random, seed + 1),
                test::diffusion_logits(L, V, LogitKind::peaked, seed + 2), one_hot, one_hot,
                test::diffusion_logits(L, V, LogitKind::random, seed + 4), test::diffusion_logits(L, V, LogitKind::ties, seed + 5)};
    const int64_t n = int64_t(b.logits.size());
    for (int64_t s = n; s >= 1; --s) b.temperatures.push_back(0.4f + 0.4f * float(s) / float(n));
    return b;
}

void check_whole_step(int64_t L, int64_t V) {
    SCOPED_TRACE("L " + std::to_string(L) + " V " + std::to_string(V));
    cuda::DiffusionStepSettings settings;
    settings.entropy_bound = 0.1;
    settings.stability_threshold = 1;
    settings.confidence_threshold = 0.005;
    settings.eos_ids = {7, 11};
    settings.pad_id = 0;
    const uint64_t seed = 1234;
    cuda::DiffusionStepCuda gpu(L, V, settings, seed);
    SamplerRng rng(seed);
    Stream s;
    cuda::DeviceBuffer canvas(size_t(L) * sizeof(int32_t)), committed(size_t(L) * sizeof(int32_t));
    for (int block = 0; block < 2; ++block) {
        const BlockScript script = block_script(L, V, 100 + uint64_t(block));
        gpu.begin_block(canvas.get<int32_t>(), nullptr, s.stream);
        std::vector<int32_t> cpu_canvas(static_cast<size_t>(L));
        for (int32_t& t : cpu_canvas) t = uniform_token(rng.next_unit(), V);
        ASSERT_EQ(download(canvas.get<int32_t>(), size_t(L)), cpu_canvas) << "block " << block << ": initial canvas";
        DiffusionStopRule rule(settings.stability_threshold, L, settings.confidence_threshold);
        bool finished = false;
        int steps = 0, excused = 0;
        std::vector<float> scaled_at_stop;
        std::vector<int32_t> argmax_at_stop;
        for (size_t k = 0; k < script.logits.size(); ++k) {
            cuda::DeviceBuffer logits = upload(script.logits[k]);
            gpu.run_step(logits.get<float>(), script.temperatures[k], canvas.get<int32_t>(), s.stream);
            const cuda::DiffusionStepFlags f = gpu.read_flags(s.stream);
            if (finished) {  // enqueued after the stop: nothing moves
                EXPECT_EQ(download(gpu.self_conditioning(), size_t(L * V)), scaled_at_stop) << "step " << k + 1;
                EXPECT_EQ(download(gpu.argmax(), size_t(L)), argmax_at_stop);
                EXPECT_EQ(download(canvas.get<int32_t>(), size_t(L)), cpu_canvas);
                const SamplerRng::State g = gpu.read_rng_state(s.stream), c = rng.state();
                EXPECT_EQ(std::memcmp(g.words, c.words, sizeof(g.words)), 0) << "a halted step drew";
                EXPECT_EQ(f.finished, 1);
                EXPECT_EQ(f.steps, steps);
                continue;
            }
            ++steps;
            const std::vector<double> units = cpu_units(rng, size_t(2 * L));
            const CpuStep cpu = test::cpu_step(script.logits[k], L, V, script.temperatures[k], units, settings.entropy_bound);
            const std::vector<double> entropy = download(gpu.entropy(), size_t(L));
            const std::vector<int32_t> sampled = download(gpu.sampled(), size_t(L)), noise = download(gpu.noise(), size_t(L));
            const std::vector<uint8_t> accepted = download(gpu.accepted(), size_t(L));
            const std::vector<int32_t> next = download(canvas.get<int32_t>(), size_t(L));
            ASSERT_EQ(download(gpu.units(), size_t(2 * L)), units) << "step " << steps;
            ASSERT_EQ(download(gpu.self_conditioning(), size_t(L * V)), cpu.stats.scaled) << "step " << steps;
            ASSERT_EQ(download(gpu.argmax(), size_t(L)), cpu.stats.argmax) << "step " << steps;
            EXPECT_EQ(noise, cpu.noise) << "step " << steps;
            const double tolerance = test::entropy_tolerance_max(V, cpu.stats.entropy);
            for (int64_t i = 0; i < L; ++i) {
                EXPECT_LE(std::abs(entropy[size_t(i)] - cpu.stats.entropy[size_t(i)]), tolerance) << "step " << steps << " pos " << i;
                if (sampled[size_t(i)] != cpu.sampled[size_t(i)]) {
                    const auto p = std::span<const float>(cpu.stats.probs).subspan(size_t(i * V), size_t(V));
                    const bool ok = test::pick_within_rounding(p, units[size_t(i)], cpu.sampled[size_t(i)], sampled[size_t(i)]);
                    excused += ok;
                    EXPECT_TRUE(ok) << "step " << steps << " pos " << i << ": " << sampled[size_t(i)] << ", CPU " << cpu.sampled[size_t(i)];
                }
                EXPECT_EQ(next[size_t(i)], accepted[size_t(i)] ? sampled[size_t(i)] : noise[size_t(i)]) << "pos " << i;
            }
            // The data keeps every decision far from its threshold, so the comparisons below are exact.
            ASSERT_TRUE(test::acceptance_is_decided(cpu.stats.entropy, cpu.stats.scaled, V, settings.entropy_bound, tolerance))
                << "step " << steps << ": test data too close to an acceptance boundary";
            EXPECT_EQ(accepted, cpu.accepted) << "step " << steps;
            ASSERT_TRUE(test::confidence_is_decided(cpu.stats.entropy, settings.confidence_threshold, tolerance));
            finished = rule.finished(cpu.stats.argmax, cpu.stats.entropy);
            rule.record(cpu.stats.argmax);
            EXPECT_EQ(f.finished, int32_t(finished)) << "step " << steps;
            EXPECT_EQ(f.steps, steps);
            cpu_canvas = next;  // what a halted step must leave
            if (finished) {
                scaled_at_stop = cpu.stats.scaled;
                argmax_at_stop = cpu.stats.argmax;
            }
        }
        EXPECT_TRUE(finished) << "block " << block << ": the repeated one-hot logits stop the block";
        EXPECT_EQ(steps, 5) << "block " << block;
        gpu.commit_block(committed.get<int32_t>(), s.stream);
        std::vector<int32_t> want = argmax_at_stop;
        const bool eos = apply_eos_and_pad(want, settings.eos_ids, settings.pad_id);
        EXPECT_EQ(download(committed.get<int32_t>(), size_t(L)), want);
        EXPECT_EQ(gpu.read_flags(s.stream).has_eos, int32_t(eos));
        std::printf("  block %d: %d steps, %d picks excused by rounding, EOS %d\n", block, steps, excused, int(eos));
    }
}

TEST(DiffusionStepCuda, WholeStepMatchesTheCpuStepAtVocabulary1000) {
    DELTABIT_REQUIRE_GPU();
    check_whole_step(256, 1000);
}

TEST(DiffusionStepCuda, WholeStepMatchesTheCpuStepAtVocabulary262144) {
    DELTABIT_REQUIRE_GPU();
    check_whole_step(256, 262144);
}

// The way a host uses it: every step of a block enqueued, one synchronisation, then the flag. The state
// equals the CPU loop's at its stop (step 5 of 7), whatever ran after.
TEST(DiffusionStepCuda, StepsEnqueuedAheadStopOnTheDevice) {
    DELTABIT_REQUIRE_GPU();
    const int64_t L = 256, V = 1000;
    cuda::DiffusionStepSettings settings;
    const uint64_t seed = 99;
    cuda::DiffusionStepCuda gpu(L, V, settings, seed);
    const BlockScript script = block_script(L, V, 500);
    std::vector<cuda::DeviceBuffer> logits;
    for (const std::vector<float>& x : script.logits) logits.push_back(upload(x));
    Stream s;
    cuda::DeviceBuffer canvas(size_t(L) * sizeof(int32_t));
    gpu.begin_block(canvas.get<int32_t>(), nullptr, s.stream);
    for (size_t k = 0; k < logits.size(); ++k) gpu.run_step(logits[k].get<float>(), script.temperatures[k], canvas.get<int32_t>(), s.stream);
    const cuda::DiffusionStepFlags f = gpu.read_flags(s.stream);  // the one synchronisation

    SamplerRng rng(seed);
    for (int64_t i = 0; i < L; ++i) rng.next_unit();
    DiffusionStopRule rule(settings.stability_threshold, L, settings.confidence_threshold);
    CpuStep cpu;
    int steps = 0;
    for (size_t k = 0; k < script.logits.size(); ++k) {
        ++steps;
        cpu = test::cpu_step(script.logits[k], L, V, script.temperatures[k], cpu_units(rng, size_t(2 * L)), settings.entropy_bound);
        const bool finished = rule.finished(cpu.stats.argmax, cpu.stats.entropy);
        rule.record(cpu.stats.argmax);
        if (finished) break;
    }
    ASSERT_EQ(steps, 5);
    EXPECT_EQ(f.finished, 1);
    EXPECT_EQ(f.steps, steps);
    EXPECT_EQ(download(gpu.argmax(), size_t(L)), cpu.stats.argmax);
    EXPECT_EQ(download(gpu.self_conditioning(), size_t(L * V)), cpu.stats.scaled);
    const SamplerRng::State g = gpu.read_rng_state(s.stream), c = rng.state();
    EXPECT_EQ(std::memcmp(g.words, c.words, sizeof(g.words)), 0) << "the device drew more or less than the CPU loop";
    // The one-hot step's entropies are all 0 and its samples are the hot tokens: the canvas is exact.
    EXPECT_EQ(download(canvas.get<int32_t>(), size_t(L)), cpu.canvas);
}

TEST(DiffusionStepCuda, RefusesACanvasTheSortCannotHold) {
    DELTABIT_REQUIRE_GPU();
    try {
        cuda::DiffusionStepCuda step(cuda::kDiffusionMaxCanvas + 1, 1000, {}, 1);
        FAIL() << "a canvas of 1025 was accepted";
    } catch (const Error& e) {
        EXPECT_NE(std::string(e.what()).find("canvas length 1025"), std::string::npos) << e.what();
    }
    cuda::DiffusionStepSettings bad;
    bad.stability_threshold = -1;
    EXPECT_THROW(cuda::DiffusionStepCuda(256, 1000, bad, 1), Error);
}

// Time per step at the real geometry (not asserted): the bytes it must move at least — logits read,
// scaled written, scaled read three more times (two measure passes, about half a row in the sample) —
// against the H200's ~4.3 TB/s copy bandwidth (docs/bench.md).
TEST(DiffusionStepCuda, StepTimeAtTheRealGeometry) {
    DELTABIT_REQUIRE_GPU();
    const int64_t L = 256, V = 262144;
    cuda::DiffusionStepSettings settings;
    settings.confidence_threshold = 0.0;  // never stops: every step runs
    cuda::DiffusionStepCuda gpu(L, V, settings, 5);
    cuda::DeviceBuffer logits = upload(test::diffusion_logits(L, V, LogitKind::peaked, 6));
    cuda::DeviceBuffer canvas(size_t(L) * sizeof(int32_t));
    Stream s;
    gpu.begin_block(canvas.get<int32_t>(), nullptr, s.stream);
    gpu.run_step(logits.get<float>(), 0.8f, canvas.get<int32_t>(), s.stream);  // warm
    cudaEvent_t start, stop;
    cuda::cuda_check(cudaEventCreate(&start), "event");
    cuda::cuda_check(cudaEventCreate(&stop), "event");
    const int n = 20;
    cuda::cuda_check(cudaEventRecord(start, s.stream), "event");
    for (int i = 0; i < n; ++i) gpu.run_step(logits.get<float>(), 0.8f, canvas.get<int32_t>(), s.stream);
    cuda::cuda_check(cudaEventRecord(stop, s.stream), "event");
    cuda::cuda_check(cudaEventSynchronize(stop), "event");
    float ms = 0.0f;
    cuda::cuda_check(cudaEventElapsedTime(&ms, start, stop), "event");
    cudaEventDestroy(start);
    cudaEventDestroy(stop);
    const double us = 1000.0 * ms / n;
    const double bytes = double(L * V) * sizeof(float) * 4.5;
    std::printf("  run_step L %lld V %lld: %.1f us/step, %.2f TB/s of the 4.5 row passes (copy ceiling ~4.3 TB/s)\n",
                (long long)L, (long long)V, us, bytes / (us * 1e-6) / 1e12);
    EXPECT_EQ(gpu.read_flags(s.stream).steps, n + 1);
}

}  // namespace
}  // namespace deltabit

#endif  // DELTABIT_HAVE_CUDA
