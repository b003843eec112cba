// The `deltabit` command: parses the subcommand and reports errors as one line on stderr.
#include "cli/commands.h"
#include "core/error.h"

#include <fmt/core.h>

#include <cstdio>
#include <exception>

int main(int argc, char** argv) {
    CLI::App app{"deltabit — run, certify and train 1-bit and hybrid language models"};
    app.require_subcommand(1);
    app.set_version_flag("--version", "deltabit 0.1");
#ifdef DELTABIT_HAVE_TEXT
    deltabit::cli::add_tokenize_commands(app);
    deltabit::cli::add_run_command(app);
#endif
    deltabit::cli::add_logits_command(app);
    deltabit::cli::add_info_command(app);
    deltabit::cli::add_convert_command(app);


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
