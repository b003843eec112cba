// The pieces of one block-diffusion denoising step (../shared/reference/diffusion-gemma.md §3.1 step 4),
// as the CPU loop (runtime/diffusion_generate.cpp) runs them. They are the naive reference: the CUDA
// step (runtime/diffusion_step_cuda.h) is tested against these functions, so both backends share one
// definition of every rule. Layouts: logits, scaled, probs [L][V] row-major (L = canvas positions,
// V = vocabulary); entropy, argmax, accepted [L]. Logits are finite (softcapped model output).
#pragma once

#include <cmath>
#include <cstdint>
#include <deque>
#include <span>
#include <vector>

#include "core/host_device.h"

namespace deltabit {

struct DiffusionStepStats {
    std::vector<float> scaled;    // logits / T_s, [L][V]: also the next step's self-conditioning input
    std::vector<float> probs;     // softmax(scaled), rounded to float
    std::vector<double> entropy;  // per position, −Σ p log p accumulated in double in vocabulary order
    std::vector<int32_t> argmax;  // per position, the first of equal maxima (torch.argmax)
};

// Divides each logit by the fp32 temperature (one fp32 division, as torch), then per row: the argmax,
// p = exp(x − max − log Σ exp(x − max)) in double (rounded to float for `probs`), and the entropy.
DiffusionStepStats scale_and_measure(std::span<const float> logits, int64_t L, int64_t V, float temperature);

// Entropy-bound acceptance (arXiv 2505.24857): positions ranked by ascending entropy (stable: equal
// entropies keep position order); a position is accepted when the sum of the strictly lower-ranked
// entropies, added in rank order, is ≤ bound. The lowest-ranked position is always accepted (its sum is 0).
std::vector<uint8_t> accepted_positions(std::span<const double> entropy, double bound);

// One categorical draw from the probabilities p[V] with the uniform `unit` in [0, 1): the first v with
// unit·Σp < p[0] + … + p[v] and p[v] > 0, sums in double in vocabulary order; when rounding leaves no
// such v, the last v with p[v] > 0 (0 when there is none). SeededDiffusionRandomness::sample is this rule.
int32_t categorical_pick(std::span<const float> p, double unit);

// A token uniform over [0, V) from a uniform `unit` in [0, 1): floor(unit·V), clamped to V − 1.
// Multiply-shift of 53 random bits: the bias is below 2^-33 for any vocabulary that fits int32. Shared
// with the CUDA step's kernels (one definition, the same bits).
DELTABIT_HOST_DEVICE inline int32_t uniform_token(double unit, int64_t V) {
    const double t = ::floor(unit * double(V));
    const double last = double(V) - 1;
    return int32_t(t < last ? t : last);
}

// The mean entropy over positions: the sum in position order, divided by L.
double mean_entropy(std::span<const double> entropy);

// The early-stop rule: a step finishes the block when its argmax canvas equals each of the last
// `stability_threshold` argmax canvases (the history starts filled with −1, so no stop before step
// stability_threshold + 1; with 0 it is always stable) and its mean entropy is < confidence_threshold.
class DiffusionStopRule {
public:
    DiffusionStopRule(int64_t stability_threshold, int64_t canvas_length, double confidence_threshold);
    // Whether this step finishes the block; does not record the step.
    bool finished(std::span<const int32_t> argmax, std::span<const double> entropy) const;
    // Adds the step's argmax canvas to the history (dropping the oldest).
    void record(std::span<const int32_t> argmax);

private:
    std::deque<std::vector<int32_t>> history_;  // oldest first
    double confidence_threshold_;
};

// The block commit's EOS rule (§3.1 step 6) applied in place to the committed argmax canvas: with
// eos_ids set, every token after the first EOS becomes pad_id (when pad_id ≥ 0). Returns whether the
// block holds an EOS.
bool apply_eos_and_pad(std::span<int32_t> committed, std::span<const int64_t> eos_ids, int64_t pad_id);

}  // namespace deltabit
