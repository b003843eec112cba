#include "cli/bench_cpu.h"

#include "core/thread_pool.h"
#include "ops/cpu_fast/matmul_cpu_fast.h"
#include "sampling/sampler.h"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <memory>
#include <random>

namespace deltabit::cli {
namespace {

using Clock = BenchClock;

std::string cpu_model_name() {
    std::ifstream in("/proc/cpuinfo");
    std::string line;
    while (std::getline(in, line))
        if (line.starts_with("model name")) {
            const size_t colon = line.find(':');
            if (colon != std::string::npos && colon + 2 <= line.size()) return line.substr(colon + 2);
        }
    return "cpu";
}

std::vector<int32_t> random_ids(int64_t n, int64_t vocab, std::mt19937_64& rng) {
    std::uniform_int_distribution<int32_t> pick(0, int32_t(vocab - 1));
    std::vector<int32_t> ids(static_cast<size_t>(n));
    for (int32_t& id : ids) id = pick(rng);
    return ids;
}

}  // namespace

CpuProbe probe_cpu(int threads) {
    CpuProbe probe;
    probe.threads = threads <= 0 ? hardware_threads() : threads;
    probe.name = cpu_model_name();
    probe.summary = fmt::format("{}, {} threads of {} hardware threads, {}", probe.name, probe.threads,
                                hardware_threads(), cpu_fast::isa_name(cpu_fast::best_isa()));
    // 256 MiB: far past any last-level cache of a machine this bench targets.
    constexpr size_t kBytes = size_t(256) << 20;
    std::vector<char> from(kBytes, 1), to(kBytes, 0);
    ThreadPool pool(probe.threads);
    const size_t slice = kBytes / size_t(probe.threads);
    std::vector<double> times;
    for (int run = 0; run < 5; ++run) {
        const auto start = Clock::now();
        pool.run(probe.threads, [&](int64_t t) {
            std::memcpy(to.data() + size_t(t) * slice, from.data() + size_t(t) * slice, slice);
        });
        times.push_back(seconds_since(start));
    }
    probe.copy_gb_s = 2.0 * double(slice * size_t(probe.threads)) / lower_median(times) / 1e9;  // read + write
    return probe;
}

std::vector<BenchMeasurement> run_cpu_bench(Engine& engine, const InferenceCost& cost, const BenchPlan& plan,
                                            const CpuProbe& cpu, std::vector<std::string>& notes) {
    std::vector<BenchMeasurement> out;
    std::mt19937_64 rng(plan.seed);
    const int64_t vocab = engine.config().n_vocab;
    const auto started = Clock::now();
    const auto out_of_time = [&](const std::string& test) {
        if (seconds_since(started) <= plan.max_seconds) return false;
        notes.push_back(fmt::format("{} skipped: past --max-seconds {:.0f}", test, plan.max_seconds));
        bench_progress(notes.back());
        return true;
    };
    const auto report = [&](const BenchMeasurement& m) {
        bench_progress(fmt::format("  {}: {:.1f} tok/s", m.test, m.tokens_per_s.value_or(0)));
        out.push_back(m);
    };
    const std::string path = fmt::format("threads {}, {}", cpu.threads, engine.description());

    double rate = 0;
    for (int64_t n : plan.prompt_lengths) {
        const std::string test = fmt::format("pp{}", n);
        if (out_of_time(test)) continue;
        if (rate > 0 && double(n) / rate > plan.prompt_budget_s) {
            notes.push_back(fmt::format("{} skipped: projected {:.0f} s at {:.0f} tok/s, over the {:.0f} s budget", test,
                                        double(n) / rate, rate, plan.prompt_budget_s));
            bench_progress(notes.back());
            continue;
        }
        bench_progress(fmt::format("{}: prompt of {} tokens", test, n));
        const std::vector<int32_t> ids = random_ids(n, vocab, rng);
        std::vector<double> times;
        do {
            const std::unique_ptr<EngineSequence> s = engine.new_sequence({.max_positions = n + 1, .kv_format = plan.kv});
            const auto start = Clock::now();
            engine.forward(*s, ids);
            times.push_back(seconds_since(start));
        } while (times.size() < 3 && times.front() * double(times.size() + 1) < 10.0);
        const double t = lower_median(times);
        rate = double(n) / t;
        BenchMeasurement m;
        m.test = test;
        m.tokens = n;
        m.seconds = t;
        m.unit_us = t * 1e6;
        m.tokens_per_s = rate;
        m.note = fmt::format("backend cpu, {}; median of {}; last-token logits only", path, times.size());
        report(m);
    }

    constexpr int kWarmupSteps = 2;
    for (int64_t depth : plan.depths) {
        const int64_t steps = plan.decode_tokens;
        const std::string test = fmt::format("tg{}", steps);
        if (out_of_time(fmt::format("{} at depth {}", test, depth))) continue;
        bench_progress(fmt::format("{} at depth {}", test, depth));
        const std::unique_ptr<EngineSequence> s =
            engine.new_sequence({.max_positions = std::max<int64_t>(depth, 1) + kWarmupSteps + steps + 1, .kv_format = plan.kv});
        const auto fill_start = Clock::now();
        engine.forward(*s, random_ids(std::max<int64_t>(depth, 1), vocab, rng));
        const double fill_seconds = seconds_since(fill_start);
        SamplingParams greedy;
        greedy.temperature = 0.0f;
        Sampler sampler(greedy);
        TokenHistory history;
        const auto step = [&] {
            const int32_t id = engine.next_token(*s, sampler, history);
            const int32_t one[1] = {id};
            engine.forward(*s, one);
        };
        for (int i = 0; i < kWarmupSteps; ++i) step();
        const auto start = Clock::now();
        for (int64_t i = 0; i < steps; ++i) step();
        const double t = seconds_since(start);
        BenchMeasurement m;
        m.test = test;
        m.depth = depth;
        m.tokens = steps;
        m.seconds = t;
        m.unit_us = t / double(steps) * 1e6;
        m.tokens_per_s = double(steps) / t;
        // The step that consumes the token at position p reads the cache of p tokens: the middle step's.
        const DecodeTraffic traffic = cost.decode_traffic(std::max<int64_t>(depth, 1) + kWarmupSteps + steps / 2);
        m.bytes_per_token = double(traffic.total());
        m.gb_s = *m.bytes_per_token * *m.tokens_per_s / 1e9;
        m.pct_of_copy_bandwidth = 100.0 * *m.gb_s / cpu.copy_gb_s;
        m.note = fmt::format("backend cpu, {}; greedy steps, depth reached by prefill in {:.1f} s", path, fill_seconds);
        report(m);
    }
    return out;
}

}  // namespace deltabit::cli
