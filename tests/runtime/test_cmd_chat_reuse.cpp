// Prefix reuse through real chat templates (tests/text/templates), end to end: the real `deltabit chat`
// binary scripted through a pipe, on the CPU and (skipped without one) the GPU.
//
// The model is the qwen3_5_binary fixture (gated DeltaNet: its state cannot be rewound, so reuse past a
// divergence needs a checkpoint) with the byte tokenizer of byte_tokenizer_model.h, and its output head
// edited so that greedy replies are lowercase letters only: every row of lm_head is zero except those of
// 'a'..'z', where the row of each even letter is the negation of the odd letter's before it (the
// original random row). So one letter of each pair has a positive logit and every other token 0: the
// argmax is a letter. Letters re-render exactly (valid UTF-8, nothing a template trims), so what each
// template makes of an earlier reply — and nothing else — decides what the next turn can reuse. The
// fixture has no EOS: every reply is kMaxTokens letters.
//
// What each template re-renders (worked out from the template text; tokens are bytes):
//   qwen3.5, thinking on/off    the reply without the <think> scaffold its generation prompt opened:
//                               the prompt differs right after "<|im_start|>assistant\n", so the turn
//                               reuses up to the previous turn start (before that line), no further
//   qwen3.5 preserved, off      "<think>\n\n</think>\n\n" + reply, as generated: everything held is reused
//   qwen3.5 preserved, on       an empty thinking block "\n</think>\n\n" inserted after the prompt's
//                               "<think>\n" (a reply without "</think>" has no thinking to keep): the
//                               previous prompt is reused, up to its end
//   qwen3, thinking on          "<|im_start|>assistant\n" + reply, as generated: everything held
//   qwen3, thinking off         drops the empty think block of the generation prompt: the turn start
//   gemma3                      "<start_of_turn>model\n" + reply: everything held
// In every case at least every token before the previous reply is reused (the requirement);
// before turn-start checkpoints the qwen3.5 cases reused nothing at all.
#include "backend/backend.h"
#include "byte_tokenizer_model.h"
#include "cli_command.h"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <sstream>
#include <string>
#include <vector>

