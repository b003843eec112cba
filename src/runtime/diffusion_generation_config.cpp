#include "runtime/diffusion_generation_config.h"

#include "core/error.h"
#include "core/file_io.h"

#include <nlohmann/json.hpp>

namespace deltabit {

namespace {

template <typename T>
void take(const nlohmann::json& j, const char* field, T& value) {
    if (j.contains(field) && !j.at(field).is_null()) value = j.at(field).get<T>();
}

}  // namespace

DiffusionGenerationConfig load_diffusion_generation_config(const std::filesystem::path& model_path,
                                                           const ModelConfig& config) {
    DiffusionGenerationConfig g;
    const std::filesystem::path file = model_path / "generation_config.json";
    if (!std::filesystem::is_directory(model_path) || !std::filesystem::exists(file)) {
        g.eos_ids = config.eos_ids;
        g.pad_id = config.pad_id;
        return g;
    }
    try {
        const nlohmann::json j = nlohmann::json::parse(read_regular_file(file, "generation config"));
        take(j, "max_new_tokens", g.max_new_tokens);
        take(j, "max_denoising_steps", g.max_denoising_steps);
        take(j, "t_min", g.t_min);
        take(j, "t_max", g.t_max);
        take(j, "stability_threshold", g.stability_threshold);
        take(j, "confidence_threshold", g.confidence_threshold);
        // transformers serialises EntropyBoundSamplerConfig as an object holding entropy_bound.
        if (j.contains("sampler_config") && j.at("sampler_config").is_object())
            take(j.at("sampler_config"), "entropy_bound", g.entropy_bound);
        if (j.contains("eos_token_id") && !j.at("eos_token_id").is_null()) {
            const nlohmann::json& eos = j.at("eos_token_id");
            g.eos_ids = eos.is_array() ? eos.get<std::vector<int64_t>>() : std::vector<int64_t>{eos.get<int64_t>()};
        }
        take(j, "pad_token_id", g.pad_id);
    } catch (const nlohmann::json::exception& e) {
        fail("{}: {}", file.string(), e.what());
    }
    return g;
}

}  // namespace deltabit
