// `deltabit serve` on a block-diffusion model (the DiffusionGemma fixture with a byte tokenizer), end to
// end with real HTTP: a reply is `deltabit run`'s for the same prompt, seed and max_tokens (the same
// block loop, so the same text to the byte), a stream sends one chunk per committed block and ends with
// [DONE], usage counts the prompt and the committed tokens, the settings the block loop has no use for
// are refused naming the field, /v1/models and /metrics describe the model, and a client that hangs up
// cancels its run. The fixture's generation_config.json sets no EOS, so a reply runs to whole blocks.
#include "cli_command.h"
#include "runtime/diffusion_chat_model.h"
#include "server_process.h"
#include "stream_client.h"

#include <algorithm>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

namespace deltabit {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;
using test::ServerProcess;

constexpr int64_t kBlock = 8;  // the fixture's canvas_length
constexpr int64_t kDefaultTokens = 13;  // this suite's generation_config.json max_new_tokens

class DiffusionServer : public ::testing::Test {
protected:
    static void SetUpTestSuite() {
        dir_ = test::scratch_dir("deltabit_test_server_diffusion");
        fs::remove_all(dir_);
        model_ = new fs::path(test::diffusion_chat_model(dir_ / "model"));
        // A default length of two blocks (the fixture leaves transformers' 256: 32 blocks, seconds each).
        nlohmann::json generation = nlohmann::json::parse(std::ifstream(*model_ / "generation_config.json"));
        generation["max_new_tokens"] = kDefaultTokens;
        std::ofstream(*model_ / "generation_config.json") << generation.dump();
        server_ = new ServerProcess(*model_);
    }
    static void TearDownTestSuite() {
        delete server_;
        delete model_;
        fs::remove_all(dir_);
    }

    static httplib::Result post_raw(const std::string& path, const json& body) {
        return server_->client()->Post(path, body.dump(), "application/json");
    }
    static json post(const std::string& path, const json& body, int expect = 200) {
        auto res = post_raw(path, body);
        EXPECT_TRUE(res) << path;
        if (!res) return {};
        EXPECT_EQ(res->status, expect) << res->body;
        return json::parse(res->body);
    }
    // `deltabit run ... --json` on the same model folder.
    static json run(const std::string& args) {
        const test::CommandResult r = test::run_deltabit(
            "run -m " + model_->string() + " " + args + " --backend " + test::server_test_backend() + " --json -q",
            test::Stderr::discard);
        EXPECT_EQ(r.exit_code, 0) << r.output;
        return json::parse(r.output);
    }
    static std::string metrics() {
        auto res = server_->client()->Get("/metrics");
        return res ? res->body : std::string();
    }

