// Errors at the edge. Code that reads files, requests or configs validates there and throws
// deltabit::Error with a one-line message that names the file, tensor, key or byte offset; the CLI
// and the server catch it and report it. Code past the boundary trusts what it was handed.
#pragma once

#include <stdexcept>
#include <string>

namespace deltabit {

class Error : public std::runtime_error {
public:
    explicit Error(const std::string& message) : std::runtime_error(message) {}
};

[[noreturn]] inline void fail_message(const std::string& message) { throw Error(message); }

}  // namespace deltabit

// nvcc cannot evaluate fmt's consteval format-string checks, so .cu files use fail_message().
#ifndef __CUDACC__
#include <fmt/format.h>

namespace deltabit {

// fail("gguf: {}: tensor {}: offset {} runs past end of file", path, name, off) — format and throw.
template <typename... Args>
[[noreturn]] void fail(fmt::format_string<Args...> format, Args&&... args) {
    throw Error(fmt::format(format, std::forward<Args>(args)...));
}

}  // namespace deltabit
#endif
