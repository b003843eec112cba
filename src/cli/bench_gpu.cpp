#include "cli/bench_gpu.h"

#if DELTABIT_HAVE_CUDA

#include "backend/cuda_buffer.h"
#include "backend/cuda_probe.h"
#include "core/error.h"
#include "core/half.h"
#include "core/non_finite_choice.h"

#include <fmt/format.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <random>
#include <thread>

namespace deltabit::cli {

namespace {

using cuda::cuda_check;
using Clock = BenchClock;

constexpr double kGiB = 1024.0 * 1024.0 * 1024.0;
constexpr int64_t kFillChunk = 4096;  // prompt tokens per forward call when prefilling to a depth
constexpr int kWarmupSteps = 2;       // steps that may run eagerly or capture the graph: not timed
constexpr int kBatchWarmupSteps = 3;  // a batched step: eager, then a capture for each DeltaNet parity

// Device-wide memory in use, sampled in the background; see bench_gpu.h.
class MemoryWatch {
public:
    MemoryWatch() : thread_([this] { loop(); }) {}
    ~MemoryWatch() {
        stop_ = true;
        thread_.join();
    }
    MemoryWatch(const MemoryWatch&) = delete;
    MemoryWatch& operator=(const MemoryWatch&) = delete;

    void set_polling(bool on) {
        sample();
        polling_ = on;
    }
    void restart() { peak_ = in_use(); }
    double peak_gib() {
        sample();
        return double(peak_.load()) / kGiB;
    }

private:
    static size_t in_use() {
        size_t free = 0, total = 0;
        return cudaMemGetInfo(&free, &total) == cudaSuccess ? total - free : 0;
    }
    void sample() {
        const size_t now = in_use();
        size_t seen = peak_.load();
        while (now > seen && !peak_.compare_exchange_weak(seen, now)) {
        }
    }
    void loop() {
        while (!stop_) {
            if (polling_) sample();
            std::this_thread::sleep_for(std::chrono::milliseconds(2));
        }
    }

    std::atomic<size_t> peak_{0};
    std::atomic<bool> polling_{true}, stop_{false};
    std::thread thread_;
};

std::vector<int32_t> random_ids(int64_t n, int64_t vocab, std::mt19937_64& rng) {
    std::uniform_int_distribution<int32_t> pick(0, int32_t(vocab - 1));
    std::vector<int32_t> ids(static_cast<size_t>(n));
    for (int32_t& id : ids) id = pick(rng);
    return ids;
}

// Writes `bytes` of random values, uniform in ±amplitude, into `buffer` from offset 0: f32 or IEEE half.
// One 16 MiB host pattern is generated and repeated — what the values are does not change the timing, only
// that they are finite and not all zero (zeros can run faster than real data: METHOD.md).
void fill_random(cuda::DeviceBuffer& buffer, size_t bytes, bool half, float amplitude, std::mt19937_64& rng) {
    const size_t element = half ? 2 : 4;
    std::vector<uint8_t> pattern(std::min<size_t>(bytes, size_t(16) << 20) / element * element);
    std::uniform_real_distribution<float> value(-amplitude, amplitude);
    for (size_t i = 0; i < pattern.size(); i += element) {
        const float v = value(rng);
        if (half) {
            const uint16_t h = float_to_half(v);
            std::memcpy(&pattern[i], &h, 2);
        } else {
            std::memcpy(&pattern[i], &v, 4);
        }
    }
    for (size_t offset = 0; offset < bytes && !pattern.empty(); offset += pattern.size())
        buffer.upload(pattern.data(), std::min(pattern.size(), bytes - offset), offset);
}

// Brings a fresh sequence to `depth` without running the model (bench_gpu.h, "Depth").
void fill_kv_side(CudaKvSide& side, int64_t depth, int64_t row, std::mt19937_64& rng) {
    // Keys leave k_norm and RoPE with about unit RMS per element: ±√3 uniform has RMS 1.
    if (side.view.element != cuda::KvElement::kivi4) {
        fill_random(side.data, size_t(depth * row) * cuda::kv_element_bytes(side.view.element),
                    side.view.element == cuda::KvElement::f16, 1.732f, rng);
        return;
    }
    // kivi4: every exact row, every code and group parameter (group minima near −√3, steps of 2√3/15).
    fill_random(side.data, side.data.bytes(), false, 1.732f, rng);
    fill_random(side.codes, side.codes.bytes(), true, 1.0f, rng);  // any bits are codes
    fill_random(side.min, side.min.bytes(), true, 1.732f, rng);
    fill_random(side.scale, side.scale.bytes(), true, 0.23f, rng);
}

void fill_state_synthetically(CudaSequenceState& state, const ModelConfig& c, int64_t depth, std::mt19937_64& rng) {
    for (int64_t l = 0; l < c.n_layer(); ++l) {
        CudaLayerState& s = state.layer(l);
        if (c.layers[size_t(l)] == LayerKind::full_attention) {
            fill_kv_side(s.k, depth, c.n_head_kv * c.head_dim, rng);
            fill_kv_side(s.v, depth, c.n_head_kv * c.head_dim, rng);
        } else {
            fill_random(s.conv[state.parity()], s.conv[state.parity()].bytes(), false, 1.0f, rng);
            fill_random(s.recurrent[state.parity()], s.recurrent[state.parity()].bytes(), false, 0.1f, rng);
        }
    }
    state.advance(depth);
}

class Bench {
public:
    Bench(CudaModel& model, const InferenceCost& cost, const BenchPlan& plan, const GpuProbe& gpu,
          std::vector<std::string>& notes)
        : model_(model), cost_(cost), plan_(plan), gpu_(gpu), notes_(notes), rng_(plan.seed), start_(Clock::now()) {}

