#include "cli/cmd_text_diffusion.h"

#include "cli/progress.h"
#include "core/error.h"

#include <fmt/format.h>

#include <chrono>
#include <filesystem>

namespace deltabit::cli {

namespace {

struct InapplicableFlag {
    const char* flag;
    const char* setting;  // diffusion_inapplicable_reason's name for it
    const char* why = nullptr;  // for the flags only the commands have
};

// The words for the sampler settings and --stop are the server's too (diffusion_inapplicable_reason).
constexpr InapplicableFlag kInapplicable[] = {
    {"--temperature", "temperature"},
    {"--top-k", "top_k"},
    {"--top-p", "top_p"},
    {"--min-p", "min_p"},
    {"--repeat-penalty", "repeat_penalty"},
    {"--presence-penalty", "presence_penalty"},
    {"--frequency-penalty", "frequency_penalty"},
    {"--penalty-last-n", "penalty_last_n"},
    {"--dry-multiplier", "dry"},
    {"--dry-base", "dry"},
    {"--dry-allowed-length", "dry"},
    {"--dry-window", "dry"},
    {"--stop", "stop"},
    {"--kv", "", "its encoder cache is kept in f32"},
    {"--ctx", "", "its cache grows with the prompt and the committed blocks"},
    {"--threads", "", "its CPU backend is the single-threaded reference"},
    {"--on-full", "", "each turn encodes the whole conversation afresh"},
};

}  // namespace

void refuse_flags_for_diffusion(const CLI::App& command, std::string_view name) {
    for (const InapplicableFlag& f : kInapplicable) {
        const CLI::Option* option = command.get_option_no_throw(f.flag);
        if (option && option->count() > 0)
            fail("{}: {} does not apply to a block-diffusion model: {}", name, f.flag,
                 f.why ? f.why : diffusion_inapplicable_reason(f.setting));
    }
}

std::unique_ptr<DiffusionRunner> load_diffusion_runner(const std::string& model, const std::string& backend,
                                                       std::optional<int64_t> max_tokens, bool progress) {
    ProgressLine line(fmt::format("loading {} ({})", std::filesystem::path(model).filename().string(), backend), progress,
                      std::chrono::milliseconds(250));
    auto runner = std::make_unique<DiffusionRunner>(model, backend, max_tokens,
                                                    [&line](double fraction) { line.set_fraction(fraction); });
    line.finish();
    return runner;
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
