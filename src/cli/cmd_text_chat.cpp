// `deltabit chat`: an interactive, multi-turn conversation with a model.
//
//   deltabit chat -m MODEL [--system TEXT] [--max-tokens N] [--thinking on|off] [--preserve-thinking]
//                 [--on-full drop-oldest|stop]
//                 [--backend cpu|cuda|auto] [--kv f32|f16|kivi4] [--ctx N] [sampling options]
//                 [--stop S]... [--json] [--quiet]
//
// Reads one line at a time from stdin: a message, or a /command (cmd_text_chat_loop.h); a line ending
// in a backslash continues on the next, for messages of several lines. On a terminal
// it prompts with "> ", edits lines with arrow keys and recalls earlier ones with Up/Down (libedit,
// line_reader.h), and streams each reply as it is made; from a pipe or file it reads one message
// per line, echoes each line after "> " so the output reads as a transcript, and ends at end of input —
// so scripts, tests and `make run` drive it the same way a user does. --json turns replies and /stats
// into one JSON object per line on stdout. Notes, progress and errors go to stderr.
//
// A block-diffusion model (DiffusionGemma) chats through DiffusionChat (cmd_text_chat_diffusion.h) on the
// same input: replies stream block by block; the flags only left-to-right decoding reads are refused.
#include "cli/cmd_text_chat_diffusion.h"
#include "cli/cmd_text_chat_loop.h"
#include "cli/cmd_text_prompt.h"
#include "cli/commands.h"
#include "cli/engine_options.h"
#include "cli/line_reader.h"
#include "cli/progress.h"
#include "cli/sampling_options.h"
#include "core/error.h"
#include "runtime/engine.h"
#include "runtime/session.h"

#include <fmt/format.h>

#include <unistd.h>

#include <cstdio>
#include <iostream>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace deltabit::cli {
namespace {

struct ChatArgs {
    std::string model;
    std::string system;
    std::optional<int64_t> max_tokens;
    SamplingParams sampling = default_sampling_params();
    std::vector<std::string> stop;
    std::string thinking;  // "", "on" or "off"
    bool preserve_thinking = false;
    std::string on_full = "drop-oldest";
    bool json = false;
    bool quiet = false;
    EngineArgs engine;
    SequenceArgs sequence;
};

// One message from stdin: a line, or several when each but the last ends with a backslash (which
// becomes a newline). False at the end of input. `echo` repeats the input after the prompt, so a
// scripted chat's output reads as a transcript.
bool read_message(LineReader& input, bool interactive, bool echo, std::string& message) {
    message.clear();
    std::string line;
    for (bool first = true;; first = false) {
        if (!input.read(first ? "> " : ". ", line)) {
            if (interactive) fmt::print("\n");  // Ctrl-D leaves the cursor after the prompt
            return !first;  // a message cut short by the end of input is still sent
        }
        if (line.ends_with('\r')) line.pop_back();  // input with Windows line ends
        if (echo) {
            fmt::print("{}{}\n", first ? "> " : ". ", line);
            std::fflush(stdout);
        }
        const bool continued = line.ends_with('\\');
        if (continued) line.pop_back();
        message += line;
        if (!continued) return true;
        message += '\n';
    }
}

// Feeds stdin's messages to `loop` (ChatLoop or DiffusionChat) until the end of input or /quit.
template <typename Loop>
void read_messages(Loop& loop, bool interactive, bool json) {
    std::string message;
    LineReader input(interactive);
    while (read_message(input, interactive, /*echo=*/!interactive && !json, message))
        if (!loop.handle_line(message)) break;
    if (!interactive && loop.failed_lines() > 0)
        fail("chat: {} line{} of the script failed (the errors above)", loop.failed_lines(),
             loop.failed_lines() == 1 ? "" : "s");
}

void run_diffusion_chat(const ChatArgs& args, const CLI::App& command) {
    refuse_flags_for_diffusion(command, "chat");
    const bool show_progress = !args.quiet && stderr_is_terminal();
    const std::unique_ptr<DiffusionRunner> loaded =
        load_diffusion_runner(args.model, args.engine.backend, args.max_tokens, show_progress);
    DiffusionRunner& runner = *loaded;
    const TextFrontEnd text = load_text_front_end(args.model, runner.config(), /*need_chat_template=*/true);
    DiffusionChatSettings settings;
    if (!args.thinking.empty()) settings.thinking = args.thinking == "on";
    settings.preserve_thinking = args.preserve_thinking;
    settings.json = args.json;
    settings.seed = args.sampling.seed;
    settings.stdout_is_terminal = isatty(STDOUT_FILENO) == 1;
    settings.interruptible = isatty(STDIN_FILENO) == 1;
    DiffusionChat loop(runner, text, settings, args.system);
    const bool interactive = isatty(STDIN_FILENO) == 1;
    if (!args.quiet) {
        for (const std::string& line : text.notes) fmt::print(stderr, "chat: note: {}\n", line);
        fmt::print(stderr, "chat: {} (block diffusion) on {}; {} tokens per reply in blocks of {}, seed {}. {}/help lists commands.\n",
                   args.model, runner.backend(), runner.settings().max_new_tokens, runner.config().canvas_length, args.sampling.seed,
                   interactive ? "Type a message; Ctrl-D or /quit ends. " : "");
    }
    read_messages(loop, interactive, args.json);
}

void run_chat(const ChatArgs& args, const CLI::App& command) {
    if (args.max_tokens && *args.max_tokens < 1) fail("chat: --max-tokens {}: must be at least 1", *args.max_tokens);
    if (is_diffusion_model(args.model)) {
        run_diffusion_chat(args, command);
        return;
    }

    const bool show_progress = !args.quiet && stderr_is_terminal();
    std::unique_ptr<Engine> engine = open_engine_for(args.model, args.engine, show_progress);
    // Checked here, not at the first message: a chat that cannot end a reply is useless from the start.
    require_an_end("chat", args.model, engine->config(), args.max_tokens);
    const TextFrontEnd text = load_text_front_end(args.model, engine->config(), /*need_chat_template=*/true);
    const SessionOptions session_options{.sequence = sequence_options(args.sequence, engine->config(), "chat"),
                                         .checkpoints = {}};
    Session session(*engine, session_options);

    ChatSettings settings;
    settings.generation.sampling = args.sampling;
    settings.generation.max_tokens = args.max_tokens;
    settings.generation.stop = args.stop;
    if (!args.thinking.empty()) settings.thinking = args.thinking == "on";
    settings.preserve_thinking = args.preserve_thinking;
    settings.on_full = args.on_full == "stop" ? OnContextFull::stop : OnContextFull::drop_oldest;
    settings.json = args.json;
    settings.show_progress = show_progress;
    settings.stdout_is_terminal = isatty(STDOUT_FILENO) == 1;
    const bool interactive = isatty(STDIN_FILENO) == 1;
    settings.interruptible = interactive;
    ChatLoop loop(session, text, settings, args.system);

    if (!args.quiet) {
        for (const std::string& line : text.notes) fmt::print(stderr, "chat: note: {}\n", line);
        fmt::print(stderr, "chat: {} on {}; kv {}, context {} tokens, seed {}. {}/help lists commands.\n", args.model,
                   engine->description(), kv_format_name(session_options.sequence.kv_format),
                   session_options.sequence.max_positions, args.sampling.seed,
                   interactive ? "Type a message; Ctrl-D or /quit ends. " : "");
    }

    read_messages(loop, interactive, args.json);
}

}  // namespace

