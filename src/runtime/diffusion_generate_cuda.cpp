// generate_diffusion_cuda (runtime/diffusion_generate_cuda.h): the order of runtime/diffusion_generate.cpp,
// with DiffusionStepCuda doing the step and the host reading only the flag and the committed block.
#include "core/error.h"

#if DELTABIT_HAVE_CUDA
#include "backend/cuda_buffer.h"
#include "runtime/diffusion_generate_cuda.h"
#include "runtime/diffusion_step_cuda.h"

#include <algorithm>
#include <vector>

namespace deltabit::cuda {

DiffusionGeneration generate_diffusion_cuda(DiffusionDenoiserCuda& model, std::span<const int32_t> prompt,
                                            const DiffusionGenerationConfig& g, uint64_t seed,
                                            std::span<const int32_t> first_canvas, const DiffusionBlockCallback& on_block,
                                            int64_t steps_per_sync, cudaStream_t stream) {
    const int64_t L = model.canvas_length(), V = model.n_vocab(), N = g.max_denoising_steps;
    validate_diffusion_generation(g, L, prompt, first_canvas);
    if (steps_per_sync < 1) fail("diffusion generate (CUDA): steps_per_sync must be at least 1 (found {})", steps_per_sync);
    const int64_t n_blocks = (g.max_new_tokens + L - 1) / L;

    DiffusionStepCuda step(L, V, DiffusionStepSettings{g.entropy_bound, g.stability_threshold, g.confidence_threshold, g.eos_ids, g.pad_id},
                           seed);
    DeviceBuffer prompt_tokens(prompt.size() * sizeof(int32_t)), first(first_canvas.size() * sizeof(int32_t));
    DeviceBuffer canvas(size_t(L) * sizeof(int32_t)), committed(size_t(L) * sizeof(int32_t));
    DeviceBuffer logits(size_t(L) * size_t(V) * sizeof(float));
    prompt_tokens.upload(prompt.data(), prompt.size() * sizeof(int32_t));
    if (!first_canvas.empty()) first.upload(first_canvas.data(), first_canvas.size() * sizeof(int32_t));

    DiffusionGeneration out;
    out.pad_id = g.pad_id;
    model.encode(prompt_tokens.get<int32_t>(), int64_t(prompt.size()), stream);
    std::vector<int32_t> block(static_cast<size_t>(L));
    for (int64_t b = 0; b < n_blocks; ++b) {
        if (b > 0) model.encode(committed.get<int32_t>(), L, stream);  // the last block, pad-replaced
        step.begin_block(canvas.get<int32_t>(), b == 0 && !first_canvas.empty() ? first.get<int32_t>() : nullptr, stream);
        for (int64_t s = N; s >= 1;) {
            const int64_t stop_at = std::max<int64_t>(s - steps_per_sync, 0);
            for (; s > stop_at; --s) {
                model.denoise(canvas.get<int32_t>(), s == N ? nullptr : step.self_conditioning(), logits.get<float>(), stream);
                step.run_step(logits.get<float>(), diffusion_step_temperature(g, s, N), canvas.get<int32_t>(), stream);
            }
            if (step.read_flags(stream).finished != 0) break;
        }
        step.commit_block(committed.get<int32_t>(), stream);
        const DiffusionStepFlags flags = step.read_flags(stream);
        committed.download(block.data(), block.size() * sizeof(int32_t));
        out.steps_per_block.push_back(flags.steps);
        out.tokens.insert(out.tokens.end(), block.begin(), block.end());
        if (on_block) on_block(block, flags.steps);
        if (flags.has_eos != 0) {
            out.finished = true;
            break;  // one sequence: finished means every row is
        }
    }
    return out;
}

}  // namespace deltabit::cuda

#endif  // DELTABIT_HAVE_CUDA