    void warm_up() {
        CudaSequenceState state = model_.new_sequence(64 + kWarmupSteps + 2, plan_.kv);
        const float* logits = model_.forward_last(state, random_ids(64, vocab(), rng_));
        watch_.set_polling(false);  // no cudaMemGetInfo from another thread while a graph is captured
        for (int i = 0; i < kWarmupSteps + 1; ++i) logits = step(state, logits);
        cuda_check(cudaStreamSynchronize(model_.stream()), "warm-up");
        watch_.set_polling(true);
    }

    void prompts() {
        double rate = 0;  // tokens per second of the last prompt test
        for (int64_t n : plan_.prompt_lengths) {
            if (out_of_time(fmt::format("pp{}", n))) continue;
            if (rate > 0 && double(n) / rate > plan_.prompt_budget_s) {
                notes_.push_back(fmt::format("pp{} skipped: projected {:.0f} s at {:.0f} tok/s, over the {:.0f} s budget",
                                             n, double(n) / rate, rate, plan_.prompt_budget_s));
                bench_progress(notes_.back());
                continue;
            }
            bench_progress(fmt::format("pp{}: prefill of {} tokens", n, n));
            watch_.restart();
            const std::vector<int32_t> ids = random_ids(n, vocab(), rng_);
            std::vector<double> times;
            do {
                CudaSequenceState state = model_.new_sequence(n, plan_.kv);
                const auto start = Clock::now();
                model_.forward_last(state, ids);
                cuda_check(cudaStreamSynchronize(model_.stream()), "prompt");
                times.push_back(seconds_since(start));
            } while (times.size() < 3 && times.front() * double(times.size() + 1) < 10.0);
            const double t = lower_median(times);
            rate = double(n) / t;
            BenchMeasurement m;
            m.test = fmt::format("pp{}", n);
            m.tokens = n;
            m.seconds = t;
            m.unit_us = t * 1e6;
            m.tokens_per_s = rate;
            m.tflop_s = cost_.prefill_flops(0, n, 1) / t / 1e12;
            if (gpu_.bf16_peak_tflop_s > 0) m.pct_of_bf16_peak = 100.0 * *m.tflop_s / gpu_.bf16_peak_tflop_s;
            m.peak_memory_gib = watch_.peak_gib();
            m.note = fmt::format("median of {}; last-token logits only", times.size());
            report(m);
        }
        prompt_rate_ = rate;
    }

