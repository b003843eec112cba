#include "convert/convert_tokenizer.h"

#include "core/error.h"

#include <nlohmann/json.hpp>

#include <fstream>
#include <sstream>

namespace deltabit {

namespace {

// llama.cpp's TokenType values (gguf-py constants.py).
constexpr int32_t kNormal = 1, kControl = 3, kUserDefined = 4, kUnused = 5;

nlohmann::json read_json(const std::filesystem::path& path) {
    std::ifstream in(path);
    if (!in) fail("convert: cannot read {}", path.string());
    try {
        return nlohmann::json::parse(in);
    } catch (const nlohmann::json::exception& e) {
        fail("convert: {}: not valid JSON: {}", path.string(), e.what());
    }
}

// A token named in tokenizer_config.json: a string, or {"content": "..."}.
std::string token_content(const nlohmann::json& v) {
    if (v.is_string()) return v.get<std::string>();
    if (v.is_object() && v.contains("content") && v["content"].is_string()) return v["content"].get<std::string>();
    return {};
}

}  // namespace

std::string_view tokenizer_pre_name(Arch arch) {
    return arch == Arch::qwen35 || arch == Arch::qwen35moe ? "qwen35" : "qwen2";
}

void write_tokenizer_gguf(const std::filesystem::path& path, const ModelConfig& config, gguf::Writer& w) {
    const std::string file = path.string();
    const nlohmann::json j = read_json(path);
    const nlohmann::json* model = j.contains("model") ? &j["model"] : nullptr;
    if (!model || !model->is_object() || model->value("type", "") != "BPE")
        fail("convert: {}: model.type must be \"BPE\" (only byte-level BPE tokenizers are written to GGUF)", file);
    if (!model->contains("vocab") || !(*model)["vocab"].is_object()) fail("convert: {}: model.vocab: missing", file);

    std::vector<std::pair<int64_t, std::string>> entries;
    int64_t max_id = -1;
    for (const auto& [token, id] : (*model)["vocab"].items()) {
        if (!id.is_number_integer() || id.get<int64_t>() < 0) fail("convert: {}: model.vocab.{}: not a token id", file, token);
        entries.emplace_back(id.get<int64_t>(), token);
        max_id = std::max(max_id, id.get<int64_t>());
    }
    struct Added {
        int64_t id;
        std::string content;
        bool special;
    };
    std::vector<Added> added;
    if (j.contains("added_tokens") && j["added_tokens"].is_array()) {
        for (const auto& t : j["added_tokens"]) {
            if (!t.contains("id") || !t["id"].is_number_integer() || !t.contains("content"))
                fail("convert: {}: added_tokens: an entry without id or content", file);
            added.push_back({t["id"].get<int64_t>(), t["content"].get<std::string>(), t.value("special", false)});
            max_id = std::max(max_id, added.back().id);
        }
    }
    if (config.n_vocab > 0 && max_id >= config.n_vocab)
        fail("convert: {}: token id {} is outside the model's vocabulary of {}", file, max_id, config.n_vocab);
    const int64_t n = std::max(config.n_vocab, max_id + 1);
    std::vector<std::string> tokens(static_cast<size_t>(n));
    std::vector<int32_t> types(static_cast<size_t>(n), kUnused);
    for (int64_t i = 0; i < n; ++i) tokens[size_t(i)] = "[PAD" + std::to_string(i) + "]";
    for (const auto& [id, token] : entries) {
        tokens[size_t(id)] = token;
        types[size_t(id)] = kNormal;
    }
    for (const Added& a : added) {
        tokens[size_t(a.id)] = a.content;
        types[size_t(a.id)] = a.special ? kControl : kUserDefined;
    }

    std::vector<std::string> merges;
    if (model->contains("merges")) {
        for (const auto& m : (*model)["merges"]) {
            if (m.is_string()) merges.push_back(m.get<std::string>());
            else if (m.is_array() && m.size() == 2 && m[0].is_string() && m[1].is_string())
                merges.push_back(m[0].get<std::string>() + " " + m[1].get<std::string>());
            else fail("convert: {}: model.merges: an entry is neither \"a b\" nor [\"a\", \"b\"]", file);
        }
    }

    w.set_string("tokenizer.ggml.model", "gpt2");
    w.set_string("tokenizer.ggml.pre", std::string(tokenizer_pre_name(config.arch)));
    w.set_string_array("tokenizer.ggml.tokens", tokens);
    w.set_i32_array("tokenizer.ggml.token_type", types);
    w.set_string_array("tokenizer.ggml.merges", merges);

    const std::filesystem::path dir = path.parent_path();
    std::error_code ec;
    if (std::filesystem::is_regular_file(dir / "tokenizer_config.json", ec)) {
        const nlohmann::json tc = read_json(dir / "tokenizer_config.json");
        if (tc.contains("pad_token")) {
            const std::string pad = token_content(tc["pad_token"]);
            for (int64_t i = 0; i < n && !pad.empty(); ++i)
                if (tokens[size_t(i)] == pad) {
                    w.set_u32("tokenizer.ggml.padding_token_id", uint32_t(i));
                    break;
                }
        }
        if (tc.contains("add_bos_token") && tc["add_bos_token"].is_boolean())
            w.set_bool("tokenizer.ggml.add_bos_token", tc["add_bos_token"].get<bool>());
        if (tc.contains("chat_template") && tc["chat_template"].is_string())
            w.set_string("tokenizer.chat_template", tc["chat_template"].get<std::string>());
    }
    if (std::filesystem::is_regular_file(dir / "chat_template.jinja", ec)) {
        std::ifstream in(dir / "chat_template.jinja");
        std::stringstream text;
        text << in.rdbuf();
        w.set_string("tokenizer.chat_template", text.str());
    }
}

}  // namespace deltabit
