// `deltabit serve` end to end: the real binary on a loopback port, a real model folder, real HTTP
// (cpp-httplib's client). Replies are greedy (temperature 0), so each can be checked against another
// way of asking for the same tokens; the fixture has no EOS, so every reply is exactly max_tokens long.
#include "server_process.h"

#include <algorithm>
#include <atomic>
#include <functional>
#include <string>

namespace deltabit {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;
using test::ServerProcess;

constexpr int kReplyTokens = 8;

class Server : public ::testing::Test {
protected:
    static void SetUpTestSuite() {
        dir_ = test::scratch_dir("deltabit_test_server_api");
        fs::remove_all(dir_);
        model_ = new fs::path(test::server_model(dir_ / "model"));
        server_ = new ServerProcess(*model_);
    }
    static void TearDownTestSuite() {
        delete server_;
        delete model_;
        fs::remove_all(dir_);
    }

    static json post(const std::string& path, const json& body, int expect = 200) {
        auto client = server_->client();
        auto res = client->Post(path, body.dump(), "application/json");
        EXPECT_TRUE(res) << path;
        if (!res) return {};
        EXPECT_EQ(res->status, expect) << res->body;
        return json::parse(res->body);
    }
    static json chat(const json& messages, json extra = json::object()) {
        json body = {{"messages", messages}, {"max_tokens", kReplyTokens}, {"temperature", 0}};
        body.update(extra);
        return post("/v1/chat/completions", body);
    }

