// open_hf_folder: config.json + safetensors + tokenizer.json into one validated description, and the
// summary `deltabit info` prints for it.
#include "core/error.h"
#include "formats/safetensors.h"
#include "models/hf_folder.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <unistd.h>
#include <vector>

namespace deltabit {
namespace {

class HfFolderTest : public ::testing::Test {
protected:
    void SetUp() override {
        dir_ = std::filesystem::temp_directory_path() / ("deltabit-hf-" + std::to_string(::getpid()));
        std::filesystem::remove_all(dir_);
        std::filesystem::create_directories(dir_);
    }
    void TearDown() override { std::filesystem::remove_all(dir_); }
    void write_text(const std::string& name, const std::string& text) {
        std::ofstream out(dir_ / name, std::ios::binary);
        out << text;
    }
    std::filesystem::path dir_;
};

const char* kTinyConfig = R"({"model_type": "qwen3_5_text", "vocab_size": 96, "hidden_size": 64,
    "intermediate_size": 80, "num_hidden_layers": 4, "num_attention_heads": 4, "num_key_value_heads": 2,
    "head_dim": 32, "linear_num_key_heads": 2, "linear_num_value_heads": 4, "linear_key_head_dim": 8,
    "linear_value_head_dim": 12, "rope_theta": 1e6, "eos_token_id": 95})";

TEST_F(HfFolderTest, OpensConfigWeightsAndTokenizer) {
    write_text("config.json", kTinyConfig);
    write_text("tokenizer.json", "{}");
    const std::vector<uint8_t> embed(96 * 64 * 2, 0), norm(64 * 4, 0);
    safetensors::write(dir_ / "model.safetensors",
                       {{"model.embed_tokens.weight", "BF16", {96, 64}, embed}, {"model.norm.weight", "F32", {64}, norm}});

    EXPECT_TRUE(is_hf_folder(dir_));
    EXPECT_FALSE(is_hf_folder(dir_ / "config.json"));
    const HfFolder folder = open_hf_folder(dir_);
    EXPECT_EQ(folder.config.arch, Arch::qwen35);
    EXPECT_EQ(folder.config.n_layer(), 4);
    EXPECT_EQ(folder.raw_config["model_type"], "qwen3_5_text");
    EXPECT_EQ(folder.weights.size(), 2u);
    EXPECT_EQ(folder.weights.total_bytes(), 96u * 64 * 2 + 64 * 4);
    EXPECT_EQ(folder.weights.require("model.embed_tokens.weight").shape, (std::vector<int64_t>{96, 64}));
    EXPECT_EQ(folder.tokenizer, dir_ / "tokenizer.json");

    const std::string text = describe_hf_folder(folder);
    EXPECT_NE(text.find("model_type qwen3_5_text"), std::string::npos) << text;
    EXPECT_NE(text.find("4 (3 linear_attention, 1 full_attention; full every 4th)"), std::string::npos) << text;
    EXPECT_NE(text.find("model.embed_tokens.weight  BF16  [96, 64]  12288"), std::string::npos) << text;
    EXPECT_NE(text.find("2 tensors in 1 file(s)"), std::string::npos) << text;
    EXPECT_EQ(describe_hf_folder(folder, false).find("model.norm.weight"), std::string::npos);

    const nlohmann::json j = hf_folder_to_json(folder);
    EXPECT_EQ(j["config"]["n_embd"], 64);
    EXPECT_EQ(j["tensors"].size(), 2u);
    EXPECT_EQ(j["tensors"][1]["name"], "model.norm.weight");
    EXPECT_EQ(j["tensors"][1]["shape"], nlohmann::json::array({64}));
    EXPECT_EQ(j["total_bytes"], 96 * 64 * 2 + 64 * 4);
}

TEST_F(HfFolderTest, ErrorsNameTheFolderAndFile) {
    try {
        open_hf_folder(dir_);
        ADD_FAILURE();
    } catch (const Error& e) {
        EXPECT_NE(std::string(e.what()).find("no config.json"), std::string::npos) << e.what();
    }
    write_text("config.json", kTinyConfig);
    try {
        open_hf_folder(dir_);
        ADD_FAILURE();
    } catch (const Error& e) {
        EXPECT_NE(std::string(e.what()).find("neither model.safetensors.index.json nor model.safetensors"),
                  std::string::npos) << e.what();
    }
    write_text("config.json", R"({"model_type": "qwen3_5_text", "vocab_size": 96)");
    try {
        open_hf_folder(dir_);
        ADD_FAILURE();
    } catch (const Error& e) {
        EXPECT_NE(std::string(e.what()).find("config.json: malformed JSON"), std::string::npos) << e.what();
    }
}

}  // namespace
}  // namespace deltabit
