// The options every command that runs a model shares, so they read and behave the same everywhere:
//   --backend cpu|cuda|auto   where the model runs (open_engine); auto = CUDA when built with it and a
//                             GPU is present
//   --kv f32|f16|kivi4        how full-attention keys and values are stored (commands that keep a sequence)
//   --ctx N                   the sequence's capacity in tokens (ditto)
//   --threads N               CPU threads for the CPU backend's matmuls (default: every core)
#pragma once

#include "models/model_config.h"
#include "runtime/engine.h"

#include <CLI/CLI.hpp>

#include <cstdint>
#include <memory>
#include <optional>
#include <string>

namespace deltabit::cli {

// The context a sequence gets without --ctx: the model's training context, capped so that a chat on a
// long-context model (Qwen3.5: 262144) does not reserve gigabytes of KV cache it will rarely use.
// 8192 tokens of f32 KV for Bonsai-27B's 16 attention layers (4 KV heads × 256 dims) is 1 GiB.
inline constexpr int64_t kDefaultContextCap = 8192;
// Used when the model's metadata states no training context.
inline constexpr int64_t kFallbackContext = 4096;

// The most --threads accepts: far past any CPU, and small enough that a typo (--threads 10000) is caught.
inline constexpr int kMaxThreads = 1024;

struct EngineArgs {
    std::string backend = "auto";
    // --threads: parsed and range-checked here (1 .. kMaxThreads); 0 means "every core" and is
    // resolved by cpu_threads(). open_engine_for hands it to the engine (Engine::set_cpu_threads: the
    // CPU backend's matmul threads; the CUDA backend ignores it).
    int threads = 0;
};

// --threads resolved: the number given, or std::thread::hardware_concurrency() (at least 1).
int cpu_threads(const EngineArgs& args);

struct SequenceArgs {
    std::string kv = "f32";
    std::optional<int64_t> ctx;
};

void add_backend_option(CLI::App& command, EngineArgs& args);

// For commands that take the model as a positional argument (info, convert): `-m/--model PATH` is
// accepted too, so every command can name its model the same way. Both given is a usage error.
// Call model_argument() in the callback: the one given, or an Error naming `command` when neither is.
struct ModelArgument {
    std::string positional;
    std::string flag;
};
void add_model_argument(CLI::App& command, ModelArgument& model, const std::string& positional_name,
                        const std::string& description);
const std::string& model_argument(const ModelArgument& model, std::string_view command);
void add_sequence_options(CLI::App& command, SequenceArgs& args);

// The model run, chat and serve use when no -m is given: the trained default model that ships in models/
// (models/README.md), the one the README's main command (`make run`) talks to. A path in this build's
// source tree, so an installed binary still finds it while the tree is there.
std::string default_model_path();
// `given`, or the default model when it is empty. Error for `command` when the default is needed and is
// not there (a moved or partial checkout), naming the path and what to do.
std::string model_or_default(const std::string& given, std::string_view command);

int64_t default_context(const ModelConfig& config);
// --kv and --ctx resolved against the model (Error naming the option for a bad value).
SequenceOptions sequence_options(const SequenceArgs& args, const ModelConfig& config, std::string_view command);

// A model whose metadata declares no EOS token can only stop at a token limit: Error for `command`
// (naming the model and the flag to give) when there is none. Checked right after loading, before any
// prompt is read.
void require_an_end(std::string_view command, const std::string& model, const ModelConfig& config,
                    const std::optional<int64_t>& max_tokens);

// open_engine with a progress line on stderr while the model loads (see progress.h for when it draws).
std::unique_ptr<Engine> open_engine_for(const std::string& model, const EngineArgs& args, bool show_progress);

}  // namespace deltabit::cli
