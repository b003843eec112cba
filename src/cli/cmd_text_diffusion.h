// The block-diffusion side of `deltabit run`, `deltabit chat` and `deltabit serve`: a DiffusionGemma model
// does not fit the Engine interface (it has no left-to-right step: runtime/engine.h refuses it), so the
// commands check the architecture first and, for a diffusion model, hand the prompt to a DiffusionRunner
// (runtime/diffusion_runner.h), which runs the block loop on --backend's choice (the CPU reference or the
// GPU's device loop) and streams each block as it is committed.
// The prompt is built exactly as for any other model (chat template, --raw, --ids).
#pragma once

#include "runtime/diffusion_runner.h"

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>

namespace deltabit::cli {

// Error naming the first flag given on `command` that the block loop has no use for, and why (the
// sampler chain, --stop, --kv, --ctx, --threads). `name` is the command.
void refuse_flags_for_diffusion(const CLI::App& command, std::string_view name);

// The model's DiffusionRunner on `backend` (--backend: cpu, cuda or auto, resolved as for any model),
// with a progress line on stderr while it loads when `progress`.
std::unique_ptr<DiffusionRunner> load_diffusion_runner(const std::string& model, const std::string& backend,
                                                       std::optional<int64_t> max_tokens, bool progress);

// The diffusion fields of --json: "blocks", "steps_per_block", "denoising_steps", "tokens_per_forward",
// "settings", and "finish_reason" ("stop": EOS; "length": the last block ran out).
void add_diffusion_json(nlohmann::ordered_json& out, const DiffusionRun& run, const DiffusionGenerationConfig& g);

}  // namespace deltabit::cli
