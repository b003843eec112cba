// generate_diffusion_cuda (runtime/diffusion_generate_cuda.h) against the CPU loop generate_diffusion with
// SeededDiffusionRandomness of the same seed, on a toy denoiser whose logits both loops get from one host
// function: the same tokens, steps_per_block and EOS stop for steps_per_sync 1, 3 and past N (the whole
// block enqueued before the first wait), with and without a first canvas. The toy's logits depend on the
// canvas, the self-conditioning input and what was encoded, so a wrong canvas, a missing self-conditioning
// step, a committed block not encoded or a draw out of order changes the tokens. The run options' hooks:
// the step callback sees the CPU loop's steps, and `stop` (or the step callback) ends a run as the CPU
// loop's step callback does.
#include <gtest/gtest.h>

#include "runtime/diffusion_generate.h"

#include <cmath>
#include <cstdint>
#include <vector>

#ifndef DELTABIT_HAVE_CUDA
TEST(DiffusionGenerateCuda, SkippedWithoutCuda) { GTEST_SKIP() << "built without CUDA"; }
#else

#include "backend/cuda_buffer.h"
#include "op_parity_cuda.h"
#include "runtime/diffusion_generate_cuda.h"

namespace deltabit {
namespace {

// The toy model: position i wants token (7·i + tokens encoded so far) mod V, by a spike over hashed noise
// in [−2, 2] of 8 to 16 (by i mod 4: entropies spread, so acceptance takes a few more positions each step)
// or 18 where the canvas already holds it (entropy near 0: kept), plus 1/20 of the self-conditioning
// logit. On the CPU with seed 2024, N = 12: blocks stop after 10, 10, 11 steps; with the first canvas
// and EOS: 3, then 10 and the EOS stop.
struct ToyModel {
    int64_t L, V;
    int64_t encoded = 0;
    uint64_t encoded_hash = 0;  // every token encoded, in order: a block encoded wrong changes the noise

