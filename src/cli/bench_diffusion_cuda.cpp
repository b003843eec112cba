// The GPU target of the block-diffusion bench (cli/bench_diffusion.h): DiffusionGemmaCuda
// (models/diffusion_gemma_cuda.h) driven by the device block loop (runtime/diffusion_generate_cuda.h).
//
// Step time. The device loop runs its steps without a host round trip, so no host clock sees one step.
// The loop is run twice instead, at the plan's max_denoising_steps and at one step a block: the two runs
// encode the same prompt and blocks, and differ only by their extra steps, so
//   step = (time at max steps − time at one step) / (steps taken − blocks),
// every step but each block's first (the bench's definition), from the device loop as it runs.
#include "cli/bench_diffusion.h"

#if DELTABIT_HAVE_CUDA

#include "backend/cuda_buffer.h"
#include "backend/cuda_probe.h"
#include "models/diffusion_gemma_cuda.h"
#include "runtime/diffusion_gemma_denoiser_cuda.h"
#include "runtime/diffusion_generate_cuda.h"

#include <chrono>
#include <numeric>

namespace deltabit::cli {

namespace {

class CudaDiffusionTarget final : public DiffusionBenchTarget {
public:
    explicit CudaDiffusionTarget(const Model& model) : model_(model) {}
    std::string description() const override {
        return "cuda: " + cuda::device_summary() + "; step time from two runs (max steps, one step)";
    }
    const ModelConfig& config() const override { return model_.config(); }
    void encode_fresh(std::span<const int32_t> prompt) override {
        DiffusionCacheCuda cache = model_.new_cache(int64_t(prompt.size()));
        model_.encode(cache, prompt);
        cuda::cuda_check(cudaStreamSynchronize(model_.stream()), "diffusion bench: encode");
    }
    Run generate(std::span<const int32_t> prompt, const DiffusionGenerationConfig& settings, uint64_t seed) override {
        const auto timed = [&](const DiffusionGenerationConfig& g, double& seconds) {
            DiffusionGemmaDenoiserCuda denoiser(
                model_, diffusion_encoded_tokens(int64_t(prompt.size()), g.max_new_tokens, config().canvas_length));
            cuda::DiffusionCudaRunOptions options;
            options.stream = model_.stream();
            const auto start = std::chrono::steady_clock::now();
            DiffusionGeneration out = cuda::generate_diffusion_cuda(denoiser, prompt, g, seed, options);
            cuda::cuda_check(cudaStreamSynchronize(model_.stream()), "diffusion bench: loop");
            seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
            return out;
        };
        DiffusionGenerationConfig one_step = settings;
        one_step.max_denoising_steps = 1;
        double base_seconds = 0, seconds = 0;
        // The first run of the loop pays once what later runs do not (kernels CUDA loads lazily on first
        // use, first allocations): timed first, the one-step run took 32 ms longer than the run at max
        // steps on the tiny geometry (H100), and the step time came out negative. So one untimed run first.
        timed(one_step, base_seconds);
        timed(one_step, base_seconds);
        Run run;
        run.generation = timed(settings, seconds);
        run.seconds = seconds;
        const int64_t steps = std::accumulate(run.generation.steps_per_block.begin(), run.generation.steps_per_block.end(),
                                              int64_t(0));
        const int64_t extra = steps - int64_t(run.generation.steps_per_block.size());
        if (extra > 0) run.step_seconds.assign(size_t(extra), (seconds - base_seconds) / double(extra));
        return run;
    }

    double memory_gib() const override {
        size_t free = 0, total = 0;
        return cudaMemGetInfo(&free, &total) == cudaSuccess ? double(total - free) / (1024.0 * 1024.0 * 1024.0) : 0.0;
    }

private:
    DiffusionGemmaCuda model_;
};

}  // namespace

std::unique_ptr<DiffusionBenchTarget> cuda_diffusion_target(const Model& model) {
    return std::make_unique<CudaDiffusionTarget>(model);
}

}  // namespace deltabit::cli

#endif  // DELTABIT_HAVE_CUDA
