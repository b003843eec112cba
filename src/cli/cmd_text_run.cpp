// `deltabit run`: one-shot generation from the command line, for scripts.
//
//   deltabit run -m MODEL (-p TEXT | -f FILE | --ids 1,2,3) [--raw] [--max-tokens N] [--temperature T] [--top-k K]
//                [--top-p P] [--min-p P] [--seed S] [--repeat-penalty R] [--dry-multiplier M]
//                [--stop S]... [--thinking on|off] [--backend cpu|cuda|auto] [--kv f32|f16|kivi4]
//                [--ctx N] [--json] [--quiet] [--record FILE]
//
// -p TEXT (or the text of FILE, -f; "-f -" reads stdin) is wrapped as one user message in the model's own chat template (unless --raw) and
// tokenized; the text is streamed to stdout as tokens arrive. --ids takes the prompt as token ids and
// needs no tokenizer: generated ids are printed instead of text. --json prints one object at the end
// instead: text (null with --ids), tokens, finish_reason, timings, and what ran it (backend, KV format,
// context, reuse). Timings also go to stderr.
//
// A block-diffusion model (DiffusionGemma) runs the block loop instead (cmd_text_diffusion.h): each
// block is printed as it is committed, --json adds the denoising steps per block, --seed and --max-tokens
// apply, --backend picks the CPU reference or the GPU's device loop, the flags that only left-to-right
// decoding reads are refused, and --record FILE writes every denoising step for `deltabit replay`
// (docs/replay.md).
//
// The run is one turn of a fresh Session (runtime/session.h), the same path `deltabit chat` takes, so
// the two commands cannot drift apart; its reuse figures are 0 and are reported to prove it.
#include "cli/cmd_text_diffusion.h"
#include "cli/cmd_text_prompt.h"
#include "cli/commands.h"
#include "cli/engine_options.h"
#include "cli/progress.h"
#include "cli/sampling_options.h"
#include "cli/token_ids.h"
#include "core/error.h"
#include "core/file_io.h"
#include "runtime/engine.h"
#include "runtime/session.h"
#include "text/tokenizer_stream.h"
#include "text/unicode.h"

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <nlohmann/json.hpp>

