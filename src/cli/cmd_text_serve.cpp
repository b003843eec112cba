// `deltabit serve`: the OpenAI-compatible HTTP server (src/server, docs/server.md).
//
//   deltabit serve [-m MODEL] [--host 127.0.0.1] [--port 8080] [--api-key KEY] [--parallel N]
//                  [--ctx N] [--kv f32|f16|kivi4] [--backend cpu|cuda|auto] [--park-budget MIB] ...
//
// Loads the model once, starts the scheduler (the one thread that uses the model) and the HTTP
// threads, prints the address it listens on, and serves until SIGINT or SIGTERM: then it refuses new
// requests, cancels what is queued or generating (each stops within one step), lets the responses in
// flight be written, and exits 0.
//
// A block-diffusion model (DiffusionGemma) is served through its DiffusionRunner (cmd_text_diffusion.h),
// one request at a time (server/scheduler.h), on --backend's choice: --parallel, --prefill-chunk, --park-budget,
// --spill-*, --ctx and --kv have nothing to act on there and are refused, as run and chat refuse theirs.
// (Files named cmd_text_*: built only with the text libraries; this one also needs cpp-httplib.)
#include "cli/cmd_text_diffusion.h"
#include "cli/cmd_text_prompt.h"
#include "cli/commands.h"
#include "cli/engine_options.h"
#include "cli/progress.h"
#include "core/error.h"
#include "runtime/engine.h"
#include "server/http_server.h"
#include "server/scheduler.h"

#include <fmt/format.h>

#include <csignal>
#include <filesystem>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

