#include "cli/cmd_text_prompt.h"

#include "core/error.h"
#include "core/file_io.h"
#include "formats/gguf.h"
#include "text/byte_tokenizer.h"
#include "text/tokenizer_load.h"
#include "text/unicode.h"

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <filesystem>
#include <fstream>
#include <iostream>
#include <iterator>

namespace deltabit::cli {
namespace {

namespace fs = std::filesystem;

// The template used when the model has none: plain "role: text" lines, so a reply's text re-renders
// exactly as it was generated after "assistant: " (which keeps prefix reuse long).
constexpr std::string_view kPlainTemplate =
    "{% for m in messages %}{{ m['role'] }}: {{ m['content'] }}\n{% endfor %}"
    "{% if add_generation_prompt %}assistant: {% endif %}";

struct TextSources {
    bool tokenizer = false;
    bool chat_template = false;
};

// What the model file or folder carries. Only presence is checked here; the loaders validate.
TextSources find_text_sources(const std::string& model_path) {
    TextSources found;
    if (fs::is_directory(model_path)) {
        const fs::path dir(model_path);
        found.tokenizer = fs::exists(dir / "tokenizer.json");
        if (fs::exists(dir / "chat_template.jinja")) {
            found.chat_template = true;
        } else if (const fs::path config = dir / "tokenizer_config.json"; fs::exists(config)) {
            std::ifstream in(config);
            // A config that does not parse counts as "has a template": the loader then names the error.
            const nlohmann::json json = nlohmann::json::parse(in, nullptr, /*allow_exceptions=*/false);
            found.chat_template = json.is_discarded() || (json.is_object() && json.contains("chat_template") &&
                                                          !json["chat_template"].is_null());
        }
        return found;
    }
    const gguf::File file = gguf::File::open(model_path);
    found.tokenizer = file.has("tokenizer.ggml.model");
    for (const gguf::KeyValue& kv : file.metadata())
        if (kv.key == "tokenizer.chat_template" || kv.key.starts_with("tokenizer.chat_template.")) found.chat_template = true;
    return found;
}

}  // namespace

TextFrontEnd load_text_front_end(const std::string& model_path, const ModelConfig& config, bool need_chat_template) {
    const TextSources sources = find_text_sources(model_path);
    TextFrontEnd text;
    if (sources.tokenizer) {
        text.tokenizer = std::make_unique<text::Tokenizer>(text::load_tokenizer(model_path));
    } else if (config.n_vocab == 256) {
        text.tokenizer = std::make_unique<text::Tokenizer>(text::make_byte_tokenizer());
        text.use_specials = false;
        text.notes.push_back(
            fmt::format("{} has no tokenizer; its 256-token vocabulary is read as raw bytes", model_path));
    } else {
        fail("{}: no tokenizer (tokenizer.json in a folder, tokenizer.ggml.* in a GGUF), so text cannot be "
             "turned into its {} token ids; use --ids, or a model file that carries its tokenizer",
             model_path, config.n_vocab);
    }
    if (!need_chat_template) return text;
    if (sources.chat_template) {
        text.chat_template = fs::is_directory(model_path)
                                 ? text::ChatTemplate::from_hf_directory(model_path)
                                 : text::ChatTemplate::from_gguf(gguf::File::open(model_path));
    } else {
        text.chat_template = text::ChatTemplate::from_string(kPlainTemplate, "deltabit plain chat layout");
        text.notes.push_back(fmt::format("{} has no chat template; using plain \"role: text\" lines", model_path));
    }
    return text;
}

std::vector<int32_t> encode_rendered(const TextFrontEnd& text, const std::string& rendered) {
    // The template writes the special tokens itself, as apply_chat_template(tokenize=True) assumes.
    return text.tokenizer->encode(rendered, {.add_special = false, .parse_special = text.use_specials});
}

std::vector<int32_t> encode_raw(const TextFrontEnd& text, const std::string& prompt) {
    return text.tokenizer->encode(prompt, {.add_special = text.use_specials, .parse_special = text.use_specials});
}

std::string read_prompt_file(const std::string& path, std::string_view what) {
    if (path != "-") return read_regular_file(path, what);
    std::string text((std::istreambuf_iterator<char>(std::cin)), std::istreambuf_iterator<char>());
    if (std::cin.bad()) fail("{} -: cannot read standard input", what);
    return text;
}

bool warn_if_not_utf8(std::string_view text, std::string_view what) {
    if (text::utf8_is_valid(text)) return true;
    size_t at = 0;
    while (at < text.size()) {
        const text::DecodedCodePoint c = text::utf8_decode(text, at);
        if (!c.valid) break;
        at += c.length;
    }
    fmt::print(stderr, "{} is not valid UTF-8 (first bad byte at offset {}); invalid bytes are replaced with U+FFFD\n",
               what, at);
    return false;
}

}  // namespace deltabit::cli
