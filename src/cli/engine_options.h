// The options every command that runs a model shares, so they read and behave the same everywhere:
//   --backend cpu|cuda|auto   where the model runs (open_engine); auto = CUDA when built with it and a
//                             GPU is present
//   --kv f32|f16|kivi4        how full-attention keys and values are stored (commands that keep a sequence)
//   --ctx N                   the sequence's capacity in tokens (ditto)
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

struct EngineArgs {
    std::string backend = "auto";
};

struct SequenceArgs {
    std::string kv = "f32";
    std::optional<int64_t> ctx;
};

void add_backend_option(CLI::App& command, EngineArgs& args);
void add_sequence_options(CLI::App& command, SequenceArgs& args);

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
