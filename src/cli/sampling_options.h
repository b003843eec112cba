// The sampler chain's options (docs/sampling.md), shared by every command that samples, so `run` and
// `chat` spell and default them the same.
#pragma once

#include "sampling/sampling_params.h"

#include <CLI/CLI.hpp>

namespace deltabit::cli {

// --temperature --top-k --top-p --min-p --seed --repeat-penalty --dry-multiplier
void add_sampling_options(CLI::App& command, SamplingParams& sampling);

}  // namespace deltabit::cli