#include <cstdio>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace deltabit::cli {
namespace {

struct RunArgs {
    std::string model;
    std::optional<std::string> prompt;
    std::optional<std::string> prompt_file;
    std::optional<std::string> ids;
    bool raw = false;
    std::optional<int64_t> max_tokens;
    SamplingParams sampling = default_sampling_params();
    std::vector<std::string> stop;
    std::string thinking;  // "", "on" or "off"
    bool json = false;
    bool quiet = false;
    std::string record;  // block diffusion: write every denoising step here
    EngineArgs engine;
    SequenceArgs sequence;
};

std::vector<int32_t> encode_prompt(const RunArgs& args, const std::string& prompt, const TextFrontEnd& text) {
    if (args.raw) return encode_raw(text, prompt);
    text::ChatRequest request;
    request.messages.push_back({{"role", "user"}, {"content", prompt}});
    request.add_generation_prompt = true;
    if (!args.thinking.empty()) request.enable_thinking = args.thinking == "on";
    return encode_rendered(text, text.chat_template->render(request));
}

// The prompt text from -p or -f, checked before the model loads: an empty prompt is named as such.
std::optional<std::string> prompt_text(const RunArgs& args) {
    if (args.prompt) {
        if (args.prompt->empty()) fail("run: -p: the prompt is empty; give some text");
        return args.prompt;
    }
    if (!args.prompt_file) return std::nullopt;
    const std::string text = read_prompt_file(*args.prompt_file, "run: -f");
    if (text.empty()) fail("run: -f {}: the file is empty; the prompt needs some text", *args.prompt_file);
    return text;
}

// The prompt as ids: the text through the tokenizer (and the chat template unless --raw), or --ids.
std::vector<int32_t> prompt_ids(const RunArgs& args, const std::optional<std::string>& prompt_string,
                                const std::vector<int32_t>& given_ids, const std::optional<TextFrontEnd>& text) {
    if (!prompt_string) return given_ids;
    if (!args.quiet)
        for (const std::string& note : text->notes) fmt::print(stderr, "run: note: {}\n", note);
    return encode_prompt(args, *prompt_string, *text);
}

void run_diffusion(const RunArgs& args, const CLI::App& command, const std::optional<std::string>& prompt_string,
                   const std::vector<int32_t>& given_ids) {
    refuse_flags_for_diffusion(command, "run");
    if (!args.record.empty()) check_replaceable(args.record, "run: --record");
    const bool progress = !args.quiet && stderr_is_terminal();
    const std::unique_ptr<DiffusionRunner> loaded = load_diffusion_runner(args.model, args.engine.backend, args.max_tokens, progress);
    DiffusionRunner& runner = *loaded;
    std::optional<TextFrontEnd> text;
    if (prompt_string) text = load_text_front_end(args.model, runner.config(), /*need_chat_template=*/!args.raw);
    const std::vector<int32_t> prompt = prompt_ids(args, prompt_string, given_ids, text);

    std::optional<text::StreamingDetokenizer> detokenizer;
    if (text) detokenizer.emplace(*text->tokenizer, text::DecodeOptions{.skip_special = true});
    std::string shown;        // the text so far
    bool ended = false;       // an EOS was committed: nothing after it is shown
    bool first = true;
    const auto on_block = [&](std::span<const int32_t> block, int64_t) {
        const std::span<const int32_t> visible = ended ? block.first(0) : diffusion_visible_tokens(block, runner.settings());
        ended = ended || visible.size() < block.size();
        std::string piece;
        if (detokenizer) {
            for (int32_t id : visible) piece += detokenizer->push(id);
            if (ended) piece += detokenizer->finish();
        } else if (!args.json) {
            for (int32_t id : block) piece += fmt::format("{}{}", first ? "" : " ", id), first = false;
        }
        shown += piece;
        if (args.json) return;
        fmt::print("{}", piece);
        std::fflush(stdout);
    };
    const DiffusionRun run = runner.generate(prompt, args.sampling.seed, on_block, args.record);
    if (detokenizer && !ended) {
        const std::string rest = detokenizer->finish();
        shown += rest;
        if (!args.json) fmt::print("{}", rest);
    }

    const DiffusionGeneration& d = run.generation;
    int64_t steps = 0;
    for (int64_t s : d.steps_per_block) steps += s;
    if (args.json) {
        nlohmann::ordered_json out;
        out["text"] = text ? nlohmann::ordered_json(shown) : nlohmann::ordered_json(nullptr);
        out["tokens"] = d.tokens;
        out["prompt_tokens"] = prompt.size();
        add_diffusion_json(out, run, runner.settings());
        out["timings"] = {{"generate_ms", run.generate_ms},
                          {"tokens_per_s", run.generate_ms > 0 ? 1000.0 * double(d.tokens.size()) / run.generate_ms : 0.0}};
        out["backend"] = runner.backend();
        out["backend_description"] = runner.backend_description();
        out["seed"] = args.sampling.seed;
        out["record"] = args.record.empty() ? nlohmann::ordered_json(nullptr) : nlohmann::ordered_json(args.record);
        fmt::print("{}\n", out.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace));
    } else {
        fmt::print("\n");
    }
    std::fflush(stdout);  // the reply ends before the summary, also when both go to one pipe
    if (!args.quiet)
        fmt::print(stderr,
                   "run: {} prompt tokens; {} blocks of {}, {} denoising steps ({}), {:.2f} tokens per forward, "
                   "{:.1f} ms; finish: {}; {}; seed {}{}\n",
                   prompt.size(), d.steps_per_block.size(), runner.config().canvas_length, steps,
                   fmt::join(d.steps_per_block, " "), d.tokens_per_forward(), run.generate_ms,
                   d.finished ? "stop" : "length", runner.backend(), args.sampling.seed,
                   args.record.empty() ? "" : fmt::format("; recorded to {}", args.record));
}