    static inline fs::path dir_;
    static inline fs::path* model_ = nullptr;
    static inline ServerProcess* server_ = nullptr;
};

std::vector<int32_t> bytes_of(const std::string& s) { return {s.begin(), s.end()}; }

TEST_F(Server, ChatReplyEqualsTheCompletionOfItsRenderedPrompt) {
    const json reply = chat({{{"role", "user"}, {"content", "Hi"}}});
    ASSERT_EQ(reply["object"], "chat.completion");
    const json& choice = reply["choices"][0];
    EXPECT_EQ(choice["finish_reason"], "length");
    EXPECT_EQ(choice["message"]["role"], "assistant");
    EXPECT_EQ(reply["usage"]["prompt_tokens"], std::string("user<Hi>assistant<").size());
    EXPECT_EQ(reply["usage"]["completion_tokens"], kReplyTokens);
    // The same prompt as token ids on /v1/completions: the same greedy tokens.
    const json completion = post("/v1/completions", {{"prompt", bytes_of("user<Hi>assistant<")}, {"max_tokens", kReplyTokens},
                                                     {"temperature", 0}, {"logprobs", 0}});
    EXPECT_EQ(completion["choices"][0]["text"], choice["message"]["content"]);
    EXPECT_EQ(completion["choices"][0]["logprobs"]["tokens"].size(), size_t(kReplyTokens));
}

TEST_F(Server, StreamedChatEqualsTheWholeReply) {
    const json messages = {{{"role", "user"}, {"content", "Stream"}}};
    const json whole = chat(messages);
    auto client = server_->client();
    json body = {{"messages", messages}, {"max_tokens", kReplyTokens}, {"temperature", 0}, {"stream", true},
                 {"stream_options", {{"include_usage", true}}}};
    auto res = client->Post("/v1/chat/completions", body.dump(), "application/json");
    ASSERT_TRUE(res);
    ASSERT_EQ(res->status, 200);
    EXPECT_EQ(res->get_header_value("Content-Type"), "text/event-stream");
    EXPECT_EQ(res->get_header_value("X-Accel-Buffering"), "no");
    const std::vector<std::string> events = test::sse_events(res->body);
    ASSERT_GE(events.size(), 3u);
    EXPECT_EQ(events.back(), "[DONE]");
    std::string content;
    std::string finish;
    json usage;
    for (size_t i = 0; i + 1 < events.size(); ++i) {
        const json chunk = json::parse(events[i]);
        EXPECT_EQ(chunk["object"], "chat.completion.chunk");
        if (chunk.contains("usage")) {
            usage = chunk["usage"];
            EXPECT_TRUE(chunk["choices"].empty());
            continue;
        }
        const json& c = chunk["choices"][0];
        if (c["delta"].contains("content")) content += c["delta"]["content"].get<std::string>();
        if (!c["finish_reason"].is_null()) finish = c["finish_reason"];
    }
    EXPECT_EQ(content, whole["choices"][0]["message"]["content"].get<std::string>());
    EXPECT_EQ(finish, "length");
    EXPECT_EQ(usage["completion_tokens"], kReplyTokens);
}

// The chat of the follow-up tests: "Follow", its greedy reply, then "More". Checks the second turn's
// usage: cached_tokens is what the session could keep, the common prefix of what it held after the first
// turn and the new prompt (a model that returns to any position keeps exactly that, at most prompt − 1).
void expect_follow_up_reuse(const std::function<json(const json&, json)>& chat) {
    const std::string first = "user<Follow>assistant<";
    const json r1 = chat({{{"role", "user"}, {"content", "Follow"}}}, {{"logprobs", true}});
    std::vector<int32_t> held = bytes_of(first);
    for (const json& t : r1["choices"][0]["logprobs"]["content"]) held.push_back(t["bytes"][0].get<int>());
    held.pop_back();  // the last reply token is never fed (runtime/generate.h)
    const std::string reply = r1["choices"][0]["message"]["content"];
    const json r2 = chat({{{"role", "user"}, {"content", "Follow"}}, {{"role", "assistant"}, {"content", reply}},
                          {{"role", "user"}, {"content", "More"}}},
                         json::object());
    const std::vector<int32_t> prompt = bytes_of(first + reply + ">user<More>assistant<");
    const auto [a, b] = std::mismatch(held.begin(), held.end(), prompt.begin(), prompt.end());
    const int64_t expected = std::min<int64_t>(a - held.begin(), int64_t(prompt.size()) - 1);
    EXPECT_GE(expected, int64_t(first.size()));
    EXPECT_EQ(r2["usage"]["prompt_tokens"], prompt.size());
    EXPECT_EQ(r2["usage"]["prompt_tokens_details"]["cached_tokens"], expected);
}

TEST_F(Server, FollowUpTurnReportsTheTokensItReused) {
    expect_follow_up_reuse([](const json& messages, json extra) { return chat(messages, std::move(extra)); });
}

// One live session, no host memory for parked ones, a spill folder: another conversation between the two
// turns pushes the first to disk, and the follow-up reuses exactly what it would have reused in memory.
TEST(ServerSpill, AFollowUpResumesFromTheSpillFolder) {
    const fs::path dir = test::scratch_dir("deltabit_test_server_spill");
    fs::remove_all(dir);
    fs::create_directories(dir / "spill");
    ServerProcess server(test::server_model(dir / "model"),
                         {"--parallel", "1", "--park-budget", "0", "--spill-dir", (dir / "spill").string()});
    bool interleaved = false;
    expect_follow_up_reuse([&](const json& messages, json extra) {
        if (messages.size() > 1 && !interleaved) {  // before the follow-up: another conversation
            interleaved = true;
            auto client = server.client();
            const json other = {{"messages", {{{"role", "user"}, {"content", "Unrelated"}}}},
                                {"max_tokens", kReplyTokens},
                                {"temperature", 0}};
            auto res = client->Post("/v1/chat/completions", other.dump(), "application/json");
            EXPECT_TRUE(res && res->status == 200);
        }
        json body = {{"messages", messages}, {"max_tokens", kReplyTokens}, {"temperature", 0}};
        body.update(extra);
        auto res = server.client()->Post("/v1/chat/completions", body.dump(), "application/json");
        EXPECT_TRUE(res && res->status == 200);
        return res ? json::parse(res->body) : json();
    });
    auto metrics = server.client()->Get("/metrics");
    ASSERT_TRUE(metrics);
    EXPECT_NE(metrics->body.find("deltabit_session_resumes_total 1\n"), std::string::npos) << metrics->body;
    EXPECT_EQ(metrics->body.find("deltabit_session_spills_total 0\n"), std::string::npos) << metrics->body;
    EXPECT_NE(metrics->body.find("deltabit_session_failed_resumes_total 0\n"), std::string::npos);
    EXPECT_EQ(server.stop(), 0);
    fs::remove_all(dir);
}

TEST_F(Server, EchoWithoutTokensScoresThePromptAsGenerationDoes) {
    // The logprob of the token greedy decoding picks after "abc" ...
    const json next = post("/v1/completions", {{"prompt", "abc"}, {"max_tokens", 1}, {"temperature", 0}, {"logprobs", 2}});
    const json& lp = next["choices"][0]["logprobs"];
    const std::string token = lp["tokens"][0];
    ASSERT_EQ(lp["top_logprobs"][0].size(), 2u);
    // ... equals its logprob when "abc" + that token is scored with echo and max_tokens 0 (exact on
    // an attention-only model with an f32 cache: the same arithmetic whichever calls fed the tokens).
    const json scored = post("/v1/completions", {{"prompt", "abc" + token}, {"max_tokens", 0}, {"echo", true}, {"logprobs", 0}});
    const json& s = scored["choices"][0];
    EXPECT_EQ(s["text"], "abc" + token);
    ASSERT_EQ(s["logprobs"]["token_logprobs"].size(), 4u);
    EXPECT_TRUE(s["logprobs"]["token_logprobs"][0].is_null());
    EXPECT_FLOAT_EQ(s["logprobs"]["token_logprobs"][3].get<float>(), lp["token_logprobs"][0].get<float>());
    EXPECT_EQ(s["logprobs"]["text_offset"][3], 3);
    EXPECT_EQ(scored["usage"]["completion_tokens"], 0);
}

TEST_F(Server, ThinkingIsReturnedAsReasoningContent) {
    const json r = chat({{{"role", "user"}, {"content", "Think"}}}, {{"chat_template_kwargs", {{"enable_thinking", true}}}});
    const json& m = r["choices"][0]["message"];
    // The template opened <think>; the model never closes it in 8 tokens, so all of it is reasoning.
    ASSERT_TRUE(m.contains("reasoning_content")) << m.dump();
    EXPECT_EQ(m["content"], "");
    const json plain = chat({{{"role", "user"}, {"content", "Think"}}}, {{"chat_template_kwargs", {{"enable_thinking", false}}}});
    EXPECT_FALSE(plain["choices"][0]["message"].contains("reasoning_content"));
}

TEST_F(Server, NamedToolChoiceStartsTheCallAndAMalformedCallIsReportedAsText) {
    const json tools = {{{"type", "function"},
                         {"function", {{"name", "get_weather"}, {"parameters", {{"type", "object"}}}}}}};
    // A tool call round trip through the template: an assistant call and the tool's answer.
    const json messages = {{{"role", "user"}, {"content", "Weather?"}},
                           {{"role", "assistant"}, {"content", nullptr},
                            {"tool_calls", {{{"id", "c1"}, {"type", "function"},
                                             {"function", {{"name", "get_weather"}, {"arguments", "{\"city\":\"Oslo\"}"}}}}}}},
                           {{"role", "tool"}, {"tool_call_id", "c1"}, {"content", "sunny"}}};
    const json r = chat(messages, {{"tools", tools}, {"tool_choice", {{"type", "function"}, {"function", {{"name", "get_weather"}}}}}});
    const std::string rendered = std::string("tools<get_weather;>user<Weather?>assistant<<tool_call>{\"name\": \"get_weather\", ") +
                                 "\"arguments\": {\"city\": \"Oslo\"}}</tool_call>>tool<sunny>assistant<" +
                                 "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": ";
    EXPECT_EQ(r["usage"]["prompt_tokens"], rendered.size());
    // Random weights cannot finish the call: it comes back as text, never dropped, and says so.
    const json& choice = r["choices"][0];
    EXPECT_EQ(choice["finish_reason"], "malformed_tool_call");
    EXPECT_TRUE(choice["message"]["content"].get<std::string>().starts_with("<tool_call>\n{\"name\": \"get_weather\""));
}

TEST_F(Server, ModelsHealthAndMetrics) {
    auto client = server_->client();
    auto models = client->Get("/v1/models");
    ASSERT_TRUE(models);
    EXPECT_EQ(json::parse(models->body)["data"][0]["id"], "model");
    auto health = client->Get("/health");
    ASSERT_TRUE(health);
    EXPECT_EQ(json::parse(health->body)["status"], "ok");
    chat({{{"role", "user"}, {"content", "count me"}}});
    auto metrics = client->Get("/metrics");
    ASSERT_TRUE(metrics);
    for (const char* name : {"deltabit_requests_total{endpoint=\"/v1/chat/completions\",status=\"200\"}",
                             "deltabit_prompt_tokens_total", "deltabit_generated_tokens_total", "deltabit_queue_depth",
                             "deltabit_active_sessions", "deltabit_parked_sessions", "deltabit_reuse_ratio",
                             "deltabit_prefill_tokens_per_second", "deltabit_decode_tokens_per_second"})
        EXPECT_NE(metrics->body.find(name), std::string::npos) << name;
}

TEST_F(Server, ClientThatDisconnectsCancelsItsGeneration) {
    auto metric = [&](const std::string& name) {
        auto res = server_->client()->Get("/metrics");
        const size_t at = res->body.find("\n" + name + " ");
        return at == std::string::npos ? int64_t(0) : int64_t(std::stod(res->body.substr(at + name.size() + 2)));
    };
    const int64_t cancelled_before = metric("deltabit_jobs_finished_total{reason=\"cancelled\"}");
    const int64_t generated_before = metric("deltabit_generated_tokens_total");
    // A raw connection: ask for 3000 tokens streamed, read the first bytes of the stream, hang up.
    const std::string body = json{{"messages", {{{"role", "user"}, {"content", "long"}}}}, {"max_tokens", 3000},
                                  {"temperature", 0}, {"stream", true}}.dump();
    const int fd = test::connect_loopback(server_->port());
    ASSERT_GE(fd, 0);
    const std::string request = "POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                                "Content-Length: " + std::to_string(body.size()) + "\r\n\r\n" + body;
    ASSERT_EQ(write(fd, request.data(), request.size()), ssize_t(request.size()));
    std::string received;
    char buffer[4096];
    while (received.find("\"content\"", received.find("\"role\"") + 1) == std::string::npos) {
        const ssize_t n = read(fd, buffer, sizeof buffer);
        ASSERT_GT(n, 0);
        received.append(buffer, size_t(n));
    }
    close(fd);
    // The generation stops at a step boundary soon after a write fails.
    int64_t cancelled = cancelled_before;
    for (int i = 0; i < 500 && cancelled == cancelled_before; ++i) {
        std::this_thread::sleep_for(std::chrono::milliseconds(20));
        cancelled = metric("deltabit_jobs_finished_total{reason=\"cancelled\"}");
    }
    EXPECT_EQ(cancelled, cancelled_before + 1);
    EXPECT_LT(metric("deltabit_generated_tokens_total") - generated_before, 3000);
}

}  // namespace
}  // namespace deltabit
