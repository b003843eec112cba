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
#include <span>

#include "runtime/diffusion_generate.h"

namespace deltabit::cuda {

// What the loop needs from a model on the device (DiffusionGemmaCuda is to be one): one sequence's cache
// behind encode and denoise, all on `stream`, device memory in and out.
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

// Errors as generate_diffusion's, and for steps_per_sync < 1 or a canvas longer than kDiffusionMaxCanvas.
DiffusionGeneration generate_diffusion_cuda(DiffusionDenoiserCuda& model, std::span<const int32_t> prompt,
                                            const DiffusionGenerationConfig& config, uint64_t seed,
                                            std::span<const int32_t> first_canvas = {},
                                            const DiffusionBlockCallback& on_block = {}, int64_t steps_per_sync = 4,
                                            cudaStream_t stream = nullptr);

}  // namespace deltabit::cuda