namespace deltabit::cli {
namespace {

struct ServeArgs {
    std::string model;
    std::string host = "127.0.0.1";
    int port = 8080;
    std::string api_key;
    int parallel = 4;
    int64_t prefill_chunk = 256;
    int64_t park_budget_mib = 1024;
    std::string spill_dir;         // "": parked conversations past --park-budget are dropped
    int64_t spill_budget_mib = 4096;
    int max_queue = 256;
    int max_concurrent = 128;
    int64_t max_body_kib = 4096;
    int64_t max_prompt_tokens = 0;
    int64_t max_tokens = 4096;
    std::vector<std::string> cors_origins;
    bool quiet = false;
    EngineArgs engine;
    SequenceArgs sequence;
};

// Starts the HTTP side over `scheduler` and serves until SIGINT or SIGTERM (`signals`, blocked).
void serve_until_signal(const ServeArgs& args, sigset_t signals, server::Scheduler& scheduler, const server::ModelText& model) {
    server::HttpOptions http_options;
    http_options.host = args.host;
    http_options.port = args.port;
    http_options.api_key = args.api_key;
    http_options.cors_origins = args.cors_origins;
    http_options.max_concurrent = args.max_concurrent;
    http_options.limits.max_body_bytes = args.max_body_kib << 10;
    http_options.limits.max_prompt_tokens = args.max_prompt_tokens;
    http_options.limits.max_tokens = args.max_tokens;
    server::HttpServer http(scheduler, model, http_options);
    http.bind();
    if (!args.quiet && args.host != "127.0.0.1" && args.host != "localhost" && args.host != "::1" && args.api_key.empty())
        fmt::print(stderr, "serve: warning: listening on {} without --api-key: anyone who can reach it can use it\n", args.host);
    // The line scripts and tests wait for; stdout, flushed.
    fmt::print("serve: listening on http://{}:{}\n", args.host, http.bound_port());
    std::fflush(stdout);

    std::thread stopper([&] {
        int signal = 0;
        sigwait(&signals, &signal);
        if (!args.quiet) fmt::print(stderr, "serve: {}: finishing\n", signal == SIGINT ? "SIGINT" : "SIGTERM");
        http.refuse_new();
        scheduler.stop();
        http.wait_idle(std::chrono::seconds(5));
        http.stop();
    });
    http.serve();
    stopper.join();
}

// What the HTTP side knows of the model's text: its name, tokenizer, template and encoders (`text` must
// outlive the result: the encoders refer to it), its vocabulary and the context a request may fill.
server::ModelText model_text(const std::string& model_path, const TextFrontEnd& text, int64_t n_vocab, int64_t context) {
    server::ModelText model;
    model.model_id = std::filesystem::path(model_path).filename().string();
    model.tokenizer = text.tokenizer.get();
    model.chat_template = &*text.chat_template;
    model.encode_rendered = [&text](const std::string& s) { return encode_rendered(text, s); };
    model.encode_raw = [&text](const std::string& s) { return encode_raw(text, s); };
    model.n_vocab = n_vocab;
    model.context = context;
    return model;
}

void serve_diffusion(const ServeArgs& args, const CLI::App& command, const std::string& model_path, sigset_t signals) {
    refuse_flags_for_diffusion(command, "serve");  // --kv, --ctx, --threads, as run refuses them
    for (const char* flag : {"--parallel", "--prefill-chunk", "--park-budget", "--spill-dir", "--spill-budget"}) {
        const CLI::Option* option = command.get_option_no_throw(flag);
        if (option && option->count() > 0)
            fail("serve: {} does not apply to a block-diffusion model: it is served one request at a time, without "
                 "sessions",
                 flag);
    }
    const std::unique_ptr<DiffusionRunner> runner =
        load_diffusion_runner(model_path, args.engine.backend, std::nullopt, !args.quiet && stderr_is_terminal());
    const TextFrontEnd text = load_text_front_end(model_path, runner->config(), /*need_chat_template=*/true);

    server::SchedulerOptions scheduler_options;
    scheduler_options.max_queued = args.max_queue;
    server::Scheduler scheduler(*runner, *text.tokenizer, scheduler_options);

    server::ModelText model = model_text(model_path, text, runner->config().n_vocab, runner->config().context_length);
    model.block_tokens = runner->config().canvas_length;
    model.default_max_tokens = runner->settings().max_new_tokens;
    if (!args.quiet) {
        for (const std::string& line : text.notes) fmt::print(stderr, "serve: note: {}\n", line);
        fmt::print(stderr, "serve: {} (block diffusion) on {}; one request at a time, blocks of {} tokens, {} per reply "
                           "unless max_tokens says otherwise\n",
                   model_path, runner->backend(), model.block_tokens, model.default_max_tokens);
    }
    serve_until_signal(args, signals, scheduler, model);
}

void run_serve(const ServeArgs& args, const CLI::App& command) {
    const std::string model_path = model_or_default(args.model, "serve");
    // Signals go to one thread that waits for them (below); every thread started from here on inherits the mask.
    sigset_t signals;
    sigemptyset(&signals);
    sigaddset(&signals, SIGINT);
    sigaddset(&signals, SIGTERM);
    pthread_sigmask(SIG_BLOCK, &signals, nullptr);
    if (is_diffusion_model(model_path)) {
        serve_diffusion(args, command, model_path, signals);
        return;
    }

    std::unique_ptr<Engine> engine = open_engine_for(model_path, args.engine, !args.quiet && stderr_is_terminal());
    const TextFrontEnd text = load_text_front_end(model_path, engine->config(), /*need_chat_template=*/true);
    const SequenceOptions sequence = sequence_options(args.sequence, engine->config(), "serve");
    if (engine->config().eos_ids.empty() && !args.quiet)
        fmt::print(stderr, "serve: note: {} declares no EOS token: every reply runs to its max_tokens\n", model_path);

    server::SchedulerOptions scheduler_options;
    scheduler_options.pool.live = args.parallel;
    scheduler_options.pool.session = {.sequence = sequence, .checkpoints = {}};
    scheduler_options.pool.park_budget_bytes = args.park_budget_mib << 20;
    scheduler_options.pool.spill_dir = args.spill_dir;
    scheduler_options.pool.spill_budget_bytes = args.spill_budget_mib << 20;
    scheduler_options.max_queued = args.max_queue;
    scheduler_options.prefill_chunk = args.prefill_chunk;
    server::Scheduler scheduler(*engine, *text.tokenizer, scheduler_options);

    server::ModelText model = model_text(model_path, text, engine->config().n_vocab, sequence.max_positions);

    if (!args.quiet) {
        for (const std::string& line : text.notes) fmt::print(stderr, "serve: note: {}\n", line);
        fmt::print(stderr, "serve: {} on {}; {} sessions at once, context {} tokens, kv {}\n", model_path,
                   engine->description(), args.parallel, sequence.max_positions, kv_format_name(sequence.kv_format));
    }
    serve_until_signal(args, signals, scheduler, model);
}

}  // namespace

void add_serve_command(CLI::App& app) {
    auto args = std::make_shared<ServeArgs>();
    CLI::App* cmd = app.add_subcommand("serve", "OpenAI-compatible HTTP server: chat, completions, a web page (docs/server.md)");
    cmd->add_option("-m,--model", args->model,
                    fmt::format("GGUF file or Hugging Face folder (default: {}, the model `make run` uses)", default_model_path()));
    cmd->add_option("--host", args->host, "address to listen on; anything but loopback exposes the server")->capture_default_str();
    cmd->add_option("--port", args->port, "TCP port (0: any free port, printed at start)")
        ->check(CLI::Range(0, 65535))->capture_default_str();
    cmd->add_option("--api-key", args->api_key, "require 'Authorization: Bearer KEY' on /v1/* and /metrics (default: none)");
    cmd->add_option("--parallel", args->parallel, "conversations generating at once (live sessions)")
        ->check(CLI::Range(1, 1024))->capture_default_str();
    cmd->add_option("--prefill-chunk", args->prefill_chunk,
                    "prompt tokens read (or scored, for echo + logprobs) between two decode steps of the running conversations (0: whole prompts)")
        ->check(CLI::Range(int64_t(0), int64_t(1) << 30))->capture_default_str();
    cmd->add_option("--park-budget", args->park_budget_mib, "MiB of host memory for parked conversations (0: none kept)")
        ->check(CLI::Range(int64_t(0), int64_t(1) << 30))->capture_default_str();
    CLI::Option* spill_dir = cmd->add_option("--spill-dir", args->spill_dir,
                    "a folder (on a disk) that parked conversations pushed out of --park-budget move to instead of "
                    "being dropped (default: none)")
        ->type_name("DIR");
    cmd->add_option("--spill-budget", args->spill_budget_mib, "MiB of --spill-dir for spilled conversations")
        ->check(CLI::Range(int64_t(0), int64_t(1) << 30))
        ->capture_default_str()
        ->needs(spill_dir);
    cmd->add_option("--max-queue", args->max_queue, "requests waiting for a session; more get 429")
        ->check(CLI::Range(1, 1 << 20))->capture_default_str();
    cmd->add_option("--max-concurrent", args->max_concurrent, "requests served at once (waiting or generating); more get 429")
        ->check(CLI::Range(1, 1 << 16))->capture_default_str();
    cmd->add_option("--max-body", args->max_body_kib, "largest request body in KiB; larger get 413")
        ->check(CLI::Range(int64_t(1), int64_t(1) << 20))->capture_default_str();
    cmd->add_option("--max-prompt-tokens", args->max_prompt_tokens, "longest prompt in tokens (0: the context)")
        ->check(CLI::Range(int64_t(0), int64_t(1) << 40))->capture_default_str();
    cmd->add_option("--max-tokens-limit", args->max_tokens, "largest max_tokens a request may ask for, and the default")
        ->check(CLI::Range(int64_t(1), int64_t(1) << 40))->capture_default_str();
    cmd->add_option("--cors-origin", args->cors_origins, "allow browsers on this origin to call the API (repeatable; default: none)");
    add_backend_option(*cmd, args->engine);
    add_sequence_options(*cmd, args->sequence);
    cmd->add_flag("-q,--quiet", args->quiet, "no banner or notes on stderr");
    cmd->callback([args, cmd] { run_serve(*args, *cmd); });
}

}  // namespace deltabit::cli
