// The CUDA diffusion step (src/runtime/diffusion_step_cuda.cu), emulated on the host, against the CPU step
// (runtime/diffusion_step.h) at small L and V: each kernel on hostile logits (tests/cuda/diffusion_step_cases.h),
// then DiffusionStepCuda's whole step and block against the CPU loop fed the same seed, including steps
// enqueued after the stop flag. Prints one "agrees" line per part; exits 1 on a disagreement.
#include "../cuda/diffusion_step_cases.h"

#include "runtime/diffusion_step.h"
#include "runtime/diffusion_step_cuda.h"
#include "sampling/rng.h"

#include <cstdio>
#include <cstring>
#include <vector>

using namespace deltabit;
using namespace deltabit::cuda;
using namespace deltabit::test;

namespace {

int failures = 0;

#define CHECK(cond, ...)                         \
    do {                                         \
        if (!(cond)) {                           \
            ++failures;                          \
            std::printf("DISAGREES: ");          \
            std::printf(__VA_ARGS__);            \
            std::printf("\n");                   \
        }                                        \
    } while (0)

template <typename T>
T* to_device(const std::vector<T>& host) {
    T* d = nullptr;
    cudaMalloc(&d, std::max<size_t>(host.size(), 1) * sizeof(T));
    cudaMemcpy(d, host.data(), host.size() * sizeof(T), cudaMemcpyHostToDevice);
    return d;
}

template <typename T>
std::vector<T> to_host(const T* d, size_t n) {
    std::vector<T> host(n);
    cudaMemcpy(host.data(), d, n * sizeof(T), cudaMemcpyDeviceToHost);
    return host;
}

std::vector<double> cpu_units(SamplerRng& rng, size_t n) {
    std::vector<double> u(n);
    for (double& x : u) x = rng.next_unit();
    return u;
}

void check_units() {
    const int32_t zero = 0, one = 1;
    int32_t* go = to_device(std::vector<int32_t>{zero});
    int32_t* stop = to_device(std::vector<int32_t>{one});
    for (uint64_t seed : {uint64_t(0), uint64_t(1), uint64_t(42), uint64_t(0x9e3779b97f4a7c15ull)}) {
        SamplerRng cpu(seed);
        const SamplerRng::State s0 = SamplerRng(seed).state();
        uint64_t* state = to_device(std::vector<uint64_t>(s0.words, s0.words + 4));
        double* units = to_device(std::vector<double>(600, -1.0));
        for (int64_t n : {1, 5, 513}) {
            diffusion_draw_units(state, n, units, go, nullptr);
            const std::vector<double> got = to_host(units, size_t(n)), want = cpu_units(cpu, size_t(n));
            CHECK(std::memcmp(got.data(), want.data(), size_t(n) * sizeof(double)) == 0, "units seed %llu n %lld",
                  (unsigned long long)seed, (long long)n);
        }
        const std::vector<uint64_t> before = to_host(state, 4);
        diffusion_draw_units(state, 7, units, stop, nullptr);
        CHECK(to_host(state, 4) == before, "a halted draw advanced the state (seed %llu)", (unsigned long long)seed);
        const SamplerRng::State c = cpu.state();
        CHECK(std::vector<uint64_t>(c.words, c.words + 4) == before, "state after the draws (seed %llu)",
              (unsigned long long)seed);
        cudaFree(state);
        cudaFree(units);
    }
    cudaFree(go);
    cudaFree(stop);
    std::printf("units agree: 4 seeds × 3 calls bit for bit, a halted draw leaves the state\n");
}

void check_rows(int64_t L, int64_t V, LogitKind kind, uint64_t seed) {
    const float temperature = 0.7f;
    const std::vector<float> logits = diffusion_logits(L, V, kind, seed);
    SamplerRng rng(seed + 1);
    const std::vector<double> units = cpu_units(rng, size_t(2 * L));
    const CpuStep cpu = cpu_step(logits, L, V, temperature, units, 0.1);

    int32_t* halt = to_device(std::vector<int32_t>{0});
    float* d_logits = to_device(logits);
    float* d_scaled = to_device(std::vector<float>(size_t(L * V)));
    double* d_entropy = to_device(std::vector<double>(size_t(L)));
    int32_t* d_argmax = to_device(std::vector<int32_t>(size_t(L)));
    int32_t* d_sampled = to_device(std::vector<int32_t>(size_t(L)));
    DiffusionRowStats* d_stats = nullptr;
    cudaMalloc(&d_stats, size_t(L) * sizeof(DiffusionRowStats));
    double* d_units = to_device(units);
    diffusion_measure_rows(d_logits, L, V, temperature, d_scaled, d_entropy, d_argmax, d_stats, halt, nullptr);
    diffusion_sample_rows(d_scaled, d_stats, L, V, d_units, d_sampled, halt, nullptr);
    const std::vector<float> scaled = to_host(d_scaled, size_t(L * V));
    const std::vector<double> entropy = to_host(d_entropy, size_t(L));
    const std::vector<int32_t> argmax = to_host(d_argmax, size_t(L)), sampled = to_host(d_sampled, size_t(L));

    const char* name = logit_kind_name(kind);
    CHECK(std::memcmp(scaled.data(), cpu.stats.scaled.data(), scaled.size() * sizeof(float)) == 0, "scaled %s L %lld V %lld",
          name, (long long)L, (long long)V);
    CHECK(argmax == cpu.stats.argmax, "argmax %s L %lld V %lld", name, (long long)L, (long long)V);
    double worst = 0.0;
    int excused = 0;
    for (int64_t r = 0; r < L; ++r) {
        const double h = cpu.stats.entropy[size_t(r)], d = std::abs(entropy[size_t(r)] - h);
        worst = std::max(worst, d / entropy_tolerance(V, h));
        CHECK(d <= entropy_tolerance(V, h), "entropy %s row %lld: %.17g vs CPU %.17g", name, (long long)r, entropy[size_t(r)], h);
        if (sampled[size_t(r)] != cpu.sampled[size_t(r)]) {
            const std::span<const float> p = std::span<const float>(cpu.stats.probs).subspan(size_t(r * V), size_t(V));
            const bool ok = pick_within_rounding(p, units[size_t(r)], cpu.sampled[size_t(r)], sampled[size_t(r)]);
            excused += ok;
            CHECK(ok, "sample %s row %lld: %d vs CPU %d", name, (long long)r, sampled[size_t(r)], cpu.sampled[size_t(r)]);
        }
    }
    if (kind == LogitKind::one_hot)
        for (int64_t r = 0; r < L; ++r) CHECK(entropy[size_t(r)] == 0.0, "one-hot row %lld entropy %g", (long long)r, entropy[size_t(r)]);
    std::printf("rows agree: %-10s L %3lld V %5lld: max |ΔH| %.2g of the bound, %d picks excused by rounding\n", name,
                (long long)L, (long long)V, worst, excused);
    for (void* p : {(void*)halt, (void*)d_logits, (void*)d_scaled, (void*)d_entropy, (void*)d_argmax, (void*)d_sampled,
                    (void*)d_stats, (void*)d_units})
        cudaFree(p);
}

// Draws that land exactly on a running-sum boundary: rows of 8 equal logits have p = 1/8 exactly
// (exp within an ulp of 1/8 rounds to it), so u = k/8 equals a running sum and the strict u < Σ moves the
// pick past it: units 0, 1/4, 1/2, 3/4 pick 0, 2, 4, 6 (1/4 is not < 2/8).
void check_boundary_draws() {
    const int64_t L = 4, V = 8;
    const std::vector<float> logits(size_t(L * V), 1.5f);
    const std::vector<double> units = {0.0, 0.25, 0.5, 0.75, 0.0, 0.0, 0.0, 0.0};
    const CpuStep cpu = cpu_step(logits, L, V, 0.5f, units, 0.1);
    CHECK(cpu.sampled == (std::vector<int32_t>{0, 2, 4, 6}), "the CPU's boundary picks");
    float* d_logits = to_device(logits);
    double* d_units = to_device(units);
    DiffusionRowStats* d_stats = nullptr;
    cudaMalloc(&d_stats, size_t(L) * sizeof(DiffusionRowStats));
    float* d_scaled = to_device(std::vector<float>(size_t(L * V)));
    double* d_entropy = to_device(std::vector<double>(size_t(L)));
    int32_t* d_argmax = to_device(std::vector<int32_t>(size_t(L)));
    int32_t* d_sampled = to_device(std::vector<int32_t>(size_t(L)));
    diffusion_measure_rows(d_logits, L, V, 0.5f, d_scaled, d_entropy, d_argmax, d_stats, nullptr, nullptr);
    diffusion_sample_rows(d_scaled, d_stats, L, V, d_units, d_sampled, nullptr, nullptr);
    CHECK(to_host(d_sampled, size_t(L)) == cpu.sampled, "boundary picks");
    for (void* p : {(void*)d_logits, (void*)d_units, (void*)d_stats, (void*)d_scaled, (void*)d_entropy,
                    (void*)d_argmax, (void*)d_sampled})
        cudaFree(p);
    std::printf("boundary draws agree: u = k/8 on p = 1/8 picks 0, 2, 4, 6\n");
}

// The settle kernel on given entropies against accepted_positions and DiffusionStopRule over 4 steps.
void check_settle(const std::vector<double>& entropy, double bound, int64_t threshold, double confidence,
                  const std::vector<std::vector<int32_t>>& argmaxes, const char* what) {
    const int64_t L = int64_t(entropy.size()), V = 97;
    SamplerRng rng(L);
    DiffusionStopRule rule(threshold, L, confidence);
    std::vector<int32_t> history(size_t(std::max<int64_t>(threshold, 0) * L), -1);
    DiffusionStepFlags flags{0, 0, 0, 0, 0.0};
    DiffusionStepFlags* d_flags = to_device(std::vector<DiffusionStepFlags>{flags});
    int32_t* d_history = to_device(history);
    double* d_entropy = to_device(entropy);
    bool cpu_finished = false;
    int steps = 0;
    for (const std::vector<int32_t>& argmax : argmaxes) {
        std::vector<int32_t> sampled(static_cast<size_t>(L));
        for (int32_t& s : sampled) s = int32_t(rng.next_u64() % V);
        const std::vector<double> units = cpu_units(rng, size_t(L));
        int32_t* d_sampled = to_device(sampled);
        int32_t* d_argmax = to_device(argmax);
        double* d_units = to_device(units);
        uint8_t* d_accepted = to_device(std::vector<uint8_t>(size_t(L), 7));
        int32_t* d_noise = to_device(std::vector<int32_t>(size_t(L), -7));
        int32_t* d_canvas = to_device(std::vector<int32_t>(size_t(L), -7));
        DiffusionSettleArgs a{d_entropy, d_sampled, d_argmax, d_units, d_accepted, d_noise, d_canvas, d_history, d_flags,
                              L, V, bound, threshold, confidence};
        diffusion_settle_step(a, nullptr);
        const DiffusionStepFlags got = to_host(d_flags, 1)[0];
        if (!cpu_finished) {
            ++steps;
            const std::vector<uint8_t> accepted = accepted_positions(entropy, bound);
            CHECK(to_host(d_accepted, size_t(L)) == accepted, "%s: accepted, step %d", what, steps);
            std::vector<int32_t> noise(static_cast<size_t>(L)), canvas(static_cast<size_t>(L));
            for (int64_t i = 0; i < L; ++i) {
                noise[size_t(i)] = uniform_token(units[size_t(i)], V);
                canvas[size_t(i)] = accepted[size_t(i)] ? sampled[size_t(i)] : noise[size_t(i)];
            }
            CHECK(to_host(d_noise, size_t(L)) == noise, "%s: noise, step %d", what, steps);
            CHECK(to_host(d_canvas, size_t(L)) == canvas, "%s: canvas, step %d", what, steps);
            cpu_finished = rule.finished(argmax, entropy);
            rule.record(argmax);
            CHECK(got.mean_entropy == mean_entropy(entropy), "%s: mean entropy", what);
        } else {
            CHECK(to_host(d_canvas, size_t(L)) == std::vector<int32_t>(size_t(L), -7), "%s: a halted step wrote the canvas", what);
        }
        CHECK(got.finished == int32_t(cpu_finished), "%s: finished %d, CPU %d after step %d", what, got.finished,
              int(cpu_finished), steps);
        CHECK(got.steps == steps, "%s: %d steps counted, CPU %d", what, got.steps, steps);
        for (void* p : {(void*)d_sampled, (void*)d_argmax, (void*)d_units, (void*)d_accepted, (void*)d_noise, (void*)d_canvas})
            cudaFree(p);
    }
    std::printf("settle agrees: %s (L %lld, %d steps run, finished %d)\n", what, (long long)L, steps, int(cpu_finished));
    cudaFree(d_flags);
    cudaFree(d_history);
    cudaFree(d_entropy);
}

void check_settles() {
    const std::vector<int32_t> a = {1, 2, 3, 4, 5}, b = {1, 2, 3, 4, 6};
    // Ties keep position order; bound 0 accepts through the zeros; everything low: confident.
    check_settle({0.25, 0.1, 0.25, 0.9, 0.25}, 0.35, 1, 0.5, {a, a, a, a}, "ties, threshold 1");
    check_settle({0.5, 0.0, 0.7, 0.0, 0.0}, 0.0, 2, 0.3, {a, a, b, b}, "zeros, bound 0, threshold 2");
    check_settle({0.001, 0.002, 0.0, 0.0, 0.0}, 0.1, 0, 0.005, {b, a, a, a}, "threshold 0 stops at once");
    check_settle({1.0, 1.0, 1.0, 1.0, 1.0}, 2.5, 1, 0.005, {a, a, a, a}, "all equal, never confident");
    std::vector<double> wide(37);
    for (size_t i = 0; i < wide.size(); ++i) wide[i] = double((i * 7919) % 13) * 0.01;  // ties in a longer canvas
    std::vector<int32_t> c(wide.size(), 3);
    check_settle(wide, 0.2, 1, 1.0, {c, c, c}, "37 positions, many ties");
    std::vector<double> one = {0.3};
    check_settle(one, 0.0, 1, 0.5, {{9}, {9}, {9}}, "one position");
}

// DiffusionStepCuda over two blocks against the CPU loop's order of draws and rules.
void check_whole_step() {
    const int64_t L = 6, V = 50;
    const uint64_t seed = 7;
    DiffusionStepSettings settings;
    settings.entropy_bound = 0.1;
    settings.stability_threshold = 1;
    settings.confidence_threshold = 0.005;
    settings.eos_ids = {3};
    settings.pad_id = 0;
    DiffusionStepCuda gpu(L, V, settings, seed);
    SamplerRng rng(seed);
    int32_t* d_canvas = to_device(std::vector<int32_t>(size_t(L), -1));
    int32_t* d_committed = to_device(std::vector<int32_t>(size_t(L), -1));
    const std::vector<float> one_hot = diffusion_logits(L, V, LogitKind::one_hot, 11);
    const std::vector<std::vector<float>> block_logits = {diffusion_logits(L, V, LogitKind::peaked, 10), one_hot, one_hot,
                                                          diffusion_logits(L, V, LogitKind::random, 12),
                                                          diffusion_logits(L, V, LogitKind::ties, 13)};
    for (int block = 0; block < 2; ++block) {
        std::vector<int32_t> first = {5, 4, 3, 2, 1, 0};
        int32_t* d_first = block == 0 ? to_device(first) : nullptr;
        gpu.begin_block(d_canvas, d_first, nullptr);
        std::vector<int32_t> canvas(static_cast<size_t>(L));
        for (int32_t& t : canvas) t = uniform_token(rng.next_unit(), V);
        if (block == 0) canvas = first;
        CHECK(to_host(d_canvas, size_t(L)) == canvas, "block %d: initial canvas", block);
        DiffusionStopRule rule(settings.stability_threshold, L, settings.confidence_threshold);
        bool finished = false;
        int steps = 0;
        std::vector<float> scaled_at_stop;
        std::vector<int32_t> argmax_at_stop;
        for (size_t s = 0; s < block_logits.size(); ++s) {
            const float temperature = 0.4f + 0.4f * float(block_logits.size() - s) / float(block_logits.size());
            float* d_logits = to_device(block_logits[s]);
            gpu.run_step(d_logits, temperature, d_canvas, nullptr);
            cudaFree(d_logits);
            if (!finished) {
                ++steps;
                const std::vector<double> units = cpu_units(rng, size_t(2 * L));
                const CpuStep cpu = cpu_step(block_logits[s], L, V, temperature, units, settings.entropy_bound);
                CHECK(to_host(gpu.units(), size_t(2 * L)) == units, "block %d step %d: units", block, steps);
                CHECK(to_host(gpu.self_conditioning(), size_t(L * V)) == cpu.stats.scaled, "block %d step %d: scaled", block, steps);
                CHECK(to_host(gpu.argmax(), size_t(L)) == cpu.stats.argmax, "block %d step %d: argmax", block, steps);
                CHECK(to_host(gpu.sampled(), size_t(L)) == cpu.sampled, "block %d step %d: sampled", block, steps);
                CHECK(to_host(gpu.accepted(), size_t(L)) == cpu.accepted, "block %d step %d: accepted", block, steps);
                CHECK(to_host(gpu.noise(), size_t(L)) == cpu.noise, "block %d step %d: noise", block, steps);
                CHECK(to_host(d_canvas, size_t(L)) == cpu.canvas, "block %d step %d: next canvas", block, steps);
                finished = rule.finished(cpu.stats.argmax, cpu.stats.entropy);
                rule.record(cpu.stats.argmax);
                if (finished) {
                    scaled_at_stop = cpu.stats.scaled;
                    argmax_at_stop = cpu.stats.argmax;
                    canvas = cpu.canvas;
                }
            } else {
                CHECK(to_host(gpu.self_conditioning(), size_t(L * V)) == scaled_at_stop, "block %d: a halted step changed the scaled logits", block);
                CHECK(to_host(gpu.argmax(), size_t(L)) == argmax_at_stop, "block %d: a halted step changed the argmax", block);
                CHECK(to_host(d_canvas, size_t(L)) == canvas, "block %d: a halted step changed the canvas", block);
                const SamplerRng::State g = gpu.read_rng_state(nullptr), c = rng.state();
                CHECK(std::memcmp(g.words, c.words, sizeof(g.words)) == 0, "block %d: a halted step drew", block);
            }
            const DiffusionStepFlags f = gpu.read_flags(nullptr);
            CHECK(f.finished == int32_t(finished) && f.steps == steps, "block %d after step %zu: flags %d/%d, CPU %d/%d", block,
                  s + 1, f.finished, f.steps, int(finished), steps);
        }
        CHECK(finished && steps == 3, "block %d: the one-hot repeat should stop at step 3 (stopped %d at %d)", block,
              int(finished), steps);
        gpu.commit_block(d_committed, nullptr);
        std::vector<int32_t> committed = argmax_at_stop;
        const bool eos = apply_eos_and_pad(committed, settings.eos_ids, settings.pad_id);
        CHECK(to_host(d_committed, size_t(L)) == committed, "block %d: committed", block);
        CHECK(gpu.read_flags(nullptr).has_eos == int32_t(eos), "block %d: has_eos", block);
        if (d_first) cudaFree(d_first);
    }
    cudaFree(d_canvas);
    cudaFree(d_committed);
    std::printf("whole step agrees: 2 blocks of 5 enqueued steps, stop at step 3, halted steps change nothing\n");
}

}  // namespace

int main() {
    check_units();
    for (LogitKind kind : {LogitKind::random, LogitKind::peaked, LogitKind::ties, LogitKind::one_hot, LogitKind::equal_rows}) {
        check_rows(5, 7, kind, 1);
        check_rows(7, 1000, kind, 2);
    }
    check_rows(3, 4097, LogitKind::ties, 3);     // a second sample tile of one element
    check_rows(4, 12293, LogitKind::random, 4);  // picks past two whole tiles
    check_rows(2, 12293, LogitKind::one_hot, 5);
    check_boundary_draws();
    check_settles();
    check_whole_step();
    try {
        DiffusionStepCuda too_long(kDiffusionMaxCanvas + 1, 10, {}, 1);
        CHECK(false, "a canvas of %lld was not refused", (long long)(kDiffusionMaxCanvas + 1));
    } catch (const std::exception& e) {
        std::printf("refused: %s\n", e.what());
    }
    if (failures) std::printf("%d disagreements\n", failures);
    return failures ? 1 : 0;
}
