// The block-diffusion side of `deltabit run` and `deltabit chat`: a DiffusionGemma model does not fit the
// Engine interface (it has no left-to-right step: runtime/engine.h refuses it), so the two commands check
// the architecture first and, for a diffusion model, hand the prompt to a DiffusionRunner, which runs the
// block loop (runtime/diffusion_generate.h) on the CPU reference and streams each block as it is committed.
// The prompt is built exactly as for any other model (chat template, --raw, --ids).
#pragma once

#include "models/diffusion_gemma.h"
#include "models/model.h"
#include "runtime/diffusion_generate.h"

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>

namespace deltabit::cli {

// Whether MODEL is a block-diffusion model, from its config alone (no weights are read). False when the
// config cannot be read, so that the usual load reports the problem in its usual words.
bool is_diffusion_model(const std::string& model);

// Error naming the first flag given on `command` that the block loop has no use for, and why (the
// sampler chain, --stop, --kv, --ctx, --threads, a CUDA backend). `name` is "run" or "chat".
void refuse_flags_for_diffusion(const CLI::App& command, std::string_view name);

struct DiffusionRun {
    DiffusionGeneration generation;
    double generate_ms = 0.0;  // the whole loop, prompt encoding included (the loop encodes it itself)
};

class DiffusionRunner {
public:
    // Loads MODEL (a progress line on stderr when `progress`) and its generation settings
    // (runtime/diffusion_generation_config.h); --max-tokens, when given, sets max_new_tokens.
    DiffusionRunner(const std::string& model, std::optional<int64_t> max_tokens, bool progress);

    const ModelConfig& config() const { return model_->config(); }
    const DiffusionGenerationConfig& settings() const { return settings_; }

    // The block loop over `prompt` with deltabit's seeded draws; `on_block` sees each committed block.
    // With a `record` path, every step goes to that file (runtime/diffusion_record.h) once the run ends.
    // `stop`, polled after every denoising step, ends the run there when it returns true (Ctrl-C in chat);
    // the result is then marked `stopped` and the unfinished block is not committed.
    DiffusionRun generate(std::span<const int32_t> prompt, uint64_t seed, const DiffusionBlockCallback& on_block,
                          const std::string& record = {}, const std::function<bool()>& stop = {}) const;

private:
    std::string path_;
    std::unique_ptr<const Model> model_;
    std::unique_ptr<const DiffusionGemma> diffusion_;
    DiffusionGenerationConfig settings_;
};

// The new tokens up to (not including) the first of the settings' EOS ids: what is shown as text.
std::span<const int32_t> diffusion_visible_tokens(std::span<const int32_t> tokens, const DiffusionGenerationConfig& g);

// The diffusion fields of --json: "blocks", "steps_per_block", "denoising_steps", "tokens_per_forward",
// "settings", and "finish_reason" ("stop": EOS; "length": the last block ran out).
void add_diffusion_json(nlohmann::ordered_json& out, const DiffusionRun& run, const DiffusionGenerationConfig& g);

}  // namespace deltabit::cli
