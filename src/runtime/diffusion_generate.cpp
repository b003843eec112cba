#include "runtime/diffusion_generate.h"

#include "core/error.h"
#include "runtime/diffusion_step.h"
#include "sampling/rng.h"

#include <algorithm>
#include <cmath>

namespace deltabit {

struct SeededDiffusionRandomness::State {
    SamplerRng rng;
};

SeededDiffusionRandomness::SeededDiffusionRandomness(uint64_t seed) : state_(std::make_unique<State>(State{SamplerRng(seed)})) {}
SeededDiffusionRandomness::~SeededDiffusionRandomness() = default;

void SeededDiffusionRandomness::uniform_tokens(int64_t n_vocab, std::span<int32_t> out) {
    for (int32_t& t : out) t = uniform_token(state_->rng.next_unit(), n_vocab);
}

void SeededDiffusionRandomness::sample(std::span<const float> probs, int64_t n_vocab, std::span<int32_t> out) {
    for (size_t r = 0; r < out.size(); ++r)
        out[r] = categorical_pick(probs.subspan(r * size_t(n_vocab), size_t(n_vocab)), state_->rng.next_unit());
}

// transformers' step counter is an int32 tensor, so s/N is an fp32 tensor and the product with
// (t_max − t_min) and the sum with t_min are fp32 operations, each rounded (the Python floats are cast to
// fp32 first). For N = 8 that is one ulp away from the double formula at s = 6 and s = 1; the scaled
// logits are the next step's self-conditioning input, so the last bit is kept as transformers has it.
float diffusion_step_temperature(const DiffusionGenerationConfig& g, int64_t step, int64_t n_steps) {
    const float fraction = float(step) / float(n_steps);
    const float span = float(g.t_max - g.t_min) * fraction;
    return float(g.t_min) + span;
}

double DiffusionGeneration::tokens_per_forward() const {
    int64_t passes = 0;
    for (int64_t s : steps_per_block) passes += s;
    int64_t real = 0;
    for (int32_t t : tokens) real += t != pad_id;
    return passes > 0 ? double(real) / double(passes) : 0.0;
}

namespace {

// DiffusionGemma behind the loop's interface, with the one sequence's cache.
class GemmaDenoiser : public DiffusionDenoiser {
public:
    explicit GemmaDenoiser(const DiffusionGemma& model) : model_(model), cache_(model.new_cache()) {}
    int64_t canvas_length() const override { return model_.config().canvas_length; }
    int64_t n_vocab() const override { return model_.config().n_vocab; }
    void encode(std::span<const int32_t> tokens) override { model_.encode(cache_, tokens); }
    std::vector<float> denoise(std::span<const int32_t> canvas, std::span<const float> self_conditioning) override {
        return model_.denoise(cache_, canvas, self_conditioning);
    }

private:
    const DiffusionGemma& model_;
    DiffusionCache cache_;
};

}  // namespace

void validate_diffusion_generation(const DiffusionGenerationConfig& g, int64_t canvas, std::span<const int32_t> prompt,
                                   std::span<const int32_t> first_canvas) {
    if (prompt.empty()) fail("diffusion generate: the prompt is empty");
    if (g.max_new_tokens < 1) fail("diffusion generate: max_new_tokens must be at least 1 (found {})", g.max_new_tokens);
    if (g.max_denoising_steps < 1)
        fail("diffusion generate: max_denoising_steps must be at least 1 (found {})", g.max_denoising_steps);
    if (!(g.t_min > 0.0) || !(g.t_max > 0.0))
        fail("diffusion generate: t_min and t_max must be positive (found {} and {})", g.t_min, g.t_max);
    if (g.stability_threshold < 0)
        fail("diffusion generate: stability_threshold must not be negative (found {})", g.stability_threshold);
    if (!first_canvas.empty() && int64_t(first_canvas.size()) != canvas)
        fail("diffusion generate: the first canvas has {} tokens; the model's canvas is {}", first_canvas.size(), canvas);
}

DiffusionGeneration generate_diffusion(const DiffusionGemma& model, std::span<const int32_t> prompt,
                                       const DiffusionGenerationConfig& g, DiffusionRandomness& random,
                                       std::span<const int32_t> first_canvas, const DiffusionBlockCallback& on_block,
                                       const DiffusionStepCallback& on_step) {
    GemmaDenoiser denoiser(model);
    return generate_diffusion(denoiser, prompt, g, random, first_canvas, on_block, on_step);
}

DiffusionGeneration generate_diffusion(DiffusionDenoiser& model, std::span<const int32_t> prompt,
                                       const DiffusionGenerationConfig& g, DiffusionRandomness& random,
                                       std::span<const int32_t> first_canvas, const DiffusionBlockCallback& on_block,
                                       const DiffusionStepCallback& on_step) {
    const int64_t L = model.canvas_length(), V = model.n_vocab(), N = g.max_denoising_steps;
    validate_diffusion_generation(g, L, prompt, first_canvas);
    const int64_t n_blocks = (g.max_new_tokens + L - 1) / L;

    DiffusionGeneration out;
    out.pad_id = g.pad_id;
    model.encode(prompt);
    std::vector<int32_t> committed;  // the last block, pad-replaced: what the next block encodes first
    for (int64_t b = 0; b < n_blocks; ++b) {
        if (b > 0) model.encode(committed);
        std::vector<int32_t> canvas(static_cast<size_t>(L));
        random.uniform_tokens(V, canvas);  // drawn even when a first canvas is given (dict.pop's default)
        if (b == 0 && !first_canvas.empty()) canvas.assign(first_canvas.begin(), first_canvas.end());

        std::vector<float> self_conditioning;  // none on a block's first step
        std::vector<int32_t> argmax_canvas = canvas;
        DiffusionStopRule stop_rule(g.stability_threshold, L, g.confidence_threshold);
        int64_t steps = 0;
        for (int64_t s = N; s >= 1; --s) {
            const std::vector<float> logits = model.denoise(canvas, self_conditioning);
            ++steps;
            DiffusionStepStats st = scale_and_measure(logits, L, V, diffusion_step_temperature(g, s, N));
            std::vector<int32_t> sampled(static_cast<size_t>(L));
            random.sample(st.probs, V, sampled);
            const std::vector<uint8_t> accepted = accepted_positions(st.entropy, g.entropy_bound);
            std::vector<int32_t> noise(static_cast<size_t>(L));
            random.uniform_tokens(V, noise);
            std::vector<int32_t> next(static_cast<size_t>(L));
            for (int64_t i = 0; i < L; ++i) next[size_t(i)] = accepted[size_t(i)] ? sampled[size_t(i)] : noise[size_t(i)];

            const bool finished = stop_rule.finished(st.argmax, st.entropy);
            if (on_step &&
                !on_step(DiffusionStep{.block = b, .step = steps, .canvas = canvas, .logits = logits, .sampled = sampled,
                                       .accepted = accepted, .noise = noise, .argmax = st.argmax})) {
                out.steps_per_block.push_back(steps);
                out.stopped = true;
                return out;
            }
            stop_rule.record(st.argmax);
            self_conditioning = std::move(st.scaled);
            canvas = std::move(next);
            argmax_canvas = std::move(st.argmax);
            if (finished) break;
        }
        out.steps_per_block.push_back(steps);

        // Commit the argmax, then EOS/pad (§3.1 steps 5–6).
        committed = argmax_canvas;
        const bool has_eos = apply_eos_and_pad(committed, g.eos_ids, g.pad_id);
        out.tokens.insert(out.tokens.end(), committed.begin(), committed.end());
        if (on_block) on_block(committed, steps);
        if (has_eos) {
            out.finished = true;
            break;  // one sequence: finished means every row is
        }
    }
    return out;
}

}  // namespace deltabit
