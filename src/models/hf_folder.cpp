#include "models/hf_folder.h"

#include "core/error.h"
#include "models/config_loader.h"
#include "models/config_summary.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <fstream>
#include <sstream>

namespace deltabit {

bool is_hf_folder(const std::filesystem::path& path) {
    std::error_code ec;
    return std::filesystem::is_directory(path, ec) && std::filesystem::is_regular_file(path / "config.json", ec);
}

HfFolder open_hf_folder(const std::filesystem::path& path) {
    std::error_code ec;
    if (!std::filesystem::is_directory(path, ec)) fail("{}: not a folder", path.string());
    const std::filesystem::path config_path = path / "config.json";
    if (!std::filesystem::is_regular_file(config_path, ec))
        fail("{}: no config.json (not a Hugging Face model folder)", path.string());

    HfFolder folder;
    folder.path = path;
    std::ifstream in(config_path, std::ios::binary);
    if (!in) fail("{}: cannot open", config_path.string());
    std::stringstream text;
    text << in.rdbuf();
    try {
        folder.raw_config = nlohmann::json::parse(text.str());
    } catch (const nlohmann::json::parse_error& e) {
        fail("{}: malformed JSON at byte {}", config_path.string(), e.byte > 0 ? e.byte - 1 : 0);
    }
    folder.config = model_config_from_hf_json(folder.raw_config, config_path.string());
    folder.weights = safetensors::Set::open(path);
    if (std::filesystem::is_regular_file(path / "tokenizer.json", ec)) folder.tokenizer = path / "tokenizer.json";
    return folder;
}

namespace {

std::string human_bytes(uint64_t bytes) {
    if (bytes >= (1ull << 30)) return fmt::format("{:.2f} GiB", double(bytes) / double(1ull << 30));
    if (bytes >= (1ull << 20)) return fmt::format("{:.2f} MiB", double(bytes) / double(1ull << 20));
    if (bytes >= (1ull << 10)) return fmt::format("{:.2f} KiB", double(bytes) / double(1ull << 10));
    return fmt::format("{} B", bytes);
}

}  // namespace

std::string describe_hf_folder(const HfFolder& folder, bool list_tensors) {
    std::string out = fmt::format("{}: Hugging Face folder, model_type {}\n", folder.path.string(),
                                  folder.raw_config.value("model_type", std::string("?")));
    for (const auto& [key, value] : model_config_summary(folder.config)) out += fmt::format("  {:<16}{}\n", key, value);
    out += fmt::format("  {:<16}{}\n", "tokenizer", folder.tokenizer.empty() ? "none" : folder.tokenizer.string());
    if (list_tensors) {
        size_t width = 0;
        for (const safetensors::TensorInfo* t : folder.weights) width = std::max(width, t->name.size());
        out += "tensors:\n";
        for (const safetensors::TensorInfo* t : folder.weights)
            out += fmt::format("  {:<{}}  {:<5} [{}]  {}\n", t->name, width, t->dtype_name, fmt::join(t->shape, ", "),
                               t->bytes);
    }
    out += fmt::format("{} tensors in {} file(s), {} ({} bytes)\n", folder.weights.size(), folder.weights.files().size(),
                       human_bytes(folder.weights.total_bytes()), folder.weights.total_bytes());
    return out;
}

nlohmann::json hf_folder_to_json(const HfFolder& folder) {
    nlohmann::json j;
    j["path"] = folder.path.string();
    j["format"] = "huggingface";
    j["model_type"] = folder.raw_config.value("model_type", std::string());
    j["config"] = model_config_to_json(folder.config);
    nlohmann::json tensors = nlohmann::json::array();
    for (const safetensors::TensorInfo* t : folder.weights)
        tensors.push_back({{"name", t->name}, {"dtype", t->dtype_name}, {"shape", t->shape}, {"bytes", t->bytes},
                           {"file", std::filesystem::path(t->file).filename().string()}});
    j["tensors"] = std::move(tensors);
    j["total_bytes"] = folder.weights.total_bytes();
    nlohmann::json files = nlohmann::json::array();
    for (const safetensors::File& f : folder.weights.files()) files.push_back(f.name());
    j["files"] = std::move(files);
    j["tokenizer"] = folder.tokenizer.empty() ? nlohmann::json() : nlohmann::json(folder.tokenizer.string());
    return j;
}

}  // namespace deltabit
