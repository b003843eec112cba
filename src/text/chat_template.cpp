#include "text/chat_template.h"

#include "formats/gguf.h"

#include <filesystem>
#include <fstream>
#include <sstream>

namespace deltabit::text {

namespace {

std::string read_file(const std::string& path) {
    std::ifstream in(path, std::ios::binary);
    if (!in) fail("chat template: cannot open {}", path);
    std::ostringstream s;
    s << in.rdbuf();
    return s.str();
}

// tokenizer_config.json writes a special token either as a string or as a serialised AddedToken
// ({"content": "<bos>", "lstrip": false, ...}); null means unset.
std::string special_token(const nlohmann::ordered_json& config, const char* key, const std::string& path) {
    auto it = config.find(key);
    if (it == config.end() || it->is_null()) return "";
    if (it->is_string()) return it->get<std::string>();
    if (it->is_object() && it->contains("content") && (*it)["content"].is_string())
        return (*it)["content"].get<std::string>();
    fail("chat template: {}: \"{}\" must be a string, null or an object with \"content\"", path, key);
}

jinja::Value json_value(const nlohmann::ordered_json& j) { return jinja::from_json(j); }

}  // namespace

void ChatTemplate::add(std::string name, std::string_view source) {
    try {
        templates_.insert_or_assign(name, Named{std::string(source), jinja::Template::parse(source)});
    } catch (const jinja::TemplateError& e) {
        std::string which = name == "default" ? "" : " '" + name + "'";
        fail("chat template{} ({}): {}", which, origin_, e.what());
    }
}

ChatTemplate ChatTemplate::from_string(std::string_view source, std::string origin, SpecialTokens tokens) {
    ChatTemplate t;
    t.origin_ = std::move(origin);
    t.tokens_ = std::move(tokens);
    t.add("default", source);
    return t;
}

ChatTemplate ChatTemplate::from_tokenizer_config(const std::string& path) {
    nlohmann::ordered_json config;
    try {
        config = nlohmann::ordered_json::parse(read_file(path));
    } catch (const nlohmann::json::exception& e) {
        fail("chat template: {}: not valid JSON: {}", path, e.what());
    }
    if (!config.is_object()) fail("chat template: {}: expected a JSON object", path);
    ChatTemplate t;
    t.origin_ = path;
    t.tokens_.bos_token = special_token(config, "bos_token", path);
    t.tokens_.eos_token = special_token(config, "eos_token", path);
    t.tokens_.unk_token = special_token(config, "unk_token", path);
    t.tokens_.pad_token = special_token(config, "pad_token", path);
    auto it = config.find("chat_template");
    if (it == config.end() || it->is_null()) fail("chat template: {}: no \"chat_template\"", path);
    if (it->is_string()) {
        t.add("default", it->get<std::string>());
    } else if (it->is_array()) {
        for (size_t i = 0; i < it->size(); ++i) {
            const auto& entry = (*it)[i];
            if (!entry.is_object() || !entry.contains("name") || !entry["name"].is_string() ||
                !entry.contains("template") || !entry["template"].is_string())
                fail("chat template: {}: chat_template[{}] must be {{\"name\": string, \"template\": string}}", path, i);
            t.add(entry["name"].get<std::string>(), entry["template"].get<std::string>());
        }
        if (t.templates_.empty()) fail("chat template: {}: \"chat_template\" is an empty list", path);
    } else {
        fail("chat template: {}: \"chat_template\" must be a string or a list of named templates", path);
    }
    return t;
}

ChatTemplate ChatTemplate::from_hf_directory(const std::string& directory) {
    namespace fs = std::filesystem;
    fs::path dir(directory);
    fs::path config = dir / "tokenizer_config.json";
    fs::path jinja_file = dir / "chat_template.jinja";
    bool has_config = fs::exists(config), has_jinja = fs::exists(jinja_file);
    if (!has_config && !has_jinja)
        fail("chat template: {}: neither tokenizer_config.json nor chat_template.jinja is there", directory);
    if (!has_jinja) return from_tokenizer_config(config.string());
    // chat_template.jinja replaces the config's template (transformers reads it last); the special
    // tokens still come from the config.
    SpecialTokens tokens;
    if (has_config) {
        nlohmann::ordered_json c;
        try {
            c = nlohmann::ordered_json::parse(read_file(config.string()));
        } catch (const nlohmann::json::exception& e) {
            fail("chat template: {}: not valid JSON: {}", config.string(), e.what());
        }
        tokens.bos_token = special_token(c, "bos_token", config.string());
        tokens.eos_token = special_token(c, "eos_token", config.string());
        tokens.unk_token = special_token(c, "unk_token", config.string());
        tokens.pad_token = special_token(c, "pad_token", config.string());
    }
    return from_string(read_file(jinja_file.string()), jinja_file.string(), std::move(tokens));
}

ChatTemplate ChatTemplate::from_gguf(const gguf::File& file) {
    ChatTemplate t;
    t.origin_ = file.path();
    const std::string prefix = "tokenizer.chat_template";
    for (const gguf::KeyValue& kv : file.metadata()) {
        if (kv.key != prefix && !kv.key.starts_with(prefix + ".")) continue;
        if (!kv.value.is_string()) fail("chat template: {}: {} must be a string", file.path(), kv.key);
        t.add(kv.key == prefix ? "default" : kv.key.substr(prefix.size() + 1), kv.value.as_string());
    }
    if (t.templates_.empty()) fail("chat template: {}: no tokenizer.chat_template", file.path());
    // Special tokens are ids into the vocabulary.
    if (const gguf::Value* tokens = file.find("tokenizer.ggml.tokens"); tokens && tokens->is_array()) {
        const std::vector<std::string>& vocab = tokens->string_elements();
        auto token_text = [&](const char* key) -> std::string {
            const gguf::Value* id = file.find(key);
            if (!id) return "";
            uint64_t i = id->as_u64();
            if (i >= vocab.size()) fail("chat template: {}: {} = {} is past the vocabulary ({} tokens)", file.path(), key, i, vocab.size());
            return vocab[i];
        };
        t.tokens_.bos_token = token_text("tokenizer.ggml.bos_token_id");
        t.tokens_.eos_token = token_text("tokenizer.ggml.eos_token_id");
        t.tokens_.unk_token = token_text("tokenizer.ggml.unknown_token_id");
        t.tokens_.pad_token = token_text("tokenizer.ggml.padding_token_id");
    }
    return t;
}

const ChatTemplate::Named& ChatTemplate::select(std::string_view name, bool has_tools) const {
    if (!name.empty()) {
        auto it = templates_.find(name);
        if (it == templates_.end()) fail("chat template ({}): no template named '{}'", origin_, name);
        return it->second;
    }
    if (has_tools)
        if (auto it = templates_.find("tool_use"); it != templates_.end()) return it->second;
    if (auto it = templates_.find("default"); it != templates_.end()) return it->second;
    if (templates_.size() == 1) return templates_.begin()->second;
    fail("chat template ({}): several named templates and none is called 'default'; pick one by name", origin_);
}

const std::string& ChatTemplate::source(std::string_view name, bool has_tools) const {
    return select(name, has_tools).source;
}

std::string ChatTemplate::render(const ChatRequest& request, std::string_view name,
                                 const jinja::RenderOptions& options) const {
    if (!request.messages.is_array()) fail("chat request: \"messages\" must be an array");
    for (size_t i = 0; i < request.messages.size(); ++i)
        if (!request.messages[i].is_object()) fail("chat request: messages[{}] must be an object", i);
    if (!request.tools.is_null() && !request.tools.is_array()) fail("chat request: \"tools\" must be an array");
    if (!request.extra.is_object()) fail("chat request: template variables must be a JSON object");

    bool has_tools = request.tools.is_array() && !request.tools.empty();
    const Named& chosen = select(name, has_tools);

    jinja::Dict vars;
    try {
        vars.set("messages", json_value(request.messages));
        vars.set("tools", json_value(request.tools));
    } catch (const Error& e) {
        fail("chat request: {}", e.what());
    }
    vars.set("add_generation_prompt", jinja::Value::boolean(request.add_generation_prompt));
    auto token = [&](const char* key, const std::string& text) {
        if (!text.empty()) vars.set(key, jinja::Value::string(text));
    };
    token("bos_token", tokens_.bos_token);
    token("eos_token", tokens_.eos_token);
    token("unk_token", tokens_.unk_token);
    token("pad_token", tokens_.pad_token);
    if (request.enable_thinking) vars.set("enable_thinking", jinja::Value::boolean(*request.enable_thinking));
    if (request.preserve_thinking) vars.set("preserve_thinking", jinja::Value::boolean(*request.preserve_thinking));
    for (const auto& [key, value] : request.extra.items()) {
        try {
            vars.set(key, json_value(value));
        } catch (const Error& e) {
            fail("chat request: template variable {}: {}", key, e.what());
        }
    }

    try {
        return chosen.compiled.render(vars, options);
    } catch (const jinja::TemplateError& e) {
        bool refused = e.origin() == jinja::TemplateError::Origin::RaisedByTemplate;
        throw ChatTemplateError(fmt::format("chat template ({}): {}", origin_, e.what()), refused);
    }
}

}  // namespace deltabit::text
