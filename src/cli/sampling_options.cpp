#include "cli/sampling_options.h"

namespace deltabit::cli {

void add_sampling_options(CLI::App& command, SamplingParams& sampling) {
    command.add_option("--temperature", sampling.temperature, "0 = greedy")->capture_default_str();
    command.add_option("--top-k", sampling.top_k, "0 = off")->capture_default_str();
    command.add_option("--top-p", sampling.top_p, "1 = off")->capture_default_str();
    command.add_option("--min-p", sampling.min_p, "0 = off")->capture_default_str();
    command.add_option("--seed", sampling.seed, "seed of the sampler's random draws")->capture_default_str();
    command.add_option("--repeat-penalty", sampling.repeat_penalty, "1 = off")->capture_default_str();
    command.add_option("--dry-multiplier", sampling.dry_multiplier, "0 = off")->capture_default_str();
}

}  // namespace deltabit::cli
