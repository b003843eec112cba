// `deltabit serve` through the official OpenAI JavaScript client (client/openai_client.mjs, pinned in
// client/package-lock.json and installed by scripts/setup.sh): chat whole and streamed, logprobs, a
// follow-up's cached tokens, a tool round trip, completions with echo, typed errors; and on a
// block-diffusion model (client/openai_client_diffusion.mjs), chat whole and streamed against `run`.
#include "cli_command.h"
#include "runtime/diffusion_chat_model.h"
#include "server_process.h"

#include <fstream>

namespace deltabit {
namespace {

namespace fs = std::filesystem;

// Runs `node SCRIPT BASE_URL ARGS` and returns its exit status and output.
std::pair<int, std::string> run_client(const fs::path& script, int port, const std::string& args = {}) {
    const std::string command = "node " + script.string() + " http://127.0.0.1:" + std::to_string(port) + "/v1 " + args + " 2>&1";
    FILE* pipe = popen(command.c_str(), "r");
    if (!pipe) return {-1, "popen failed"};
    std::string output;
    char buffer[4096];
    size_t n;
    while ((n = fread(buffer, 1, sizeof buffer, pipe)) > 0) output.append(buffer, n);
    const int status = pclose(pipe);
    return {WIFEXITED(status) ? WEXITSTATUS(status) : -1, output};
}

const fs::path kClient = fs::path(DELTABIT_SOURCE_DIR) / "tests" / "server" / "client";

bool client_missing(std::string& why) {
    if (!fs::exists(kClient / "node_modules" / "openai"))
        why = "tests/server/client/node_modules is missing: run scripts/setup.sh (npm ci there)";
    else if (std::system("node --version > /dev/null 2>&1") != 0)
        why = "node is not installed (scripts/setup.sh)";
    return !why.empty();
}

TEST(ServerOpenAiClient, PassesTheClientScript) {
    std::string why;
    if (client_missing(why)) GTEST_SKIP() << why;
    const fs::path dir = test::scratch_dir("deltabit_test_server_openai");
    fs::remove_all(dir);
    test::ServerProcess server(test::server_model(dir / "model"));
    const auto [status, output] = run_client(kClient / "openai_client.mjs", server.port());
    EXPECT_EQ(status, 0) << output;
    EXPECT_NE(output.find("all checks passed"), std::string::npos) << output;
    EXPECT_EQ(server.stop(), 0);
    fs::remove_all(dir);
}

TEST(ServerOpenAiClient, PassesTheBlockDiffusionScript) {
    std::string why;
    if (client_missing(why)) GTEST_SKIP() << why;
    const fs::path dir = test::scratch_dir("deltabit_test_server_openai_diffusion");
    fs::remove_all(dir);
    const fs::path model = test::diffusion_chat_model(dir / "model");
    const test::CommandResult expected =
        test::run_deltabit("run -m " + model.string() + " -p hello --max-tokens 20 --seed 11 --backend " +
                               test::server_test_backend() + " --json -q",
                           test::Stderr::discard);
    ASSERT_EQ(expected.exit_code, 0) << expected.output;
    std::ofstream(dir / "expected.json") << expected.output;
    test::ServerProcess server(model);
    const auto [status, output] = run_client(kClient / "openai_client_diffusion.mjs", server.port(), (dir / "expected.json").string());
    EXPECT_EQ(status, 0) << output;
    EXPECT_NE(output.find("all checks passed"), std::string::npos) << output;
    EXPECT_EQ(server.stop(), 0);
    fs::remove_all(dir);
}

}  // namespace
}  // namespace deltabit
