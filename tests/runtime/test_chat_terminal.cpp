// `deltabit chat` on a real pseudo-terminal: line editing and history (libedit). Keys are sent as a
// terminal sends them (ESC [ D for Left, ESC [ A for Up); the conversation saved by /save shows what
// reached the model. Before line editing, the escape sequences went into the message as text.
//
// Runs only when the command was built with libedit (DELTABIT_HAVE_LIBEDIT); otherwise it skips.
#include "byte_tokenizer_model.h"
#include "cli_command.h"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <poll.h>
#include <pty.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

namespace deltabit {
namespace {

namespace fs = std::filesystem;

#if defined(DELTABIT_HAVE_TEXT) && defined(DELTABIT_HAVE_LIBEDIT)

// A child process on the slave side of a pty; the test types on the master side.
class Terminal {
public:
    explicit Terminal(const std::string& command) {
        struct winsize size {};
        size.ws_row = 40;
        size.ws_col = 200;
        pid_ = forkpty(&master_, nullptr, nullptr, &size);
        if (pid_ == 0) {
            setenv("TERM", "xterm", 1);
            execl("/bin/sh", "sh", "-c", command.c_str(), static_cast<char*>(nullptr));
            _exit(127);
        }
    }
    ~Terminal() {
        if (pid_ > 0 && !exited_) {
            kill(pid_, SIGKILL);
            waitpid(pid_, nullptr, 0);
        }
        if (master_ >= 0) close(master_);
    }
    bool started() const { return pid_ > 0; }

    void type(const std::string& keys) { ASSERT_EQ(write(master_, keys.data(), keys.size()), ssize_t(keys.size())); }

    // Reads until the output so far ends with the chat's prompt "> " and nothing more arrives for a
    // moment (the prompt is printed last, when the chat waits for a line). False on timeout or exit.
    bool wait_for_prompt(std::chrono::seconds timeout = std::chrono::seconds(60)) {
        const auto deadline = std::chrono::steady_clock::now() + timeout;
        while (std::chrono::steady_clock::now() < deadline) {
            const bool more = read_some(200);
            if (!more && output_.size() >= 2 && output_.ends_with("> ")) return true;
            if (eof_) return false;
        }
        return false;
    }

    // Reads to the end of the output and returns the exit status.
    int finish(std::chrono::seconds timeout = std::chrono::seconds(60)) {
        const auto deadline = std::chrono::steady_clock::now() + timeout;
        while (!eof_ && std::chrono::steady_clock::now() < deadline) read_some(200);
        int status = 0;
        waitpid(pid_, &status, 0);
        exited_ = true;
        return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
    }

    const std::string& output() const { return output_; }

private:
    // True when bytes arrived within `ms`.
    bool read_some(int ms) {
        struct pollfd p {master_, POLLIN, 0};
        if (poll(&p, 1, ms) <= 0) return false;
        char buffer[4096];
        const ssize_t n = read(master_, buffer, sizeof buffer);
        if (n <= 0) {  // EIO once the child has closed the slave side
            eof_ = true;
            return false;
        }
        output_.append(buffer, size_t(n));
        return true;
    }

    pid_t pid_ = -1;
    int master_ = -1;
    bool eof_ = false;
    bool exited_ = false;
    std::string output_;
};

TEST(ChatTerminal, ArrowKeysEditTheLineAndUpRecallsHistory) {
    const fs::path dir = test::test_scratch_dir("deltabit_test_chat_terminal");
    const fs::path folder = test::byte_tokenizer_model(
        dir / "hf", "{% for m in messages %}{{ m['role'] }}<{{ m['content'] }}>{% endfor %}"
                    "{% if add_generation_prompt %}assistant<{% endif %}");
    const fs::path saved = dir / "terminal.chat";
    fs::remove(saved);

    Terminal chat(std::string(DELTABIT_BINARY) + " chat -m " + folder.string() +
                  " --backend cpu --temperature 0 --max-tokens 2 --quiet");
    ASSERT_TRUE(chat.started());
    ASSERT_TRUE(chat.wait_for_prompt()) << chat.output();
    chat.type("ab\x1b[DX\r");  // a, b, Left, X, Enter: "aXb"
    ASSERT_TRUE(chat.wait_for_prompt()) << chat.output();
    chat.type("\x1b[A\r");  // Up recalls "aXb"
    ASSERT_TRUE(chat.wait_for_prompt()) << chat.output();
    chat.type("/save " + saved.string() + "\r");
    ASSERT_TRUE(chat.wait_for_prompt()) << chat.output();
    chat.type("/quit\r");
    EXPECT_EQ(chat.finish(), 0) << chat.output();

    std::ifstream in(saved);
    std::string magic, header;
    ASSERT_TRUE(std::getline(in, magic)) << chat.output();
    ASSERT_TRUE(std::getline(in, header));
    const nlohmann::json messages = nlohmann::json::parse(header).at("messages");
    std::vector<std::string> user;
    for (const nlohmann::json& m : messages)
        if (m.at("role") == "user") user.push_back(m.at("content").get<std::string>());
    EXPECT_EQ(user, (std::vector<std::string>{"aXb", "aXb"})) << chat.output();
}

#else

TEST(ChatTerminal, ArrowKeysEditTheLineAndUpRecallsHistory) {
    GTEST_SKIP() << "deltabit was built without libedit (libedit-dev): the chat reads plain lines";
}

#endif

}  // namespace
}  // namespace deltabit
