// The real `deltabit serve` for black-box tests: a model folder on disk (a test fixture's weights, a
// byte tokenizer, the test's chat template), the binary started as a child process on a free
// loopback port, and an HTTP client (cpp-httplib's) for it. Stopped with SIGTERM; exit code kept.
#pragma once

#include "runtime/byte_tokenizer_model.h"

#include <gtest/gtest.h>
#include <httplib.h>
#include <nlohmann/json.hpp>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <memory>
#include <string>
#include <thread>
#include <vector>

namespace deltabit::test {

// role<content> per message (tool calls in the Hermes JSON form), tools first, then "assistant<", with
// "<think>" when enable_thinking is true. Every text's tokens are its bytes.
inline constexpr const char* kServerTemplate =
    "{%- if tools %}tools<{% for t in tools %}{{ t.function.name }};{% endfor %}>{% endif %}"
    "{%- for m in messages %}{{ m.role }}<"
    "{%- if m.tool_calls %}{% for c in m.tool_calls %}<tool_call>{\"name\": \"{{ c.function.name }}\", \"arguments\": "
    "{{ c.function.arguments | tojson }}}</tool_call>{% endfor %}{% endif %}{{ m.content }}>{% endfor %}"
    "{%- if add_generation_prompt %}assistant<{% if enable_thinking is defined and enable_thinking %}<think>{% endif %}{% endif %}";

// A scratch folder under the temp dir, named `name` and this process's id: ctest runs each test in a
// process of its own, in parallel, and other checkouts run the same tests on the same machine.
inline std::filesystem::path scratch_dir(const std::string& name) {
    return std::filesystem::temp_directory_path() / (name + "_" + std::to_string(getpid()));
}

// An attention-only fixture (Qwen3): its sessions return to any position exactly, so a reply is the
// same whatever the server reused (runtime/session.h) — what the load test's comparison needs.
inline std::filesystem::path server_model(const std::filesystem::path& dir, const std::string& fixture = "qwen3_binary",
                                          const std::string& chat_template = kServerTemplate) {
    namespace fs = std::filesystem;
    const fs::path folder = byte_tokenizer_model(dir, chat_template);
    const fs::path source = fs::path(DELTABIT_SOURCE_DIR) / "tests" / "fixtures" / fixture;
    fs::copy_file(source / "config.json", folder / "config.json", fs::copy_options::overwrite_existing);
    fs::copy_file(source / "model.safetensors", folder / "model.safetensors", fs::copy_options::overwrite_existing);
    return folder;
}

// The backend the server tests run on: cpu, unless DELTABIT_TEST_SERVER_BACKEND names another. Tests that
// compare a reply with `deltabit run` give run the same one.
inline std::string server_test_backend() {
    const char* backend = std::getenv("DELTABIT_TEST_SERVER_BACKEND");
    return backend != nullptr && *backend != '\0' ? backend : "cpu";
}

class ServerProcess {
public:
    // Starts `deltabit serve -m MODEL --port 0 --backend B -q EXTRA` and waits for its address. B is cpu,
    // unless DELTABIT_TEST_SERVER_BACKEND names another (cuda: the same black-box tests against the GPU
    // engine and its batched decode, on a machine that has one).
    ServerProcess(const std::filesystem::path& model, const std::vector<std::string>& extra = {}) {
        int out[2];
        if (pipe(out) != 0) throw std::runtime_error("pipe failed");
        std::vector<std::string> args = {DELTABIT_BINARY, "serve", "-m", model.string(), "--port", "0", "--backend",
                                         server_test_backend(), "-q"};
        args.insert(args.end(), extra.begin(), extra.end());
        pid_ = fork();
        if (pid_ == 0) {
            dup2(out[1], STDOUT_FILENO);
            close(out[0]);
            close(out[1]);
            std::vector<char*> argv;
            for (std::string& a : args) argv.push_back(a.data());
            argv.push_back(nullptr);
            execv(argv[0], argv.data());
            _exit(127);
        }
        close(out[1]);
        FILE* f = fdopen(out[0], "r");
        char line[512];
        const std::string prefix = "serve: listening on http://127.0.0.1:";
        while (std::fgets(line, sizeof line, f)) {
            const std::string s(line);
            if (s.rfind(prefix, 0) == 0) {
                port_ = std::stoi(s.substr(prefix.size()));
                break;
            }
        }
        stdout_ = f;
        if (port_ <= 0) throw std::runtime_error("deltabit serve did not start");
    }
    ~ServerProcess() {
        if (pid_ > 0 && exit_code_ < 0) stop();
        if (stdout_) std::fclose(stdout_);
    }

    // SIGTERM, then the exit code (−1 when it did not exit on its own within 20 s: killed).
    int stop() {
        kill(pid_, SIGTERM);
        for (int i = 0; i < 2000; ++i) {
            int status = 0;
            if (waitpid(pid_, &status, WNOHANG) == pid_) {
                exit_code_ = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
                return exit_code_;
            }
            std::this_thread::sleep_for(std::chrono::milliseconds(10));
        }
        kill(pid_, SIGKILL);
        waitpid(pid_, nullptr, 0);
        exit_code_ = -1;
        return exit_code_;
    }

    int port() const { return port_; }
    pid_t pid() const { return pid_; }
    std::unique_ptr<httplib::Client> client() const {
        auto c = std::make_unique<httplib::Client>("127.0.0.1", port_);
        c->set_read_timeout(120, 0);
        return c;
    }
    // Resident memory of the server in KiB (/proc/PID/status VmRSS).
    int64_t rss_kib() const {
        std::ifstream in("/proc/" + std::to_string(pid_) + "/status");
        std::string key;
        while (in >> key) {
            if (key == "VmRSS:") {
                int64_t kib = 0;
                in >> kib;
                return kib;
            }
            std::getline(in, key);
        }
        return -1;
    }

private:
    pid_t pid_ = -1;
    int port_ = -1;
    int exit_code_ = -1;
    FILE* stdout_ = nullptr;
};

// A TCP connection to 127.0.0.1:port; −1 on failure.
inline int connect_loopback(int port) {
    const int fd = socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in address{};
    address.sin_family = AF_INET;
    address.sin_port = htons(uint16_t(port));
    address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (connect(fd, reinterpret_cast<sockaddr*>(&address), sizeof address) != 0) {
        close(fd);
        return -1;
    }
    return fd;
}

// The data: payloads of an SSE body, in order ("[DONE]" included).
inline std::vector<std::string> sse_events(const std::string& body) {
    std::vector<std::string> events;
    size_t at = 0;
    while (at < body.size()) {
        const size_t end = body.find("\n\n", at);
        if (end == std::string::npos) break;
        const std::string line = body.substr(at, end - at);
        if (line.rfind("data: ", 0) == 0) events.push_back(line.substr(6));
        at = end + 2;
    }
    return events;
}

}  // namespace deltabit::test
