// Replaying a recorded block-diffusion run (runtime/diffusion_record.h) on the model: the loop runs again
// with the record's draws as its random numbers, and every step's decoder input (the canvas), output (the
// logits' hash), acceptance and argmax are compared with the record. Everything a step computes depends
// on the steps before it, so the first step that differs is the one to look at; replay stops there.
#pragma once

#include "models/diffusion_gemma.h"
#include "runtime/diffusion_record.h"

#include <cstdint>
#include <optional>
#include <string>

namespace deltabit {

struct DiffusionDifference {
    int64_t index = 0;  // 1-based over the whole run, as "step N" in messages
    int64_t block = 0;  // 0-based
    int64_t step = 0;   // 1-based within the block
    std::string what;   // "the canvas differs at position 3 (recorded 17, replayed 250)"
};

struct DiffusionReplayResult {
    int64_t steps_replayed = 0;  // steps that matched the record
    std::optional<DiffusionDifference> difference;  // none: identical
};

// Error when the record cannot be replayed on this model at all (another model's fingerprint, another
// canvas or vocabulary, another backend): `model_fingerprint` is the model's, `backend` where it runs.
void check_replayable(const DiffusionRecord& record, const DiffusionGemma& model, const std::string& model_fingerprint,
                      const std::string& backend, const std::string& record_name);

DiffusionReplayResult replay_diffusion(const DiffusionGemma& model, const DiffusionRecord& record);

}  // namespace deltabit
