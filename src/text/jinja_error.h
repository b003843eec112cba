// Errors of the Jinja interpreter.
//
// Every error that leaves the interpreter is a TemplateError naming the line and column of the
// template text it came from: "template line 12, column 5: unknown filter 'frobnicate'". Code deep
// inside (value operations, filters, string methods) does not know where it is; it throws ValueError
// with the bare message, and the interpreter adds the position of the expression it was evaluating.
#pragma once

#include "core/error.h"

#include <fmt/format.h>

#include <stdexcept>
#include <string>

namespace deltabit::text::jinja {

// A 1-based position in the template text; columns count code points, not bytes.
struct SourcePosition {
    int line = 1;
    int column = 1;
};

class TemplateError : public Error {
public:
    enum class Origin { Syntax, Runtime, RaisedByTemplate };

    TemplateError(SourcePosition at, std::string message, Origin origin)
        : Error(fmt::format("template line {}, column {}: {}", at.line, at.column, message)),
          at_(at), message_(std::move(message)), origin_(origin) {}

    SourcePosition position() const { return at_; }
    // The message without the position prefix.
    const std::string& message() const { return message_; }
    // RaisedByTemplate: the template called raise_exception(message) — a refusal of the input
    // (e.g. "Conversation roles must alternate"), not a bug in the template or the interpreter.
    Origin origin() const { return origin_; }

private:
    SourcePosition at_;
    std::string message_;
    Origin origin_;
};

// A failure without a position yet; the interpreter converts it into a TemplateError.
class ValueError : public std::runtime_error {
public:
    explicit ValueError(const std::string& message) : std::runtime_error(message) {}
};

template <typename... Args>
[[noreturn]] void value_error(fmt::format_string<Args...> format, Args&&... args) {
    throw ValueError(fmt::format(format, std::forward<Args>(args)...));
}

}  // namespace deltabit::text::jinja