void run_generation(const RunArgs& args, const CLI::App& command) {
    if (int(args.prompt.has_value()) + int(args.prompt_file.has_value()) + int(args.ids.has_value()) != 1)
        fail("run: give exactly one of -p TEXT, -f FILE or --ids 1,2,3");
    if (args.ids && !args.stop.empty())
        fail("run: --stop matches text, and --ids runs without a tokenizer; drop one of them");
    if (args.ids && (args.raw || !args.thinking.empty()))
        fail("run: --raw and --thinking shape a text prompt; --ids is used as given");
    if (args.max_tokens && *args.max_tokens < 1) fail("run: --max-tokens {}: must be at least 1", *args.max_tokens);
    std::optional<std::string> prompt_string = prompt_text(args);
    // Checked before the model loads, so a typo costs nothing.
    const std::vector<int32_t> given_ids = args.ids ? parse_token_ids(*args.ids, "run: --ids") : std::vector<int32_t>{};
    if (prompt_string && !warn_if_not_utf8(*prompt_string, "run: warning: the prompt"))
        prompt_string = text::utf8_repair(*prompt_string);
    if (is_diffusion_model(args.model)) {
        run_diffusion(args, command, prompt_string, given_ids);
        return;
    }
    if (!args.record.empty())
        fail("run: --record records the steps of a block-diffusion model; {} decodes left to right", args.model);

    const bool progress = !args.quiet && stderr_is_terminal();
    std::unique_ptr<Engine> engine = open_engine_for(args.model, args.engine, progress);
    require_an_end("run", args.model, engine->config(), args.max_tokens);
    const SequenceOptions sequence = sequence_options(args.sequence, engine->config(), "run");
    std::optional<TextFrontEnd> text;
    if (prompt_string) text = load_text_front_end(args.model, engine->config(), /*need_chat_template=*/!args.raw);
    const std::vector<int32_t> prompt = prompt_ids(args, prompt_string, given_ids, text);

    if (int64_t(prompt.size()) > sequence.max_positions)
        fail("run: the prompt has {} tokens and the context holds {}; raise --ctx or shorten the prompt",
             prompt.size(), sequence.max_positions);

    GenerationOptions options;
    options.sampling = args.sampling;
    options.max_tokens = args.max_tokens;
    options.stop = args.stop;

    GenerationCallbacks callbacks;
    std::optional<text::StreamingDetokenizer> detokenizer;
    if (text) {
        detokenizer.emplace(*text->tokenizer, text::DecodeOptions{.skip_special = true});
        callbacks.detokenize = [&](int32_t id) { return detokenizer->push(id); };
        callbacks.detokenize_finish = [&] { return detokenizer->finish(); };
    }
    // Drawn while the prompt is read, erased by the first token.
    ProgressLine prefill_progress(fmt::format("prefill {} tokens", prompt.size()), progress);
    callbacks.on_prefill_progress = [&](int64_t done, int64_t total) {
        prefill_progress.set_fraction(double(done) / double(total));
    };
    bool first = true;  // outlives the callback, which runs inside run_turn()
    callbacks.on_token = [&](int32_t id, std::string_view piece) {
        prefill_progress.finish();
        if (args.json) return;
        if (text) fmt::print("{}", piece);
        else fmt::print("{}{}", first ? "" : " ", id);
        first = false;
        std::fflush(stdout);
    };

    // One turn never returns to an earlier position, so no checkpoint is kept (each would copy about
    // 157 MB at the 27B geometry, docs/sessions.md); the prompt is still read in the session's pieces,
    // which drive the progress bar and give the same forward calls, so the same bits, as `chat`.
    Session session(*engine, SessionOptions{.sequence = sequence,
                                            .checkpoints = {.interval = CheckpointPolicy{}.interval, .max_kept = 0}});
    const TurnResult turn = session.run_turn(prompt, options, callbacks);
    prefill_progress.finish();
    const GenerationResult& result = turn.generation;

    const GenerationTimings& t = result.timings;
    if (args.json) {
        nlohmann::ordered_json out;
        out["text"] = text ? nlohmann::ordered_json(result.text) : nlohmann::ordered_json(nullptr);
        out["tokens"] = result.tokens;
        out["prompt_tokens"] = turn.reuse.prompt_tokens;
        out["finish_reason"] = finish_reason_name(result.finish);
        out["timings"] = {{"prefill_ms", t.prefill_ms},
                          {"decode_ms", t.decode_ms},
                          {"decode_steps", t.decode_steps},
                          {"decode_tokens_per_s", t.decode_tokens_per_s()}};
        out["backend"] = engine->backend_name();
        out["backend_description"] = engine->description();
        out["kv_format"] = kv_format_name(sequence.kv_format);
        out["context"] = sequence.max_positions;
        out["seed"] = args.sampling.seed;
        out["reuse"] = {{"prompt_tokens", turn.reuse.prompt_tokens},
                        {"common_prefix", turn.reuse.common_prefix},
                        {"reused", turn.reuse.reused},
                        {"recomputed", turn.reuse.recomputed}};
        fmt::print("{}\n", out.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace));
    } else {
        fmt::print("\n");
    }
    std::fflush(stdout);  // the reply ends before the summary, also when both go to one pipe
    if (!args.quiet)
        fmt::print(stderr,
                   "run: {} prompt tokens in {:.1f} ms; {} generated, {:.1f} tok/s decode; finish: {}; {}, kv {}; seed {}\n",
                   t.prompt_tokens, t.prefill_ms, result.tokens.size(), t.decode_tokens_per_s(),
                   finish_reason_name(result.finish), engine->backend_name(), kv_format_name(sequence.kv_format),
                   args.sampling.seed);
}

}  // namespace