    void encode(std::span<const int32_t> tokens) {
        for (int32_t t : tokens) encoded_hash = (encoded_hash ^ uint64_t(uint32_t(t))) * 0x100000001b3ull;
        encoded += int64_t(tokens.size());
    }
    int32_t target(int64_t i) const { return int32_t((7 * i + encoded) % V); }
    std::vector<float> logits(std::span<const int32_t> canvas, std::span<const float> self_conditioning) const {
        std::vector<float> x(size_t(L * V));
        for (int64_t i = 0; i < L; ++i)
            for (int64_t v = 0; v < V; ++v) {
                uint64_t h = (encoded_hash + uint64_t(i * V + v)) * 0x9e3779b97f4a7c15ull;
                h ^= h >> 29;
                float value = 4.0f * (float(h % 10007) / 10007.0f - 0.5f);
                if (v == target(i)) value += canvas[size_t(i)] == target(i) ? 18.0f : 8.0f + 8.0f * float(i % 4) / 3.0f;
                if (!self_conditioning.empty()) value += 0.05f * self_conditioning[size_t(i * V + v)];
                x[size_t(i * V + v)] = value;
            }
        return x;
    }
};

class ToyDenoiser : public DiffusionDenoiser {
public:
    ToyDenoiser(int64_t L, int64_t V) : toy_{L, V} {}
    int64_t canvas_length() const override { return toy_.L; }
    int64_t n_vocab() const override { return toy_.V; }
    void encode(std::span<const int32_t> tokens) override { toy_.encode(tokens); }
    std::vector<float> denoise(std::span<const int32_t> canvas, std::span<const float> sc) override { return toy_.logits(canvas, sc); }

private:
    ToyModel toy_;
};

// The same toy on the device: it copies through the host (a test stand-in; the real forward stays on the
// device), so the logits are the CPU's bit for bit.
class ToyDenoiserCuda : public cuda::DiffusionDenoiserCuda {
public:
    ToyDenoiserCuda(int64_t L, int64_t V) : toy_{L, V} {}
    int64_t canvas_length() const override { return toy_.L; }
    int64_t n_vocab() const override { return toy_.V; }
    void encode(const int32_t* tokens, int64_t n, cudaStream_t stream) override {
        toy_.encode(download<int32_t>(tokens, size_t(n), stream));
    }
    void denoise(const int32_t* canvas, const float* sc, float* logits, cudaStream_t stream) override {
        ++passes;
        const std::vector<int32_t> c = download<int32_t>(canvas, size_t(toy_.L), stream);
        const std::vector<float> s = sc ? download<float>(sc, size_t(toy_.L * toy_.V), stream) : std::vector<float>{};
        const std::vector<float> x = toy_.logits(c, s);
        cuda::cuda_check(cudaMemcpyAsync(logits, x.data(), x.size() * sizeof(float), cudaMemcpyHostToDevice, stream), "toy logits");
        cuda::cuda_check(cudaStreamSynchronize(stream), "toy logits");
    }
    int64_t passes = 0;

private:
    template <typename T>
    static std::vector<T> download(const T* device, size_t n, cudaStream_t stream) {
        std::vector<T> host(n);
        cuda::cuda_check(cudaMemcpyAsync(host.data(), device, n * sizeof(T), cudaMemcpyDeviceToHost, stream), "toy read");
        cuda::cuda_check(cudaStreamSynchronize(stream), "toy read");
        return host;
    }
    ToyModel toy_;
};

struct Stream {
    cudaStream_t stream = nullptr;
    Stream() { cuda::cuda_check(cudaStreamCreate(&stream), "stream"); }
    ~Stream() { cudaStreamDestroy(stream); }
};

void check_against_cpu(const DiffusionGenerationConfig& g, std::span<const int32_t> first_canvas, const char* what) {
    SCOPED_TRACE(what);
    const int64_t L = 64, V = 1000;
    const std::vector<int32_t> prompt = {5, 17, 99, 3};
    const uint64_t seed = 2024;
    ToyDenoiser cpu_model(L, V);
    SeededDiffusionRandomness random(seed);
    const DiffusionGeneration want = generate_diffusion(cpu_model, prompt, g, random, first_canvas);
    int early = 0;
    for (int64_t steps : want.steps_per_block) early += steps < g.max_denoising_steps;
    ASSERT_GT(early, 0) << "the toy should stop some block early, or the flag goes untested";
    for (int64_t steps_per_sync : {int64_t(1), int64_t(3), g.max_denoising_steps + 5}) {
        ToyDenoiserCuda gpu_model(L, V);
        Stream s;
        std::vector<int64_t> streamed;
        cuda::DiffusionCudaRunOptions options;
        options.first_canvas = first_canvas;
        options.on_block = [&](std::span<const int32_t>, int64_t steps) { streamed.push_back(steps); };
        options.steps_per_sync = steps_per_sync;
        options.stream = s.stream;
        const DiffusionGeneration got = cuda::generate_diffusion_cuda(gpu_model, prompt, g, seed, options);
        EXPECT_EQ(got.tokens, want.tokens) << "steps_per_sync " << steps_per_sync;
        EXPECT_EQ(got.steps_per_block, want.steps_per_block) << "steps_per_sync " << steps_per_sync;
        EXPECT_EQ(got.finished, want.finished);
        EXPECT_EQ(streamed, want.steps_per_block);
        // Forwards past the stop: at most steps_per_sync − 1 per block (the rest of the last batch).
        int64_t run = 0;
        for (int64_t steps : want.steps_per_block) run += steps;
        EXPECT_GE(gpu_model.passes, run);
        EXPECT_LE(gpu_model.passes, run + int64_t(want.steps_per_block.size()) * (steps_per_sync - 1));
        std::printf("  %s, steps_per_sync %lld: %zu blocks, steps %s, %lld forwards for %lld steps\n", what,
                    (long long)steps_per_sync, got.steps_per_block.size(),
                    [&] {
                        std::string t;
                        for (int64_t x : got.steps_per_block) t += std::to_string(x) + " ";
                        return t;
                    }().c_str(),
                    (long long)gpu_model.passes, (long long)run);
    }
}

TEST(DiffusionGenerateCuda, MatchesTheCpuLoop) {
    DELTABIT_REQUIRE_GPU();
    DiffusionGenerationConfig g;
    g.max_new_tokens = 3 * 64;
    g.max_denoising_steps = 12;
    check_against_cpu(g, {}, "three blocks");
}

TEST(DiffusionGenerateCuda, MatchesTheCpuLoopWithAFirstCanvasAndEos) {
    DELTABIT_REQUIRE_GPU();
    DiffusionGenerationConfig g;
    g.max_new_tokens = 3 * 64;
    g.max_denoising_steps = 12;
    g.stability_threshold = 2;
    // Block 1 (encoded: the prompt's 4 tokens and block 0's 64) wants 7·10 + 68 = 138 at position 10.
    g.eos_ids = {138};
    g.pad_id = 0;
    std::vector<int32_t> first(64);
    for (size_t i = 0; i < first.size(); ++i) first[i] = int32_t((7 * i + 4) % 1000);  // block 0's targets
    check_against_cpu(g, first, "a first canvas, EOS in block 1");
}

// A step as the loops hand it over, copied out of the callback's spans.
struct SeenStep {
    int64_t block, step;
    std::vector<int32_t> canvas, sampled, noise, argmax;
    std::vector<uint8_t> accepted;
    std::vector<float> logits;
    bool operator==(const SeenStep&) const = default;
};
SeenStep seen(const DiffusionStep& s) {
    return {s.block, s.step, {s.canvas.begin(), s.canvas.end()}, {s.sampled.begin(), s.sampled.end()},
            {s.noise.begin(), s.noise.end()}, {s.argmax.begin(), s.argmax.end()}, {s.accepted.begin(), s.accepted.end()},
            {s.logits.begin(), s.logits.end()}};
}

DiffusionGenerationConfig three_blocks() {
    DiffusionGenerationConfig g;
    g.max_new_tokens = 3 * 64;
    g.max_denoising_steps = 12;
    return g;
}

// The step callback (--record's path) sees every step as the CPU loop hands it over — the step's input
// canvas (not the next one, which the device step writes in place), the toy's logits, both draws,
// acceptance and argmax — with one forward per step (it waits after each), and the result unchanged.
TEST(DiffusionGenerateCuda, StepCallbackSeesTheCpuLoopsSteps) {
    DELTABIT_REQUIRE_GPU();
    const DiffusionGenerationConfig g = three_blocks();
    const std::vector<int32_t> prompt = {5, 17, 99, 3};
    ToyDenoiser cpu_model(64, 1000);
    SeededDiffusionRandomness random(2024);
    std::vector<SeenStep> want;
    const DiffusionGeneration want_out = generate_diffusion(cpu_model, prompt, g, random, {}, {}, [&](const DiffusionStep& s) {
        want.push_back(seen(s));
        return true;
    });
    ToyDenoiserCuda gpu_model(64, 1000);
    Stream stream;
    std::vector<SeenStep> got;
    cuda::DiffusionCudaRunOptions options;
    options.on_step = [&](const DiffusionStep& s) {
        got.push_back(seen(s));
        return true;
    };
    options.steps_per_sync = 5;  // ignored with a step callback
    options.stream = stream.stream;
    const DiffusionGeneration got_out = cuda::generate_diffusion_cuda(gpu_model, prompt, g, 2024, options);
    EXPECT_EQ(got_out.tokens, want_out.tokens);
    EXPECT_EQ(got_out.steps_per_block, want_out.steps_per_block);
    ASSERT_EQ(got.size(), want.size());
    for (size_t i = 0; i < got.size(); ++i) EXPECT_TRUE(got[i] == want[i]) << "step " << i + 1 << " differs";
    EXPECT_EQ(gpu_model.passes, int64_t(want.size()));
}

// `stop`, polled at each sync, ends the run as a false from the CPU loop's step callback after the same
// steps: `stopped`, the unfinished block's steps last, its tokens not committed nor streamed. So does a
// false from the step callback.
TEST(DiffusionGenerateCuda, StopEndsTheRunAtASyncPointAsTheCpuLoopStops) {
    DELTABIT_REQUIRE_GPU();
    const DiffusionGenerationConfig g = three_blocks();
    const std::vector<int32_t> prompt = {5, 17, 99, 3};
    ToyDenoiser full_model(64, 1000);
    SeededDiffusionRandomness full_random(2024);
    const DiffusionGeneration full = generate_diffusion(full_model, prompt, g, full_random);
    ASSERT_EQ(full.steps_per_block.size(), 3u);
    ASSERT_GT(full.steps_per_block[1], 3);

    for (const bool through_step_callback : {false, true}) {
        SCOPED_TRACE(through_step_callback ? "the step callback" : "stop");
        // Stop at block 1's third step: every sync is one step apart with steps_per_sync 1.
        const int64_t stop_after = full.steps_per_block[0] + 3;
        ToyDenoiser cpu_model(64, 1000);
        SeededDiffusionRandomness random(2024);
        int64_t cpu_steps = 0;
        const DiffusionGeneration want = generate_diffusion(cpu_model, prompt, g, random, {}, {},
                                                            [&](const DiffusionStep&) { return ++cpu_steps < stop_after; });
        ASSERT_TRUE(want.stopped);
        ToyDenoiserCuda gpu_model(64, 1000);
        Stream stream;
        int64_t polls = 0, blocks = 0;
        cuda::DiffusionCudaRunOptions options;
        options.on_block = [&](std::span<const int32_t>, int64_t) { ++blocks; };
        if (through_step_callback) options.on_step = [&](const DiffusionStep&) { return ++polls < stop_after; };
        else options.stop = [&] { return ++polls >= stop_after; };
        options.steps_per_sync = 1;
        options.stream = stream.stream;
        const DiffusionGeneration got = cuda::generate_diffusion_cuda(gpu_model, prompt, g, 2024, options);
        EXPECT_TRUE(got.stopped);
        EXPECT_FALSE(got.finished);
        EXPECT_EQ(got.steps_per_block, want.steps_per_block);
        EXPECT_EQ(got.steps_per_block, (std::vector<int64_t>{full.steps_per_block[0], 3}));
        EXPECT_EQ(got.tokens, want.tokens);
        EXPECT_EQ(got.tokens.size(), 64u);
        EXPECT_EQ(blocks, 1);
        EXPECT_EQ(polls, stop_after);
        EXPECT_EQ(gpu_model.passes, stop_after);  // nothing runs past the stop
    }

    // With steps_per_sync 5 the first poll comes after five steps: stopped there, five steps counted.
    ToyDenoiserCuda gpu_model(64, 1000);
    Stream stream;
    cuda::DiffusionCudaRunOptions options;
    options.stop = [] { return true; };
    options.steps_per_sync = 5;
    options.stream = stream.stream;
    const DiffusionGeneration got = cuda::generate_diffusion_cuda(gpu_model, prompt, g, 2024, options);
    EXPECT_TRUE(got.stopped);
    EXPECT_TRUE(got.tokens.empty());
    EXPECT_EQ(got.steps_per_block, std::vector<int64_t>{5});
    EXPECT_EQ(gpu_model.passes, 5);
}

TEST(DiffusionGenerateCuda, RefusesBadSettingsBeforeRunning) {
    DELTABIT_REQUIRE_GPU();
    ToyDenoiserCuda model(64, 1000);
    const std::vector<int32_t> prompt = {1};
    DiffusionGenerationConfig g;
    cuda::DiffusionCudaRunOptions no_sync;
    no_sync.steps_per_sync = 0;
    EXPECT_THROW(cuda::generate_diffusion_cuda(model, prompt, g, 1, no_sync), Error);
    g.max_denoising_steps = 0;
    EXPECT_THROW(cuda::generate_diffusion_cuda(model, prompt, g, 1), Error);
    EXPECT_EQ(model.passes, 0);
}

}  // namespace
}  // namespace deltabit

#endif  // DELTABIT_HAVE_CUDA
