// `deltabit chat` end to end: the real binary, scripted through stdin, on a real converted GGUF.
//
// The model is the qwen3_5_binary fixture with a byte tokenizer (byte_tokenizer_model.h) converted to
// Q1_0, so every text's token count is its byte count and each prompt's size can be computed here by
// hand from the template below and the reply texts the chat printed. The fixture has no EOS token:
// every reply is exactly kMaxTokens tokens.
#include "byte_tokenizer_model.h"
#include "cli_command.h"

#include <gtest/gtest.h>
#include <sys/stat.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <sstream>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace deltabit {
namespace {

#ifdef DELTABIT_HAVE_TEXT

namespace fs = std::filesystem;
using nlohmann::json;
using test::CommandResult;

// role<content> per message, then "assistant<" for the reply ("assistant<!" with thinking off).
constexpr const char* kTemplate =
    "{% for m in messages %}{{ m['role'] }}<{{ m['content'] }}>{% endfor %}"
    "{% if add_generation_prompt %}assistant<"
    "{% if enable_thinking is defined and not enable_thinking %}!{% endif %}{% endif %}";
constexpr int kMaxTokens = 8;

using Messages = std::vector<std::pair<std::string, std::string>>;  // role, content

// The prompt for `messages` as kTemplate renders them with a generation prompt; its tokens are its bytes.
std::string rendered_text(const Messages& messages, bool thinking_off = false) {
    std::string text;
    for (const auto& [role, content] : messages) text += role + "<" + content + ">";
    return text + "assistant<" + (thinking_off ? "!" : "");
}
int64_t rendered_tokens(const Messages& messages, bool thinking_off = false) {
    return int64_t(rendered_text(messages, thinking_off).size());
}
std::vector<int32_t> byte_tokens(std::string_view text) {
    std::vector<int32_t> ids;
    for (unsigned char c : text) ids.push_back(c);
    return ids;
}

struct ChatOutput {
    int exit_code = -1;
    std::string output;           // stdout and stderr, interleaved as printed
    std::vector<json> replies;    // {"reply", "tokens", "finish_reason", "prompt_tokens", "reused", "recomputed"}
    std::vector<json> stats;      // the objects inside {"stats": ...}
    std::vector<std::string> lines;  // everything else (notes and errors)
};

class CmdChat : public ::testing::Test {
protected:
    void SetUp() override {
        dir_ = test::test_scratch_dir("deltabit_test_cmd_chat");
        const fs::path folder = test::byte_tokenizer_model(dir_ / "hf", kTemplate);
        model_ = (dir_ / "chat.q1_0.gguf").string();
        const CommandResult convert = test::run_deltabit("convert " + folder.string() + " -o " + model_ + " --type q1_0");
        ASSERT_EQ(convert.exit_code, 0) << convert.output;
    }

    // Runs `deltabit chat` on `script` (one input line each) in JSON mode, greedy, on the CPU.
    ChatOutput chat(const std::vector<std::string>& script, const std::string& extra = "") {
        const fs::path input = dir_ / ("input" + std::to_string(scripts_++) + ".txt");
        std::ofstream out(input);
        for (const std::string& line : script) out << line << "\n";
        out.close();
        const CommandResult r = test::run_deltabit(
            "chat -m " + model_ + " --backend cpu --temperature 0 --max-tokens " + std::to_string(kMaxTokens) +
                " --json --quiet " + extra,
            test::Stderr::merge, input.string());
        ChatOutput chat{r.exit_code, r.output, {}, {}, {}};
        std::istringstream lines(r.output);
        for (std::string line; std::getline(lines, line);) {
            if (!line.starts_with("{")) {
                chat.lines.push_back(line);
                continue;
            }
            const json object = json::parse(line);
            if (object.contains("stats")) chat.stats.push_back(object["stats"]);
            else chat.replies.push_back(object);
        }
        return chat;
    }

