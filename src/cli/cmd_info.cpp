// `deltabit info MODEL [--json]`: what a model file holds and what the engine makes of it.
//
// MODEL is a GGUF file or a Hugging Face folder (config.json + safetensors). For a GGUF the report is
// built once as JSON (describe_gguf) and the text form is rendered from that object, so the two
// outputs cannot disagree. Shapes are printed in each format's own order: ggml order for GGUF
// (ne0, the contiguous row length, first), PyTorch order for safetensors.
#include "cli/commands.h"
#include "cli/engine_options.h"
#include "core/error.h"
#include "formats/gguf.h"
#include "models/config_gguf.h"
#include "models/config_summary.h"
#include "models/hf_folder.h"
#include "models/kv_cache.h"
#include "models/kv_format.h"
#include "models/sequence_state.h"

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <map>
#include <string>

namespace deltabit::cli {
namespace {

using nlohmann::json;

// ---- GGUF → JSON ----

json value_to_json(const gguf::Value& v) {
    using gguf::ValueType;
    if (v.is_array()) {
        json out = json::array();
        if (v.element_type() == ValueType::STRING) {
            for (const std::string& s : v.string_elements()) out.push_back(s);
        } else {
            for (size_t i = 0; i < v.size(); ++i) out.push_back(value_to_json(v.at(i)));
        }
        return out;
    }
    if (v.is_string()) return v.as_string();
    if (v.type() == ValueType::BOOL) return v.as_bool();
    if (v.is_float()) return v.as_f64();
    if (v.type() == ValueType::INT8 || v.type() == ValueType::INT16 || v.type() == ValueType::INT32 ||
        v.type() == ValueType::INT64) {
        return v.as_i64();
    }
    return v.as_u64();
}

json optional_value(const gguf::File& file, std::string_view key) {
    const gguf::Value* v = file.find(key);
    return v ? value_to_json(*v) : json();
}

// Every "<arch>.*" key: the architecture's hyperparameters, under their full key names.
json hyperparameters(const gguf::File& file, const std::string& arch) {
    json out = json::object();
    if (arch.empty()) return out;
    const std::string prefix = arch + ".";
    for (const gguf::KeyValue& kv : file.metadata()) {
        if (kv.key.starts_with(prefix)) out[kv.key] = value_to_json(kv.value);
    }
    return out;
}

json tokenizer_summary(const gguf::File& file) {
    const gguf::Value* tokens = file.find("tokenizer.ggml.tokens");
    return {
        {"model", optional_value(file, "tokenizer.ggml.model")},
        {"pre", optional_value(file, "tokenizer.ggml.pre")},
        {"vocab_size", tokens && tokens->is_array() ? json(tokens->size()) : json()},
        {"bos_token_id", optional_value(file, "tokenizer.ggml.bos_token_id")},
        {"eos_token_id", optional_value(file, "tokenizer.ggml.eos_token_id")},
        {"chat_template", file.has("tokenizer.chat_template")},
    };
}

json tensor_table(const gguf::File& file) {
    json out = json::array();
    for (const gguf::TensorInfo& t : file.tensors()) {
        out.push_back({{"name", t.name},
                       {"type", dtype_name(t.dtype)},
                       {"shape", t.shape},
                       {"elements", t.n_elements()},
                       {"bytes", t.bytes},
                       {"offset", t.offset}});
    }
    return out;
}

double bits_per_weight(uint64_t bytes, uint64_t elements) {
    return elements == 0 ? 0.0 : 8.0 * static_cast<double>(bytes) / static_cast<double>(elements);
}

// Parameters, bytes and bits per weight over all tensors and per type (in DType order).
json totals(const gguf::File& file) {
    struct Sum {
        uint64_t tensors = 0, elements = 0, bytes = 0;
    };
    std::map<DType, Sum> by_type;
    Sum all;
    for (const gguf::TensorInfo& t : file.tensors()) {
        for (Sum* s : {&by_type[t.dtype], &all}) {
            s->tensors += 1;
            s->elements += t.n_elements();
            s->bytes += t.bytes;
        }
    }
    auto to_json = [](const Sum& s) {
        return json{{"tensors", s.tensors},
                    {"parameters", s.elements},
                    {"bytes", s.bytes},
                    {"bits_per_weight", bits_per_weight(s.bytes, s.elements)}};
    };
    json types = json::object();
    for (const auto& [dtype, sum] : by_type) types[std::string(dtype_name(dtype))] = to_json(sum);
    json out = to_json(all);
    out["by_type"] = std::move(types);
    return out;
}

// The engine's reading of the hyperparameters, or why it cannot run the file.
void add_engine_view(const gguf::File& file, json& out) {
    try {
        out["config"] = model_config_to_json(model_config_from_gguf(file));
        out["config_error"] = nullptr;
    } catch (const Error& e) {
        out["config"] = nullptr;
        out["config_error"] = e.what();
    }
}

json describe_gguf(const gguf::File& file) {
    const std::string arch = file.get_string("general.architecture", "");
    json out = {
        {"path", file.path()},
        {"format", "gguf"},
        {"version", file.version()},
        {"file_size", file.file_size()},
        {"alignment", file.alignment()},
        {"metadata_count", file.metadata().size()},
        {"architecture", arch.empty() ? json() : json(arch)},
        {"name", optional_value(file, "general.name")},
        {"hyperparameters", hyperparameters(file, arch)},
        {"tokenizer", tokenizer_summary(file)},
        {"tensors", tensor_table(file)},
        {"totals", totals(file)},
    };
    add_engine_view(file, out);
    return out;
}

// ---- JSON → text ----

std::string human_bytes(uint64_t bytes) {
    static constexpr const char* kUnits[] = {"B", "KiB", "MiB", "GiB", "TiB"};
    double v = static_cast<double>(bytes);
    size_t unit = 0;
    while (v >= 1024.0 && unit + 1 < std::size(kUnits)) v /= 1024.0, ++unit;
    return unit == 0 ? fmt::format("{} B", bytes) : fmt::format("{:.2f} {}", v, kUnits[unit]);
}

std::string json_text(const json& v) {
    if (v.is_null()) return "-";
    if (v.is_string()) return v.get<std::string>();
    if (v.is_number_float()) return fmt::format("{:g}", v.get<double>());
    return v.dump();
}

std::string shape_text(const json& shape) {
    std::vector<int64_t> dims = shape.get<std::vector<int64_t>>();
    return fmt::format("[{}]", fmt::join(dims, ", "));
}

void print_header(const json& r) {
    const auto size = r["file_size"].get<uint64_t>();
    const std::string size_text = size < 1024 ? fmt::format("{} bytes", size) : fmt::format("{} ({} bytes)", human_bytes(size), size);
    fmt::print("{}: GGUF v{}, {}, alignment {}, {} metadata keys, {} tensors\n", r["path"].get<std::string>(),
               json_text(r["version"]), size_text, json_text(r["alignment"]), json_text(r["metadata_count"]),
               r["tensors"].size());
    fmt::print("  {:<16}{}\n", "architecture", json_text(r["architecture"]));
    fmt::print("  {:<16}{}\n", "name", json_text(r["name"]));
}

void print_hyperparameters(const json& r) {
    if (r["hyperparameters"].empty()) return;
    fmt::print("hyperparameters:\n");
    size_t width = 0;
    for (const auto& [key, _] : r["hyperparameters"].items()) width = std::max(width, key.size());
    // items() of a json object iterate in key order; that groups related keys (attention.*, ssm.*).
    for (const auto& [key, value] : r["hyperparameters"].items()) {
        fmt::print("  {:<{}}  {}\n", key, width, json_text(value));
    }
}

void print_tokenizer(const json& r) {
    const json& t = r["tokenizer"];
    fmt::print("tokenizer: model {}, pre {}, vocab {}, bos {}, eos {}, chat template {}\n", json_text(t["model"]),
               json_text(t["pre"]), json_text(t["vocab_size"]), json_text(t["bos_token_id"]),
               json_text(t["eos_token_id"]), t["chat_template"].get<bool>() ? "yes" : "no");
}

// The engine's reading, with model_config_summary's labels (recomputed: the JSON holds raw fields).
void print_engine_view(const gguf::File& file, const json& r) {
    if (r["config"].is_null()) {
        fmt::print("engine: cannot run this file: {}\n", r["config_error"].get<std::string>());
        return;
    }
    fmt::print("engine:\n");
    for (const auto& [key, value] : model_config_summary(model_config_from_gguf(file))) {
        fmt::print("  {:<16}{}\n", key, value);
    }
}

void print_tensors(const json& r) {
    size_t name_width = 4, shape_width = 5;
    for (const json& t : r["tensors"]) {
        name_width = std::max(name_width, t["name"].get<std::string>().size());
        shape_width = std::max(shape_width, shape_text(t["shape"]).size());
    }
    fmt::print("tensors (shape in ggml order, row length first):\n");
    fmt::print("  {:<{}}  {:<8}  {:<{}}  {:>14}\n", "name", name_width, "type", "shape", shape_width, "bytes");
    for (const json& t : r["tensors"]) {
        fmt::print("  {:<{}}  {:<8}  {:<{}}  {:>14}\n", t["name"].get<std::string>(), name_width,
                   t["type"].get<std::string>(), shape_text(t["shape"]), shape_width, t["bytes"].get<uint64_t>());
    }
}

void print_totals(const json& r) {
    fmt::print("totals:\n");
    fmt::print("  {:<10}  {:>7}  {:>14}  {:>14}  {:>11}\n", "type", "tensors", "parameters", "bytes", "bits/weight");
    auto line = [](const std::string& label, const json& s) {
        fmt::print("  {:<10}  {:>7}  {:>14}  {:>14}  {:>11.4f}\n", label, s["tensors"].get<uint64_t>(),
                   s["parameters"].get<uint64_t>(), s["bytes"].get<uint64_t>(), s["bits_per_weight"].get<double>());
    };
    for (const auto& [type, s] : r["totals"]["by_type"].items()) line(type, s);
    line("all", r["totals"]);
}

void print_gguf(const gguf::File& file, const json& r) {
    print_header(r);
    print_hyperparameters(r);
    print_tokenizer(r);
    print_engine_view(file, r);
    print_tensors(r);
    print_totals(r);
}

// ---- KV cache memory (--kv) ----

// What one sequence of this model holds per format: bytes per further token, at 1K and 32K positions
// (models/sequence_state.h computes them from the state image layout), and the DeltaNet state.
json kv_cache_report(const ModelConfig& c) {
    int64_t attention_layers = 0;
    for (LayerKind kind : c.layers) attention_layers += kind == LayerKind::full_attention;
    json formats = json::array();
    for (KvFormat f : {KvFormat::f32, KvFormat::f16, KvFormat::kivi4}) {
        json row = {{"format", kv_format_name(f)}};
        if (f == KvFormat::kivi4 && c.head_dim % kKiviGroup != 0) {
            row["unavailable"] =
                fmt::format("head_dim {} is not a multiple of the group size {}", c.head_dim, kKiviGroup);
        } else {
            row["bytes_per_token"] = kv_bytes_per_token(c, f);
            row["bytes_1k"] = kv_cache_bytes(c, f, 1024);
            row["bytes_32k"] = kv_cache_bytes(c, f, 32768);
        }
        formats.push_back(std::move(row));
    }
    // Attention layers that a kivi4 sequence keeps in f16 (models/kv_format.h, layer_kv_format).
    json kivi4_f16_layers = json::array();
    for (int64_t l = 0; l < c.n_layer(); ++l)
        if (c.layers[size_t(l)] == LayerKind::full_attention && layer_kv_format(c, KvFormat::kivi4, l) == KvFormat::f16)
            kivi4_f16_layers.push_back(l);
    return {{"full_attention_layers", attention_layers},
            {"kivi4_f16_layers", std::move(kivi4_f16_layers)},
            {"n_head_kv", c.n_head_kv},
            {"head_dim", c.head_dim},
            {"deltanet_state_bytes", deltanet_state_bytes(c)},
            {"formats", std::move(formats)}};
}

void print_kv_cache(const std::string& model, const json& r) {
    const auto layers = r["full_attention_layers"].get<int64_t>();
    fmt::print("{}: KV cache of {} full-attention layer{}, {} KV heads x head_dim {}\n", model, layers,
               layers == 1 ? "" : "s", json_text(r["n_head_kv"]), json_text(r["head_dim"]));
    fmt::print("  {:<7}  {:>12}  {:>14}  {:>14}\n", "format", "bytes/token", "1K context", "32K context");
    for (const json& f : r["formats"]) {
        if (f.contains("unavailable")) {
            fmt::print("  {:<7}  unavailable: {}\n", f["format"].get<std::string>(),
                       f["unavailable"].get<std::string>());
            continue;
        }
        fmt::print("  {:<7}  {:>12g}  {:>14}  {:>14}\n", f["format"].get<std::string>(),
                   f["bytes_per_token"].get<double>(), human_bytes(f["bytes_1k"].get<uint64_t>()),
                   human_bytes(f["bytes_32k"].get<uint64_t>()));
    }
    fmt::print("  kivi4 keeps the first {} and the newest {}..{} tokens exact (f32) and the rest at 4 bits in "
               "groups of {}\n",
               kKiviSinks, kKiviResidual, kKiviResidual + kKiviGroup - 1, kKiviGroup);
    for (const json& layer : r["kivi4_f16_layers"])
        fmt::print("  kivi4 keeps layer {} in f16: nothing mixes tokens before it, so quantising it costs the most\n",
                   layer.get<int64_t>());
    const auto deltanet = r["deltanet_state_bytes"].get<uint64_t>();
    if (deltanet > 0)
        fmt::print("  DeltaNet conv + recurrent state: {} per sequence, at any length\n", human_bytes(deltanet));
}

void info_kv_cache(const std::string& model, bool as_json) {
    const std::filesystem::path path(model);
    const ModelConfig config = std::filesystem::is_directory(path)
                                   ? open_hf_folder(path).config
                                   : model_config_from_gguf(gguf::File::open(model));
    const json report = kv_cache_report(config);
    if (as_json) {
        fmt::print("{}\n", json{{"path", model}, {"kv_cache", report}}.dump(2));
    } else {
        print_kv_cache(model, report);
    }
}

// ---- dispatch ----

void info_hf_folder(const std::filesystem::path& path, bool as_json) {
    const HfFolder folder = open_hf_folder(path);
    if (as_json) {
        fmt::print("{}\n", hf_folder_to_json(folder).dump(2));
    } else {
        fmt::print("{}", describe_hf_folder(folder));
    }
}

void info_gguf(const std::string& path, bool as_json) {
    const gguf::File file = gguf::File::open(path);
    const json report = describe_gguf(file);
    if (as_json) {
        fmt::print("{}\n", report.dump(2));
    } else {
        print_gguf(file, report);
    }
}

// The one place that decides what kind of model MODEL is.
void run_info(const std::string& model, bool as_json, bool kv) {
    if (kv) {
        info_kv_cache(model, as_json);
        return;
    }
    const std::filesystem::path path(model);
    if (std::filesystem::is_directory(path)) {
        if (!is_hf_folder(path)) fail("info: {}: a folder without config.json is not a Hugging Face model", model);
        info_hf_folder(path, as_json);
        return;
    }
    info_gguf(model, as_json);  // anything else must be a GGUF; the reader says so when it is not
}

}  // namespace

void add_info_command(CLI::App& app) {
    struct Args {
        ModelArgument model;
        bool json = false;
        bool kv = false;
    };
    auto args = std::make_shared<Args>();
    CLI::App* cmd = app.add_subcommand("info", "Show a model's metadata, tensors, types and sizes");
    add_model_argument(*cmd, args->model, "MODEL", "GGUF file or Hugging Face folder");
    cmd->add_flag("--json", args->json, "Print one JSON object instead of text");
    cmd->add_flag("--kv", args->kv, "Print only the KV cache's memory per token and at 1K/32K context, per format");
    cmd->callback([args] { run_info(model_argument(args->model, "info"), args->json, args->kv); });
}

}  // namespace deltabit::cli
