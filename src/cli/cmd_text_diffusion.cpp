#include "cli/cmd_text_diffusion.h"

#include "cli/progress.h"
#include "core/error.h"
#include "core/file_io.h"
#include "formats/gguf.h"
#include "models/config_gguf.h"
#include "models/config_loader.h"
#include "models/config_summary.h"
#include "models/hf_folder.h"
#include "models/model_fingerprint.h"
#include "runtime/diffusion_generation_config.h"
#include "runtime/diffusion_record.h"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <filesystem>

namespace deltabit::cli {

namespace {

struct InapplicableFlag {
    const char* flag;
    const char* why;
};

// Why each flag does not reach the block loop. The loop's temperature is a schedule from t_max down
// towards t_min over the denoising steps (generation_config.json), not one number, and it samples every
// position of the canvas from the plain softmax, so no part of the sampler chain has a place in it.
constexpr InapplicableFlag kInapplicable[] = {
    {"--temperature", "its temperature follows the t_max → t_min schedule of generation_config.json"},
    {"--top-k", "it samples each canvas position from the whole softmax (no sampler chain)"},
    {"--top-p", "it samples each canvas position from the whole softmax (no sampler chain)"},
    {"--min-p", "it samples each canvas position from the whole softmax (no sampler chain)"},
    {"--repeat-penalty", "penalties look back at earlier tokens, and a canvas is denoised all at once"},
    {"--presence-penalty", "penalties look back at earlier tokens, and a canvas is denoised all at once"},
    {"--frequency-penalty", "penalties look back at earlier tokens, and a canvas is denoised all at once"},
    {"--penalty-last-n", "penalties look back at earlier tokens, and a canvas is denoised all at once"},
    {"--dry-multiplier", "DRY looks back at earlier tokens, and a canvas is denoised all at once"},
    {"--dry-base", "DRY looks back at earlier tokens, and a canvas is denoised all at once"},
    {"--dry-allowed-length", "DRY looks back at earlier tokens, and a canvas is denoised all at once"},
    {"--dry-window", "DRY looks back at earlier tokens, and a canvas is denoised all at once"},
    {"--stop", "a block is committed whole; it stops at the EOS ids of generation_config.json"},
    {"--kv", "its encoder cache is kept in f32 (the CPU reference)"},
    {"--ctx", "its cache grows with the prompt and the committed blocks"},
    {"--threads", "it runs on the single-threaded CPU reference"},
    {"--on-full", "each turn encodes the whole conversation afresh"},
};

}  // namespace

bool is_diffusion_model(const std::string& model) {
    try {
        if (is_hf_folder(model)) return load_hf_config(model).arch == Arch::diffusion_gemma;
        const gguf::File file = gguf::File::open(model);
        return model_config_from_gguf(file).arch == Arch::diffusion_gemma;
    } catch (const Error&) {
        return false;
    }
}

void refuse_flags_for_diffusion(const CLI::App& command, std::string_view name) {
    for (const InapplicableFlag& f : kInapplicable) {
        const CLI::Option* option = command.get_option_no_throw(f.flag);
        if (option && option->count() > 0)
            fail("{}: {} does not apply to a block-diffusion model: {}", name, f.flag, f.why);
    }
    const CLI::Option* backend = command.get_option_no_throw("--backend");
    if (backend && backend->count() > 0 && backend->as<std::string>() == "cuda")
        fail("{}: --backend cuda: block diffusion runs on the CPU reference only so far; use --backend cpu", name);
}

DiffusionRunner::DiffusionRunner(const std::string& model, std::optional<int64_t> max_tokens, bool progress)
    : path_(model) {
    ProgressLine line(fmt::format("loading {} (cpu)", std::filesystem::path(model).filename().string()), progress,
                      std::chrono::milliseconds(250));
    model_ = std::make_unique<const Model>(Model::load(model, [&line](uint64_t done, uint64_t total) {
        line.set_fraction(total == 0 ? 1.0 : double(done) / double(total));
    }));
    line.finish();
    diffusion_ = std::make_unique<const DiffusionGemma>(*model_);
    settings_ = load_diffusion_generation_config(model, model_->config());
    if (max_tokens) settings_.max_new_tokens = *max_tokens;
}

DiffusionRun DiffusionRunner::generate(std::span<const int32_t> prompt, uint64_t seed,
                                       const DiffusionBlockCallback& on_block, const std::string& record,
                                       const std::function<bool()>& stop) const {
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
    run.generation = generate_diffusion(*diffusion_, prompt, settings_, random, {}, on_block, on_step);
    run.generate_ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
    if (!record.empty()) {
        recorded.fingerprint = model_fingerprint(model_->weights());
        recorded.model_path = std::filesystem::absolute(path_).lexically_normal().string();
        recorded.backend = "cpu";
        recorded.canvas_length = config().canvas_length;
        recorded.n_vocab = config().n_vocab;
        recorded.seed = seed;
        recorded.prompt.assign(prompt.begin(), prompt.end());
        recorded.settings = settings_;
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

void add_diffusion_json(nlohmann::ordered_json& out, const DiffusionRun& run, const DiffusionGenerationConfig& g) {
    const DiffusionGeneration& d = run.generation;
    int64_t steps = 0;
    for (int64_t s : d.steps_per_block) steps += s;
    out["finish_reason"] = d.finished ? "stop" : "length";
    out["blocks"] = d.steps_per_block.size();
    out["steps_per_block"] = d.steps_per_block;
    out["denoising_steps"] = steps;
    out["tokens_per_forward"] = d.tokens_per_forward();
    out["settings"] = {{"max_new_tokens", g.max_new_tokens},
                       {"max_denoising_steps", g.max_denoising_steps},
                       {"entropy_bound", g.entropy_bound},
                       {"t_min", g.t_min},
                       {"t_max", g.t_max},
                       {"stability_threshold", g.stability_threshold},
                       {"confidence_threshold", g.confidence_threshold},
                       {"eos_ids", g.eos_ids},
                       {"pad_id", g.pad_id}};
}

}  // namespace deltabit::cli
