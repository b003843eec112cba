// The `deltabit` command: parses the subcommand and reports errors as one line on stderr.
#include "cli/commands.h"
#include "core/error.h"

#include <fmt/core.h>

#include <cstdio>
#include <string>
#include <exception>

int main(int argc, char** argv) {
    CLI::App app{"deltabit — run, certify and train 1-bit and hybrid language models"};
    app.require_subcommand(1);
    app.set_version_flag("--version", "deltabit 0.1");
#ifdef DELTABIT_HAVE_TEXT
    deltabit::cli::add_tokenize_commands(app);
    deltabit::cli::add_run_command(app);
    deltabit::cli::add_chat_command(app);
#endif
    deltabit::cli::add_logits_command(app);
    deltabit::cli::add_info_command(app);
    deltabit::cli::add_convert_command(app);
    deltabit::cli::add_bench_command(app);
    deltabit::cli::add_eval_command(app);
#ifdef DELTABIT_HAVE_TRAIN
    deltabit::cli::add_train_command(app);
#endif


    // CLI11 answers a misspelt command with "A subcommand is required"; name it and the choices instead.
    if (argc > 1 && argv[1][0] != '-' && app.get_subcommands([&](CLI::App* sub) { return sub->check_name(argv[1]); }).empty()) {
        std::string names;
        for (const CLI::App* sub : app.get_subcommands({})) names += (names.empty() ? "" : ", ") + sub->get_name();
        fmt::print(stderr, "deltabit: error: unknown command '{}' (commands: {}; see deltabit --help)\n", argv[1], names);
        return 1;
    }
    try {
        app.parse(argc, argv);
    } catch (const CLI::ParseError& e) {
        return app.exit(e);
    } catch (const deltabit::Error& e) {
        fmt::print(stderr, "deltabit: error: {}\n", e.what());
        return 1;
    } catch (const std::exception& e) {
        fmt::print(stderr, "deltabit: internal error: {}\n", e.what());
        return 2;
    }
    return 0;
}