namespace deltabit {
namespace {

#ifdef DELTABIT_HAVE_TEXT

namespace fs = std::filesystem;
using nlohmann::json;

constexpr int kMaxTokens = 8;

std::string read_file(const fs::path& path) {
    std::ifstream in(path, std::ios::binary);
    return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

fs::path template_path(const std::string& name) {
    return fs::path(DELTABIT_SOURCE_DIR) / "tests" / "text" / "templates" / name;
}

std::string template_text(const std::string& file) {
    const std::string text = read_file(template_path(file));
    if (file.ends_with(".json")) return json::parse(text).at("chat_template").get<std::string>();
    return text;
}

// The byte-tokenizer model folder with lm_head edited as the file comment says.
fs::path letters_only_model(const fs::path& dir, const std::string& chat_template) {
    const fs::path folder = test::byte_tokenizer_model(dir, chat_template);
    std::string bytes = read_file(folder / "model.safetensors");
    uint64_t header_bytes = 0;
    std::memcpy(&header_bytes, bytes.data(), 8);
    const json header = json::parse(bytes.substr(8, header_bytes));
    const json& head = header.at("lm_head.weight");
    EXPECT_EQ(head.at("dtype"), "BF16");
    EXPECT_EQ(head.at("shape"), json::array({256, 128}));
    const size_t begin = 8 + header_bytes + head.at("data_offsets")[0].get<size_t>();
    constexpr size_t kRowBytes = 128 * 2;
    for (int token = 0; token < 256; ++token) {
        char* row = bytes.data() + begin + size_t(token) * kRowBytes;
        const bool letter = token >= 'a' && token <= 'z';
        if (!letter) {
            std::memset(row, 0, kRowBytes);
        } else if ((token - 'a') % 2 == 1) {
            std::memcpy(row, row - kRowBytes, kRowBytes);
            for (size_t i = 1; i < kRowBytes; i += 2) row[i] ^= char(0x80);  // bf16 sign bit (little-endian high byte)
        }
    }
    std::ofstream(folder / "model.safetensors", std::ios::binary) << bytes;
    return folder;
}

enum class Expect { held, turn_start, end_of_prompt };

struct TemplateCase {
    std::string name;
    std::string file;
    std::string flags;
    // Bytes of the generation prompt the template appends ("<|im_start|>assistant\n<think>\n" = 30).
    int64_t generation_prompt;
    Expect expect;
};

struct ReuseParam {
    TemplateCase t;
    bool cuda;
};

std::vector<ReuseParam> reuse_params() {
    const std::vector<TemplateCase> cases = {
        {"qwen3_5_thinking_on", "qwen3.5.jinja", "--thinking on", 30, Expect::turn_start},
        {"qwen3_5_thinking_off", "qwen3.5.jinja", "--thinking off", 41, Expect::turn_start},
        {"qwen3_5_preserved_thinking_off", "qwen3.5.jinja", "--thinking off --preserve-thinking", 41, Expect::held},
        {"qwen3_5_preserved_thinking_on", "qwen3.5.jinja", "--thinking on --preserve-thinking", 30,
         Expect::end_of_prompt},
        {"qwen3_thinking_on", "qwen3-tokenizer_config.json", "--thinking on", 22, Expect::held},
        {"qwen3_thinking_off", "qwen3-tokenizer_config.json", "--thinking off", 41, Expect::turn_start},
        {"gemma3", "gemma3.jinja", "", 21, Expect::held},
    };
    std::vector<ReuseParam> out;
    for (bool cuda : {false, true})
        for (const TemplateCase& t : cases) out.push_back({t, cuda});
    return out;
}

std::string param_name(const ::testing::TestParamInfo<ReuseParam>& info) {
    return std::string(info.param.cuda ? "cuda_" : "cpu_") + info.param.t.name;
}

class ChatTemplateReuse : public ::testing::TestWithParam<ReuseParam> {};

TEST_P(ChatTemplateReuse, FollowUpTurnsReuseEverythingBeforeThePreviousReply) {
    const ReuseParam& p = GetParam();
    if (p.cuda && !cuda_backend_available()) GTEST_SKIP() << "no CUDA on this machine";
    const fs::path dir = test::test_scratch_dir("deltabit_test_chat_reuse");
    const fs::path folder = letters_only_model(dir / "hf", template_text(p.t.file));
    const std::string model = (dir / "chat.q1_0.gguf").string();
    const test::CommandResult convert = test::run_deltabit("convert " + folder.string() + " -o " + model + " --type q1_0");
    ASSERT_EQ(convert.exit_code, 0) << convert.output;

    const fs::path input = dir / "script.txt";
    std::ofstream(input) << "hello\n/stats\nhow are you\n/stats\nbye\n/stats\n";
    const test::CommandResult r = test::run_deltabit(
        "chat -m " + model + " --backend " + (p.cuda ? "cuda" : "cpu") + " --temperature 0 --max-tokens " +
            std::to_string(kMaxTokens) + " --json --quiet " + p.t.flags,
        test::Stderr::merge, input.string());
    ASSERT_EQ(r.exit_code, 0) << r.output;
    std::vector<json> replies, stats;
    std::istringstream lines(r.output);
    for (std::string line; std::getline(lines, line);) {
        ASSERT_TRUE(line.starts_with("{")) << "not JSON: " << line;
        const json object = json::parse(line);
        (object.contains("stats") ? stats : replies).push_back(object.contains("stats") ? object["stats"] : object);
    }
    ASSERT_EQ(replies.size(), 3u) << r.output;
    ASSERT_EQ(stats.size(), 3u) << r.output;
    for (const json& reply : replies) {
        const std::string text = reply.at("reply");
        ASSERT_EQ(text.size(), size_t(kMaxTokens)) << text;
        for (char c : text) ASSERT_TRUE(c >= 'a' && c <= 'z') << "the edited head should give letters only: " << text;
    }

    EXPECT_EQ(replies[0].at("reused"), 0);
    for (size_t turn = 1; turn < 3; ++turn) {
        SCOPED_TRACE("turn " + std::to_string(turn + 1));
        const int64_t previous_prompt = replies[turn - 1].at("prompt_tokens");
        const int64_t held = stats[turn - 1].at("position");  // the previous prompt and reply but its last token
        ASSERT_EQ(held, previous_prompt + kMaxTokens - 1);
        const int64_t turn_start = previous_prompt - p.t.generation_prompt;  // before the previous reply's scaffold
        const json& reuse = replies[turn].at("reuse");
        const int64_t reused = replies[turn].at("reused");
        EXPECT_GE(reused, turn_start) << "the requirement: every token before the previous reply";
        switch (p.t.expect) {
            case Expect::held:
                EXPECT_EQ(reused, held);
                EXPECT_EQ(reuse.at("from"), "held");
                EXPECT_TRUE(reuse.at("first_divergence").is_null());
                break;
            case Expect::turn_start:
                EXPECT_EQ(reused, turn_start);
                EXPECT_EQ(reuse.at("from"), "checkpoint");
                EXPECT_EQ(reuse.at("checkpoint_kind"), "turn_start");
                // The re-rendered reply follows "<|im_start|>assistant\n" (22 bytes) where the held state
                // has the generation prompt's "<think>\n".
                EXPECT_EQ(reuse.at("first_divergence"), turn_start + 22);
                EXPECT_EQ(reuse.at("held_around"), "ant\n<thi");
                EXPECT_EQ(reuse.at("prompt_around"), "ant\n" + replies[turn - 1].at("reply").get<std::string>().substr(0, 4));
                break;
            case Expect::end_of_prompt:
                EXPECT_EQ(reused, previous_prompt);
                EXPECT_EQ(reuse.at("from"), "checkpoint");
                EXPECT_EQ(reuse.at("checkpoint_kind"), "end_of_prompt");
                EXPECT_EQ(reuse.at("first_divergence"), previous_prompt);
                EXPECT_EQ(reuse.at("prompt_around"), "nk>\n\n</t");
                break;
        }
        // /stats reports the same turn.
        EXPECT_EQ(stats[turn].at("last_turn").at("reused"), reused);
        EXPECT_EQ(stats[turn].at("last_turn").at("reuse"), reuse);
        EXPECT_EQ(stats[turn].at("preserve_thinking"), p.t.flags.find("--preserve-thinking") != std::string::npos);
    }
    // The checkpoints /stats lists include the last turn's start unless the whole reply was reused.
    bool has_turn_start = false;
    for (const json& c : stats[2].at("checkpoint_list")) has_turn_start = has_turn_start || c.at("kind") == "turn_start";
    EXPECT_TRUE(has_turn_start) << stats[2].dump();
}

INSTANTIATE_TEST_SUITE_P(Templates, ChatTemplateReuse, ::testing::ValuesIn(reuse_params()), param_name);

// /preserve-thinking switches the template's preserve_thinking mid-chat, and /stats in text mode names
// where the last turn's prompt first differed from the held state.
TEST(ChatTemplateReuseCommands, PreserveThinkingSwitchAndTextStats) {
    const fs::path dir = test::test_scratch_dir("deltabit_test_chat_reuse");
    const fs::path folder = letters_only_model(dir / "hf", template_text("qwen3.5.jinja"));
    const fs::path input = dir / "script.txt";
    std::ofstream(input) << "hello\nhow are you\n/stats\n/preserve-thinking on\n/preserve-thinking\nbye\n"
                            "/preserve-thinking maybe\n/stats\n";
    const test::CommandResult r = test::run_deltabit(
        "chat -m " + folder.string() + " --backend cpu --temperature 0 --thinking off --max-tokens " +
            std::to_string(kMaxTokens),
        test::Stderr::merge, input.string());
    // The refused "/preserve-thinking maybe" makes the scripted chat exit 1 at its end (docs/chat.md).
    ASSERT_EQ(r.exit_code, 1) << r.output;
    EXPECT_NE(r.output.find("chat: 1 line of the script failed"), std::string::npos) << r.output;
    EXPECT_NE(r.output.find("reused from  checkpoint (turn_start)"), std::string::npos) << r.output;
    EXPECT_NE(r.output.find("divergence   at token "), std::string::npos) << r.output;
    EXPECT_NE(r.output.find("held \"ant\\n<thi\""), std::string::npos) << r.output;
    EXPECT_NE(r.output.find("chat: preserve-thinking on"), std::string::npos) << r.output;
    EXPECT_NE(r.output.find("chat: preserve-thinking is on"), std::string::npos) << r.output;
    EXPECT_NE(r.output.find("chat: error: /preserve-thinking \"maybe\": expected on or off"), std::string::npos)
        << r.output;
    const test::CommandResult help = test::run_deltabit("chat --help");
    EXPECT_NE(help.output.find("--preserve-thinking"), std::string::npos) << help.output;
}

#endif

}  // namespace
}  // namespace deltabit
