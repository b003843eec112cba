// ChatTemplate: where a template is read from (tokenizer_config.json as a string or named list,
// chat_template.jinja, GGUF), which variables it sees, and real templates rendered into prompts
// worked out by hand from the template text (the byte-for-byte comparison with the JS reference
// is test_chat_template_reference.cpp; these hold without node).
#include "text/chat_template.h"

#include "formats/gguf.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <functional>
#include <sstream>

namespace deltabit::text {
namespace {

using json = nlohmann::ordered_json;
namespace fs = std::filesystem;

const fs::path kTemplates = fs::path(DELTABIT_SOURCE_DIR) / "tests/text/templates";

std::string read_text(const fs::path& path) {
    std::ifstream in(path, std::ios::binary);
    std::ostringstream s;
    s << in.rdbuf();
    return s.str();
}

class TempDir {
public:
    TempDir() : path_(fs::temp_directory_path() / ("deltabit-chat-" + std::to_string(::getpid()) + "-" + std::to_string(counter_++))) {
        fs::create_directories(path_);
    }
    ~TempDir() { fs::remove_all(path_); }
    fs::path write(const std::string& name, const std::string& text) const {
        std::ofstream(path_ / name, std::ios::binary) << text;
        return path_ / name;
    }
    const fs::path& path() const { return path_; }

private:
    static inline int counter_ = 0;
    fs::path path_;
};

ChatRequest request(json messages, bool add_generation_prompt = false) {
    ChatRequest r;
    r.messages = std::move(messages);
    r.add_generation_prompt = add_generation_prompt;
    return r;
}

std::string error_of(const std::function<void()>& f) {
    try {
        f();
    } catch (const Error& e) {
        return e.what();
    }
    return "(no error)";
}

TEST(ChatTemplateLoad, TokenizerConfigWithNamedTemplates) {
    TempDir dir;
    json config = {{"bos_token", {{"content", "<s>"}, {"lstrip", false}}},
                   {"eos_token", "</s>"},
                   {"unk_token", nullptr},
                   {"chat_template",
                    {{{"name", "default"}, {"template", "D{{ messages | length }}{{ bos_token }}{{ eos_token }}{{ unk_token is defined }}"}},
                     {{"name", "tool_use"}, {"template", "T{{ tools | length }}"}}}}};
    fs::path path = dir.write("tokenizer_config.json", config.dump());
    ChatTemplate t = ChatTemplate::from_tokenizer_config(path.string());
    EXPECT_EQ(t.special_tokens().bos_token, "<s>");  // AddedToken object form
    ChatRequest plain = request({{{"role", "user"}, {"content", "x"}}});
    EXPECT_EQ(t.render(plain), "D1<s></s>False");
    // HF's rule: tools present and a "tool_use" template exists -> that one, unless a name is given.
    ChatRequest with_tools = plain;
    with_tools.tools = json::array({{{"type", "function"}}});
    EXPECT_EQ(t.render(with_tools), "T1");
    EXPECT_EQ(t.render(with_tools, "default"), "D1<s></s>False");
    EXPECT_EQ(error_of([&] { t.render(plain, "rag"); }), "chat template (" + path.string() + "): no template named 'rag'");
}

TEST(ChatTemplateLoad, ChatTemplateJinjaBesideTheConfigWins) {
    TempDir dir;
    dir.write("tokenizer_config.json", json{{"eos_token", "</s>"}, {"chat_template", "from config"}}.dump());
    EXPECT_EQ(ChatTemplate::from_hf_directory(dir.path().string()).render(request(json::array())), "from config");
    dir.write("chat_template.jinja", "from file {{ eos_token }}\n");
    EXPECT_EQ(ChatTemplate::from_hf_directory(dir.path().string()).render(request(json::array())), "from file </s>");

    TempDir empty;
    EXPECT_EQ(error_of([&] { ChatTemplate::from_hf_directory(empty.path().string()); }),
              "chat template: " + empty.path().string() + ": neither tokenizer_config.json nor chat_template.jinja is there");
}

TEST(ChatTemplateLoad, BadConfigsAreRefusedWithTheFileName) {
    TempDir dir;
    fs::path none = dir.write("a.json", json{{"eos_token", "</s>"}}.dump());
    EXPECT_EQ(error_of([&] { ChatTemplate::from_tokenizer_config(none.string()); }),
              "chat template: " + none.string() + ": no \"chat_template\"");
    fs::path number = dir.write("b.json", json{{"chat_template", 3}}.dump());
    EXPECT_EQ(error_of([&] { ChatTemplate::from_tokenizer_config(number.string()); }),
              "chat template: " + number.string() + ": \"chat_template\" must be a string or a list of named templates");
    fs::path bad = dir.write("c.json", json{{"chat_template", "{% if x %}unclosed"}}.dump());
    EXPECT_EQ(error_of([&] { ChatTemplate::from_tokenizer_config(bad.string()); }),
              "chat template (" + bad.string() + "): template line 1, column 19: unexpected end of template, expected 'endif'");
}

TEST(ChatTemplateLoad, Gguf) {
    gguf::Writer w;
    w.set_string("general.architecture", "qwen3");
    w.set_string("tokenizer.chat_template", "G{{ bos_token }}{{ eos_token }}");
    w.set_string("tokenizer.chat_template.tool_use", "TU");
    w.set_string_array("tokenizer.ggml.tokens", {"<unk>", "<s>", "</s>"});
    w.set_u32("tokenizer.ggml.bos_token_id", 1);
    w.set_u32("tokenizer.ggml.eos_token_id", 2);
    std::vector<uint8_t> bytes = w.to_bytes();
    gguf::File file = gguf::File::parse(bytes, "model.gguf");
    ChatTemplate t = ChatTemplate::from_gguf(file);
    EXPECT_EQ(t.render(request(json::array())), "G<s></s>");
    ChatRequest with_tools = request(json::array());
    with_tools.tools = json::array({json::object()});
    EXPECT_EQ(t.render(with_tools), "TU");

    gguf::Writer bad;
    bad.set_string("tokenizer.chat_template", "x");
    bad.set_string_array("tokenizer.ggml.tokens", {"a"});
    bad.set_u32("tokenizer.ggml.bos_token_id", 5);
    std::vector<uint8_t> bad_bytes = bad.to_bytes();
    gguf::File bad_file = gguf::File::parse(bad_bytes, "bad.gguf");
    EXPECT_EQ(error_of([&] { ChatTemplate::from_gguf(bad_file); }),
              "chat template: bad.gguf: tokenizer.ggml.bos_token_id = 5 is past the vocabulary (1 tokens)");
}

TEST(ChatTemplateRender, VariablesFollowApplyChatTemplate) {
    ChatTemplate t = ChatTemplate::from_string(
        "{{ tools is none }}/{{ add_generation_prompt }}/{{ enable_thinking is defined }}/{{ preserve_thinking is defined }}"
        "/{{ bos_token is defined }}/{{ custom | default('-') }}",
        "inline", SpecialTokens{"", "</s>", "", ""});
    ChatRequest r = request(json::array(), true);
    EXPECT_EQ(t.render(r), "True/True/False/False/False/-");
    r.enable_thinking = false;
    r.preserve_thinking = true;
    r.extra = {{"custom", 5}};
    r.tools = json::array();
    EXPECT_EQ(t.render(r), "False/True/True/True/False/5");
    r.messages = json::object();
    EXPECT_EQ(error_of([&] { t.render(r); }), "chat request: \"messages\" must be an array");
    // A client's message nested without end is refused before anything recurses over it.
    json deep = "leaf";
    for (int i = 0; i < 600; ++i) deep = json::array({deep});
    r.messages = json::array({{{"role", "user"}, {"content", deep}}});
    EXPECT_EQ(error_of([&] { t.render(r); }), "chat request: JSON value nests deeper than 512 levels");
}

TEST(ChatTemplateRender, Qwen3ToolCallPromptWorkedOutByHand) {
    ChatTemplate t = ChatTemplate::from_tokenizer_config((kTemplates / "qwen3-tokenizer_config.json").string());
    ChatRequest r;
    r.messages = json::parse(R"([
        {"role": "system", "content": "S"},
        {"role": "user", "content": "Weather in Paris?"},
        {"role": "assistant", "content": "", "tool_calls": [{"type": "function", "function": {"name": "get_weather", "arguments": {"city": "Paris"}}}]},
        {"role": "tool", "content": "18"}])");
    r.tools = json::parse(R"([{"type": "function", "function": {"name": "get_weather"}}])");
    r.add_generation_prompt = true;
    std::string expected =
        "<|im_start|>system\nS\n\n# Tools\n\nYou may call one or more functions to assist with the user query.\n\n"
        "You are provided with function signatures within <tools></tools> XML tags:\n<tools>\n"
        "{\"type\": \"function\", \"function\": {\"name\": \"get_weather\"}}\n</tools>\n\n"
        "For each function call, return a json object with function name and arguments within <tool_call></tool_call> XML tags:\n"
        "<tool_call>\n{\"name\": <function-name>, \"arguments\": <args-json-object>}\n</tool_call><|im_end|>\n"
        "<|im_start|>user\nWeather in Paris?<|im_end|>\n"
        "<|im_start|>assistant\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}\n</tool_call><|im_end|>\n"
        "<|im_start|>user\n<tool_response>\n18\n</tool_response><|im_end|>\n"
        "<|im_start|>assistant\n";
    EXPECT_EQ(t.render(r), expected);
    // Thinking off adds the empty think block after the generation prompt.
    r.enable_thinking = false;
    EXPECT_EQ(t.render(r), expected + "<think>\n\n</think>\n\n");
}

TEST(ChatTemplateRender, Qwen35ThinkingSwitchesWorkedOutByHand) {
    fs::path path = kTemplates / "qwen3.5.jinja";
    ChatTemplate t = ChatTemplate::from_string(read_text(path), path.string());
    ChatRequest r = request(json::parse(R"([{"role": "user", "content": "Hi"}])"), true);
    EXPECT_EQ(t.render(r), "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n<think>\n");
    r.enable_thinking = false;
    EXPECT_EQ(t.render(r), "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\n");

    // Reasoning of an earlier turn is dropped unless preserve_thinking is true.
    ChatRequest history = request(json::parse(R"([{"role": "user", "content": "Q1"},
        {"role": "assistant", "content": "A1", "reasoning_content": "R1"}, {"role": "user", "content": "Q2"}])"));
    EXPECT_EQ(t.render(history), "<|im_start|>user\nQ1<|im_end|>\n<|im_start|>assistant\nA1<|im_end|>\n<|im_start|>user\nQ2<|im_end|>\n");
    history.preserve_thinking = true;
    EXPECT_EQ(t.render(history),
              "<|im_start|>user\nQ1<|im_end|>\n<|im_start|>assistant\n<think>\nR1\n</think>\n\nA1<|im_end|>\n"
              "<|im_start|>user\nQ2<|im_end|>\n");
}

TEST(ChatTemplateRender, GemmaPromptAndRefusalWorkedOutByHand) {
    fs::path path = kTemplates / "gemma3.jinja";
    ChatTemplate t = ChatTemplate::from_string(read_text(path), path.string(), SpecialTokens{"<bos>", "<end_of_turn>", "", ""});
    ChatRequest r = request(json::parse(R"([{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi"},
        {"role": "assistant", "content": " Hello! "}, {"role": "user", "content": "Bye"}])"), true);
    // The system prompt is folded into the first user turn; "assistant" is called "model"; content is trimmed.
    EXPECT_EQ(t.render(r),
              "<bos><start_of_turn>user\nBe brief.\n\nHi<end_of_turn>\n<start_of_turn>model\nHello!<end_of_turn>\n"
              "<start_of_turn>user\nBye<end_of_turn>\n<start_of_turn>model\n");

    ChatRequest twice = request(json::parse(R"([{"role": "user", "content": "a"}, {"role": "user", "content": "b"}])"));
    try {
        t.render(twice);
        ADD_FAILURE() << "two user turns in a row must be refused";
    } catch (const ChatTemplateError& e) {
        EXPECT_TRUE(e.refused_input());
        // gemma3.jinja line 19: `        {{ raise_exception(...` — the call starts at column 12.
        EXPECT_EQ(std::string(e.what()), "chat template (" + path.string() +
                                             "): template line 19, column 12: Conversation roles must alternate "
                                             "user/assistant/user/assistant/...");
    }
}

}  // namespace
}  // namespace deltabit::text
