#include "cli/bench_diffusion.h"

#include "models/diffusion_gemma.h"
#include "models/model.h"

#include <fmt/format.h>

#include <algorithm>
#include <fstream>
#include <random>
#include <string>

#include <sys/resource.h>

namespace deltabit::cli {

namespace {

using Clock = BenchClock;

// The CPU's counterpart of the GPU rows' device memory: the process's peak resident memory (VmHWM), reset
// when the bench starts (Linux ≥ 4.0: writing 5 to clear_refs), so the copy-bandwidth probe's buffers do not
// count. Where the reset is refused the figure is the process's peak since it started.
void reset_peak_resident() {
    std::ofstream("/proc/self/clear_refs") << "5";
}

double peak_resident_gib() {
    std::ifstream status("/proc/self/status");
    std::string line;
    while (std::getline(status, line))
        if (line.starts_with("VmHWM:")) return std::stod(line.substr(6)) / (1024.0 * 1024.0);  // kB
    rusage usage{};
    getrusage(RUSAGE_SELF, &usage);
    return double(usage.ru_maxrss) / (1024.0 * 1024.0);  // KiB on Linux
}

class CpuDiffusionTarget final : public DiffusionBenchTarget {
public:
    explicit CpuDiffusionTarget(const Model& model) : model_(model) {}
    std::string description() const override { return "cpu reference (models/diffusion_gemma.h, one thread)"; }
    const ModelConfig& config() const override { return model_.config(); }
    void encode_fresh(std::span<const int32_t> prompt) override {
        DiffusionCache cache = model_.new_cache();
        model_.encode(cache, prompt);
    }
    Run generate(std::span<const int32_t> prompt, const DiffusionGenerationConfig& settings, uint64_t seed) override {
        Run run;
        int64_t last_block = -1;
        BenchClock::time_point last = BenchClock::now();
        const DiffusionStepCallback on_step = [&](const DiffusionStep& step) {
            const auto now = BenchClock::now();
            if (step.block == last_block) run.step_seconds.push_back(std::chrono::duration<double>(now - last).count());
            last_block = step.block;
            last = now;
            return true;
        };
        SeededDiffusionRandomness random(seed);
        const auto start = BenchClock::now();
        run.generation = generate_diffusion(model_, prompt, settings, random, {}, {}, on_step);
        run.seconds = seconds_since(start);
        return run;
    }
    double memory_gib() const override { return peak_resident_gib(); }

private:
    DiffusionGemma model_;
};


}  // namespace

std::unique_ptr<DiffusionBenchTarget> cpu_diffusion_target(const Model& model) {
    return std::make_unique<CpuDiffusionTarget>(model);
}

std::vector<BenchMeasurement> run_diffusion_bench(DiffusionBenchTarget& target, const DiffusionCost& cost,
                                                  const DiffusionBenchPlan& plan, const DiffusionFloors& floors) {
    const ModelConfig& c = target.config();
    const int64_t P = plan.prompt_tokens, L = c.canvas_length;
    std::mt19937_64 rng(plan.seed);
    std::uniform_int_distribution<int32_t> pick(0, int32_t(c.n_vocab - 1));
    std::vector<int32_t> prompt(static_cast<size_t>(P));
    for (int32_t& id : prompt) id = pick(rng);
    std::vector<BenchMeasurement> out;
    const std::string path = target.description();
    reset_peak_resident();

    // The prompt alone, into a fresh cache each time.
    bench_progress(fmt::format("enc{}: encoding a prompt of {} tokens", P, P));
    std::vector<double> times;
    do {
        const auto start = Clock::now();
        target.encode_fresh(prompt);
        times.push_back(seconds_since(start));
    } while (times.size() < 3 && times.front() * double(times.size() + 1) < 10.0);
    const double encode_seconds = lower_median(times);
    {
        const PassCost pass = cost.encode(0, P);
        BenchMeasurement m;
        m.test = fmt::format("enc{}", P);
        m.tokens = P;
        m.seconds = encode_seconds;
        m.unit_us = encode_seconds * 1e6;
        m.tokens_per_s = double(P) / encode_seconds;
        m.tflop_s = pass.flops / encode_seconds / 1e12;
        if (floors.bf16_peak_tflop_s > 0) m.pct_of_bf16_peak = 100.0 * *m.tflop_s / floors.bf16_peak_tflop_s;
        m.gb_s = pass.bytes() / encode_seconds / 1e9;
        m.pct_of_copy_bandwidth = 100.0 * *m.gb_s / floors.copy_gb_s;
        m.peak_memory_gib = target.memory_gib();
        m.note = fmt::format("{}; median of {}; causal encoder, no LM head", path, times.size());
        bench_progress(fmt::format("  {:.1f} tok/s", *m.tokens_per_s));
        out.push_back(m);
    }

    // The block loop. A step's time is the gap between two callbacks of one block.
    DiffusionGenerationConfig settings = plan.settings;
    settings.max_new_tokens = plan.new_tokens;
    settings.eos_ids.clear();  // every block runs: random weights write EOS as often as any token
    const int64_t n_blocks = (plan.new_tokens + L - 1) / L;
    bench_progress(fmt::format("dg{}: {} block(s) of {} after the prompt, at most {} denoising steps each",
                               n_blocks * L, n_blocks, L, settings.max_denoising_steps));
    const DiffusionBenchTarget::Run run = target.generate(prompt, settings, plan.seed);
    const double loop_seconds = run.seconds;
    const DiffusionGeneration& generation = run.generation;
    const std::vector<double>& step_seconds = run.step_seconds;
    const int64_t committed = int64_t(generation.tokens.size());
    const double generate_seconds = std::max(loop_seconds - encode_seconds, 1e-9);

    BenchMeasurement m;
    m.test = fmt::format("dg{}", committed);
    m.depth = P;
    m.tokens = committed;
    m.seconds = generate_seconds;
    m.tokens_per_s = double(committed) / generate_seconds;
    m.peak_memory_gib = target.memory_gib();
    DiffusionFigures d;
    d.canvas = L;
    d.steps_per_block = generation.steps_per_block;
    d.max_steps = settings.max_denoising_steps;
    const PassCost step = cost.denoise(P + L * (n_blocks - 1) / 2, L, true);
    d.step_bytes = step.bytes();
    d.step_flops = step.flops;
    const double bytes_us = d.step_bytes / (floors.copy_gb_s * 1e9) * 1e6;
    const double flops_us = floors.bf16_peak_tflop_s > 0 ? d.step_flops / (floors.bf16_peak_tflop_s * 1e12) * 1e6 : 0.0;
    d.step_floor_us = std::max(bytes_us, flops_us);
    std::string steps_text;
    for (int64_t s : generation.steps_per_block) {
        if (!steps_text.empty()) steps_text += ',';
        steps_text += std::to_string(s);
    }
    if (step_seconds.empty()) {
        m.unit_us = 0;
        m.note = fmt::format("{}; steps per block {} (max {}): no block took two steps, so no step time", path,
                             steps_text, d.max_steps);
    } else {
        const double step_s = lower_median(step_seconds);
        m.unit_us = step_s * 1e6;
        m.tflop_s = d.step_flops / step_s / 1e12;
        if (floors.bf16_peak_tflop_s > 0) m.pct_of_bf16_peak = 100.0 * *m.tflop_s / floors.bf16_peak_tflop_s;
        m.gb_s = d.step_bytes / step_s / 1e9;
        m.pct_of_copy_bandwidth = 100.0 * *m.gb_s / floors.copy_gb_s;
        d.pct_of_floor = 100.0 * d.step_floor_us / m.unit_us;
        // A block at max steps: that many median steps and the encoding of one block (of L tokens).
        const double encode_block_s = encode_seconds * double(L) / double(P);
        d.tokens_per_s_at_max_steps = double(L) / (double(d.max_steps) * step_s + encode_block_s);
        m.note = fmt::format(
            "{}; steps per block {} (max {}); median step {:.3f} ms of {} steps, {:.1f}% of its floor {:.3f} ms "
            "({:.1f} MB at copy: {:.3f} ms; {:.2f} GFLOP{}); {:.1f} tok/s at {} steps a block",
            path, steps_text, d.max_steps, step_s * 1e3, step_seconds.size(), d.pct_of_floor, d.step_floor_us / 1e3,
            d.step_bytes / 1e6, bytes_us / 1e3, d.step_flops / 1e9,
            floors.bf16_peak_tflop_s > 0 ? fmt::format(" at the bf16 peak: {:.3f} ms", flops_us / 1e3)
                                         : std::string(", no peak known"),
            d.tokens_per_s_at_max_steps, d.max_steps);
    }
    m.diffusion = d;
    bench_progress(fmt::format("  {:.1f} tok/s committed, median step {:.2f} ms", *m.tokens_per_s, m.unit_us / 1e3));
    out.push_back(m);
    return out;
}

}  // namespace deltabit::cli