void add_chat_command(CLI::App& app) {
    auto args = std::make_shared<ChatArgs>();
    CLI::App* cmd = app.add_subcommand("chat", "Chat with a model: multi-turn, streamed, with /commands (/help)");
    cmd->add_option("-m,--model", args->model,
                    fmt::format("GGUF file or Hugging Face folder (default: {}, the model `make run` uses)",
                                default_model_path()));
    cmd->add_option("--system", args->system, "system message, kept for the whole conversation (default: none)");
    cmd->add_option("--max-tokens", args->max_tokens,
                    "at most this many tokens per reply (default: until EOS or the end of the context; required for "
                    "a model without an EOS token)");
    add_sampling_options(*cmd, args->sampling);
    cmd->add_option("--stop", args->stop, "end a reply when its text contains this (repeatable; default: none)");
    cmd->add_option("--thinking", args->thinking, "enable_thinking for the chat template (default: the template's own; /thinking switches it)")
        ->check(CLI::IsMember({"on", "off"}));
    cmd->add_flag("--preserve-thinking", args->preserve_thinking,
                  "keep earlier replies' thinking in the conversation (the chat template's preserve_thinking, "
                  "Qwen3.5): the next turn reuses the whole previous reply instead of re-reading it; "
                  "/preserve-thinking switches it (default: off, the template drops old thinking)");
    cmd->add_option("--on-full", args->on_full,
                    "when the conversation outgrows the context: drop-oldest turns (never the system "
                    "message) or stop (refuse the message)")
        ->check(CLI::IsMember({"drop-oldest", "stop"}))
        ->capture_default_str();
    add_backend_option(*cmd, args->engine);
    add_sequence_options(*cmd, args->sequence);
    cmd->add_flag("--json", args->json, "replies and /stats as one JSON object per line on stdout (for scripts)");
    cmd->add_flag("-q,--quiet", args->quiet, "no banner, notes or progress line on stderr");
    cmd->callback([args, cmd] {
        args->model = model_or_default(args->model, "chat");
        run_chat(*args, *cmd);
    });
}

}  // namespace deltabit::cli