    // The first prompt length continuing a sequence `depth` tokens deep (llama-bench's pp512 at d32768), one
    // run. When the depth is reached by prefill, the fill's own rate is a row too (`fill`, depth = the
    // tokens filled): the average prompt rate from an empty sequence to that depth.
    void prompt_at(int64_t depth) {
        if (plan_.prompt_lengths.empty()) return;
        const int64_t n = plan_.prompt_lengths.front();
        const std::string name = fmt::format("pp{} at depth {}", n, depth);
        if (out_of_time(name)) return;
        bench_progress(name);
        watch_.restart();
        CudaSequenceState state = model_.new_sequence(depth + n, plan_.kv);
        const Reached reached = reach_depth(state, depth);
        if (reached.prefill_seconds > 0) {
            BenchMeasurement fill;
            fill.test = "fill";
            fill.depth = depth;
            fill.tokens = depth;
            fill.seconds = reached.prefill_seconds;
            fill.unit_us = reached.prefill_seconds * 1e6;
            fill.tokens_per_s = double(depth) / reached.prefill_seconds;
            fill.tflop_s = cost_.prefill_flops(0, depth, (depth + kFillChunk - 1) / kFillChunk) / reached.prefill_seconds / 1e12;
            if (gpu_.bf16_peak_tflop_s > 0) fill.pct_of_bf16_peak = 100.0 * *fill.tflop_s / gpu_.bf16_peak_tflop_s;
            fill.peak_memory_gib = watch_.peak_gib();
            fill.note = fmt::format("an empty sequence prefilled to depth {} in {}-token calls", depth, kFillChunk);
            report(fill);
        }
        const std::vector<int32_t> ids = random_ids(n, vocab(), rng_);
        const auto start = Clock::now();
        model_.forward_last(state, ids);
        cuda_check(cudaStreamSynchronize(model_.stream()), "prompt at depth");
        const double t = seconds_since(start);
        BenchMeasurement m;
        m.test = fmt::format("pp{}", n);
        m.depth = depth;
        m.tokens = n;
        m.seconds = t;
        m.unit_us = t * 1e6;
        m.tokens_per_s = double(n) / t;
        m.tflop_s = cost_.prefill_flops(depth, n, 1) / t / 1e12;
        if (gpu_.bf16_peak_tflop_s > 0) m.pct_of_bf16_peak = 100.0 * *m.tflop_s / gpu_.bf16_peak_tflop_s;
        m.peak_memory_gib = watch_.peak_gib();
        m.note = "one run; last-token logits only" + (reached.note.empty() ? "" : "; " + reached.note);
        report(m);
    }

    void first_tokens() {
        for (int64_t n : plan_.first_token_lengths) {
            if (out_of_time(fmt::format("ttft{}", n))) continue;
            bench_progress(fmt::format("ttft{}: first token after a {}-token prompt", n, n));
            watch_.restart();
            const std::vector<int32_t> ids = random_ids(n, vocab(), rng_);
            std::vector<double> times;
            for (int run = 0; run < 5; ++run) {
                CudaSequenceState state = model_.new_sequence(n + 1, plan_.kv);
                const auto start = Clock::now();
                model_.argmax(model_.forward_last(state, ids));
                times.push_back(seconds_since(start));
            }
            BenchMeasurement m;
            m.test = fmt::format("ttft{}", n);
            m.tokens = n;
            m.seconds = lower_median(times);
            m.unit_us = m.seconds * 1e6;
            m.peak_memory_gib = watch_.peak_gib();
            m.note = "median of 5; fresh sequence, prefill + GPU argmax";
            report(m);
        }
    }

