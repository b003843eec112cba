// Block-diffusion generation on the GPU (CUDA builds only): the block loop of runtime/diffusion_generate.h
// with the model's forward and the whole denoising step on the device (runtime/diffusion_step_cuda.h).
// Per step only device pointers and the temperature cross; the host waits once every `steps_per_sync`
// steps to read the early-stop flag, and once per block for the committed tokens. Steps enqueued past
// the stop cost their forward only: the step kernels see the flag and do nothing, so the result equals
// the CPU loop's whatever steps_per_sync is.
//
// Seeded as generate_diffusion with SeededDiffusionRandomness(seed): the same draws in the same order, so
// the same tokens and steps_per_block — up to the rounding cases listed in diffusion_step_cuda.h (a draw
// within rounding of a running-sum boundary, an entropy tie within rounding).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <functional>
#include <span>

#include "runtime/diffusion_generate.h"

namespace deltabit::cuda {

// What the loop needs from a model on the device (DiffusionGemmaDenoiserCuda is one): one sequence's
// cache behind encode and denoise, all on `stream`, device memory in and out.
class DiffusionDenoiserCuda {
public:
    virtual ~DiffusionDenoiserCuda() = default;
    virtual int64_t canvas_length() const = 0;
    virtual int64_t n_vocab() const = 0;
    // Appends tokens[n] (device) to the cache.
    virtual void encode(const int32_t* tokens, int64_t n, cudaStream_t stream) = 0;
    // logits[L][V] (device, softcapped, fp32) for canvas[L] (device), with the previous step's scaled logits
    // [L][V] (device) as self-conditioning, or null on a block's first step.
    virtual void denoise(const int32_t* canvas, const float* self_conditioning, float* logits, cudaStream_t stream) = 0;
};

// How one run goes, past the model, the prompt, the settings and the seed.
struct DiffusionCudaRunOptions {
    std::span<const int32_t> first_canvas;  // block 0's initial canvas; empty: drawn
    DiffusionBlockCallback on_block;        // each committed block, as the CPU loop's
    // Polled at every host sync point (every steps_per_sync steps, or every step with on_step): true
    // ends the run there, as a false from the CPU loop's step callback does — `stopped` set, the
    // unfinished block's steps the last entry of steps_per_block, its tokens not committed. Steps
    // enqueued since the last sync still run (at most steps_per_sync − 1 past the one that stopped).
    std::function<bool()> stop;
    // When set, the loop waits after every step and hands it the step as the CPU loop does
    // (DiffusionStep: the input canvas, the logits, both draws, acceptance and argmax, downloaded); a
    // false stops the run as `stop` does. For recording and replay: every step then costs a round trip
    // and a download of the logits [L][V]. Without it no step is synchronised or copied.
    DiffusionStepCallback on_step;
    int64_t steps_per_sync = 4;  // ignored (1) with on_step
    cudaStream_t stream = nullptr;
};

// Errors as generate_diffusion's, and for steps_per_sync < 1 or a canvas longer than kDiffusionMaxCanvas.
DiffusionGeneration generate_diffusion_cuda(DiffusionDenoiserCuda& model, std::span<const int32_t> prompt,
                                            const DiffusionGenerationConfig& config, uint64_t seed,
                                            const DiffusionCudaRunOptions& options = {});

}  // namespace deltabit::cuda
