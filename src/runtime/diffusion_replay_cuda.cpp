// replay_diffusion_cuda (runtime/diffusion_replay.h): the device loop run again from the record's seed,
// waiting after every step to hand it to the replay check. What makes it repeat bit for bit is the
// recorded run's own path: the same device loop, model and kernels (a step callback only adds waits and
// copies), the same seed drawing the same numbers.
#include "runtime/diffusion_replay.h"

#include "core/error.h"

#if DELTABIT_HAVE_CUDA
#include "models/diffusion_gemma_cuda.h"
#include "runtime/diffusion_gemma_denoiser_cuda.h"
#include "runtime/diffusion_generate_cuda.h"
#endif

namespace deltabit {

#if DELTABIT_HAVE_CUDA

DiffusionReplayResult replay_diffusion_cuda(const Model& model, const DiffusionRecord& record) {
    const int64_t L = model.config().canvas_length;
    // Before the upload and the cache: settings the loop refuses (an edited header) cost nothing.
    validate_diffusion_generation(record.settings, L, record.prompt, {});
    DiffusionGemmaCuda gpu(model);
    DiffusionGemmaDenoiserCuda denoiser(
        gpu, diffusion_encoded_tokens(int64_t(record.prompt.size()), record.settings.max_new_tokens, L));
    DiffusionReplayCheck check(record, /*compare_draws=*/true);
    cuda::DiffusionCudaRunOptions options;
    options.on_step = [&check](const DiffusionStep& s) { return check.step(s); };
    options.stream = gpu.stream();
    return check.finish(cuda::generate_diffusion_cuda(denoiser, record.prompt, record.settings, record.seed, options));
}

#else

DiffusionReplayResult replay_diffusion_cuda(const Model&, const DiffusionRecord&) {
    fail("replay: this build has no CUDA (configure with nvcc and -DDELTABIT_CUDA=ON)");
}

#endif

}  // namespace deltabit
