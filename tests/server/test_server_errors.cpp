// Every way `deltabit serve` refuses a request, over real HTTP: the status, an OpenAI-style error
// object naming what was wrong, and — for the checks made before the body is read — that the body
// was never parsed (a 415 for a body that is not even JSON).
#include "server_process.h"

#include <string>

namespace deltabit {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;
using test::ServerProcess;

const std::string kChat = R"({"messages": [{"role": "user", "content": "hi"}], "max_tokens": 2})";

class ServerErrors : public ::testing::Test {
protected:
    static void SetUpTestSuite() {
        dir_ = test::scratch_dir("deltabit_test_server_errors");
        fs::remove_all(dir_);
        model_ = new fs::path(test::server_model(dir_ / "model"));
    }
    static void TearDownTestSuite() {
        delete model_;
        fs::remove_all(dir_);
    }
    static json error_of(const httplib::Result& res, int status) {
        EXPECT_TRUE(res);
        if (!res) return {};
        EXPECT_EQ(res->status, status) << res->body;
        EXPECT_EQ(res->get_header_value("Content-Type"), "application/json");
        const json body = json::parse(res->body, nullptr, false);
        EXPECT_TRUE(body.contains("error")) << res->body;
        EXPECT_TRUE(body["error"]["message"].is_string());
        return body["error"];
    }
    static inline fs::path dir_;
    static inline fs::path* model_ = nullptr;
};

TEST_F(ServerErrors, BodiesThatAreNotJsonGet415BeforeParsing) {
    ServerProcess server(*model_);
    auto client = server.client();
    // The three types a browser sends cross-site without a preflight, an unrelated type, and none.
    for (const char* type : {"text/plain", "application/x-www-form-urlencoded", "multipart/form-data; boundary=x",
                             "application/xml"}) {
        const json e = error_of(client->Post("/v1/chat/completions", kChat, type), 415);
        EXPECT_NE(e["message"].get<std::string>().find(type), std::string::npos) << type;
    }
    httplib::Request req;
    req.method = "POST";
    req.path = "/v1/completions";
    req.body = "not json at all";  // 415 comes first: no 400 about the body
    httplib::Client raw("127.0.0.1", server.port());
    error_of(raw.send(req), 415);
    // application/json with a charset parameter is JSON.
    EXPECT_EQ(client->Post("/v1/chat/completions", kChat, "application/json; charset=utf-8")->status, 200);
    EXPECT_EQ(server.stop(), 0);
}

TEST_F(ServerErrors, MalformedWronglyTypedAndUnknownFieldsGet400NamingTheField) {
    ServerProcess server(*model_);
    auto client = server.client();
    auto post = [&](const std::string& path, const std::string& body) { return client->Post(path, body, "application/json"); };
    EXPECT_NE(error_of(post("/v1/chat/completions", "{\"messages\": ["), 400)["message"].get<std::string>().find("not valid JSON"),
              std::string::npos);
    EXPECT_EQ(error_of(post("/v1/chat/completions", R"({"messages": "hi"})"), 400)["param"], "messages");
    EXPECT_EQ(error_of(post("/v1/chat/completions", R"({"messages": [{"role": "user", "content": "x"}], "temprature": 1})"), 400)["param"],
              "temprature");
    EXPECT_EQ(error_of(post("/v1/chat/completions", R"({"messages": [{"role": "user", "content": "x"}], "top_p": 1.5})"), 400)["param"],
              "top_p");
    EXPECT_EQ(error_of(post("/v1/completions", R"({"prompt": [1, 2, 300]})"), 400)["param"], "prompt[2]");
    // A prompt longer than the context (--ctx 64 below is not needed: 5,000 bytes > 4,096).
    const json long_prompt = {{"prompt", std::string(5000, 'a')}, {"max_tokens", 1}};
    EXPECT_EQ(error_of(post("/v1/completions", long_prompt.dump()), 400)["code"], "context_length_exceeded");
    EXPECT_EQ(error_of(post("/v1/chat/completions", R"({"messages": [{"role": "user", "content": "x"}], "max_tokens": 100000})"), 400)["param"],
              "max_tokens");
    error_of(client->Get("/v1/nothing"), 404);
    // The server still answers after all of that.
    EXPECT_EQ(post("/v1/chat/completions", kChat)->status, 200);
    EXPECT_EQ(server.stop(), 0);
}

TEST_F(ServerErrors, ApiKeyBodySizeAndConcurrencyLimits) {
    ServerProcess server(*model_, {"--api-key", "sesame", "--max-body", "1", "--max-concurrent", "1"});
    auto client = server.client();
    EXPECT_EQ(error_of(client->Post("/v1/chat/completions", kChat, "application/json"), 401)["code"], "invalid_api_key");
    client->set_bearer_token_auth("wrong");
    error_of(client->Get("/v1/models"), 401);
    error_of(client->Get("/metrics"), 401);
    EXPECT_EQ(client->Get("/health")->status, 200);  // open: for load balancers
    client->set_bearer_token_auth("sesame");
    EXPECT_EQ(client->Post("/v1/chat/completions", kChat, "application/json")->status, 200);
    // Over --max-body 1 KiB: 413 before parsing.
    const json big = {{"messages", {{{"role", "user"}, {"content", std::string(2000, 'x')}}}}};
    error_of(client->Post("/v1/chat/completions", big.dump(), "application/json"), 413);
    // --max-concurrent 1: a second request while a long one streams gets 429 with Retry-After.
    const int fd = test::connect_loopback(server.port());
    const std::string body = R"({"messages": [{"role": "user", "content": "x"}], "max_tokens": 3000, "stream": true})";
    const std::string request = "POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer sesame\r\n"
                                "Content-Type: application/json\r\nContent-Length: " + std::to_string(body.size()) + "\r\n\r\n" + body;
    ASSERT_EQ(write(fd, request.data(), request.size()), ssize_t(request.size()));
    char buffer[256];
    ASSERT_GT(read(fd, buffer, sizeof buffer), 0);  // the stream has started
    auto busy = client->Post("/v1/chat/completions", kChat, "application/json");
    error_of(busy, 429);
    EXPECT_EQ(busy->get_header_value("Retry-After"), "1");
    close(fd);
    EXPECT_EQ(server.stop(), 0);
}

TEST_F(ServerErrors, CorsIsOffUnlessTheOriginIsAllowed) {
    {
        ServerProcess server(*model_);
        auto res = server.client()->Get("/v1/models", {{"Origin", "http://evil.example"}});
        ASSERT_TRUE(res);
        EXPECT_FALSE(res->has_header("Access-Control-Allow-Origin"));
        httplib::Request preflight;
        preflight.method = "OPTIONS";
        preflight.path = "/v1/chat/completions";
        preflight.headers = {{"Origin", "http://evil.example"}, {"Access-Control-Request-Method", "POST"}};
        httplib::Client raw("127.0.0.1", server.port());
        auto p = raw.send(preflight);
        ASSERT_TRUE(p);
        EXPECT_EQ(p->status, 403);
        EXPECT_EQ(server.stop(), 0);
    }
    ServerProcess server(*model_, {"--cors-origin", "http://app.example"});
    auto allowed = server.client()->Get("/v1/models", {{"Origin", "http://app.example"}});
    EXPECT_EQ(allowed->get_header_value("Access-Control-Allow-Origin"), "http://app.example");
    auto other = server.client()->Get("/v1/models", {{"Origin", "http://evil.example"}});
    EXPECT_FALSE(other->has_header("Access-Control-Allow-Origin"));
    EXPECT_EQ(server.stop(), 0);
}

TEST_F(ServerErrors, SigtermWhileStreamingExitsZero) {
    ServerProcess server(*model_);
    const int fd = test::connect_loopback(server.port());
    const std::string body = R"({"messages": [{"role": "user", "content": "x"}], "max_tokens": 3000, "stream": true})";
    const std::string request = "POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                                "Content-Length: " + std::to_string(body.size()) + "\r\n\r\n" + body;
    ASSERT_EQ(write(fd, request.data(), request.size()), ssize_t(request.size()));
    // Until the first token's event (the role's comes at once): the job is generating, not queued —
    // a queued one is refused at shutdown (503), not cancelled.
    std::string rest;
    char buffer[4096];
    for (size_t events = 0; events < 2;) {
        const ssize_t n = read(fd, buffer, sizeof buffer);
        ASSERT_GT(n, 0);
        rest.append(buffer, size_t(n));
        events = 0;
        for (size_t at = rest.find("data: "); at != std::string::npos; at = rest.find("data: ", at + 1)) ++events;
    }
    // A client that keeps reading (one that does not is cut off after a 5 s grace).
    std::thread reader([&] {
        char chunk[4096];
        ssize_t n;
        while ((n = read(fd, chunk, sizeof chunk)) > 0) rest.append(chunk, size_t(n));
    });
    EXPECT_EQ(server.stop(), 0);
    reader.join();
    close(fd);
    // The stream was ended properly: its last event says why (cancelled) and [DONE] follows.
    EXPECT_NE(rest.find("\"finish_reason\":\"cancelled\""), std::string::npos);
    EXPECT_NE(rest.find("data: [DONE]"), std::string::npos);
}

}  // namespace
}  // namespace deltabit
