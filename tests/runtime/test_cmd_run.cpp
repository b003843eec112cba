// `deltabit run --ids ... --json` end to end: the binary's tokens against the library's greedy run.
#include "byte_tokenizer_model.h"
#include "cli_command.h"
#include "models/model.h"
#include "runtime/engine.h"
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

const std::filesystem::path kFixture = test::kBinaryFixture;

TEST(CmdRun, IdsJsonMatchesLibraryGreedy) {
    const std::vector<int32_t> prompt = {5, 61, 200, 7};
    const CommandResult r =
        run("run -m " + kFixture.string() + " --ids 5,61,200,7 --max-tokens 6 --temperature 0 --json", false);
    ASSERT_EQ(r.exit_code, 0) << r.output;
    const nlohmann::json out = nlohmann::json::parse(r.output);

    const Model model = Model::load(kFixture);
    const std::unique_ptr<Engine> engine = make_cpu_engine(model);
    const std::unique_ptr<EngineSequence> sequence = engine->new_sequence({.max_positions = 64});
    TokenLedger ledger;
    GenerationOptions options;
    options.sampling.temperature = 0.0f;
    options.max_tokens = 6;
    const GenerationResult want = generate(*engine, *sequence, ledger, prompt, options);

    EXPECT_EQ(out.at("tokens").get<std::vector<int32_t>>(), want.tokens);
    EXPECT_EQ(out.at("finish_reason"), "length");
    EXPECT_EQ(out.at("prompt_tokens"), 4);
    EXPECT_TRUE(out.at("text").is_null());  // --ids: no tokenizer, no text
    EXPECT_GE(out.at("timings").at("prefill_ms").get<double>(), 0.0);
    EXPECT_EQ(out.at("timings").at("decode_steps"), 5);
}

// --json says what ran the prompt, and a one-shot run reuses nothing (a fresh session).
TEST(CmdRun, JsonNamesBackendKvFormatContextAndReuse) {
    const CommandResult r = run("run -m " + kFixture.string() +
                                    " --ids 5,61,200,7 --max-tokens 3 --temperature 0 --backend cpu --kv f16 --ctx 64 --json",
                                false);
    ASSERT_EQ(r.exit_code, 0) << r.output;
    const nlohmann::json out = nlohmann::json::parse(r.output);
    EXPECT_EQ(out.at("backend"), "cpu");
    EXPECT_EQ(out.at("kv_format"), "f16");
    EXPECT_EQ(out.at("context"), 64);
    EXPECT_EQ(out.at("reuse").at("prompt_tokens"), 4);
    EXPECT_EQ(out.at("reuse").at("reused"), 0);
    EXPECT_EQ(out.at("reuse").at("recomputed"), 4);
    EXPECT_EQ(out.at("tokens").size(), 3u);
}

// The context bounds prompt + reply: 4 prompt tokens in a context of 6 leave room for 2 tokens in the
// state, and the last generated token is never fed (generate.h), so 3 come out and then "length".
TEST(CmdRun, ContextLimitEndsGeneration) {
    const CommandResult r =
        run("run -m " + kFixture.string() + " --ids 5,61,200,7 --max-tokens 10 --temperature 0 --backend cpu --ctx 6 --json",
            false);
    ASSERT_EQ(r.exit_code, 0) << r.output;
    const nlohmann::json out = nlohmann::json::parse(r.output);
    EXPECT_EQ(out.at("finish_reason"), "length");
    EXPECT_EQ(out.at("tokens").size(), 3u);

    const CommandResult too_long =
        run("run -m " + kFixture.string() + " --ids 5,61,200,7,8 --max-tokens 1 --backend cpu --ctx 4", true);
    EXPECT_EQ(too_long.exit_code, 1) << too_long.output;
    EXPECT_NE(too_long.output.find("the prompt has 5 tokens and the context holds 4"), std::string::npos)
        << too_long.output;
}

TEST(CmdRun, BadBackendAndKvAreRefusedByName) {
    const CommandResult backend = run("run -m " + kFixture.string() + " --ids 1 --max-tokens 1 --backend tpu", true);
    EXPECT_NE(backend.exit_code, 0);
    EXPECT_NE(backend.output.find("tpu"), std::string::npos) << backend.output;
    const CommandResult kv = run("run -m " + kFixture.string() + " --ids 1 --max-tokens 1 --kv q8", true);
    EXPECT_NE(kv.exit_code, 0);
    EXPECT_NE(kv.output.find("q8"), std::string::npos) << kv.output;
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
    EXPECT_NE(r.output.find("give --max-tokens N"), std::string::npos) << r.output;  // the flag, not the field
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

// The byte-tokenizer model (byte_tokenizer_model.h) with a template that wraps the user message in
// <...> and appends "!" when thinking is off, which makes the rendered prompt checkable by its token
// count.
std::filesystem::path byte_tokenizer_model() {
    return test::byte_tokenizer_model(test::test_scratch_dir("deltabit_test_cmd_run"),
                                      "{% for m in messages %}<{{ m['content'] }}>{% endfor %}"
                                      "{% if enable_thinking is defined and not enable_thinking %}!{% endif %}");
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
