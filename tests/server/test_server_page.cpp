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
    const fs::path dir = test::scratch_dir("deltabit_test_server_page");
    fs::remove_all(dir);
    test::ServerProcess server(test::server_model(dir / "model"));
    const std::string url = "http://127.0.0.1:" + std::to_string(server.port()) + "/";
    const std::string flags = "chromium --headless --no-sandbox --disable-gpu --no-first-run --user-data-dir=" +
                              (dir / "profile").string() + " --virtual-time-budget=60000 ";

    // The page sends ?say=TEXT once it has loaded (chat.html), as a user typing it would; the dumped
    // DOM is taken when the page is idle: after the streamed reply has finished.
    // Chromium dumps the DOM when its virtual time budget is spent, which does not wait for a stream;
    // on a loaded machine the first token can come later than that, so up to three page loads.
    std::string dom;
    auto reply_text_length = [](const std::string& d) -> size_t {
        const size_t reply = d.find("class=\"msg assistant\"");
        if (reply == std::string::npos) return 0;
        const size_t open = d.find("<div>", reply);
        return open == std::string::npos ? 0 : d.find("</div>", open) - open - 5;
    };
    for (int attempt = 0; attempt < 3 && reply_text_length(dom) == 0; ++attempt)
        dom = run(flags + "--dump-dom '" + url + "?say=Hello&max_tokens=12' 2>/dev/null");
    for (const char* id : {"id=\"thinking\"", "id=\"stop\"", "id=\"send\"", "id=\"input\""})
        EXPECT_NE(dom.find(id), std::string::npos) << id;
    EXPECT_NE(dom.find("class=\"msg user\""), std::string::npos) << dom.substr(0, 2000);
    // Whether the reply has finished when Chromium dumps the DOM depends on the machine's load (its
    // virtual time budget does not wait for a stream); the screenshot below shows the finished page.
    EXPECT_EQ(dom.find("class=\"msg assistant error\""), std::string::npos) << dom.substr(0, 4000);
    // The reply streamed into the page: its text is there (random weights: its bytes, not words).
    EXPECT_GT(reply_text_length(dom), 0u) << dom.substr(0, 4000);

    const fs::path shot = dir / "page.png";
    run(flags + "--window-size=900,600 --screenshot=" + shot.string() + " '" + url + "?say=Hello' 2>/dev/null");
    EXPECT_TRUE(fs::exists(shot) && fs::file_size(shot) > 1000) << shot;
    RecordProperty("screenshot", shot.string());
    EXPECT_EQ(server.stop(), 0);
}

}  // namespace
}  // namespace deltabit
