#include "cli/line_reader.h"

#include <fmt/format.h>

#include <cstdio>
#include <cstdlib>
#include <iostream>

#ifdef DELTABIT_HAVE_LIBEDIT
#include <editline/readline.h>
#endif

namespace deltabit::cli {

LineReader::LineReader(bool terminal) : terminal_(terminal) {
#ifdef DELTABIT_HAVE_LIBEDIT
    editing_ = terminal_;
    if (editing_) {
        rl_readline_name = "deltabit";  // the name an ~/.editrc section can select
        using_history();
    }
#endif
}

LineReader::~LineReader() {
#ifdef DELTABIT_HAVE_LIBEDIT
    if (editing_) clear_history();
#endif
}

bool LineReader::read(std::string_view prompt, std::string& line) {
    line.clear();
#ifdef DELTABIT_HAVE_LIBEDIT
    if (editing_) {
        std::fflush(stdout);  // the streamed reply before the prompt
        char* text = readline(std::string(prompt).c_str());
        if (text == nullptr) return false;
        line = text;
        std::free(text);
        // Blank lines and immediate repeats stay out of the history, as in a shell.
        if (!line.empty() && line != last_added_) {
            add_history(line.c_str());
            last_added_ = line;
        }
        return true;
    }
#endif
    if (terminal_) {
        fmt::print("{}", prompt);
        std::fflush(stdout);
    }
    return bool(std::getline(std::cin, line));
}

}  // namespace deltabit::cli
