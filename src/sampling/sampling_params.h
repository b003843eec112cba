// Settings of the sampler chain. The chain runs in this fixed order (documented in docs/sampling.md):
//   1. repetition / presence / frequency penalties   (over the last `penalty_last_n` tokens)
//   2. DRY                                           (penalise extending a repeat)
//   3. temperature                                   (0 = greedy: argmax, ties to the lowest id)
//   4. top-k   5. top-p   6. min-p (as a logit threshold: keep logit ≥ max + ln(min_p))
//   7. a seeded draw from the softmax of what is left
// A value that disables a stage: repeat_penalty 1, presence/frequency 0, dry_multiplier 0,
// top_k 0, top_p 1, min_p 0.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>

namespace deltabit {

struct SamplingParams {
    float temperature = 0.8f;
    int top_k = 40;
    float top_p = 0.95f;
    float min_p = 0.05f;

    float repeat_penalty = 1.0f;     // llama.cpp style: positive logits ÷ p, negative × p
    float presence_penalty = 0.0f;   // subtracted once from every token seen
    float frequency_penalty = 0.0f;  // subtracted per occurrence
    int penalty_last_n = 64;         // how far back the three penalties look (0 = off, -1 = all)

    // DRY ("don't repeat yourself"): a token that would extend a repeat of length n ≥ allowed_length
    // loses multiplier · base^(n − allowed_length) from its logit. Only repeats whose earlier
    // occurrence contains generated tokens count, so quoting the prompt is not fined.
    float dry_multiplier = 0.0f;
    float dry_base = 1.75f;
    int dry_allowed_length = 6;
    int dry_window = 256;

    uint64_t seed = 0;
};

// Where the default sampling settings come from when the user gives none. The seed stays 0 here (so
// library callers and tests are deterministic); the commands and the server draw a random one with
// random_seed() unless the user gives one, and report it so the run can be repeated.
inline SamplingParams default_sampling_params() { return SamplingParams{}; }

// A fresh seed from the system's entropy source, below 2^32 so it is short to type back (any value
// 0 .. 2^64 − 1 is accepted as a seed).
uint64_t random_seed();

// The valid range of every setting, in one place for the command-line flags and the server's JSON
// fields. Each field has its snake_case name (as in SamplingParams and docs/sampling.md).
//
// Two sets of bounds: `engine`, what each stage can mean (the CLI's flags); `openai_api`, the same
// narrowed to what the OpenAI API documents for its fields (temperature at most 2, presence and
// frequency penalties in [−2, 2]), which the server applies so that what it accepts is what an OpenAI
// client may send.
enum class SamplingBounds { engine, openai_api };

struct SamplingField {
    std::string_view name;       // "top_p"
    std::string_view range;      // "in (0, 1] (1 = off)", for messages and --help
    std::string_view api_range;  // the same under SamplingBounds::openai_api
    bool integer;                // whole numbers only
};
std::span<const SamplingField> sampling_fields();

// nullopt when `value` is valid for `field`, else the range it must lie in (SamplingField::range or
// api_range). NaN and infinities are outside every range. Unknown names are a programming error (Error).
std::optional<std::string_view> sampling_range_error(std::string_view field, double value,
                                                     SamplingBounds bounds = SamplingBounds::engine);

// The first field of `params` outside its range: {name, value as held, range} — for a request parser
// that filled the struct first (a value that was in range as given can leave it as a float).
struct SamplingRangeViolation {
    std::string_view field;
    double value;
    std::string_view range;
};
std::optional<SamplingRangeViolation> check_sampling_params(const SamplingParams& params,
                                                            SamplingBounds bounds = SamplingBounds::engine);

// A seed given as text: a whole decimal number in 0 .. 2^64 − 1, else nullopt.
std::optional<uint64_t> parse_seed(std::string_view text);

}  // namespace deltabit
