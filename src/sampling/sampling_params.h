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

// Where the default sampling settings come from when the user gives none.
inline SamplingParams default_sampling_params() { return SamplingParams{}; }

}  // namespace deltabit
