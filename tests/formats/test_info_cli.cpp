// `deltabit info` run as a user runs it: the built binary (DELTABIT_BINARY) on a GGUF written here,
// as text and as --json, and on a corrupt file (exit code 1, one-line error).
#include "formats/gguf.h"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <sys/wait.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

namespace deltabit::gguf {
namespace {

namespace fs = std::filesystem;

struct CliRun {
    int exit_code;
    std::string out;
    std::string err;
};

std::string slurp(const fs::path& p) {
    std::ifstream in(p, std::ios::binary);
    std::stringstream ss;
    ss << in.rdbuf();
    return ss.str();
}

class InfoCli : public ::testing::Test {
protected:
    void SetUp() override {
        dir_ = fs::temp_directory_path() / ("deltabit_info_cli_" + std::to_string(::getpid()));
        fs::create_directories(dir_);
    }
    void TearDown() override { fs::remove_all(dir_); }

    CliRun run_cli(const std::string& args) {
        const fs::path out = dir_ / "stdout", err = dir_ / "stderr";
        const std::string command =
            std::string(DELTABIT_BINARY) + " " + args + " >" + out.string() + " 2>" + err.string();
        const int status = std::system(command.c_str());
        return {WIFEXITED(status) ? WEXITSTATUS(status) : -1, slurp(out), slurp(err)};
    }

    // 3 tensors: q8_0 [32, 3] (96 values, 3 blocks × 34 = 102 bytes), f32 [32] (128 bytes),
    // q1_0 [128, 4] (512 values, 4 blocks × 18 = 72 bytes): 640 parameters in 302 bytes.
    fs::path write_model() {
        Writer w;
        w.set_string("general.architecture", "tiny");
        w.set_string("general.name", "Tiny Test");
        w.set_u32("tiny.block_count", 2);
        w.set_u32("tiny.context_length", 64);
        w.set_f32("tiny.rope.freq_base", 10000.f);
        w.set_string("tokenizer.ggml.model", "gpt2");
        w.set_string("tokenizer.ggml.pre", "qwen2");
        w.set_string_array("tokenizer.ggml.tokens", {"a", "b", "c"});
        w.set_u32("tokenizer.ggml.bos_token_id", 1);
        w.set_u32("tokenizer.ggml.eos_token_id", 2);
        w.set_string("tokenizer.chat_template", "{{ messages }}");
        w.add_tensor_owned("token_embd.weight", DType::Q8_0, {32, 3}, std::vector<uint8_t>(102, 1));
        w.add_tensor_owned("blk.0.attn_norm.weight", DType::F32, {32}, std::vector<uint8_t>(128, 0));
        w.add_tensor_owned("blk.0.ffn_up.weight", DType::Q1_0, {128, 4}, std::vector<uint8_t>(72, 2));
        const fs::path path = dir_ / "tiny.gguf";
        w.write(path.string());
        return path;
    }

