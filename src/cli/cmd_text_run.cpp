// `deltabit run`: one-shot generation from the command line, for scripts.
//
//   deltabit run -m MODEL (-p TEXT | --ids 1,2,3) [--raw] [--max-tokens N] [--temperature T] [--top-k K]
//                [--top-p P] [--min-p P] [--seed S] [--repeat-penalty R] [--dry-multiplier M]
//                [--stop S]... [--thinking on|off] [--json]
//
// -p TEXT is wrapped as one user message in the model's own chat template (unless --raw) and
// tokenized; the text is streamed to stdout as tokens arrive. --ids takes the prompt as token ids and
// needs no tokenizer: generated ids are printed instead of text. --json prints one object at the end
// instead: text (null with --ids), tokens, finish_reason, timings. Timings also go to stderr.
#include "cli/commands.h"
#include "cli/token_ids.h"
#include "core/error.h"
#include "formats/gguf.h"
#include "models/model.h"
#include "runtime/generate.h"
#include "text/chat_template.h"
#include "text/tokenizer_load.h"
#include "text/tokenizer_stream.h"

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <cstdio>
#include <filesystem>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace deltabit::cli {
namespace {

struct RunArgs {
    std::string model;
    std::string prompt;
    std::string ids;
    bool raw = false;
    std::optional<int64_t> max_tokens;
    SamplingParams sampling = default_sampling_params();
    std::vector<std::string> stop;
    std::string thinking;  // "", "on" or "off"
    bool json = false;
};

text::ChatTemplate load_chat_template(const std::string& model_path) {
    if (std::filesystem::is_directory(model_path)) return text::ChatTemplate::from_hf_directory(model_path);
    return text::ChatTemplate::from_gguf(gguf::File::open(model_path));
}

std::vector<int32_t> encode_prompt(const RunArgs& args, const text::Tokenizer& tokenizer) {
    if (args.raw) return tokenizer.encode(args.prompt, {.add_special = true});
    text::ChatRequest request;
    request.messages.push_back({{"role", "user"}, {"content", args.prompt}});
    request.add_generation_prompt = true;
    if (!args.thinking.empty()) request.enable_thinking = args.thinking == "on";
    const std::string rendered = load_chat_template(args.model).render(request);
    // The template writes the special tokens itself, as apply_chat_template(tokenize=True) assumes.
    return tokenizer.encode(rendered, {.add_special = false, .parse_special = true});
}

void run_generation(const RunArgs& args) {
    if (args.prompt.empty() == args.ids.empty()) fail("run: give exactly one of -p TEXT or --ids 1,2,3");
    if (!args.ids.empty() && !args.stop.empty())
        fail("run: --stop matches text, and --ids runs without a tokenizer; drop one of them");
    if (!args.ids.empty() && (args.raw || !args.thinking.empty()))
        fail("run: --raw and --thinking shape a text prompt; --ids is used as given");

    const Model model = Model::load(args.model);
    std::unique_ptr<text::Tokenizer> tokenizer;
    std::vector<int32_t> prompt;
    if (args.ids.empty()) {
        tokenizer = std::make_unique<text::Tokenizer>(text::load_tokenizer(args.model));
        prompt = encode_prompt(args, *tokenizer);
    } else {
        prompt = parse_token_ids(args.ids, "run: --ids");
    }

    GenerationOptions options;
    options.sampling = args.sampling;
    options.max_tokens = args.max_tokens;
    options.stop = args.stop;

    GenerationCallbacks callbacks;
    std::optional<text::StreamingDetokenizer> detokenizer;
    if (tokenizer) {
        detokenizer.emplace(*tokenizer, text::DecodeOptions{.skip_special = true});
        callbacks.detokenize = [&](int32_t id) { return detokenizer->push(id); };
        callbacks.detokenize_finish = [&] { return detokenizer->finish(); };
    }
    bool first = true;  // outlives the callback, which runs inside generate()
    if (!args.json) {
        callbacks.on_token = [&](int32_t id, std::string_view text) {
            if (tokenizer) fmt::print("{}", text);
            else fmt::print("{}{}", first ? "" : " ", id);
            first = false;
            std::fflush(stdout);
        };
    }

    SequenceState state = model.new_sequence();
    TokenLedger ledger;
    const GenerationResult result = generate(model, state, ledger, prompt, options, callbacks);

    const GenerationTimings& t = result.timings;
    if (args.json) {
        nlohmann::ordered_json out;
        out["text"] = tokenizer ? nlohmann::ordered_json(result.text) : nlohmann::ordered_json(nullptr);
        out["tokens"] = result.tokens;
        out["prompt_tokens"] = t.prompt_tokens;
        out["finish_reason"] = finish_reason_name(result.finish);
        out["timings"] = {{"prefill_ms", t.prefill_ms},
                          {"decode_ms", t.decode_ms},
                          {"decode_steps", t.decode_steps},
                          {"decode_tokens_per_s", t.decode_tokens_per_s()}};
        fmt::print("{}\n", out.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace));
    } else {
        fmt::print("\n");
    }
    fmt::print(stderr, "run: {} prompt tokens in {:.1f} ms; {} generated, {:.1f} tok/s decode; finish: {}\n",
               t.prompt_tokens, t.prefill_ms, result.tokens.size(), t.decode_tokens_per_s(),
               finish_reason_name(result.finish));
}

}  // namespace

void add_run_command(CLI::App& app) {
    auto args = std::make_shared<RunArgs>();
    CLI::App* cmd = app.add_subcommand("run", "Generate from a prompt (text through the chat template, or token ids)");
    cmd->add_option("-m,--model", args->model, "GGUF file or Hugging Face folder")->required();
    auto* prompt = cmd->add_option("-p,--prompt", args->prompt, "prompt text (a user message unless --raw)");
    auto* ids = cmd->add_option("--ids", args->ids, "prompt as token ids, comma-separated; no tokenizer needed");
    prompt->excludes(ids);
    cmd->add_flag("--raw", args->raw, "tokenize the prompt as is, without the chat template");
    cmd->add_option("--max-tokens", args->max_tokens, "stop after this many generated tokens");
    cmd->add_option("--temperature", args->sampling.temperature, "0 = greedy")->capture_default_str();
    cmd->add_option("--top-k", args->sampling.top_k, "0 = off")->capture_default_str();
    cmd->add_option("--top-p", args->sampling.top_p, "1 = off")->capture_default_str();
    cmd->add_option("--min-p", args->sampling.min_p, "0 = off")->capture_default_str();
    cmd->add_option("--seed", args->sampling.seed, "seed of the sampler's random draws")->capture_default_str();
    cmd->add_option("--repeat-penalty", args->sampling.repeat_penalty, "1 = off")->capture_default_str();
    cmd->add_option("--dry-multiplier", args->sampling.dry_multiplier, "0 = off")->capture_default_str();
    cmd->add_option("--stop", args->stop, "stop when the text contains this (repeatable)");
    cmd->add_option("--thinking", args->thinking, "enable_thinking for the chat template")
        ->check(CLI::IsMember({"on", "off"}));
    cmd->add_flag("--json", args->json, "print one JSON object at the end instead of streaming");
    cmd->callback([args] { run_generation(*args); });
}

}  // namespace deltabit::cli
