// `deltabit serve` through the official OpenAI JavaScript client (client/openai_client.mjs, pinned in
// client/package-lock.json and installed by scripts/setup.sh): chat whole and streamed, logprobs, a
// follow-up's cached tokens, a tool round trip, completions with echo, typed errors.
#include "cli_command.h"
#include "server_process.h"

namespace deltabit {
namespace {

namespace fs = std::filesystem;

TEST(ServerOpenAiClient, PassesTheClientScript) {
    const fs::path client = fs::path(DELTABIT_SOURCE_DIR) / "tests" / "server" / "client";
    if (!fs::exists(client / "node_modules" / "openai"))
        GTEST_SKIP() << "tests/server/client/node_modules is missing: run scripts/setup.sh (npm ci there)";
    if (std::system("node --version > /dev/null 2>&1") != 0) GTEST_SKIP() << "node is not installed (scripts/setup.sh)";
    const fs::path dir = test::scratch_dir("deltabit_test_server_openai");
    fs::remove_all(dir);
    test::ServerProcess server(test::server_model(dir / "model"));
    const std::string command = "node " + (client / "openai_client.mjs").string() + " http://127.0.0.1:" +
                                std::to_string(server.port()) + "/v1 2>&1";
    FILE* pipe = popen(command.c_str(), "r");
    ASSERT_NE(pipe, nullptr);
    std::string output;
    char buffer[4096];
    size_t n;
    while ((n = fread(buffer, 1, sizeof buffer, pipe)) > 0) output.append(buffer, n);
    const int status = pclose(pipe);
    EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << output;
    EXPECT_NE(output.find("all checks passed"), std::string::npos) << output;
    EXPECT_EQ(server.stop(), 0);
    fs::remove_all(dir);
}

}  // namespace
}  // namespace deltabit
