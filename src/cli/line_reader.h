// Lines of input for `deltabit chat`. On a terminal, when the build has libedit (libedit-dev;
// DELTABIT_HAVE_LIBEDIT), lines are edited in place (arrow keys, Home/End, Ctrl-A/E/K/W, ...) and Up/Down
// recall earlier lines of this chat, so an arrow key never reaches the model as an escape sequence.
// Without libedit, or from a pipe or a file, lines are read as they come (the terminal's own line
// discipline: Backspace only).
#pragma once

#include <string>
#include <string_view>

namespace deltabit::cli {

class LineReader {
public:
    // `terminal`: stdin is a terminal (prompts are shown, editing is on where built).
    explicit LineReader(bool terminal);
    ~LineReader();
    LineReader(const LineReader&) = delete;
    LineReader& operator=(const LineReader&) = delete;

    // One line without its newline, after showing `prompt` on a terminal. False at the end of input.
    bool read(std::string_view prompt, std::string& line);
    // Whether lines are edited (libedit on a terminal): for tests and the banner.
    bool editing() const { return editing_; }

private:
    bool terminal_;
    bool editing_ = false;
    std::string last_added_;  // the newest history entry
};

}  // namespace deltabit::cli
