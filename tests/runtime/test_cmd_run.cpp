// `deltabit run --ids ... --json` end to end: the binary's tokens against the library's greedy run.
#include "cli_command.h"
#include "models/model.h"
#include "runtime/generate.h"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cctype>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

namespace deltabit {
namespace {

// `run` is a cmd_text_* command: built only with the text libraries.
#ifdef DELTABIT_HAVE_TEXT

using test::CommandResult;

// stdout only when `merge_stderr` is false, so JSON can be parsed without the timing line.
CommandResult run(const std::string& args, bool merge_stderr) {
    return test::run_deltabit(args, merge_stderr ? test::Stderr::merge : test::Stderr::discard);
}

const std::filesystem::path kFixture = std::filesystem::path(DELTABIT_SOURCE_DIR) / "tests" / "fixtures" / "qwen3_5_binary";

TEST(CmdRun, IdsJsonMatchesLibraryGreedy) {
    const std::vector<int32_t> prompt = {5, 61, 200, 7};
    const CommandResult r =
        run("run -m " + kFixture.string() + " --ids 5,61,200,7 --max-tokens 6 --temperature 0 --json", false);
    ASSERT_EQ(r.exit_code, 0) << r.output;
    const nlohmann::json out = nlohmann::json::parse(r.output);

    const Model model = Model::load(kFixture);
    SequenceState state = model.new_sequence();
    TokenLedger ledger;
    GenerationOptions options;
    options.sampling.temperature = 0.0f;
    options.max_tokens = 6;
    const GenerationResult want = generate(model, state, ledger, prompt, options);

    EXPECT_EQ(out.at("tokens").get<std::vector<int32_t>>(), want.tokens);
    EXPECT_EQ(out.at("finish_reason"), "length");
    EXPECT_EQ(out.at("prompt_tokens"), 4);
    EXPECT_TRUE(out.at("text").is_null());  // --ids: no tokenizer, no text
    EXPECT_GE(out.at("timings").at("prefill_ms").get<double>(), 0.0);
    EXPECT_EQ(out.at("timings").at("decode_steps"), 5);
}

TEST(CmdRun, SeededSamplingIsReproducibleFromTheCommandLine) {
    const std::string args = "run -m " + kFixture.string() +
                             " --ids 5,61,200,7 --max-tokens 16 --temperature 1.5 --top-k 0 --top-p 1 --min-p 0 --json";
    const CommandResult a = run(args + " --seed 11", false);
    const CommandResult b = run(args + " --seed 11", false);
    const CommandResult c = run(args + " --seed 12", false);
    ASSERT_EQ(a.exit_code, 0) << a.output;
    ASSERT_EQ(c.exit_code, 0) << c.output;
    const auto tokens = [](const CommandResult& r) { return nlohmann::json::parse(r.output).at("tokens"); };
    EXPECT_EQ(tokens(a), tokens(b));
    EXPECT_NE(tokens(a), tokens(c));
}

TEST(CmdRun, RefusesOpenEndedWithoutEos) {
    const CommandResult r = run("run -m " + kFixture.string() + " --ids 5,61 --temperature 0", true);
    EXPECT_EQ(r.exit_code, 1) << r.output;
    EXPECT_NE(r.output.find("no EOS"), std::string::npos) << r.output;
}

TEST(CmdRun, PlainOutputStreamsIds) {
    const CommandResult r = run("run -m " + kFixture.string() + " --ids 5,61,200,7 --max-tokens 3 --temperature 0", false);
    ASSERT_EQ(r.exit_code, 0) << r.output;
    const CommandResult j =
        run("run -m " + kFixture.string() + " --ids 5,61,200,7 --max-tokens 3 --temperature 0 --json", false);
    const auto ids = nlohmann::json::parse(j.output).at("tokens").get<std::vector<int32_t>>();
    ASSERT_EQ(ids.size(), 3u);
    EXPECT_EQ(r.output, std::to_string(ids[0]) + " " + std::to_string(ids[1]) + " " + std::to_string(ids[2]) + "\n");
}

// A model folder with the fixture's weights and a hand-made byte tokenizer: 256 tokens, token b is
// byte b (GPT-2's byte-to-character table, no merges), so the expected text of any ids is their
// bytes. The chat template wraps the user message in <...> and appends "!" when thinking is off,
// which makes the rendered prompt checkable by its token count.
std::filesystem::path byte_tokenizer_model() {
    namespace fs = std::filesystem;
    // One folder per test: ctest runs the tests of this file in parallel processes.
    const fs::path dir = fs::temp_directory_path() /
                         (std::string("deltabit_test_cmd_run_") +
                          ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::create_directories(dir);
    fs::copy_file(kFixture / "config.json", dir / "config.json", fs::copy_options::overwrite_existing);
    fs::copy_file(kFixture / "model.safetensors", dir / "model.safetensors", fs::copy_options::overwrite_existing);
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
    const nlohmann::json config = {
        {"chat_template",
         "{% for m in messages %}<{{ m['content'] }}>{% endfor %}"
         "{% if enable_thinking is defined and not enable_thinking %}!{% endif %}"}};
    std::ofstream(dir / "tokenizer_config.json") << config.dump();
    return dir;
}

TEST(CmdRun, TextPromptThroughChatTemplate) {
    const std::string model = byte_tokenizer_model().string();
    const CommandResult plain = run("run -m " + model + " -p ab --max-tokens 2 --temperature 0 --json", false);
    ASSERT_EQ(plain.exit_code, 0) << plain.output;
    EXPECT_EQ(nlohmann::json::parse(plain.output).at("prompt_tokens"), 4);  // "<ab>"
    const CommandResult off = run("run -m " + model + " -p ab --thinking off --max-tokens 2 --temperature 0 --json", false);
    ASSERT_EQ(off.exit_code, 0) << off.output;
    EXPECT_EQ(nlohmann::json::parse(off.output).at("prompt_tokens"), 5);  // "<ab>!"
    const CommandResult raw = run("run -m " + model + " -p ab --raw --max-tokens 2 --temperature 0 --json", false);
    ASSERT_EQ(raw.exit_code, 0) << raw.output;
    EXPECT_EQ(nlohmann::json::parse(raw.output).at("prompt_tokens"), 2);  // "ab"
}

TEST(CmdRun, StreamedTextAndStopString) {
    const std::string model = byte_tokenizer_model().string();
    const std::string base = "run -m " + model + " -p hi --raw --max-tokens 40 --temperature 0";
    const CommandResult full_run = run(base + " --json", false);
    ASSERT_EQ(full_run.exit_code, 0) << full_run.output;
    const nlohmann::json full = nlohmann::json::parse(full_run.output);
    const auto tokens = full.at("tokens").get<std::vector<int32_t>>();
    const std::string text = full.at("text").get<std::string>();

    // Streaming prints the same text as the JSON holds, then one newline.
    const CommandResult streamed = run(base, false);
    ASSERT_EQ(streamed.exit_code, 0) << streamed.output;
    EXPECT_EQ(streamed.output, text + "\n");

    // Stop on the first ASCII letter after the first token: its byte cannot come from any other
    // token (U+FFFD is not ASCII), so the text must end right before its first appearance. A letter
    // also needs no shell quoting.
    size_t k = 1;
    while (k < tokens.size() && !(tokens[k] < 128 && std::isalpha(tokens[k]))) ++k;
    ASSERT_LT(k, tokens.size()) << "no letter in the greedy run; pick another prompt";
    const std::string stop(1, char(tokens[k]));
    const CommandResult stopped_run = run(base + " --json --stop " + stop, false);
    ASSERT_EQ(stopped_run.exit_code, 0) << stopped_run.output;
    const nlohmann::json stopped = nlohmann::json::parse(stopped_run.output);
    EXPECT_EQ(stopped.at("finish_reason"), "stop");
    EXPECT_EQ(stopped.at("text").get<std::string>(), text.substr(0, text.find(stop)));
    const size_t first = size_t(std::find(tokens.begin(), tokens.end(), tokens[k]) - tokens.begin());
    EXPECT_EQ(stopped.at("tokens").get<std::vector<int32_t>>(),
              std::vector<int32_t>(tokens.begin(), tokens.begin() + long(first) + 1));
}
#endif

}  // namespace
}  // namespace deltabit
