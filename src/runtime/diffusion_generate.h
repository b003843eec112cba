// Block-diffusion generation (DiffusionGemma), the loop of transformers 5.17's
// DiffusionGemmaGenerationMixin.generate in its exact order (../shared/reference/diffusion-gemma.md §3.1),
// for one sequence:
//   encode the prompt; then per block: a uniform random canvas (or the given first canvas), and per
//   denoising step s = N..1: logits → / T_s (T_s = t_min + (t_max − t_min)·s/N) → one categorical sample
//   per position → entropy-bound acceptance (positions by ascending entropy, accepted while the entropy
//   of the ones before stays ≤ the bound; the lowest always) → the rest re-noised uniformly → stop early
//   when the argmax canvas equals each of the last `stability_threshold` ones and the mean entropy is
//   below `confidence_threshold`; the scaled logits self-condition the next step. The block's final argmax
//   is committed, EOS/pad applied, and it is encoded at the next block's start.
// The random numbers come from a DiffusionRandomness in transformers' order (§3.2), so a recorded run of
// transformers can be replayed exactly, and a seeded one reproduced.
#pragma once

#include "models/diffusion_gemma.h"

#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <vector>

namespace deltabit {

// transformers' DiffusionGemmaGenerationConfig defaults (§3 "Effective parameters"). As there, EOS
// stopping and pad replacement happen only when eos_ids and pad_id are set here; the model config's
// eos ids are not consulted.
struct DiffusionGenerationConfig {
    int64_t max_new_tokens = 256;  // ceil(max_new_tokens / canvas) whole blocks; the output is not truncated
    int64_t max_denoising_steps = 48;
    double entropy_bound = 0.1;
    double t_min = 0.4;
    double t_max = 0.8;
    int64_t stability_threshold = 1;
    double confidence_threshold = 0.005;
    std::vector<int64_t> eos_ids;  // empty: no EOS stopping
    int64_t pad_id = -1;           // < 0: no pad replacement
};

// The loop's two kinds of draw, in the order the loop makes them.
class DiffusionRandomness {
public:
    virtual ~DiffusionRandomness() = default;
    // torch.randint(0, n_vocab, (L,)): out.size() tokens uniform over the whole vocabulary.
    virtual void uniform_tokens(int64_t n_vocab, std::span<int32_t> out) = 0;
    // torch.multinomial(probs, 1): one token per row of probs[out.size()][n_vocab].
    virtual void sample(std::span<const float> probs, int64_t n_vocab, std::span<int32_t> out) = 0;
};

// deltabit's own seeded draws (sampling/rng.h): reproducible on every machine; not torch's stream.
class SeededDiffusionRandomness : public DiffusionRandomness {
public:
    explicit SeededDiffusionRandomness(uint64_t seed);
    ~SeededDiffusionRandomness() override;
    void uniform_tokens(int64_t n_vocab, std::span<int32_t> out) override;
    void sample(std::span<const float> probs, int64_t n_vocab, std::span<int32_t> out) override;

private:
    struct State;
    std::unique_ptr<State> state_;
};

struct DiffusionGeneration {
    std::vector<int32_t> tokens;           // the new tokens, whole blocks (EOS/pad applied)
    std::vector<int64_t> steps_per_block;  // decoder passes of each block
    bool finished = false;                 // stopped on EOS
    // The step callback asked to stop: the last entry of steps_per_block is then the unfinished block's,
    // whose tokens are not in `tokens`.
    bool stopped = false;
    // Non-pad new tokens per decoder pass (transformers' tokens_per_forward).
    double tokens_per_forward() const;
    int64_t pad_id = -1;
};

// The temperature of denoising step `step` (n_steps down to 1): t_min + (t_max − t_min)·step/n_steps,
// rounded in fp32 operation by operation as transformers computes it.
float diffusion_step_temperature(const DiffusionGenerationConfig& config, int64_t step, int64_t n_steps);

// Called after each block is committed, with that block's tokens (streaming).
using DiffusionBlockCallback = std::function<void(std::span<const int32_t> block, int64_t steps)>;

// One denoising step as the loop ran it: what recording and replay (runtime/diffusion_record.h) see.
// Every span is [canvas_length] (logits [canvas_length][n_vocab]) and lives only during the call.
struct DiffusionStep {
    int64_t block = 0;                    // 0-based
    int64_t step = 0;                     // 1-based within the block
    std::span<const int32_t> canvas;      // the decoder's input
    std::span<const float> logits;        // its softcapped logits, before the temperature
    std::span<const int32_t> sampled;     // the step's first draw: one sample per position
    std::span<const uint8_t> accepted;    // 1 where the sample was kept
    std::span<const int32_t> noise;       // the step's second draw: tokens for the positions not accepted
    std::span<const int32_t> argmax;      // argmax of the scaled logits (what a block commits)
};
// Returns false to stop the generation after this step (an interrupt, or a replay that diverged).
using DiffusionStepCallback = std::function<bool(const DiffusionStep& step)>;

// What the loop needs from a model: one sequence's cache behind encode (append tokens) and denoise
// (the decoder's softcapped logits [L][V] for a canvas [L], with the previous step's scaled logits as
// self-conditioning, empty on a block's first step). DiffusionGemma is one; tests plug in others.
class DiffusionDenoiser {
public:
    virtual ~DiffusionDenoiser() = default;
    virtual int64_t canvas_length() const = 0;
    virtual int64_t n_vocab() const = 0;
    virtual void encode(std::span<const int32_t> tokens) = 0;
    virtual std::vector<float> denoise(std::span<const int32_t> canvas, std::span<const float> self_conditioning) = 0;
};

// Error for an empty prompt, a first canvas of the wrong length, or a bad setting (steps < 1,
// t_min/t_max not positive, ...), before anything runs. The CUDA loop checks the same.
void validate_diffusion_generation(const DiffusionGenerationConfig& config, int64_t canvas_length,
                                   std::span<const int32_t> prompt, std::span<const int32_t> first_canvas);

DiffusionGeneration generate_diffusion(DiffusionDenoiser& denoiser, std::span<const int32_t> prompt,
                                       const DiffusionGenerationConfig& config, DiffusionRandomness& random,
                                       std::span<const int32_t> first_canvas = {},
                                       const DiffusionBlockCallback& on_block = {},
                                       const DiffusionStepCallback& on_step = {});
// The same on a DiffusionGemma, with a fresh cache.
DiffusionGeneration generate_diffusion(const DiffusionGemma& model, std::span<const int32_t> prompt,
                                       const DiffusionGenerationConfig& config, DiffusionRandomness& random,
                                       std::span<const int32_t> first_canvas = {},
                                       const DiffusionBlockCallback& on_block = {},
                                       const DiffusionStepCallback& on_step = {});

}  // namespace deltabit
