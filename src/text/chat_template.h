// Chat templates: turn a conversation (OpenAI-style messages, tool definitions, switches such as
// enable_thinking) into the prompt text a model was trained on, by rendering the model's own Jinja
// template as Hugging Face's apply_chat_template(tokenize=False) does.
//
// Where the template comes from, in the order transformers looks:
//   - a Hugging Face folder: chat_template.jinja beside tokenizer_config.json wins over the
//     "chat_template" field of tokenizer_config.json;
//   - tokenizer_config.json "chat_template": a string, or a list of {"name", "template"};
//   - GGUF: tokenizer.chat_template, and tokenizer.chat_template.NAME for named ones.
// With several named templates, an explicit name picks one; otherwise "tool_use" is used when the
// request has tools and the model has one, else "default" — HF's rule.
//
// The variables a template sees: messages, tools (None when absent), add_generation_prompt, the
// special tokens that are set (bos_token, eos_token, unk_token, pad_token), then enable_thinking /
// preserve_thinking when the request sets them, then any extra variables (chat_template_kwargs).
#pragma once

#include "core/error.h"
#include "text/jinja.h"

#include <nlohmann/json.hpp>

#include <map>
#include <optional>
#include <string>
#include <string_view>

namespace deltabit::gguf {
class File;
}

namespace deltabit::text {

// Special tokens as text; empty when the model does not set one (the template then sees it undefined).
struct SpecialTokens {
    std::string bos_token;
    std::string eos_token;
    std::string unk_token;
    std::string pad_token;
};

struct ChatRequest {
    nlohmann::ordered_json messages = nlohmann::ordered_json::array();
    nlohmann::ordered_json tools;  // null, or an array of tool definitions
    bool add_generation_prompt = false;
    std::optional<bool> enable_thinking;
    std::optional<bool> preserve_thinking;
    nlohmann::ordered_json extra = nlohmann::ordered_json::object();  // more variables, passed as given
};

// A render failure, naming the template's origin and position. `refused_input()` is true when the
// template itself refused the conversation with raise_exception (e.g. "Conversation roles must
// alternate"): a bad request, not a broken model file.
class ChatTemplateError : public Error {
public:
    ChatTemplateError(const std::string& message, bool refused_input) : Error(message), refused_input_(refused_input) {}
    bool refused_input() const { return refused_input_; }

private:
    bool refused_input_;
};

class ChatTemplate {
public:
    // `origin` names where the text came from in every message ("Qwen3-8B/tokenizer_config.json").
    static ChatTemplate from_string(std::string_view source, std::string origin, SpecialTokens tokens = {});
    static ChatTemplate from_tokenizer_config(const std::string& path);
    // A folder with tokenizer_config.json and/or chat_template.jinja.
    static ChatTemplate from_hf_directory(const std::string& directory);
    static ChatTemplate from_gguf(const gguf::File& file);

    // `name` picks one of several named templates; empty applies HF's rule (see above).
    std::string render(const ChatRequest& request, std::string_view name = "",
                       const jinja::RenderOptions& options = {}) const;

    // The template text that render(request, name) would use.
    const std::string& source(std::string_view name = "", bool has_tools = false) const;
    const SpecialTokens& special_tokens() const { return tokens_; }
    const std::string& origin() const { return origin_; }

private:
    struct Named {
        std::string source;
        jinja::Template compiled;
    };
    ChatTemplate() = default;
    void add(std::string name, std::string_view source);
    const Named& select(std::string_view name, bool has_tools) const;

    std::string origin_;
    SpecialTokens tokens_;
    std::map<std::string, Named, std::less<>> templates_;
};

}  // namespace deltabit::text
