// The CPU sampler chain (the reference; the GPU sampler must draw the same tokens for the same seed).
// Stages and their order: sampling_params.h.
#pragma once

#include "sampling/rng.h"
#include "sampling/sampling_params.h"

#include <cstdint>
#include <span>
#include <vector>

namespace deltabit {

// What the sampler may look at: every token so far, and which of them the model generated
// (as opposed to the prompt), one byte each (1 = generated).
struct TokenHistory {
    std::span<const int32_t> tokens;
    std::span<const uint8_t> generated;
};

// One candidate after the logit-changing stages.
struct Candidate {
    int32_t token;
    float logit;
};

class Sampler {
public:
    explicit Sampler(const SamplingParams& params);

    // Draws the next token from `logits` (one per vocabulary entry). Deterministic given the seed and
    // the sequence of calls.
    int32_t sample(std::span<const float> logits, const TokenHistory& history);

    // The candidates that survive stages 1–6 with their final logits (after temperature), sorted by
    // logit descending then id ascending; exposed so tests can check each stage.
    std::vector<Candidate> candidates(std::span<const float> logits, const TokenHistory& history) const;

    const SamplingParams& params() const { return params_; }

    // The random numbers the draw consumes (one next_unit() per sample() that keeps more than one
    // candidate). Exposed so another backend of the chain (sampling/sampler_cuda.h) advances it exactly
    // as sample() would, and the two can be interleaved on one sequence.
    SamplerRng& rng() { return rng_; }

private:
    SamplingParams params_;
    SamplerRng rng_;
};

// Stage functions, applied in place, exposed for tests.
void apply_penalties(std::vector<float>& logits, const TokenHistory& history, const SamplingParams& params);
void apply_dry(std::vector<float>& logits, const TokenHistory& history, const SamplingParams& params);
int32_t argmax_lowest_id(std::span<const float> logits);

// Stages 1–2 touch only tokens in the history. For each such token, what they do to its logit, so a
// backend that keeps the logits elsewhere (the GPU) can apply the very same float operations to just
// those entries, in this order:
//   if (penalised) { x = x > 0 ? x / repeat_penalty : x * repeat_penalty;  x -= penalty; }
//   if (dried) x -= dry;
// The values are computed with the same expressions as apply_penalties / apply_dry, so applying them
// gives those functions' result bit for bit (tests/cuda/test_sampler_cuda.cpp checks it on the CPU).
struct LogitAdjustment {
    int32_t token;
    bool penalised;  // stage 1 applies: the repeat_penalty sign rule, then − penalty
    bool dried;      // stage 2 applies: − dry
    float penalty;   // presence_penalty + frequency_penalty · occurrences in the last penalty_last_n
    float dry;       // dry_multiplier · dry_base^(repeat length − dry_allowed_length)
};

// One entry per adjusted token, sorted by token; tokens outside [0, n_vocab) are dropped, as the stages
// drop them.
std::vector<LogitAdjustment> logit_adjustments(const TokenHistory& history, const SamplingParams& params,
                                               size_t n_vocab);
// The host twin of what the GPU does with one entry (for the test above and for readers).
float apply_logit_adjustment(float logit, const LogitAdjustment& adjustment, float repeat_penalty);

}  // namespace deltabit
