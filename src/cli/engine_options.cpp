#include "cli/engine_options.h"

#include "cli/progress.h"
#include "core/error.h"

#include <fmt/format.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <thread>

namespace deltabit::cli {

void add_backend_option(CLI::App& command, EngineArgs& args) {
    command.add_option("--backend", args.backend, fmt::format("where the model runs: {}", kBackendChoices))
        ->check(CLI::IsMember({"cpu", "cuda", "auto"}))
        ->capture_default_str();
    command.add_option("--threads", args.threads,
                       fmt::format("CPU threads for the CPU backend (default: every core, {} here)", cpu_threads({})))
        ->check(CLI::Validator(
            [](std::string& text) -> std::string {
                char* end = nullptr;
                const long value = std::strtol(text.c_str(), &end, 10);
                if (end == text.c_str() || *end != '\0' || value < 1 || value > kMaxThreads)
                    return fmt::format("{} is out of range: it must be a whole number in 1 .. {}", text, kMaxThreads);
                return {};
            },
            "", "thread count"));
}

void add_model_argument(CLI::App& command, ModelArgument& model, const std::string& positional_name,
                        const std::string& description) {
    CLI::Option* positional = command.add_option(positional_name, model.positional, description + " (or -m)");
    CLI::Option* flag = command.add_option("-m,--model", model.flag, description);
    positional->excludes(flag);
}

const std::string& model_argument(const ModelArgument& model, std::string_view command) {
    if (!model.positional.empty()) return model.positional;
    if (!model.flag.empty()) return model.flag;
    fail("{}: no model given: deltabit {} MODEL, or -m MODEL", command, command);
}

std::string default_model_path() {
    return (std::filesystem::path(DELTABIT_SOURCE_DIR) / "models" / "bytelm-hybrid-14m.q1_0.gguf").string();
}

std::string model_or_default(const std::string& given, std::string_view command) {
    if (!given.empty()) return given;
    std::string path = default_model_path();
    std::error_code error;
    if (!std::filesystem::is_regular_file(path, error))
        fail("{}: no model given, and the default model {} is not there (the source tree this deltabit was "
             "built from has moved or lacks models/): give one with -m MODEL",
             command, path);
    return path;
}

int cpu_threads(const EngineArgs& args) {
    if (args.threads > 0) return args.threads;
    return std::max(1, int(std::thread::hardware_concurrency()));
}

void add_sequence_options(CLI::App& command, SequenceArgs& args) {
    command.add_option("--kv", args.kv, "KV cache format: f32 (exact), f16, or kivi4 (KIVI 4-bit)")
        ->check(CLI::IsMember({"f32", "f16", "kivi4"}))
        ->capture_default_str();
    command.add_option("--ctx", args.ctx,
                       fmt::format("context capacity in tokens (default: the model's training context, at most {}; "
                                   "{} when the model does not say)",
                                   kDefaultContextCap, kFallbackContext));
}

int64_t default_context(const ModelConfig& config) {
    if (config.context_length <= 0) return kFallbackContext;
    return std::min(config.context_length, kDefaultContextCap);
}

SequenceOptions sequence_options(const SequenceArgs& args, const ModelConfig& config, std::string_view command) {
    SequenceOptions options;
    const std::optional<KvFormat> kv = parse_kv_format(args.kv);
    if (!kv) fail("{}: --kv {:?}: expected f32, f16 or kivi4", command, args.kv);
    options.kv_format = *kv;
    options.max_positions = args.ctx.value_or(default_context(config));
    if (options.max_positions < 2)
        fail("{}: --ctx {}: the context must hold at least a prompt token and a reply", command, options.max_positions);
    return options;
}

std::unique_ptr<Engine> open_engine_for(const std::string& model, const EngineArgs& args, bool show_progress) {
    ProgressLine progress(fmt::format("loading {} ({})", std::filesystem::path(model).filename().string(), args.backend),
                          show_progress, std::chrono::milliseconds(250));
    std::unique_ptr<Engine> engine =
        open_engine(model, args.backend, [&progress](double fraction) { progress.set_fraction(fraction); });
    engine->set_cpu_threads(cpu_threads(args));
    return engine;
}

void require_an_end(std::string_view command, const std::string& model, const ModelConfig& config,
                    const std::optional<int64_t>& max_tokens) {
    if (config.eos_ids.empty() && !max_tokens)
        fail("{}: {}: the model's metadata declares no EOS token, so a reply would never end on its own; "
             "give --max-tokens N",
             command, model);
}

}  // namespace deltabit::cli
