// The whole model's forward and backward on the CPU reference ops (train/reference_ops.h), in double:
// embeddings → per layer [RMSNorm → gated attention or Gated DeltaNet → residual, RMSNorm → SwiGLU →
// residual] → final RMSNorm → LM head fused with cross entropy. qwen35 (1+w norms, output-gated
// attention with partial RoPE, DeltaNet layers) and qwen3 (plain norms, full RoPE, no gate).
//
// This is a second copy of the layer loop beside models/blocks.cpp on purpose (STYLE habit 18): the
// engine's blocks are float, in place and carry a KV cache; the oracle for gradients must be double
// and keep each layer's inputs. tests/train checks that both compute the same logits.
//
// Memory: the forward keeps each layer's input residual [T][D]; the backward re-runs one layer's
// forward at a time to get its intermediates (activation recomputation), so memory is O(layers·T·D)
// plus one layer's intermediates.
#pragma once

#include "train/parameters.h"

#include <cstdint>
#include <span>
#include <vector>

namespace deltabit::train::ref {

// Loss over one sequence: tokens[T] in, targets[T] (−1 = ignored). chunk is the LM head's position
// chunk (at most chunk·V logits exist at once).
struct SequenceLoss {
    double loss_sum = 0.0;   // Σ −log p(target) over counted positions
    int64_t counted = 0;
};

// Forward only. params is the flat array of ParameterLayout (float master weights, or the QAT
// forward's effective weights).
SequenceLoss sequence_loss(const ParameterLayout& layout, std::span<const double> params,
                           std::span<const int32_t> tokens, std::span<const int32_t> targets, int64_t chunk = 64);

// Forward and backward: adds scale · ∂(loss_sum)/∂params into grads (same layout).
SequenceLoss sequence_loss_and_gradient(const ParameterLayout& layout, std::span<const double> params,
                                        std::span<const int32_t> tokens, std::span<const int32_t> targets,
                                        double scale, std::span<double> grads, int64_t chunk = 64);

// All logits [T][V] (tests and small evaluations only: it stores T·V values).
std::vector<double> sequence_logits(const ParameterLayout& layout, std::span<const double> params,
                                    std::span<const int32_t> tokens);

}  // namespace deltabit::train::ref
