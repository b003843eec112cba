#include "runtime/diffusion_runner.h"

#include "core/file_io.h"
#include "models/config_summary.h"
#include "models/model_fingerprint.h"
#include "runtime/diffusion_generation_config.h"
#include "runtime/diffusion_record.h"

#include <algorithm>
#include <chrono>
#include <filesystem>

namespace deltabit {

DiffusionRunner::DiffusionRunner(const std::string& model, std::optional<int64_t> max_tokens, const LoadProgress& progress)
    : path_(model) {
    model_ = std::make_unique<const Model>(Model::load(model, progress));
    diffusion_ = std::make_unique<const DiffusionGemma>(*model_);
    settings_ = load_diffusion_generation_config(model, model_->config());
    if (max_tokens) settings_.max_new_tokens = *max_tokens;
}

DiffusionRun DiffusionRunner::generate(std::span<const int32_t> prompt, uint64_t seed,
                                       const DiffusionBlockCallback& on_block, const std::string& record,
                                       const std::function<bool()>& stop, std::optional<int64_t> max_new_tokens) const {
    DiffusionGenerationConfig settings = settings_;
    if (max_new_tokens) settings.max_new_tokens = *max_new_tokens;
    DiffusionRecord recorded;
    DiffusionStepCallback on_step;
    if (!record.empty()) {
        check_replaceable(record, "run: --record");  // before the run, so a bad path costs nothing
        diffusion_logits_hash({});                   // a build without xxhash says so now, not after the run
    }
    if (!record.empty() || stop)
        on_step = [&](const DiffusionStep& step) {
            if (!record.empty()) recorded.steps.push_back(record_step(step));
            return !(stop && stop());
        };
    SeededDiffusionRandomness random(seed);
    const auto start = std::chrono::steady_clock::now();
    DiffusionRun run;
    run.generation = generate_diffusion(*diffusion_, prompt, settings, random, {}, on_block, on_step);
    run.generate_ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
    if (!record.empty()) {
        recorded.fingerprint = model_fingerprint(model_->weights());
        recorded.model_path = std::filesystem::absolute(path_).lexically_normal().string();
        recorded.backend = "cpu";
        recorded.canvas_length = config().canvas_length;
        recorded.n_vocab = config().n_vocab;
        recorded.seed = seed;
        recorded.prompt.assign(prompt.begin(), prompt.end());
        recorded.settings = settings;
        recorded.tokens = run.generation.tokens;
        recorded.steps_per_block = run.generation.steps_per_block;
        recorded.finished = run.generation.finished;
        write_diffusion_record(record, recorded, model_config_summary(config()));
    }
    return run;
}

std::span<const int32_t> diffusion_visible_tokens(std::span<const int32_t> tokens, const DiffusionGenerationConfig& g) {
    const auto eos = std::find_if(tokens.begin(), tokens.end(), [&](int32_t t) {
        return std::find(g.eos_ids.begin(), g.eos_ids.end(), int64_t(t)) != g.eos_ids.end();
    });
    return tokens.first(size_t(eos - tokens.begin()));
}

const char* diffusion_inapplicable_reason(std::string_view setting) {
    // The loop's temperature is a schedule from t_max down towards t_min over the denoising steps
    // (generation_config.json), not one number, and it samples every position of the canvas from the
    // plain softmax, so no part of the sampler chain has a place in it.
    struct Reason {
        std::string_view setting;
        const char* why;
    };
    static constexpr Reason kReasons[] = {
        {"temperature", "its temperature follows the t_max → t_min schedule of generation_config.json"},
        {"top_k", "it samples each canvas position from the whole softmax (no sampler chain)"},
        {"top_p", "it samples each canvas position from the whole softmax (no sampler chain)"},
        {"min_p", "it samples each canvas position from the whole softmax (no sampler chain)"},
        {"repeat_penalty", "penalties look back at earlier tokens, and a canvas is denoised all at once"},
        {"presence_penalty", "penalties look back at earlier tokens, and a canvas is denoised all at once"},
        {"frequency_penalty", "penalties look back at earlier tokens, and a canvas is denoised all at once"},
        {"penalty_last_n", "penalties look back at earlier tokens, and a canvas is denoised all at once"},
        {"dry", "DRY looks back at earlier tokens, and a canvas is denoised all at once"},
        {"stop", "a block is committed whole; it stops at the EOS ids of generation_config.json"},
        {"logprobs", "a committed token is the argmax of the last denoising step, not a draw whose probability could be reported"},
        {"tools", "the server forces and parses tool calls in a reply written left to right, and a block is written whole"},
        {"echo", "scoring a prompt needs next-token logits, and the encoder that reads the prompt computes none"},
    };
    for (const Reason& r : kReasons)
        if (r.setting == setting) return r.why;
    return nullptr;
}

}  // namespace deltabit
