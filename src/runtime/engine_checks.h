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
// An image that would not fit this sequence's capacity.
void check_image_fits(const StateImage& image, int64_t max_positions);

}  // namespace deltabit
