// The `deltabit` command: parses the subcommand and reports errors as one line on stderr.
//
// Exit codes (README): 0 success (and --help, --version); 1 a usage or input error — a bad flag or
// value, a file that cannot be read or written, a failed line of a scripted chat, standard output
// that cannot be written (a full disk, /dev/full) — always one line "deltabit: error: ..."; 2 an
// internal error (a bug: please report it).
#include "cli/commands.h"
#include "core/error.h"

#include <fmt/format.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <exception>
#include <string>
#include <string_view>

namespace {

// CLI11 reports a value its option's type cannot hold as "Could not convert: --max-tokens = 1.5", which
// says neither what was wrong nor what the flag takes: "--max-tokens: "1.5" is not a whole number".
std::string conversion_message(const CLI::App* command, const std::string& message) {
    constexpr std::string_view prefix = "Could not convert: ";
    const size_t equals = message.find(" = ");
    if (command == nullptr || !message.starts_with(prefix) || equals == std::string::npos) return message;
    const std::string flag = message.substr(prefix.size(), equals - prefix.size());
    const std::string value = message.substr(equals + 3);
    const CLI::Option* option = command->get_option_no_throw(flag);
    const std::string type = option != nullptr ? option->get_type_name() : "";
    const char* expected = type.starts_with("INT") || type.starts_with("UINT") ? "a whole number"
                           : type.starts_with("FLOAT")                         ? "a number"
                                                                               : "a value this flag takes";
    return fmt::format("{}: {:?} is not {}", flag, value, expected);
}

// CLI11's message (a missing, unknown or malformed option) as one line, naming the command's --help.
void print_usage_error(CLI::App& app, int argc, char** argv, std::string message) {
    for (char& c : message)
        if (c == '\n') c = ' ';
    std::string command = "deltabit";
    const CLI::App* sub = nullptr;
    if (argc > 1) {
        const auto found = app.get_subcommands([&](CLI::App* s) { return s->check_name(argv[1]); });
        if (!found.empty()) {
            sub = found.front();
            command += std::string(" ") + argv[1];
        }
    }
    fmt::print(stderr, "deltabit: error: {} (see {} --help)\n", conversion_message(sub, message), command);
}

int report_stdout_failure(int error) {
    fmt::print(stderr, "deltabit: error: cannot write to standard output: {}\n",
               error != 0 ? std::strerror(error) : "write failed");
    return 1;
}

}  // namespace

int main(int argc, char** argv) {
    CLI::App app{"deltabit — run, certify and train 1-bit and hybrid language models", "deltabit"};
    app.require_subcommand(1);
    app.set_version_flag("--version", "deltabit 0.1");
#ifdef DELTABIT_HAVE_TEXT
    deltabit::cli::add_tokenize_commands(app);
    deltabit::cli::add_run_command(app);
    deltabit::cli::add_chat_command(app);
#endif
#ifdef DELTABIT_HAVE_SERVER
    deltabit::cli::add_serve_command(app);
#endif
    deltabit::cli::add_logits_command(app);
    deltabit::cli::add_info_command(app);
    deltabit::cli::add_convert_command(app);
    deltabit::cli::add_bench_command(app);
    deltabit::cli::add_eval_command(app);
    deltabit::cli::add_replay_command(app);
#ifdef DELTABIT_HAVE_TRAIN
    deltabit::cli::add_train_command(app);
    deltabit::cli::add_train_ab_command(app);
#endif

    // No command at all: a new user's first try. The help (every command, one line each) says more than
    // CLI11's "A subcommand is required"; exit 1 all the same, since nothing ran.
    if (argc == 1) {
        fmt::print("{}", app.help());
        return 1;
    }
    // CLI11 answers a misspelt command with "A subcommand is required"; name it and the choices instead.
    if (argv[1][0] != '-' && app.get_subcommands([&](CLI::App* sub) { return sub->check_name(argv[1]); }).empty()) {
        std::string names;
        for (const CLI::App* sub : app.get_subcommands({})) names += (names.empty() ? "" : ", ") + sub->get_name();
        fmt::print(stderr, "deltabit: error: unknown command '{}' (commands: {}; see deltabit --help)\n", argv[1], names);
        return 1;
    }
    try {
        app.parse(argc, argv);
    } catch (const CLI::ParseError& e) {
        if (e.get_exit_code() == 0) return app.exit(e);  // --help, --version
        print_usage_error(app, argc, argv, e.what());
        return 1;
    } catch (const deltabit::Error& e) {
        fmt::print(stderr, "deltabit: error: {}\n", e.what());
        return 1;
    } catch (const std::exception& e) {
        // A write to stdout that failed surfaces from fmt as an exception; it is the user's disk or pipe.
        if (std::ferror(stdout)) return report_stdout_failure(errno);
        fmt::print(stderr, "deltabit: internal error: {}\n", e.what());
        return 2;
    }
    if (std::fflush(stdout) != 0 || std::ferror(stdout)) return report_stdout_failure(errno);
    return 0;
}