    static inline fs::path dir_;
    static inline fs::path* model_ = nullptr;
    static inline ServerProcess* server_ = nullptr;
};

// Value of a Prometheus line `name value` (−1 when absent).
double metric_value(const std::string& text, const std::string& name) {
    const size_t at = text.find("\n" + name + " ");
    return at == std::string::npos ? -1.0 : std::stod(text.substr(at + name.size() + 2));
}

TEST_F(DiffusionServer, ChatReplyIsRunsReplyForTheSamePromptSeedAndMaxTokens) {
    const json reply = post("/v1/chat/completions",
                            {{"messages", {{{"role", "user"}, {"content", "hello"}}}}, {"max_tokens", 20}, {"seed", 11}});
    const json expected = run("-p hello --max-tokens 20 --seed 11");
    ASSERT_EQ(expected.at("blocks"), 3);  // 20 tokens round up to three blocks of 8
    ASSERT_EQ(reply["object"], "chat.completion");
    const json& choice = reply["choices"][0];
    EXPECT_EQ(choice["message"]["role"], "assistant");
    EXPECT_EQ(choice["message"]["content"], expected.at("text"));
    EXPECT_FALSE(expected.at("text").get<std::string>().empty());  // the comparison compares something
    EXPECT_EQ(choice["finish_reason"], "length");
    EXPECT_EQ(expected.at("finish_reason"), "length");
    EXPECT_EQ(reply["usage"]["prompt_tokens"], std::string("user: hello\nassistant: ").size());
    EXPECT_EQ(reply["usage"]["prompt_tokens"], expected.at("prompt_tokens"));
    // No EOS: every committed token counts, whole blocks (24 for max_tokens 20, as run commits).
    EXPECT_EQ(reply["usage"]["completion_tokens"], expected.at("tokens").size());
    EXPECT_EQ(reply["usage"]["completion_tokens"], 3 * kBlock);
    EXPECT_EQ(reply["usage"]["total_tokens"],
              reply["usage"]["prompt_tokens"].get<int64_t>() + reply["usage"]["completion_tokens"].get<int64_t>());

    // The seed decides the reply: the same seed repeats it, another changes it.
    const json again = post("/v1/chat/completions",
                            {{"messages", {{{"role", "user"}, {"content", "hello"}}}}, {"max_tokens", 20}, {"seed", 11}});
    EXPECT_EQ(again["choices"][0]["message"]["content"], choice["message"]["content"]);
    const json other = post("/v1/chat/completions",
                            {{"messages", {{{"role", "user"}, {"content", "hello"}}}}, {"max_tokens", 20}, {"seed", 12}});
    EXPECT_EQ(other["choices"][0]["message"]["content"], run("-p hello --max-tokens 20 --seed 12").at("text"));
    EXPECT_NE(other["choices"][0]["message"]["content"], choice["message"]["content"]);
}

TEST_F(DiffusionServer, ChatWithoutMaxTokensWritesGenerationConfigsLength) {
    // max_new_tokens of generation_config.json, as `run` without --max-tokens: 13, so two blocks.
    const json reply = post("/v1/chat/completions", {{"messages", {{{"role", "user"}, {"content", "hi"}}}}, {"seed", 3}});
    const json expected = run("-p hi --seed 3");
    EXPECT_EQ(expected.at("blocks"), 2);
    EXPECT_EQ(reply["usage"]["completion_tokens"], 2 * kBlock);
    EXPECT_EQ(reply["choices"][0]["message"]["content"], expected.at("text"));
}

TEST_F(DiffusionServer, StreamedChatSendsOneChunkPerBlockAndEndsWithDone) {
    const json expected = run("-p stream --max-tokens 24 --seed 5");
    ASSERT_EQ(expected.at("blocks"), 3);
    const json body = {{"messages", {{{"role", "user"}, {"content", "stream"}}}}, {"max_tokens", 24}, {"seed", 5},
                       {"stream", true}, {"stream_options", {{"include_usage", true}}}};
    auto res = post_raw("/v1/chat/completions", body);
    ASSERT_TRUE(res);
    ASSERT_EQ(res->status, 200) << res->body;
    EXPECT_EQ(res->get_header_value("Content-Type"), "text/event-stream");
    const std::vector<std::string> events = test::sse_events(res->body);
    ASSERT_GE(events.size(), 3u) << res->body;
    EXPECT_EQ(events.back(), "[DONE]");
    std::string content;
    int content_chunks = 0;
    std::string finish;
    json usage;
    for (size_t i = 0; i + 1 < events.size(); ++i) {
        const json chunk = json::parse(events[i]);
        EXPECT_EQ(chunk["object"], "chat.completion.chunk");
        if (chunk.contains("usage") && !chunk["usage"].is_null()) usage = chunk["usage"];
        if (chunk["choices"].empty()) continue;
        const json& choice = chunk["choices"][0];
        if (choice["delta"].contains("content") && !choice["delta"]["content"].get<std::string>().empty()) {
            content += choice["delta"]["content"].get<std::string>();
            ++content_chunks;
        }
        if (!choice["finish_reason"].is_null()) finish = choice["finish_reason"];
    }
    EXPECT_EQ(content, expected.at("text").get<std::string>());
    EXPECT_EQ(content_chunks, 3);  // one per committed block (each block of this run has visible text)
    EXPECT_EQ(finish, "length");
    EXPECT_EQ(usage["completion_tokens"], 24);
    EXPECT_EQ(usage["prompt_tokens"], expected.at("prompt_tokens"));
}

TEST_F(DiffusionServer, CompletionIsRunsRawReplyAndStreamsByBlock) {
    const json expected = run("--raw -p 'once upon' --max-tokens 9 --seed 7");
    ASSERT_EQ(expected.at("blocks"), 2);
    const json reply = post("/v1/completions", {{"prompt", "once upon"}, {"max_tokens", 9}, {"seed", 7}});
    EXPECT_EQ(reply["object"], "text_completion");
    EXPECT_EQ(reply["choices"][0]["text"], expected.at("text"));
    EXPECT_EQ(reply["choices"][0]["finish_reason"], "length");
    EXPECT_EQ(reply["usage"]["prompt_tokens"], expected.at("prompt_tokens"));
    EXPECT_EQ(reply["usage"]["completion_tokens"], 2 * kBlock);

    // Token ids as the prompt: the same prompt, so the same reply.
    std::vector<int32_t> ids;
    for (char c : std::string("once upon")) ids.push_back(int32_t(uint8_t(c)));
    const json by_ids = post("/v1/completions", {{"prompt", ids}, {"max_tokens", 9}, {"seed", 7}});
    EXPECT_EQ(by_ids["choices"][0]["text"], expected.at("text"));

    auto res = post_raw("/v1/completions", {{"prompt", "once upon"}, {"max_tokens", 9}, {"seed", 7}, {"stream", true}});
    ASSERT_TRUE(res);
    const std::vector<std::string> events = test::sse_events(res->body);
    ASSERT_FALSE(events.empty());
    EXPECT_EQ(events.back(), "[DONE]");
    std::string text;
    int text_chunks = 0;
    for (size_t i = 0; i + 1 < events.size(); ++i) {
        const json chunk = json::parse(events[i]);
        const std::string piece = chunk["choices"][0]["text"];
        text += piece;
        text_chunks += piece.empty() ? 0 : 1;
    }
    EXPECT_EQ(text, expected.at("text").get<std::string>());
    EXPECT_EQ(text_chunks, 2);
}

TEST_F(DiffusionServer, RefusesWhatTheBlockLoopHasNoUseForNamingTheField) {
    const json messages = {{{"role", "user"}, {"content", "hi"}}};
    const json tools = json::array({{{"type", "function"}, {"function", {{"name", "f"}}}}});
    const std::vector<std::pair<std::string, json>> chat_fields = {
        {"temperature", 0.5}, {"top_p", 0.9}, {"top_k", 5}, {"min_p", 0.1}, {"presence_penalty", 0.5},
        {"frequency_penalty", 0.5}, {"repetition_penalty", 1.1}, {"stop", "x"}, {"logprobs", true}, {"tools", tools}};
    for (const auto& [field, value] : chat_fields) {
        const json error = post("/v1/chat/completions", {{"messages", messages}, {field, value}}, 400)["error"];
        EXPECT_EQ(error["param"], field);
        EXPECT_EQ(error["code"], "unsupported_parameter") << field;
        EXPECT_EQ(error["type"], "invalid_request_error");
        const std::string message = error["message"];
        EXPECT_EQ(message.find("'" + field + "' does not apply to a block-diffusion model: "), 0u) << message;
    }
    for (const auto& [field, value] : std::vector<std::pair<std::string, json>>{{"echo", true}, {"logprobs", 1}, {"temperature", 0}}) {
        const json error = post("/v1/completions", {{"prompt", "hi"}, {"max_tokens", 8}, {field, value}}, 400)["error"];
        EXPECT_EQ(error["param"], field);
        EXPECT_EQ(error["code"], "unsupported_parameter") << field;
    }
    // Fields that ask for nothing pass: logprobs false, an empty stop list, tool_choice none, n 1.
    const json fine = post("/v1/chat/completions", {{"messages", messages}, {"max_tokens", 8}, {"logprobs", false},
                                                    {"stop", json::array()}, {"tool_choice", "none"}, {"n", 1}});
    EXPECT_EQ(fine["choices"][0]["finish_reason"], "length");
    // n > 1 is refused for every model.
    EXPECT_EQ(post("/v1/chat/completions", {{"messages", messages}, {"n", 2}}, 400)["error"]["param"], "n");
}

TEST_F(DiffusionServer, ModelsHealthAndMetricsDescribeTheModel) {
    auto client = server_->client();
    auto health = client->Get("/health");
    ASSERT_TRUE(health);
    EXPECT_EQ(health->status, 200);
    auto models = client->Get("/v1/models");
    ASSERT_TRUE(models);
    const json entry = json::parse(models->body)["data"][0];
    EXPECT_EQ(entry["id"], "model");
    EXPECT_EQ(entry["decoding"], "block_diffusion");
    EXPECT_EQ(entry["block_tokens"], kBlock);

    const std::string before = metrics();
    const json reply = post("/v1/chat/completions",
                            {{"messages", {{{"role", "user"}, {"content", "count"}}}}, {"max_tokens", 16}, {"seed", 2}});
    const std::string after = metrics();
    const json expected = run("-p count --max-tokens 16 --seed 2");
    EXPECT_EQ(metric_value(after, "deltabit_diffusion_blocks_total") - metric_value(before, "deltabit_diffusion_blocks_total"), 2);
    EXPECT_EQ(metric_value(after, "deltabit_denoising_steps_total") - metric_value(before, "deltabit_denoising_steps_total"),
              expected.at("denoising_steps").get<double>());
    EXPECT_EQ(metric_value(after, "deltabit_generated_tokens_total") - metric_value(before, "deltabit_generated_tokens_total"),
              reply["usage"]["completion_tokens"].get<double>());
    EXPECT_NE(after.find("deltabit_jobs_finished_total{reason=\"length\"}"), std::string::npos) << after;
}

TEST_F(DiffusionServer, AClientThatHangsUpCancelsItsRun) {
    // 56 blocks (what fits the fixture's context of 512): far longer than the test waits; hung up at the
    // first block's chunk.
    const std::string body = json{{"messages", {{{"role", "user"}, {"content", "long"}}}}, {"max_tokens", 56 * kBlock},
                                  {"seed", 1}, {"stream", true}}.dump();
    const std::string before = metrics();
    const double cancelled_before = metric_value(before, "deltabit_jobs_finished_total{reason=\"cancelled\"}");
    const double blocks_before = metric_value(before, "deltabit_diffusion_blocks_total");
    const test::StreamResult r = test::stream_chat(server_->port(), body, test::hang_up_at_first);
    ASSERT_TRUE(r.ok) << r.error;
    double cancelled = 0;
    for (int i = 0; i < 200; ++i) {  // the run stops after the denoising step under way: well within 10 s
        cancelled = metric_value(metrics(), "deltabit_jobs_finished_total{reason=\"cancelled\"}");
        if (cancelled > std::max(cancelled_before, 0.0)) break;
        std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    EXPECT_EQ(cancelled, std::max(cancelled_before, 0.0) + 1);
    const double blocks = metric_value(metrics(), "deltabit_diffusion_blocks_total");
    // The next request is served at once (the scheduler is free), with the reply run gives.
    const json reply = post("/v1/chat/completions",
                            {{"messages", {{{"role", "user"}, {"content", "hello"}}}}, {"max_tokens", 8}, {"seed", 11}});
    EXPECT_EQ(reply["choices"][0]["message"]["content"], run("-p hello --max-tokens 8 --seed 11").at("text"));
    EXPECT_LT(blocks - blocks_before, 20);  // the cancelled run committed far fewer than its 56 blocks
}

// With an EOS id in generation_config.json the loop stops at the block that commits it: finish_reason
// "stop", the text ends before it (as run prints it), and completion_tokens counts up to the EOS.
TEST(DiffusionServerEos, StopsAtTheBlockWithTheEos) {
    const fs::path dir = test::scratch_dir("deltabit_test_server_diffusion_eos");
    fs::remove_all(dir);
    const fs::path model = test::diffusion_chat_model(dir / "model");
    const auto run = [&](const std::string& args) {
        const test::CommandResult r = test::run_deltabit(
            "run -m " + model.string() + " " + args + " --backend " + test::server_test_backend() + " --json -q",
            test::Stderr::discard);
        EXPECT_EQ(r.exit_code, 0) << r.output;
        return json::parse(r.output);
    };
    // The EOS: a token the second block commits first, so the reply ends inside that block. Which token
    // the loop commits does not depend on the EOS ids (they act on committed blocks only).
    const std::vector<int32_t> tokens = run("-p hello --max-tokens 24 --seed 11").at("tokens");
    ASSERT_EQ(tokens.size(), 24u);
    size_t eos_at = kBlock;
    while (eos_at < 2 * kBlock && std::find(tokens.begin(), tokens.begin() + eos_at, tokens[eos_at]) != tokens.begin() + eos_at)
        ++eos_at;
    ASSERT_LT(eos_at, size_t(2 * kBlock));
    nlohmann::json generation = nlohmann::json::parse(std::ifstream(model / "generation_config.json"));
    generation["eos_token_id"] = tokens[eos_at];
    std::ofstream(model / "generation_config.json") << generation.dump();
    const json expected = run("-p hello --max-tokens 24 --seed 11");
    ASSERT_EQ(expected.at("finish_reason"), "stop");
    ASSERT_EQ(expected.at("blocks"), 2);

    ServerProcess server(model);
    auto res = server.client()->Post("/v1/chat/completions",
                                     json{{"messages", {{{"role", "user"}, {"content", "hello"}}}}, {"max_tokens", 24},
                                          {"seed", 11}}.dump(),
                                     "application/json");
    ASSERT_TRUE(res);
    const json reply = json::parse(res->body);
    EXPECT_EQ(reply["choices"][0]["finish_reason"], "stop");
    EXPECT_EQ(reply["choices"][0]["message"]["content"], expected.at("text"));
    EXPECT_EQ(reply["usage"]["completion_tokens"], eos_at + 1);
    EXPECT_EQ(server.stop(), 0);
    fs::remove_all(dir);
}

TEST(DiffusionServerFlags, SessionFlagsAreRefused) {
    const fs::path dir = test::scratch_dir("deltabit_test_server_diffusion_flags");
    fs::remove_all(dir);
    const fs::path model = test::diffusion_chat_model(dir / "model");
    const test::CommandResult r = test::run_deltabit("serve -m " + model.string() + " --port 0 --parallel 2");
    EXPECT_EQ(r.exit_code, 1);
    EXPECT_NE(r.output.find("serve: --parallel does not apply to a block-diffusion model"), std::string::npos) << r.output;
    fs::remove_all(dir);
}

}  // namespace
}  // namespace deltabit
