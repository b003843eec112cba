#include "cli/sampling_options.h"

#include <fmt/format.h>

#include <cstdlib>
#include <limits>
#include <string>

namespace deltabit::cli {
namespace {

std::string_view range_text(std::string_view field) {
    for (const SamplingField& f : sampling_fields())
        if (f.name == field) return f.range;
    return {};
}

// "--top-p: 1.5 is out of range: it must be in (0, 1] (1 = off)" — CLI11 puts the flag's name in front.
CLI::Validator range_of(std::string_view field) {
    const std::string name(field);
    return CLI::Validator(
        [name](std::string& text) -> std::string {
            const char* begin = text.c_str();
            char* end = nullptr;
            const double value = std::strtod(begin, &end);
            if (end == begin || *end != '\0')
                return fmt::format("{:?} is not a number; it must be {}", text, range_text(name));
            if (sampling_range_error(name, value)) return fmt::format("{} is out of range: it must be {}", text, range_text(name));
            return {};
        },
        "", "sampling range");
}

template <typename T>
void add_ranged(CLI::App& command, const char* flag, T& value, std::string_view field, std::string_view what) {
    command.add_option(flag, value, fmt::format("{}; {}", what, range_text(field)))
        ->check(range_of(field))
        ->capture_default_str();
}

}  // namespace

void add_sampling_options(CLI::App& command, SamplingParams& sampling) {
    add_ranged(command, "--temperature", sampling.temperature, "temperature", "divides the logits");
    add_ranged(command, "--top-k", sampling.top_k, "top_k", "keep the k most likely tokens");
    add_ranged(command, "--top-p", sampling.top_p, "top_p", "keep the most likely tokens whose probability reaches p");
    add_ranged(command, "--min-p", sampling.min_p, "min_p", "keep tokens with p ≥ min-p × the top p");
    add_ranged(command, "--repeat-penalty", sampling.repeat_penalty, "repeat_penalty",
               "divides a recent token's positive logit (multiplies a negative one)");
    add_ranged(command, "--presence-penalty", sampling.presence_penalty, "presence_penalty",
               "subtracted once from a recent token's logit");
    add_ranged(command, "--frequency-penalty", sampling.frequency_penalty, "frequency_penalty",
               "subtracted from a recent token's logit per occurrence");
    add_ranged(command, "--penalty-last-n", sampling.penalty_last_n, "penalty_last_n",
               "how many recent tokens the three penalties look at");
    add_ranged(command, "--dry-multiplier", sampling.dry_multiplier, "dry_multiplier",
               "DRY: fine for extending a repeat");
    add_ranged(command, "--dry-base", sampling.dry_base, "dry_base", "DRY: the fine grows by this factor per token");
    add_ranged(command, "--dry-allowed-length", sampling.dry_allowed_length, "dry_allowed_length",
               "DRY: repeats up to this long are free");
    add_ranged(command, "--dry-window", sampling.dry_window, "dry_window", "DRY: how many recent tokens it searches");

    CLI::Option* seed = command.add_option("--seed", sampling.seed,
                                           "seed of the sampler's random draws, 0 .. 18446744073709551615 "
                                           "(default: a random one, reported so the run can be repeated)");
    seed->check(CLI::Validator(
        [](std::string& text) -> std::string {
            if (parse_seed(text)) return {};
            return fmt::format("{} is out of range: it must be a whole number in 0 .. {}", text,
                               std::numeric_limits<uint64_t>::max());
        },
        "", "seed range"));
    command.parse_complete_callback([seed, &sampling] {
        if (seed->count() == 0) sampling.seed = random_seed();
    });
}

}  // namespace deltabit::cli
