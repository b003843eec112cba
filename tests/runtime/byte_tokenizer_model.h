// A model folder for CLI tests that talk in text: the qwen3_5_binary fixture's weights (vocabulary 256)
// and a hand-made byte tokenizer — 256 tokens, token b is byte b (GPT-2's byte-to-character table, no
// merges) — so the expected token count of any text is its byte count and the expected text of any ids
// is their bytes. The chat template is the caller's.
#pragma once

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <filesystem>
#include <fstream>
#include <string>

namespace deltabit::test {

inline const std::filesystem::path kBinaryFixture =
    std::filesystem::path(DELTABIT_SOURCE_DIR) / "tests" / "fixtures" / "qwen3_5_binary";

// A fresh folder named after the running test: ctest runs each test in its own process, in parallel.
inline std::filesystem::path test_scratch_dir(const std::string& prefix) {
    namespace fs = std::filesystem;
    const ::testing::TestInfo* info = ::testing::UnitTest::GetInstance()->current_test_info();
    const fs::path dir = fs::temp_directory_path() /
                         (prefix + "_" + info->test_suite_name() + "_" + info->name());
    fs::remove_all(dir);
    fs::create_directories(dir);
    return dir;
}

inline std::filesystem::path byte_tokenizer_model(const std::filesystem::path& dir, const std::string& chat_template) {
    namespace fs = std::filesystem;
    fs::create_directories(dir);
    fs::copy_file(kBinaryFixture / "config.json", dir / "config.json", fs::copy_options::overwrite_existing);
    fs::copy_file(kBinaryFixture / "model.safetensors", dir / "model.safetensors", fs::copy_options::overwrite_existing);
    nlohmann::json vocab = nlohmann::json::object();
    int next_unprintable = 256;
    for (int b = 0; b < 256; ++b) {
        const bool printable = (b >= 33 && b <= 126) || (b >= 161 && b <= 172) || (b >= 174 && b <= 255);
        const int code = printable ? b : next_unprintable++;
        std::string utf8;  // code < 0x800: one or two bytes
        if (code < 0x80) utf8 = std::string(1, char(code));
        else utf8 = {char(0xC0 | (code >> 6)), char(0x80 | (code & 0x3F))};
        vocab[utf8] = b;
    }
    const nlohmann::json tokenizer = {
        {"model", {{"type", "BPE"}, {"vocab", vocab}, {"merges", nlohmann::json::array()}}},
        {"pre_tokenizer", {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"trim_offsets", false}, {"use_regex", true}}},
        {"decoder", {{"type", "ByteLevel"}}},
        {"added_tokens", nlohmann::json::array()}};
    std::ofstream(dir / "tokenizer.json") << tokenizer.dump();
    std::ofstream(dir / "tokenizer_config.json") << nlohmann::json{{"chat_template", chat_template}}.dump();
    return dir;
}

}  // namespace deltabit::test
