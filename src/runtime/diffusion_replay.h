// Replaying a recorded block-diffusion run (runtime/diffusion_record.h) on the model, on the backend it
// was recorded on: the loop runs again and every step's decoder input (the canvas), output (the logits'
// hash), acceptance and argmax are compared with the record. Everything a step computes depends on the
// steps before it, so the first step that differs is the one to look at; replay stops there.
// The draws: the CPU replay takes the record's as its random numbers (so a run whose draws came from
// elsewhere, transformers, replays too); the CUDA replay draws on the device from the record's seed, as
// the recorded run did, and compares its samples and noise with the record's as well.
#pragma once

#include "models/diffusion_gemma.h"
#include "models/model.h"
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
// canvas or vocabulary, another backend): `config` and `model_fingerprint` are the model's, `backend`
// where it runs.
void check_replayable(const DiffusionRecord& record, const ModelConfig& config, const std::string& model_fingerprint,
                      const std::string& backend, const std::string& record_name);

// Follows a replay step by step against the record; both backends' replays use it.
class DiffusionReplayCheck {
public:
    // `compare_draws`: the replay makes its own draws (not the record's), so they are compared too.
    DiffusionReplayCheck(const DiffusionRecord& record, bool compare_draws);
    // The loop's step callback: true while the replay matches the record; at the first difference,
    // false (which stops the loop) with the difference kept.
    bool step(const DiffusionStep& step);
    // After the loop: the steps that matched and the first difference, including a replay that ended
    // before the record's last step or committed other tokens.
    DiffusionReplayResult finish(const DiffusionGeneration& replayed);

private:
    void differ(int64_t block, int64_t step, std::string what);
    const DiffusionRecord& record_;
    bool compare_draws_;
    size_t next_ = 0;
    DiffusionReplayResult result_;
};

// On the CPU reference, with the record's draws.
DiffusionReplayResult replay_diffusion(const DiffusionGemma& model, const DiffusionRecord& record);

// On the GPU (DiffusionGemmaCuda on the current device), drawing from the record's seed. Error in a build
// without CUDA.
DiffusionReplayResult replay_diffusion_cuda(const Model& model, const DiffusionRecord& record);

}  // namespace deltabit
