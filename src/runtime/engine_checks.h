// Checks every engine makes the same way, so the CPU and CUDA engines refuse the same inputs with the
// same messages.
#pragma once

#include "models/model_config.h"
#include "models/state_image.h"
#include "runtime/engine.h"

#include <cstdint>
#include <span>

namespace deltabit {

void check_sequence_options(const SequenceOptions& options);
// ids not empty, every id in the vocabulary, and room for them.
void check_forward(const ModelConfig& config, std::span<const int32_t> ids, int64_t position, int64_t max_positions);
// A batched step's rows (Engine::forward_batch): one id per sequence, each row as check_forward, no
// sequence twice.
void check_forward_batch(const ModelConfig& config, std::span<EngineSequence* const> sequences,
                         std::span<const int32_t> ids);
// An image that would not fit this sequence's capacity.
void check_image_fits(const StateImage& image, int64_t max_positions);
// Logit `token` of the sequence at `position` is NaN or ±inf: the weights or activations broke, and
// sampling would print noise with exit code 0. Both engines stop generation with this one line (the CPU
// engine's scan finds the lowest such token; the CUDA engine's choosers report it, core/non_finite_choice.h).
[[noreturn]] void fail_non_finite_logit(int64_t token, int64_t position, float value);

}  // namespace deltabit
