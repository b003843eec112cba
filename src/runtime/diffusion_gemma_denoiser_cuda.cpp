#include "runtime/diffusion_gemma_denoiser_cuda.h"

#if DELTABIT_HAVE_CUDA

#include "backend/cuda_buffer.h"

namespace deltabit {

int64_t diffusion_encoded_tokens(int64_t prompt_tokens, int64_t max_new_tokens, int64_t canvas_length) {
    const int64_t blocks = (max_new_tokens + canvas_length - 1) / canvas_length;
    return prompt_tokens + (blocks - 1) * canvas_length;
}

DiffusionGemmaDenoiserCuda::DiffusionGemmaDenoiserCuda(DiffusionGemmaCuda& model, int64_t capacity)
    : model_(model), cache_(model.new_cache(capacity)) {}

void DiffusionGemmaDenoiserCuda::reset(int64_t capacity) {
    if (capacity <= cache_.capacity) {
        cache_.clear();
        return;
    }
    // The old cache's kernels may still be queued: free it only once they are done.
    cuda::cuda_check(cudaStreamSynchronize(model_.stream()), "diffusion cache: drain before replacing");
    cache_ = DiffusionCacheCuda{};
    cache_ = model_.new_cache(capacity);
}

int64_t DiffusionGemmaDenoiserCuda::canvas_length() const { return model_.config().canvas_length; }
int64_t DiffusionGemmaDenoiserCuda::n_vocab() const { return model_.config().n_vocab; }

void DiffusionGemmaDenoiserCuda::encode(const int32_t* tokens, int64_t n, cudaStream_t stream) {
    host_.resize(size_t(n));
    cuda::cuda_check(cudaMemcpyAsync(host_.data(), tokens, size_t(n) * sizeof(int32_t), cudaMemcpyDeviceToHost, stream),
                     "diffusion encode: the block to encode");
    cuda::cuda_check(cudaStreamSynchronize(stream), "diffusion encode: the block to encode");
    model_.encode(cache_, host_);
}

void DiffusionGemmaDenoiserCuda::denoise(const int32_t* canvas, const float* self_conditioning, float* logits, cudaStream_t) {
    model_.denoise(cache_, canvas, canvas_length(), self_conditioning, logits);
}

}  // namespace deltabit

#endif  // DELTABIT_HAVE_CUDA