    void decode_at(int64_t depth) {
        const int64_t steps = plan_.decode_tokens;
        if (out_of_time(fmt::format("tg{} at depth {}", steps, depth))) return;
        bench_progress(fmt::format("tg{} at depth {}", steps, depth));
        watch_.restart();
        CudaSequenceState state = model_.new_sequence(depth + kWarmupSteps + steps + 1, plan_.kv);
        const std::string fill = reach_depth(state, depth).note;

        const int32_t first[1] = {random_ids(1, vocab(), rng_)[0]};
        watch_.set_polling(false);  // decode allocates nothing after warm-up; captures happen in it
        const float* logits = model_.forward_last(state, first);
        for (int i = 0; i < kWarmupSteps; ++i) logits = step(state, logits);
        const CudaDecodeStats before = model_.decode_stats();
        const auto start = Clock::now();
        for (int64_t i = 0; i < steps; ++i) logits = step(state, logits);
        cuda_check(cudaStreamSynchronize(model_.stream()), "decode steps");
        const double t = seconds_since(start);
        watch_.set_polling(true);
        const CudaDecodeStats after = model_.decode_stats();

        // The timed steps consume positions depth + 3 .. depth + 130: count the traffic at about their middle.
        const DecodeTraffic traffic = cost_.decode_traffic(depth + kWarmupSteps + steps / 2);
        BenchMeasurement m;
        m.test = fmt::format("tg{}", steps);
        m.depth = depth;
        m.tokens = steps;
        m.seconds = t;
        m.unit_us = t / double(steps) * 1e6;
        m.tokens_per_s = double(steps) / t;
        m.bytes_per_token = double(traffic.total());
        m.gb_s = *m.bytes_per_token * *m.tokens_per_s / 1e9;
        m.pct_of_copy_bandwidth = 100.0 * *m.gb_s / gpu_.copy_gb_s;
        m.peak_memory_gib = watch_.peak_gib();
        m.note = fmt::format("graph replays {}/{}, run ahead {}; MB/token weights {:.1f} + KV {:.1f} + state {:.1f}{}",
                             after.graph_replays - before.graph_replays, steps,
                             after.run_ahead_steps - before.run_ahead_steps, double(traffic.weight_bytes) / 1e6,
                             double(traffic.kv_bytes) / 1e6, double(traffic.state_bytes) / 1e6,
                             fill.empty() ? "" : "; " + fill);
        report(m);
    }

    // B sequences at depth 0 stepped together (forward_batch), each row's greedy token chosen on the GPU.
    void decode_batched(int64_t B) {
        const int64_t steps = plan_.decode_tokens;
        const std::string name = fmt::format("tg{}b{}", steps, B);
        if (out_of_time(name)) return;
        bench_progress(name);
        watch_.restart();
        std::vector<CudaSequenceState> states;
        std::vector<CudaSequenceState*> rows;
        states.reserve(size_t(B));
        for (int64_t i = 0; i < B; ++i) states.push_back(model_.new_sequence(kBatchWarmupSteps + steps + 2, plan_.kv));
        for (CudaSequenceState& s : states) rows.push_back(&s);
        const int64_t V = vocab();
        cuda::DeviceBuffer scratch(cuda::argmax_scratch_bytes(V)), d_ids(size_t(B) * sizeof(int32_t));
        std::vector<int32_t> ids = random_ids(B, V, rng_);
        // Every row's argmax on the stream, one copy of the B ids back: what a batched greedy chooser costs.
        const auto choose = [&](const float* logits) {
            for (int64_t i = 0; i < B; ++i)
                cuda::argmax(logits + i * V, V, scratch.get(), d_ids.get<int32_t>() + i, model_.stream());
            cuda_check(cudaMemcpyAsync(ids.data(), d_ids.get(), size_t(B) * sizeof(int32_t), cudaMemcpyDeviceToHost,
                                       model_.stream()), "download batch ids");
            cuda_check(cudaStreamSynchronize(model_.stream()), "batch ids");
            for (int32_t id : ids) check_finite(id);
        };
        // An eager step, then one capture per DeltaNet parity (CudaModel::forward_batch): the timed steps replay.
        for (int i = 0; i < kBatchWarmupSteps; ++i) choose(model_.forward_batch(rows, ids));
        const CudaDecodeStats before = model_.decode_stats();
        const auto start = Clock::now();
        for (int64_t i = 0; i < steps; ++i) choose(model_.forward_batch(rows, ids));
        const double t = seconds_since(start);
        const int64_t replays = model_.decode_stats().batch_graph_replays - before.batch_graph_replays;

        const DecodeTraffic traffic = cost_.decode_traffic(kBatchWarmupSteps + steps / 2);
        const double step_bytes = double(traffic.weight_bytes) + double(B) * double(traffic.kv_bytes + traffic.state_bytes);
        BenchMeasurement m;
        m.test = name;
        m.tokens = steps * B;
        m.seconds = t;
        m.unit_us = t / double(steps) * 1e6;
        m.tokens_per_s = double(steps * B) / t;
        m.bytes_per_token = step_bytes / double(B);
        m.gb_s = step_bytes * double(steps) / t / 1e9;
        m.pct_of_copy_bandwidth = 100.0 * *m.gb_s / gpu_.copy_gb_s;
        m.peak_memory_gib = watch_.peak_gib();
        m.note = fmt::format("{} sequences a step ({:.0f} us a step), graph replays {}/{}; MB/step weights {:.1f} + KV "
                             "and state {:.1f}", B, m.unit_us, replays, steps, double(traffic.weight_bytes) / 1e6,
                             double(B) * double(traffic.kv_bytes + traffic.state_bytes) / 1e6);
        report(m);
    }