    fs::path dir_;
};

bool has_line_with(const std::string& text, std::initializer_list<std::string> parts) {
    std::istringstream in(text);
    for (std::string line; std::getline(in, line);) {
        bool all = true;
        for (const std::string& p : parts) all = all && line.find(p) != std::string::npos;
        if (all) return true;
    }
    return false;
}

TEST_F(InfoCli, TextReport) {
    const fs::path model = write_model();
    const CliRun r = run_cli("info " + model.string());
    ASSERT_EQ(r.exit_code, 0) << r.err;
    EXPECT_TRUE(has_line_with(r.out, {"GGUF v3", "alignment 32", "11 metadata keys", "3 tensors"})) << r.out;
    EXPECT_TRUE(has_line_with(r.out, {"architecture", "tiny"})) << r.out;
    EXPECT_TRUE(has_line_with(r.out, {"name", "Tiny Test"})) << r.out;
    EXPECT_TRUE(has_line_with(r.out, {"tiny.block_count", "2"})) << r.out;
    EXPECT_TRUE(has_line_with(r.out, {"tiny.rope.freq_base", "10000"})) << r.out;
    EXPECT_TRUE(has_line_with(r.out, {"tokenizer: model gpt2, pre qwen2, vocab 3, bos 1, eos 2, chat template yes"}))
        << r.out;
    EXPECT_TRUE(has_line_with(r.out, {"engine: cannot run this file", "tiny"})) << r.out;
    EXPECT_TRUE(has_line_with(r.out, {"token_embd.weight", "q8_0", "[32, 3]", "102"})) << r.out;
    EXPECT_TRUE(has_line_with(r.out, {"blk.0.attn_norm.weight", "f32", "[32]", "128"})) << r.out;
    EXPECT_TRUE(has_line_with(r.out, {"blk.0.ffn_up.weight", "q1_0", "[128, 4]", "72"})) << r.out;
    // Totals by hand: q1_0 72·8/512 = 1.125 bits; q8_0 102·8/96 = 8.5; all 302·8/640 = 3.775.
    EXPECT_TRUE(has_line_with(r.out, {"q1_0", " 1 ", "512", "72", "1.1250"})) << r.out;
    EXPECT_TRUE(has_line_with(r.out, {"q8_0", "96", "102", "8.5000"})) << r.out;
    EXPECT_TRUE(has_line_with(r.out, {"all", " 3 ", "640", "302", "3.7750"})) << r.out;
    EXPECT_TRUE(r.err.empty()) << r.err;
}

TEST_F(InfoCli, JsonReport) {
    const fs::path model = write_model();
    const CliRun r = run_cli("info --json " + model.string());
    ASSERT_EQ(r.exit_code, 0) << r.err;
    const nlohmann::json j = nlohmann::json::parse(r.out);  // throws (fails the test) unless one JSON object
    EXPECT_EQ(j["format"], "gguf");
    EXPECT_EQ(j["version"], 3);
    EXPECT_EQ(j["alignment"], 32);
    EXPECT_EQ(j["metadata_count"], 11);
    EXPECT_EQ(j["file_size"], fs::file_size(model));
    EXPECT_EQ(j["architecture"], "tiny");
    EXPECT_EQ(j["name"], "Tiny Test");
    EXPECT_EQ(j["hyperparameters"]["tiny.block_count"], 2);
    EXPECT_EQ(j["hyperparameters"]["tiny.rope.freq_base"], 10000.0);
    EXPECT_EQ(j["hyperparameters"].size(), 3u);
    EXPECT_EQ(j["tokenizer"]["model"], "gpt2");
    EXPECT_EQ(j["tokenizer"]["vocab_size"], 3);
    EXPECT_EQ(j["tokenizer"]["bos_token_id"], 1);
    EXPECT_EQ(j["tokenizer"]["eos_token_id"], 2);
    EXPECT_EQ(j["tokenizer"]["chat_template"], true);
    EXPECT_TRUE(j["config"].is_null());
    EXPECT_NE(j["config_error"].get<std::string>().find("tiny"), std::string::npos);
    ASSERT_EQ(j["tensors"].size(), 3u);
    EXPECT_EQ(j["tensors"][2]["name"], "blk.0.ffn_up.weight");
    EXPECT_EQ(j["tensors"][2]["type"], "q1_0");
    EXPECT_EQ(j["tensors"][2]["shape"], nlohmann::json({128, 4}));
    EXPECT_EQ(j["tensors"][2]["bytes"], 72);
    EXPECT_EQ(j["tensors"][2]["offset"].get<uint64_t>() % 32, 0u);
    EXPECT_EQ(j["totals"]["parameters"], 640);
    EXPECT_EQ(j["totals"]["bytes"], 302);
    EXPECT_DOUBLE_EQ(j["totals"]["bits_per_weight"].get<double>(), 3.775);
    EXPECT_DOUBLE_EQ(j["totals"]["by_type"]["q1_0"]["bits_per_weight"].get<double>(), 1.125);
    EXPECT_EQ(j["totals"]["by_type"]["f32"]["tensors"], 1);
}

TEST_F(InfoCli, EngineViewOfASupportedArchitecture) {
    // qwen35 hyperparameters of the published 27B geometry (reference/llamacpp-formats-and-qwen35.md
    // §2.1); the file carries no weights, only what the config reader needs.
    Writer w;
    w.set_string("general.architecture", "qwen35");
    w.set_u32("qwen35.vocab_size", 248320);
    w.set_u32("qwen35.context_length", 262144);
    w.set_u32("qwen35.embedding_length", 5120);
    w.set_u32("qwen35.feed_forward_length", 17408);
    w.set_u32("qwen35.block_count", 64);
    w.set_u32("qwen35.attention.head_count", 24);
    w.set_u32("qwen35.attention.head_count_kv", 4);
    w.set_u32("qwen35.attention.key_length", 256);
    w.set_u32("qwen35.attention.value_length", 256);
    w.set_f32("qwen35.attention.layer_norm_rms_epsilon", 1e-6f);
    w.set_u32("qwen35.rope.dimension_count", 64);
    w.set_f32("qwen35.rope.freq_base", 1e7f);
    w.set_i32_array("qwen35.rope.dimension_sections", {11, 11, 10, 0});
    w.set_u32("qwen35.ssm.conv_kernel", 4);
    w.set_u32("qwen35.ssm.state_size", 128);
    w.set_u32("qwen35.ssm.group_count", 16);
    w.set_u32("qwen35.ssm.time_step_rank", 48);
    w.set_u32("qwen35.ssm.inner_size", 6144);
    w.set_u32("qwen35.full_attention_interval", 4);
    w.set_u32("tokenizer.ggml.eos_token_id", 248046);
    const fs::path path = dir_ / "qwen35.gguf";
    w.write(path.string());

    const CliRun text = run_cli("info " + path.string());
    ASSERT_EQ(text.exit_code, 0) << text.err;
    EXPECT_TRUE(has_line_with(text.out, {"engine:"})) << text.out;
    EXPECT_FALSE(has_line_with(text.out, {"cannot run"})) << text.out;
    EXPECT_TRUE(has_line_with(text.out, {"qwen35.embedding_length", "5120"})) << text.out;
    EXPECT_TRUE(has_line_with(text.out, {"all", " 0 ", "0.0000"})) << text.out;  // no tensors: totals are zero

    const CliRun json = run_cli("info --json " + path.string());
    ASSERT_EQ(json.exit_code, 0) << json.err;
    const nlohmann::json j = nlohmann::json::parse(json.out);
    ASSERT_TRUE(j["config"].is_object()) << j["config_error"];
    EXPECT_EQ(j["config"]["n_embd"], 5120);
    EXPECT_EQ(j["config"]["n_layer"], 64);
    EXPECT_EQ(j["hyperparameters"].size(), 19u);
}

TEST_F(InfoCli, CorruptFileIsOneLineAndExitOne) {
    const fs::path model = write_model();
    const uint64_t size = fs::file_size(model);
    fs::resize_file(model, size - 50);  // the last tensor: 72 bytes + 24 padding; cut 26 into its data
    const CliRun r = run_cli("info " + model.string());
    EXPECT_EQ(r.exit_code, 1);
    EXPECT_TRUE(r.out.empty()) << r.out;
    EXPECT_EQ(r.err.find("deltabit: error: gguf: " + model.string() + ": tensor "), 0u) << r.err;
    EXPECT_NE(r.err.find("runs past end of file"), std::string::npos) << r.err;
    EXPECT_EQ(r.err.find('\n'), r.err.size() - 1) << "one line: " << r.err;
}

TEST_F(InfoCli, MissingFileAndPlainFolder) {
    CliRun r = run_cli("info " + (dir_ / "nope.gguf").string());
    EXPECT_EQ(r.exit_code, 1);
    EXPECT_NE(r.err.find("cannot open"), std::string::npos) << r.err;
    r = run_cli("info " + dir_.string());
    EXPECT_EQ(r.exit_code, 1);
    EXPECT_NE(r.err.find("without config.json"), std::string::npos) << r.err;
}

}  // namespace
}  // namespace deltabit::gguf
