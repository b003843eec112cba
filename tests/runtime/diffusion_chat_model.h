// The DiffusionGemma fixture (tests/fixtures/diffusion_gemma) as a model folder that talks in text, for
// the tests of `deltabit chat`, `run -p` and `serve` on a block-diffusion model.
#pragma once

#include <nlohmann/json.hpp>

#include <filesystem>
#include <fstream>
#include <string>

namespace deltabit::test {

// The fixture with a tokenizer for chat: token b < 256 is byte b (byte_tokenizer_model.h's table), and
// 256..511 are special tokens "<tN>", which the streamed text skips.
inline std::filesystem::path diffusion_chat_model(const std::filesystem::path& dir) {
    namespace fs = std::filesystem;
    const fs::path fixture = fs::path(DELTABIT_SOURCE_DIR) / "tests" / "fixtures" / "diffusion_gemma";
    fs::create_directories(dir);
    for (const char* f : {"config.json", "generation_config.json", "model.safetensors"})
        fs::copy_file(fixture / f, dir / f, fs::copy_options::overwrite_existing);
    nlohmann::json vocab = nlohmann::json::object();
    int next_unprintable = 256;
    for (int b = 0; b < 256; ++b) {
        const bool printable = (b >= 33 && b <= 126) || (b >= 161 && b <= 172) || (b >= 174 && b <= 255);
        const int code = printable ? b : next_unprintable++;
        std::string utf8;
        if (code < 0x80) utf8 = std::string(1, char(code));
        else utf8 = {char(0xC0 | (code >> 6)), char(0x80 | (code & 0x3F))};
        vocab[utf8] = b;
    }
    nlohmann::json added = nlohmann::json::array();
    for (int id = 256; id < 512; ++id) {
        const std::string content = "<t" + std::to_string(id) + ">";
        vocab[content] = id;
        added.push_back({{"id", id}, {"content", content}, {"special", true}, {"single_word", false},
                         {"lstrip", false}, {"rstrip", false}, {"normalized", false}});
    }
    const nlohmann::json tokenizer = {
        {"model", {{"type", "BPE"}, {"vocab", vocab}, {"merges", nlohmann::json::array()}}},
        {"pre_tokenizer", {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"trim_offsets", false}, {"use_regex", true}}},
        {"decoder", {{"type", "ByteLevel"}}},
        {"added_tokens", added}};
    std::ofstream(dir / "tokenizer.json") << tokenizer.dump();
    const std::string chat_template =
        "{% for m in messages %}{{ m['role'] }}: {{ m['content'] }}\n{% endfor %}"
        "{% if add_generation_prompt %}assistant: {% endif %}";
    std::ofstream(dir / "tokenizer_config.json") << nlohmann::json{{"chat_template", chat_template}}.dump();
    return dir;
}

}  // namespace deltabit::test
