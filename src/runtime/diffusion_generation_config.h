// A diffusion model's generation settings as transformers would take them (../shared/reference/
// diffusion-gemma.md §3 "Effective parameters"): the global defaults (DiffusionGenerationConfig),
// overridden by the model folder's generation_config.json where a field is set (null means unset), and
// then by the command's flags (the caller's part).
//
// EOS stopping and pad replacement follow generation_config.json's eos_token_id and pad_token_id, as in
// transformers (the model config's own eos ids are not consulted). A single-file model (GGUF) has no
// generation_config.json: there the model's eos ids and pad id are used, so that a converted model still
// stops at its end of turn.
#pragma once

#include "models/model_config.h"
#include "runtime/diffusion_generate.h"

#include <filesystem>

namespace deltabit {

// Error naming the file and the field for a file that is not JSON or a field of the wrong type.
DiffusionGenerationConfig load_diffusion_generation_config(const std::filesystem::path& model_path,
                                                           const ModelConfig& config);

}  // namespace deltabit