    std::vector<BenchMeasurement> take() { return std::move(results_); }

private:
    int64_t vocab() const { return model_.config().n_vocab; }

    bool out_of_time(const std::string& test) {
        const double elapsed = seconds_since(start_);
        if (elapsed <= plan_.max_seconds) return false;
        notes_.push_back(fmt::format("{} skipped: {:.0f} s of measuring already, over --max-seconds {:.0f}", test,
                                     elapsed, plan_.max_seconds));
        bench_progress(notes_.back());
        return true;
    }

    // Keeps the figure, and shows it at once on stderr: a run cut short still leaves what it measured.
    void report(const BenchMeasurement& m) {
        std::string figures = fmt::format("{:.4g} s", m.seconds);
        if (m.tokens_per_s) figures += fmt::format(", {:.1f} tok/s", *m.tokens_per_s);
        if (m.tflop_s) figures += fmt::format(", {:.2f} TFLOP/s", *m.tflop_s);
        if (m.pct_of_copy_bandwidth) figures += fmt::format(", {:.0f} GB/s = {:.1f}% of copy", *m.gb_s, *m.pct_of_copy_bandwidth);
        bench_progress(fmt::format("  {} (depth {}): {}; peak {:.2f} GiB", m.test, m.depth, figures, m.peak_memory_gib));
        results_.push_back(m);
    }

    // One greedy decode step, as the engine takes it: the argmax of the last logits starts the step that
    // consumes it (run-ahead), or, before the step's graph exists, argmax then forward. Returns the
    // step's logits.
    // Logits that are not finite (the argmax's report) would make the figures meaningless: stop, saying so.
    const float* step(CudaSequenceState& state, const float* logits) {
        const float* next = nullptr;
        if (const std::optional<int32_t> id = model_.argmax_and_step(state, logits, &next)) {
            check_finite(*id);
            return next;
        }
        const int32_t id[1] = {model_.argmax(logits)};
        check_finite(id[0]);
        return model_.forward_last(state, id);
    }
    static void check_finite(int32_t id) {
        if (is_non_finite_choice(id))
            fail("bench: the random model's logit for token {} is not finite; nothing to measure", non_finite_index(id));
    }

    // How a sequence reached its depth: the rows' note, and the prefill's seconds (0 when filled
    // synthetically or at depth 0).
    struct Reached {
        std::string note;
        double prefill_seconds = 0;
    };

    Reached reach_depth(CudaSequenceState& state, int64_t depth) {
        if (depth == 0) return {};
        const double projected = prompt_rate_ > 0 ? double(depth) / prompt_rate_ : 0.0;
        const bool by_prefill = plan_.fill == DepthFill::prefill ||
                                (plan_.fill == DepthFill::automatic && prompt_rate_ > 0 && projected <= plan_.fill_budget_s);
        if (!by_prefill) {
            fill_state_synthetically(state, model_.config(), depth, rng_);
            const std::string why =
                plan_.fill == DepthFill::synthetic ? "as asked (--fill synthetic)"
                : prompt_rate_ > 0 ? fmt::format("prefill projected {:.0f} s > {:.0f} s budget", projected, plan_.fill_budget_s)
                                   : "no prompt rate measured";
            bench_progress(fmt::format("  depth {} filled synthetically ({})", depth, why));
            return {fmt::format("depth filled synthetically ({})", why), 0.0};
        }
        const auto start = Clock::now();
        for (int64_t done = 0; done < depth; done += kFillChunk)
            model_.forward_last(state, random_ids(std::min(kFillChunk, depth - done), vocab(), rng_));
        cuda_check(cudaStreamSynchronize(model_.stream()), "prefill to depth");
        const double t = seconds_since(start);
        bench_progress(fmt::format("  depth {} reached by prefill in {:.1f} s ({:.0f} tok/s)", depth, t, double(depth) / t));
        return {fmt::format("depth by prefill in {}-token calls: {:.1f} s, {:.0f} tok/s", kFillChunk, t, double(depth) / t),
                t};
    }

