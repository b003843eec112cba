// The web page at / in a real browser: headless Chromium loads it from `deltabit serve`, types a
// message, sends it, and waits for the streamed reply to finish; the DOM it ends with is checked and a
// screenshot is kept (in the test's scratch folder) for a person to look at. Skips, saying so, where
// Chromium is not installed (scripts/setup.sh installs it where the server is built).
#include "server_process.h"

#include <cstdlib>

namespace deltabit {
namespace {

namespace fs = std::filesystem;

std::string run(const std::string& command) {
    FILE* pipe = popen(command.c_str(), "r");
    if (!pipe) return {};
    std::string out;
    char buffer[4096];
    size_t n;
    while ((n = fread(buffer, 1, sizeof buffer, pipe)) > 0) out.append(buffer, n);
    pclose(pipe);
    return out;
}

TEST(ServerPage, StreamsAReplyInHeadlessChromium) {
    if (std::system("command -v chromium > /dev/null 2>&1") != 0)
        GTEST_SKIP() << "chromium is not installed (apt-get install chromium; scripts/setup.sh does it)";
    const fs::path dir = fs::temp_directory_path() / "deltabit_test_server_page";
    fs::remove_all(dir);
    test::ServerProcess server(test::server_model(dir / "model"));
    const std::string url = "http://127.0.0.1:" + std::to_string(server.port()) + "/";
    const std::string flags = "chromium --headless --no-sandbox --disable-gpu --no-first-run --user-data-dir=" +
                              (dir / "profile").string() + " --virtual-time-budget=60000 ";

    // The page sends ?say=TEXT once it has loaded (chat.html), as a user typing it would; the dumped
    // DOM is taken when the page is idle: after the streamed reply has finished.
    const std::string dom = run(flags + "--dump-dom '" + url + "?say=Hello&max_tokens=12' 2>/dev/null");
    for (const char* id : {"id=\"thinking\"", "id=\"stop\"", "id=\"send\"", "id=\"input\""})
        EXPECT_NE(dom.find(id), std::string::npos) << id;
    EXPECT_NE(dom.find("class=\"msg user\""), std::string::npos) << dom.substr(0, 2000);
    EXPECT_NE(dom.find("data-done=\"true\""), std::string::npos) << dom.substr(0, 4000);
    EXPECT_EQ(dom.find("class=\"msg assistant error\""), std::string::npos) << dom.substr(0, 4000);
    // The reply streamed into the page: its text is there (random weights: its bytes, not words).
    const size_t reply = dom.find("class=\"msg assistant\"");
    ASSERT_NE(reply, std::string::npos);
    EXPECT_GT(dom.find("</div>", dom.find("<div>", reply)) - dom.find("<div>", reply), 5u);

    const fs::path shot = dir / "page.png";
    run(flags + "--window-size=900,600 --screenshot=" + shot.string() + " '" + url + "?say=Hello' 2>/dev/null");
    EXPECT_TRUE(fs::exists(shot) && fs::file_size(shot) > 1000) << shot;
    RecordProperty("screenshot", shot.string());
    EXPECT_EQ(server.stop(), 0);
}

}  // namespace
}  // namespace deltabit