void add_run_command(CLI::App& app) {
    auto args = std::make_shared<RunArgs>();
    CLI::App* cmd = app.add_subcommand("run", "Generate from a prompt (text through the chat template, or token ids)");
    cmd->add_option("-m,--model", args->model,
                    fmt::format("GGUF file or Hugging Face folder (default: {}, the model `make run` uses)",
                                default_model_path()));
    auto* prompt = cmd->add_option("-p,--prompt", args->prompt, "prompt text (a user message unless --raw)");
    auto* file = cmd->add_option("-f,--file", args->prompt_file, "read the prompt text from FILE (- = stdin)");
    auto* ids = cmd->add_option("--ids", args->ids, "prompt as token ids, comma-separated; no tokenizer needed");
    prompt->excludes(ids)->excludes(file);
    file->excludes(ids);
    cmd->add_flag("--raw", args->raw, "tokenize the prompt as is, without the chat template");
    cmd->add_option("--max-tokens", args->max_tokens,
                    "stop after this many generated tokens (default: no limit but the context and EOS; "
                    "required for a model without an EOS token)");
    add_sampling_options(*cmd, args->sampling);
    cmd->add_option("--stop", args->stop, "stop when the text contains this (repeatable; default: none)");
    cmd->add_option("--thinking", args->thinking, "enable_thinking for the chat template (default: the template's own)")
        ->check(CLI::IsMember({"on", "off"}));
    add_backend_option(*cmd, args->engine);
    add_sequence_options(*cmd, args->sequence);
    cmd->add_flag("--json", args->json, "print one JSON object at the end instead of streaming");
    cmd->add_flag("-q,--quiet", args->quiet, "no progress line, notes or timing summary on stderr");
    cmd->add_option("--record", args->record,
                    "block-diffusion models: write every denoising step to FILE, for `deltabit replay FILE`");
    cmd->callback([args, cmd] {
        args->model = model_or_default(args->model, "run");
        run_generation(*args, *cmd);
    });
}

}  // namespace deltabit::cli