    fs::path dir_;
    std::string model_;
    int scripts_ = 0;
};

std::vector<int32_t> tokens_of(const json& reply) { return reply.at("tokens").get<std::vector<int32_t>>(); }
std::string text_of(const json& reply) { return reply.at("reply").get<std::string>(); }

size_t count_lines_with(const std::vector<std::string>& lines, const std::string& needle) {
    size_t n = 0;
    for (const std::string& line : lines) n += line.find(needle) != std::string::npos;
    return n;
}

TEST_F(CmdChat, ThreeTurnsReuseWhatTheSessionHolds) {
    const ChatOutput c = chat({"hello", "/stats", "how are you", "/stats", "bye", "/stats"});
    ASSERT_EQ(c.exit_code, 0) << c.output;
    ASSERT_EQ(c.replies.size(), 3u) << c.output;
    ASSERT_EQ(c.stats.size(), 3u) << c.output;

    // Each turn's prompt is the whole conversation re-rendered.
    Messages messages = {{"user", "hello"}};
    std::vector<int64_t> prompts;
    for (size_t turn = 0; turn < 3; ++turn) {
        if (turn == 1) messages.push_back({"user", "how are you"});
        if (turn == 2) messages.push_back({"user", "bye"});
        prompts.push_back(rendered_tokens(messages));
        EXPECT_EQ(c.replies[turn].at("prompt_tokens"), prompts[turn]) << "turn " << turn;
        EXPECT_EQ(c.replies[turn].at("tokens").size(), size_t(kMaxTokens));
        EXPECT_EQ(c.replies[turn].at("finish_reason"), "length");
        messages.push_back({"assistant", text_of(c.replies[turn])});
    }

    // Turn 1 reads everything. Turns 2 and 3 start with the previous prompt token for token, and the
    // session checkpoints the end of every prompt, so at least that much is reused.
    EXPECT_EQ(c.stats[0].at("last_turn").at("reused"), 0);
    EXPECT_EQ(c.stats[0].at("last_turn").at("recomputed"), prompts[0]);
    int64_t total_reused = 0;
    for (size_t turn = 0; turn < 3; ++turn) {
        const json& last = c.stats[turn].at("last_turn");
        const int64_t reused = last.at("reused");
        if (turn > 0) {
            EXPECT_GE(reused, prompts[turn - 1]) << "turn " << turn;
            EXPECT_LE(reused, prompts[turn]) << "turn " << turn;
        }
        EXPECT_EQ(last.at("recomputed").get<int64_t>(), prompts[turn] - reused) << "turn " << turn;
        EXPECT_EQ(c.replies[turn].at("reused"), reused);
        total_reused += reused;
        // The state holds the prompt and every generated token but the last (generate.h).
        EXPECT_EQ(c.stats[turn].at("position").get<int64_t>(), prompts[turn] + kMaxTokens - 1) << "turn " << turn;
    }
    EXPECT_EQ(c.stats[2].at("total").at("turns"), 3);
    EXPECT_EQ(c.stats[2].at("total").at("reused"), total_reused);
    EXPECT_EQ(c.stats[2].at("backend"), "cpu");
    EXPECT_EQ(c.stats[2].at("kv_format"), "f32");
    EXPECT_GE(c.stats[2].at("checkpoints").get<int64_t>(), 1);

    // The first reply is what `run` makes of the same single message.
    const CommandResult run = test::run_deltabit(
        "run -m " + model_ + " --backend cpu -p hello --temperature 0 --max-tokens " + std::to_string(kMaxTokens) + " --json",
        test::Stderr::discard);
    ASSERT_EQ(run.exit_code, 0) << run.output;
    EXPECT_EQ(json::parse(run.output).at("tokens").get<std::vector<int32_t>>(), tokens_of(c.replies[0]));
}

TEST_F(CmdChat, SaveThenLoadInANewProcessContinuesLikeAnUninterruptedChat) {
    const std::string file = (dir_ / "two-turns.chat").string();
    const ChatOutput first = chat({"hello", "how are you", "/stats", "/save " + file});
    ASSERT_EQ(first.exit_code, 0) << first.output;
    ASSERT_EQ(first.replies.size(), 2u) << first.output;
    ASSERT_TRUE(fs::exists(file));

    const ChatOutput resumed = chat({"/load " + file, "/stats", "bye", "/stats"});
    ASSERT_EQ(resumed.exit_code, 0) << resumed.output;
    ASSERT_EQ(resumed.replies.size(), 1u) << resumed.output;
    ASSERT_EQ(resumed.stats.size(), 2u) << resumed.output;
    EXPECT_EQ(resumed.stats[0].at("position"), first.stats[0].at("position"));
    EXPECT_TRUE(resumed.stats[0].at("last_turn").is_null());

    const ChatOutput uninterrupted = chat({"hello", "how are you", "bye"});
    ASSERT_EQ(uninterrupted.replies.size(), 3u) << uninterrupted.output;
    EXPECT_EQ(tokens_of(resumed.replies[0]), tokens_of(uninterrupted.replies[2]));
    EXPECT_EQ(resumed.replies[0].at("prompt_tokens"), uninterrupted.replies[2].at("prompt_tokens"));
    // What the loaded state can give: the saved sequence is the second prompt and the second reply's
    // tokens but the last (generate.h), and the snapshot carries the session's checkpoints (session.h),
    // the one at the end of the second prompt among them. So the third turn keeps all of it when its
    // prompt starts with it, and otherwise (when the reply's text re-encodes differently, e.g. U+FFFD
    // for a stray byte) the second prompt — exactly what the uninterrupted chat keeps.
    Messages messages = {{"user", "hello"}, {"assistant", text_of(first.replies[0])}, {"user", "how are you"}};
    std::vector<int32_t> held = byte_tokens(rendered_text(messages));
    const std::vector<int32_t> reply = tokens_of(first.replies[1]);
    held.insert(held.end(), reply.begin(), reply.end() - 1);
    EXPECT_EQ(first.stats[0].at("position"), int64_t(held.size()));
    messages.push_back({"assistant", text_of(first.replies[1])});
    messages.push_back({"user", "bye"});
    const std::vector<int32_t> third_prompt = byte_tokens(rendered_text(messages));
    const bool extends = std::equal(held.begin(), held.end(), third_prompt.begin());
    const int64_t second_prompt = int64_t(held.size()) - (kMaxTokens - 1);
    const int64_t reused = extends ? int64_t(held.size()) : second_prompt;
    EXPECT_EQ(resumed.replies[0].at("reused").get<int64_t>(), reused)
        << (extends ? "the third prompt extends the saved sequence" : "the saved reply re-encodes differently");
    EXPECT_EQ(uninterrupted.replies[2].at("reused").get<int64_t>(), reused);
}

// Bytes of `file` with `edit` applied, written to `to`.
template <typename Edit>
std::string edited_copy(const std::string& file, const fs::path& to, Edit edit) {
    std::ifstream in(file, std::ios::binary);
    std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    edit(bytes);
    std::ofstream(to, std::ios::binary) << bytes;
    return to.string();
}

TEST_F(CmdChat, DamagedFilesAreRefusedAndTheChatContinuesIntact) {
    const std::string good = (dir_ / "good.chat").string();
    ASSERT_EQ(chat({"hello", "/save " + good}).exit_code, 0);

    const std::string truncated = edited_copy(good, dir_ / "truncated.chat", [](std::string& b) { b.resize(b.size() - 16); });
    const std::string edited = edited_copy(good, dir_ / "edited.chat", [](std::string& b) {
        const size_t at = b.find("hello");
        ASSERT_NE(at, std::string::npos);
        b[at] = 'j';  // still valid JSON: only the checksum can tell
    });
    const std::string flipped = edited_copy(good, dir_ / "flipped.chat", [](std::string& b) {
        const size_t session_start = b.find('\n', b.find('\n') + 1) + 1;  // after the magic and conversation lines
        b[session_start + (b.size() - session_start) / 2] ^= 0x40;
    });
    const std::string foreign = (test::kBinaryFixture / "config.json").string();

    const ChatOutput c = chat({"hello", "/stats", "/load " + truncated, "/load " + edited, "/load " + flipped,
                               "/load " + foreign, "/load " + (dir_ / "missing.chat").string(), "/stats", "how are you"});
    ASSERT_EQ(c.exit_code, 1) << c.output;  // a scripted chat with failed lines says so in its exit code
    EXPECT_EQ(count_lines_with(c.lines, "5 lines of the script failed"), 1u) << c.output;
    EXPECT_EQ(count_lines_with(c.lines, "chat: error: load: "), 5u) << c.output;
    EXPECT_EQ(count_lines_with(c.lines, "truncated"), 1u) << c.output;
    EXPECT_EQ(count_lines_with(c.lines, "conversation's checksum"), 1u) << c.output;
    EXPECT_EQ(count_lines_with(c.lines, "is refused: "), 1u) << c.output;  // by the session's own checks
    EXPECT_EQ(count_lines_with(c.lines, "not a deltabit chat file"), 1u) << c.output;
    EXPECT_EQ(count_lines_with(c.lines, "missing.chat: no such file; /save FILE writes one"), 1u) << c.output;

    // Nothing changed: same position, and the next turn is the uninterrupted chat's.
    ASSERT_EQ(c.stats.size(), 2u) << c.output;
    EXPECT_EQ(c.stats[1].at("position"), c.stats[0].at("position"));
    ASSERT_EQ(c.replies.size(), 2u) << c.output;
    const ChatOutput uninterrupted = chat({"hello", "how are you"});
    ASSERT_EQ(uninterrupted.replies.size(), 2u) << uninterrupted.output;
    EXPECT_EQ(tokens_of(c.replies[1]), tokens_of(uninterrupted.replies[1]));
    EXPECT_GE(c.replies[1].at("reused").get<int64_t>(), rendered_tokens({{"user", "hello"}}));
}

TEST_F(CmdChat, ResetStartsOverKeepingTheSystemMessage) {
    const ChatOutput c = chat({"hello", "/reset", "/stats", "hello", "/stats"}, "--system be-brief");
    ASSERT_EQ(c.exit_code, 0) << c.output;
    ASSERT_EQ(c.replies.size(), 2u) << c.output;
    ASSERT_EQ(c.stats.size(), 2u) << c.output;
    EXPECT_EQ(c.stats[0].at("position"), 0);
    EXPECT_TRUE(c.stats[0].at("last_turn").is_null());
    const int64_t prompt = rendered_tokens({{"system", "be-brief"}, {"user", "hello"}});
    EXPECT_EQ(c.replies[0].at("prompt_tokens"), prompt);
    EXPECT_EQ(c.replies[1].at("prompt_tokens"), prompt);
    EXPECT_EQ(c.replies[1].at("reused"), 0);  // the reset dropped the state too
    EXPECT_EQ(tokens_of(c.replies[1]), tokens_of(c.replies[0]));
}

// Replays the context policy by hand: before each turn, while prompt + kMaxTokens (the reply's
// reserve) exceeds the context, drop the oldest user message and its reply; the system message stays.
TEST_F(CmdChat, FullContextDropsTheOldestTurnsButNeverTheSystemMessage) {
    constexpr int64_t kContext = 72;
    const std::vector<std::string> script = {"ab", "cd", "ef", "gh", "ij"};
    const ChatOutput c = chat(script, "--system sys --ctx " + std::to_string(kContext));
    ASSERT_EQ(c.exit_code, 0) << c.output;
    ASSERT_EQ(c.replies.size(), script.size()) << c.output;

    Messages messages = {{"system", "sys"}};
    size_t turns_with_drops = 0;
    for (size_t turn = 0; turn < script.size(); ++turn) {
        messages.push_back({"user", script[turn]});
        bool dropped = false;
        while (rendered_tokens(messages) + kMaxTokens > kContext) {
            ASSERT_GT(messages.size(), 3u) << "turn " << turn << " cannot fit even alone";
            messages.erase(messages.begin() + 1, messages.begin() + 3);  // user + assistant after the system message
            dropped = true;
        }
        turns_with_drops += dropped;
        EXPECT_EQ(c.replies[turn].at("prompt_tokens"), rendered_tokens(messages)) << "turn " << turn;
        messages.push_back({"assistant", text_of(c.replies[turn])});
    }
    ASSERT_GT(turns_with_drops, 0u) << "the script never filled the context; lower kContext";
    EXPECT_EQ(count_lines_with(c.lines, "context full: dropped the oldest"), turns_with_drops) << c.output;
}

TEST_F(CmdChat, FullContextWithOnFullStopRefusesAndKeepsTheConversation) {
    constexpr int64_t kContext = 72;
    const std::vector<std::string> script = {"ab", "cd", "ef", "gh"};
    std::vector<std::string> lines = script;
    lines.push_back("/stats");
    const ChatOutput c = chat(lines, "--on-full stop --ctx " + std::to_string(kContext));
    ASSERT_EQ(c.exit_code, 0) << c.output;

    Messages messages;
    size_t answered = 0, refused = 0;
    for (const std::string& message : script) {
        messages.push_back({"user", message});
        if (rendered_tokens(messages) + kMaxTokens > kContext) {
            messages.pop_back();
            ++refused;
            continue;
        }
        ASSERT_LT(answered, c.replies.size()) << c.output;
        EXPECT_EQ(c.replies[answered].at("prompt_tokens"), rendered_tokens(messages));
        messages.push_back({"assistant", text_of(c.replies[answered])});
        ++answered;
    }
    ASSERT_GT(refused, 0u) << "the script never filled the context; lower kContext";
    EXPECT_EQ(c.replies.size(), answered) << c.output;
    EXPECT_EQ(count_lines_with(c.lines, "context full"), refused) << c.output;
    ASSERT_EQ(c.stats.size(), 1u);
    EXPECT_EQ(c.stats[0].at("total").at("turns"), int64_t(answered));
}

TEST_F(CmdChat, ThinkingSwitchReachesTheTemplate) {
    const ChatOutput c = chat({"hello", "/thinking off", "hi", "/thinking on", "yo"});
    ASSERT_EQ(c.exit_code, 0) << c.output;
    ASSERT_EQ(c.replies.size(), 3u) << c.output;
    Messages messages = {{"user", "hello"}, {"assistant", text_of(c.replies[0])}, {"user", "hi"}};
    EXPECT_EQ(c.replies[1].at("prompt_tokens"), rendered_tokens(messages, /*thinking_off=*/true));
    messages.push_back({"assistant", text_of(c.replies[1])});
    messages.push_back({"user", "yo"});
    EXPECT_EQ(c.replies[2].at("prompt_tokens"), rendered_tokens(messages));
}

TEST_F(CmdChat, PlainOutputIsATranscript) {
    const ChatOutput json_run = chat({"hello"});
    ASSERT_EQ(json_run.replies.size(), 1u) << json_run.output;
    const fs::path input = dir_ / "plain.txt";
    std::ofstream(input) << "hello\n";
    const CommandResult plain = test::run_deltabit(
        "chat -m " + model_ + " --backend cpu --temperature 0 --quiet --max-tokens " + std::to_string(kMaxTokens),
        test::Stderr::discard, input.string());
    ASSERT_EQ(plain.exit_code, 0) << plain.output;
    EXPECT_EQ(plain.output, "> hello\n" + text_of(json_run.replies[0]) + "\n");
}

TEST_F(CmdChat, UnknownCommandsAndLeadingSlashes) {
    const ChatOutput c = chat({"/frobnicate", "//slash", "/stats"});
    ASSERT_EQ(c.exit_code, 1) << c.output;  // the unknown command failed
    EXPECT_EQ(count_lines_with(c.lines, "unknown command /frobnicate"), 1u) << c.output;
    ASSERT_EQ(c.replies.size(), 1u) << c.output;
    EXPECT_EQ(c.replies[0].at("prompt_tokens"), rendered_tokens({{"user", "/slash"}}));  // one slash sent
    ASSERT_EQ(c.stats.size(), 1u);
}

// A trailing backslash continues the message on the next line, joined by a newline.
TEST_F(CmdChat, BackslashContinuesAMessage) {
    const ChatOutput c = chat({"ab\\", "cd", "/stats"});
    ASSERT_EQ(c.exit_code, 0) << c.output;
    ASSERT_EQ(c.replies.size(), 1u) << c.output;
    EXPECT_EQ(c.replies[0].at("prompt_tokens"), rendered_tokens({{"user", "ab\ncd"}}));
}

// Every path a user can type after /save or /load that is not a regular file gets a one-line refusal
// naming it, nothing is replaced, and the chat goes on; the scripted chat then exits 1.
TEST_F(CmdChat, SaveAndLoadRefuseWhatIsNotARegularFile) {
    const fs::path folder = dir_ / "a_folder";
    const fs::path fifo = dir_ / "a_fifo";
    fs::create_directories(folder);
    fs::remove(fifo);
    ASSERT_EQ(mkfifo(fifo.c_str(), 0600), 0);
    const fs::path device = "/dev/null";  // refused before anything touches it
    const fs::path saved = dir_ / "after.chat";
    fs::remove(saved);

    const ChatOutput c = chat({"hello", "/load " + folder.string(), "/load " + fifo.string(), "/load " + device.string(),
                               "/save " + folder.string(), "/save " + fifo.string(), "/save " + device.string(),
                               "/save " + (dir_ / "no_such_folder" / "x.chat").string(), "/stats", "how are you",
                               "/save " + saved.string()});
    EXPECT_EQ(c.exit_code, 1) << c.output;
    EXPECT_EQ(count_lines_with(c.lines, "7 lines of the script failed"), 1u) << c.output;
    EXPECT_EQ(count_lines_with(c.lines, "internal error"), 0u) << c.output;
    EXPECT_EQ(count_lines_with(c.lines, "chat: error: load: " + folder.string() + " is a folder, not a regular file"), 1u)
        << c.output;
    EXPECT_EQ(count_lines_with(c.lines, "chat: error: load: " + fifo.string() + " is a FIFO"), 1u) << c.output;
    EXPECT_EQ(count_lines_with(c.lines, "chat: error: load: /dev/null is a character device"), 1u) << c.output;
    EXPECT_EQ(count_lines_with(c.lines, "chat: error: save: " + folder.string() + " is a folder"), 1u) << c.output;
    EXPECT_EQ(count_lines_with(c.lines, "chat: error: save: " + fifo.string() + " is a FIFO"), 1u) << c.output;
    EXPECT_EQ(count_lines_with(c.lines, "chat: error: save: /dev/null is a character device"), 1u) << c.output;
    EXPECT_EQ(count_lines_with(c.lines, "no_such_folder does not exist"), 1u) << c.output;
    EXPECT_EQ(count_lines_with(c.lines, ".tmp"), 0u) << c.output;  // messages name the user's path only

    // Nothing was replaced, nothing was left behind, and the chat went on to its end.
    EXPECT_TRUE(fs::is_directory(folder));
    EXPECT_TRUE(fs::is_empty(folder));
    EXPECT_TRUE(fs::is_fifo(fifo));
    EXPECT_TRUE(fs::is_character_file(device));
    ASSERT_EQ(c.replies.size(), 2u) << c.output;
    EXPECT_TRUE(fs::is_regular_file(saved)) << c.output;
    for (const fs::directory_entry& e : fs::directory_iterator(dir_))
        EXPECT_EQ(e.path().string().find(".deltabit-"), std::string::npos) << "left behind: " << e.path();
}

TEST_F(CmdChat, SaveThroughASymbolicLinkReplacesItsTargetAndKeepsTheLink) {
    const fs::path target = dir_ / "target.chat", link = dir_ / "link.chat";
    fs::remove(link);
    std::ofstream(target) << "old";
    fs::create_symlink(target, link);
    const ChatOutput c = chat({"hello", "/save " + link.string()});
    ASSERT_EQ(c.exit_code, 0) << c.output;
    EXPECT_TRUE(fs::is_symlink(link));
    std::ifstream in(target);
    std::string first;
    std::getline(in, first);
    EXPECT_EQ(first, "deltabit-chat 1");
}

TEST_F(CmdChat, ConvertRefusesAnOutputThatIsNotARegularFile) {
    const fs::path fifo = dir_ / "out_fifo";
    fs::remove(fifo);
    ASSERT_EQ(mkfifo(fifo.c_str(), 0600), 0);
    const std::string hf = (dir_ / "hf").string();
    for (const std::string& out : {std::string("/dev/null"), fifo.string(), dir_.string()}) {
        const CommandResult r = test::run_deltabit("convert -m " + hf + " -o " + out + " --type q1_0 --quiet");
        EXPECT_EQ(r.exit_code, 1) << r.output;
        EXPECT_EQ(std::count(r.output.begin(), r.output.end(), '\n'), 1) << r.output;
        EXPECT_TRUE(r.output.starts_with("deltabit: error: convert: " + out + " is a ")) << r.output;
        EXPECT_EQ(r.output.find(".tmp"), std::string::npos) << r.output;
    }
    EXPECT_TRUE(fs::is_character_file("/dev/null"));
    EXPECT_TRUE(fs::is_fifo(fifo));
}

// A scripted chat whose replies cannot be written (stdout on a full device) exits 1, saying so.
TEST_F(CmdChat, StdoutThatCannotBeWrittenExitsOne) {
    const fs::path input = dir_ / "full.txt";
    std::ofstream(input) << "hello\n";
    const std::string command = std::string(DELTABIT_BINARY) + " chat -m " + model_ +
                                " --backend cpu --temperature 0 --quiet --max-tokens 4 < " + input.string() +
                                " 2>&1 >/dev/full";
    FILE* pipe = popen(command.c_str(), "r");
    ASSERT_NE(pipe, nullptr);
    std::string output;
    char buffer[512];
    for (size_t n; (n = fread(buffer, 1, sizeof buffer, pipe)) > 0;) output.append(buffer, n);
    const int status = pclose(pipe);
    ASSERT_TRUE(WIFEXITED(status));
    EXPECT_EQ(WEXITSTATUS(status), 1) << output;
    EXPECT_NE(output.find("deltabit: error: cannot write to standard output: No space left on device"),
              std::string::npos)
        << output;
}

TEST_F(CmdChat, InvalidUtf8GetsAOneLineWarning) {
    const ChatOutput c = chat({"caf\xe9 au lait"});
    ASSERT_EQ(c.exit_code, 0) << c.output;
    EXPECT_EQ(count_lines_with(c.lines, "chat: warning: the message is not valid UTF-8 (first bad byte at offset 3)"),
              1u)
        << c.output;
    ASSERT_EQ(c.replies.size(), 1u) << c.output;
}

// (Without -m, chat talks to the shipped default model: tests/train/test_default_model.cpp.)
TEST_F(CmdChat, RefusesAModelWithoutAnEndToReplies) {
    const CommandResult no_limit = test::run_deltabit("chat -m " + model_ + " --backend cpu");
    EXPECT_EQ(no_limit.exit_code, 1) << no_limit.output;
    EXPECT_NE(no_limit.output.find("--max-tokens"), std::string::npos) << no_limit.output;
}

#endif

}  // namespace
}  // namespace deltabit
