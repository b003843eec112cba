// DiffusionGemmaCuda (models/diffusion_gemma_cuda.h) with one sequence's cache, as the device block loop's
// denoiser (runtime/diffusion_generate_cuda.h): what DiffusionRunner, `deltabit replay` and the bench run.
// Here, not beside DiffusionGemmaCuda, because the loop's interface lives in runtime/, above models/.
// CUDA builds only.
#pragma once

#if DELTABIT_HAVE_CUDA

#include "models/diffusion_gemma_cuda.h"
#include "runtime/diffusion_generate_cuda.h"

#include <cstdint>
#include <vector>

namespace deltabit {

// The tokens a generation encodes: the prompt, then each committed block but the last (the loop never
// encodes the block it ends on), with max_new_tokens rounded up to whole blocks as the loop does.
int64_t diffusion_encoded_tokens(int64_t prompt_tokens, int64_t max_new_tokens, int64_t canvas_length);

class DiffusionGemmaDenoiserCuda final : public cuda::DiffusionDenoiserCuda {
public:
    // A cache for up to `capacity` encoded tokens (DiffusionGemmaCuda::new_cache).
    DiffusionGemmaDenoiserCuda(DiffusionGemmaCuda& model, int64_t capacity);

    // Empties the cache for a new sequence of up to `capacity` encoded tokens: cleared in place when it
    // holds that many (no allocation), else replaced (the old one freed first, so both never coexist).
    void reset(int64_t capacity);
    const DiffusionCacheCuda& cache() const { return cache_; }

    int64_t canvas_length() const override;
    int64_t n_vocab() const override;
    // The model encodes host ids (checked against the vocabulary): one copy and one wait a block.
    void encode(const int32_t* tokens, int64_t n, cudaStream_t stream) override;
    // On the model's own stream (DiffusionGemmaCuda::stream(); the loop must be run on it).
    void denoise(const int32_t* canvas, const float* self_conditioning, float* logits, cudaStream_t stream) override;

private:
    DiffusionGemmaCuda& model_;
    DiffusionCacheCuda cache_;
    std::vector<int32_t> host_;
};

}  // namespace deltabit

#endif  // DELTABIT_HAVE_CUDA
