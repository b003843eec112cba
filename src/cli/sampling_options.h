// The sampler chain's options (docs/sampling.md), shared by every command that samples, so `run` and
// `chat` spell, default and range-check them the same. The ranges are sampling_fields()
// (sampling/sampling_params.h), the same table the server checks JSON requests against.
#pragma once

#include "sampling/sampling_params.h"

#include <CLI/CLI.hpp>

namespace deltabit::cli {

// --temperature --top-k --top-p --min-p --seed --repeat-penalty --presence-penalty --frequency-penalty
// --penalty-last-n --dry-multiplier --dry-base --dry-allowed-length --dry-window. A value outside its
// range is a usage error naming the flag and the range. Without --seed, a random seed is drawn once
// the command line is parsed (sampling.seed holds it, for the command to report).
void add_sampling_options(CLI::App& command, SamplingParams& sampling);

}  // namespace deltabit::cli
