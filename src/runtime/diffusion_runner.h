// One block-diffusion model ready to generate: the model, its generation settings
// (diffusion_generation_config.h), and the block loop run over a prompt with deltabit's seeded draws —
// on the CPU reference (diffusion_generate.h over DiffusionGemma) or on the GPU (the device loop,
// diffusion_generate_cuda.h, over DiffusionGemmaCuda). `deltabit run`, `deltabit chat` and `deltabit
// serve` all generate through it, so a reply of the server is the reply of `run` for the same prompt,
// seed, max_tokens and backend. The two backends draw the same numbers for a seed, so they give the same
// tokens unless rounding decides: the GPU's logits are fp32-class (the CPU's sums are double), and a
// sample, an acceptance or an argmax within that rounding of a boundary may go the other way
// (diffusion_step_cuda.h, diffusion_gemma_cuda.h).
// A DiffusionGemma model does not fit the Engine interface (it has no left-to-right step: engine.h
// refuses it), so this is its own small front.
#pragma once

#include "models/diffusion_gemma.h"
#include "models/model.h"
#include "runtime/diffusion_generate.h"
#include "runtime/diffusion_settings.h"

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>

namespace deltabit {

struct DiffusionRun {
    DiffusionGeneration generation;
    double generate_ms = 0.0;  // the whole loop, prompt encoding included (the loop encodes it itself)
};

class DiffusionRunner {
public:
    // How far the load has got, 0..1 (on CUDA the host load is the first half, the upload the second).
    using Progress = std::function<void(double fraction)>;

    // Loads MODEL and its generation settings onto `backend`: "cpu", "cuda" or "auto" (CUDA when this
    // build has it and a GPU is present; backend/backend.h resolve_backend, whose error for cuda where
    // there is none comes before the load). `max_tokens`, when given, sets max_new_tokens (the commands'
    // --max-tokens).
    DiffusionRunner(const std::string& model, std::string_view backend, std::optional<int64_t> max_tokens,
                    const Progress& progress = {});
    ~DiffusionRunner();
    DiffusionRunner(const DiffusionRunner&) = delete;
    DiffusionRunner& operator=(const DiffusionRunner&) = delete;

    const ModelConfig& config() const { return model_->config(); }
    const DiffusionGenerationConfig& settings() const { return settings_; }
    // "cpu" or "cuda": where generate runs, and what a record says it ran on.
    const std::string& backend() const { return backend_; }
    // For --json and logs: "cpu: block-diffusion reference", or "cuda: <device>; block-diffusion device loop".
    std::string backend_description() const;

    // The block loop over `prompt` with deltabit's seeded draws; `on_block` sees each committed block.
    // With a `record` path, every step goes to that file (runtime/diffusion_record.h) once the run ends
    // (on CUDA the loop then waits for and downloads every step). `stop` ends the run when it returns true
    // (Ctrl-C in chat, a server client gone); the CPU polls it after every denoising step, CUDA at each
    // host sync point (every few steps); the result is then marked `stopped` and the unfinished block is
    // not committed. `max_new_tokens`, when given, replaces the settings' for this run only (a server
    // request's max_tokens); like it, it is rounded up to whole blocks.
    // Not reentrant: on CUDA the runner holds one sequence's cache, reset at each call; one thread
    // generates (the command, the server's inference thread).
    DiffusionRun generate(std::span<const int32_t> prompt, uint64_t seed, const DiffusionBlockCallback& on_block,
                          const std::string& record = {}, const std::function<bool()>& stop = {},
                          std::optional<int64_t> max_new_tokens = std::nullopt);

private:
    struct Cuda;  // the device model and its cache (CUDA builds)

    DiffusionGeneration generate_cpu(std::span<const int32_t> prompt, const DiffusionGenerationConfig& settings, uint64_t seed,
                                     const DiffusionBlockCallback& on_block, const DiffusionStepCallback& on_step) const;

    std::string path_;
    std::string backend_;
    std::unique_ptr<const Model> model_;
    std::unique_ptr<const DiffusionGemma> diffusion_;  // the CPU backend's
    std::unique_ptr<Cuda> cuda_;                       // the CUDA backend's
    DiffusionGenerationConfig settings_;
};

// The new tokens up to (not including) the first of the settings' EOS ids: what is shown as text.
std::span<const int32_t> diffusion_visible_tokens(std::span<const int32_t> tokens, const DiffusionGenerationConfig& g);

}  // namespace deltabit
