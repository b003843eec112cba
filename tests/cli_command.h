// Runs the built `deltabit` binary (DELTABIT_BINARY, set by CMake for every test binary) through the
// shell with the given arguments, as a user would, and collects its output and exit code.
#pragma once

#include <sys/wait.h>

#include <cstdio>
#include <stdexcept>
#include <string>

namespace deltabit::test {

struct CommandResult {
    int exit_code = -1;
    std::string output;
};

enum class Stderr { merge, discard };  // discard: stdout alone, e.g. JSON without progress lines

inline CommandResult run_deltabit(const std::string& args, Stderr stderr_mode = Stderr::merge,
                                  const std::string& stdin_path = "/dev/null") {
    const std::string command = std::string(DELTABIT_BINARY) + " " + args + " < '" + stdin_path + "'" +
                                (stderr_mode == Stderr::merge ? " 2>&1" : " 2>/dev/null");
    FILE* pipe = popen(command.c_str(), "r");
    if (!pipe) throw std::runtime_error("popen failed: " + command);
    CommandResult result;
    char buffer[4096];
    size_t n;
    while ((n = fread(buffer, 1, sizeof buffer, pipe)) > 0) result.output.append(buffer, n);
    const int status = pclose(pipe);
    result.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
    return result;
}

}  // namespace deltabit::test
