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

}  // namespace deltabit
