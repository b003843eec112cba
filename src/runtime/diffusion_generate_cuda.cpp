// generate_diffusion_cuda (runtime/diffusion_generate_cuda.h): the order of runtime/diffusion_generate.cpp,
// with DiffusionStepCuda doing the step and the host reading only the flag and the committed block (and,
// for a step callback, the step).
#include "core/error.h"

#if DELTABIT_HAVE_CUDA
#include "backend/cuda_buffer.h"
#include "runtime/diffusion_generate_cuda.h"
#include "runtime/diffusion_step_cuda.h"

#include <algorithm>
#include <optional>
#include <vector>

namespace deltabit::cuda {

namespace {

// A step's device buffers copied to the host for the step callback, reused step after step.
struct HostStep {
    std::vector<int32_t> canvas, sampled, noise, argmax;
    std::vector<uint8_t> accepted;
    std::vector<float> logits;

    HostStep(int64_t L, int64_t V)
        : canvas(size_t(L)), sampled(size_t(L)), noise(size_t(L)), argmax(size_t(L)), accepted(size_t(L)),
          logits(size_t(L) * size_t(V)) {}

    // After the stream has been waited for (read_flags): plain copies.
    DiffusionStep download(const DiffusionStepCuda& step, const DeviceBuffer& step_canvas, const DeviceBuffer& d_logits,
                           int64_t block, int64_t index) {
        const auto copy = [](auto& host, const void* device, const char* what) {
            cuda_check(cudaMemcpy(host.data(), device, host.size() * sizeof(host[0]), cudaMemcpyDeviceToHost), what);
        };
        copy(canvas, step_canvas.get(), "diffusion step: canvas");
        copy(logits, d_logits.get(), "diffusion step: logits");
        copy(sampled, step.sampled(), "diffusion step: samples");
        copy(accepted, step.accepted(), "diffusion step: acceptance");
        copy(noise, step.noise(), "diffusion step: noise");
        copy(argmax, step.argmax(), "diffusion step: argmax");
        return DiffusionStep{.block = block, .step = index, .canvas = canvas, .logits = logits, .sampled = sampled,
                             .accepted = accepted, .noise = noise, .argmax = argmax};
    }
};

}  // namespace

DiffusionGeneration generate_diffusion_cuda(DiffusionDenoiserCuda& model, std::span<const int32_t> prompt,
                                            const DiffusionGenerationConfig& g, uint64_t seed,
                                            const DiffusionCudaRunOptions& options) {
    const int64_t L = model.canvas_length(), V = model.n_vocab(), N = g.max_denoising_steps;
    const std::span<const int32_t> first_canvas = options.first_canvas;
    validate_diffusion_generation(g, L, prompt, first_canvas);
    if (options.steps_per_sync < 1)
        fail("diffusion generate (CUDA): steps_per_sync must be at least 1 (found {})", options.steps_per_sync);
    const int64_t n_blocks = (g.max_new_tokens + L - 1) / L;
    const int64_t steps_per_sync = options.on_step ? 1 : options.steps_per_sync;
    const cudaStream_t stream = options.stream;

    DiffusionStepCuda step(L, V, DiffusionStepSettings{g.entropy_bound, g.stability_threshold, g.confidence_threshold, g.eos_ids, g.pad_id},
                           seed);
    DeviceBuffer prompt_tokens(prompt.size() * sizeof(int32_t)), first(first_canvas.size() * sizeof(int32_t));
    DeviceBuffer canvas(size_t(L) * sizeof(int32_t)), committed(size_t(L) * sizeof(int32_t));
    DeviceBuffer logits(size_t(L) * size_t(V) * sizeof(float));
    prompt_tokens.upload(prompt.data(), prompt.size() * sizeof(int32_t));
    if (!first_canvas.empty()) first.upload(first_canvas.data(), first_canvas.size() * sizeof(int32_t));
    // The step callback's input canvas: run_step overwrites `canvas` with the next one.
    DeviceBuffer step_canvas(options.on_step ? size_t(L) * sizeof(int32_t) : 0);
    std::optional<HostStep> host_step;
    if (options.on_step) host_step.emplace(L, V);

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
                if (options.on_step)
                    cuda_check(cudaMemcpyAsync(step_canvas.get(), canvas.get(), canvas.bytes(), cudaMemcpyDeviceToDevice, stream),
                               "diffusion generate (CUDA): the step's canvas");
                step.run_step(logits.get<float>(), diffusion_step_temperature(g, s, N), canvas.get<int32_t>(), stream);
            }
            const DiffusionStepFlags flags = step.read_flags(stream);
            // With a step callback every sync follows one step that ran: the loop leaves a block at its
            // finishing step, so no halted step reaches the callback.
            bool go_on = !options.on_step || options.on_step(host_step->download(step, step_canvas, logits, b, flags.steps));
            if (go_on && options.stop) go_on = !options.stop();
            if (!go_on) {
                out.steps_per_block.push_back(flags.steps);
                out.stopped = true;
                return out;
            }
            if (flags.finished != 0) break;
        }
        step.commit_block(committed.get<int32_t>(), stream);
        const DiffusionStepFlags flags = step.read_flags(stream);
        committed.download(block.data(), block.size() * sizeof(int32_t));
        out.steps_per_block.push_back(flags.steps);
        out.tokens.insert(out.tokens.end(), block.begin(), block.end());
        if (options.on_block) options.on_block(block, flags.steps);
        if (flags.has_eos != 0) {
            out.finished = true;
            break;  // one sequence: finished means every row is
        }
    }
    return out;
}

}  // namespace deltabit::cuda

#endif  // DELTABIT_HAVE_CUDA
