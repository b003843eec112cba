// One block-diffusion model ready to generate: the model, its DiffusionGemma view and its generation
// settings (diffusion_generation_config.h), and the block loop (diffusion_generate.h) run over a prompt
// with deltabit's seeded draws. `deltabit run`, `deltabit chat` and `deltabit serve` all generate through
// it, so a reply of the server is the reply of `run` for the same prompt, seed and max_tokens.
// A DiffusionGemma model does not fit the Engine interface (it has no left-to-right step: engine.h
// refuses it), so this is its own small front; it runs on the CPU reference.
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
    // Loads MODEL (`progress` sees the weight bytes handled) and its generation settings; `max_tokens`,
    // when given, sets max_new_tokens (the commands' --max-tokens).
    DiffusionRunner(const std::string& model, std::optional<int64_t> max_tokens, const LoadProgress& progress = {});

    const ModelConfig& config() const { return model_->config(); }
    const DiffusionGenerationConfig& settings() const { return settings_; }

    // The block loop over `prompt` with deltabit's seeded draws; `on_block` sees each committed block.
    // With a `record` path, every step goes to that file (runtime/diffusion_record.h) once the run ends.
    // `stop`, polled after every denoising step, ends the run there when it returns true (Ctrl-C in chat,
    // a server client gone); the result is then marked `stopped` and the unfinished block is not
    // committed. `max_new_tokens`, when given, replaces the settings' for this run only (a server
    // request's max_tokens); like it, it is rounded up to whole blocks.
    DiffusionRun generate(std::span<const int32_t> prompt, uint64_t seed, const DiffusionBlockCallback& on_block,
                          const std::string& record = {}, const std::function<bool()>& stop = {},
                          std::optional<int64_t> max_new_tokens = std::nullopt) const;

private:
    std::string path_;
    std::unique_ptr<const Model> model_;
    std::unique_ptr<const DiffusionGemma> diffusion_;
    DiffusionGenerationConfig settings_;
};

// The new tokens up to (not including) the first of the settings' EOS ids: what is shown as text.
std::span<const int32_t> diffusion_visible_tokens(std::span<const int32_t> tokens, const DiffusionGenerationConfig& g);

}  // namespace deltabit
