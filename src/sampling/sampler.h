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

private:
    SamplingParams params_;
    SamplerRng rng_;
};

// Stage functions, applied in place, exposed for tests.
void apply_penalties(std::vector<float>& logits, const TokenHistory& history, const SamplingParams& params);
void apply_dry(std::vector<float>& logits, const TokenHistory& history, const SamplingParams& params);
int32_t argmax_lowest_id(std::span<const float> logits);

}  // namespace deltabit