    CudaModel& model_;
    const InferenceCost& cost_;
    const BenchPlan& plan_;
    const GpuProbe& gpu_;
    std::vector<std::string>& notes_;
    std::mt19937_64 rng_;
    MemoryWatch watch_;
    Clock::time_point start_;
    double prompt_rate_ = 0;
    std::vector<BenchMeasurement> results_;
};

}  // namespace

GpuProbe probe_gpu() {
    if (cuda::device_count() == 0)
        fail("bench: no CUDA GPU is visible (cudaGetDeviceCount found none); give --backend cpu to measure the CPU");
    bench_progress("measuring the device-to-device copy bandwidth");
    GpuProbe probe;
    cudaDeviceProp prop{};
    cuda_check(cudaGetDeviceProperties(&prop, 0), "device properties");
    probe.name = prop.name;
    probe.summary = cuda::device_summary();
    if (probe.name.find("H200") != std::string::npos) probe.bf16_peak_tflop_s = kH200Bf16TensorPeakTflops;

    cudaStream_t stream{};
    cuda_check(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), "stream");
    cudaEvent_t start{}, stop{};
    cuda_check(cudaEventCreate(&start), "event");
    cuda_check(cudaEventCreate(&stop), "event");
    {
        const size_t bytes = size_t(1) << 30;  // far past the L2 (60 MB on an H200)
        cuda::DeviceBuffer a(bytes), b(bytes);
        cuda_check(cudaMemset(a.get(), 0x5a, bytes), "memset");
        constexpr int kCopies = 10;
        std::vector<double> ms;
        for (int run = 0; run < 6; ++run) {  // the first is a warm-up
            cuda_check(cudaEventRecord(start, stream), "record");
            for (int i = 0; i < kCopies; ++i)
                cuda_check(cudaMemcpyAsync(b.get(), a.get(), bytes, cudaMemcpyDeviceToDevice, stream), "copy");
            cuda_check(cudaEventRecord(stop, stream), "record");
            cuda_check(cudaEventSynchronize(stop), "sync");
            float elapsed = 0;
            cuda_check(cudaEventElapsedTime(&elapsed, start, stop), "elapsed");
            if (run > 0) ms.push_back(elapsed);
        }
        probe.copy_gb_s = 2.0 * double(bytes) * kCopies / (lower_median(ms) * 1e-3) / 1e9;  // read + write
    }
    probe.stream_floor = cuda::measure_stream_floor(size_t(12) << 20, 9, stream);
    probe.dependent_launch_us = cuda::measure_dependent_launch_us(256, 9, stream);
    cudaEventDestroy(start);
    cudaEventDestroy(stop);
    cudaStreamDestroy(stream);
    return probe;
}

std::vector<BenchMeasurement> run_gpu_bench(CudaModel& model, const InferenceCost& cost, const BenchPlan& plan,
                                            const GpuProbe& gpu, std::vector<std::string>& notes,
                                            std::string& decode_path) {
    Bench bench(model, cost, plan, gpu, notes);
    bench_progress("warm-up (module load, arenas, decode graph capture)");
    bench.warm_up();
    bench.prompts();
    for (int64_t depth : plan.prompt_depths) bench.prompt_at(depth);
    bench.first_tokens();
    for (int64_t depth : plan.depths) bench.decode_at(depth);
    for (int64_t b : plan.batch_sizes) bench.decode_batched(b);
    const CudaDecodeStats s = model.decode_stats();
    decode_path = fmt::format("{} graph replays, {} captures, {} eager steps, {} prompt chunks over the run; seams {}",
                              s.graph_replays, s.graph_captures, s.eager_steps, s.prompt_chunks,
                              s.folded_seams ? "folded into the GEMVs" : "as kernels");
    if (s.step_kernels > 0) decode_path += fmt::format("; {} kernels a step", s.step_kernels);
    decode_path += fmt::format("; scratch: prompt {:.0f} MiB, decode {:.1f} MiB, {} cudaMallocs",
                               s.prompt_arena_bytes / 1048576.0, s.decode_arena_bytes / 1048576.0, s.arena_allocations);
    return bench.take();
}

}  // namespace deltabit::cli

#endif  // DELTABIT_HAVE_CUDA
