// `deltabit tokenize` and `deltabit detokenize`: the tokenizer from the command line, for checking a
// model's tokenizer against another implementation and for scripts.
//
//   deltabit tokenize -m MODEL [--ids|--pieces] [--add-special] [--no-parse-special] [TEXT]
//   deltabit detokenize -m MODEL [--skip-special] [IDS...]
//
// MODEL is a tokenizer.json, a Hugging Face folder holding one, or a .gguf. Without TEXT (or IDS) the
// input is read from stdin; ids may be separated by spaces, commas or newlines, with optional [ ].
#include "cli/commands.h"
#include "cli/token_ids.h"
#include "core/error.h"
#include "text/tokenizer_load.h"
#include "text/tokenizer_stream.h"

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <iostream>
#include <iterator>
#include <string>
#include <vector>

namespace deltabit::cli {
namespace {

std::string read_stdin() {
    std::cin >> std::noskipws;
    return std::string(std::istreambuf_iterator<char>(std::cin), std::istreambuf_iterator<char>());
}

struct TokenizeArgs {
    std::string model;
    bool ids = false;  // the default; the flag exists so scripts can say what they want
    bool pieces = false;
    bool add_special = false;
    bool no_parse_special = false;
    std::vector<std::string> text;
};

struct DetokenizeArgs {
    std::string model;
    bool skip_special = false;
    std::vector<std::string> ids;
};

void run_tokenize(const TokenizeArgs& args) {
    const text::Tokenizer tokenizer = text::load_tokenizer(args.model);
    std::string input;
    if (args.text.empty()) {
        input = read_stdin();
    } else {
        for (size_t i = 0; i < args.text.size(); ++i) input += (i ? " " : "") + args.text[i];
    }
    const auto ids = tokenizer.encode(input, {.add_special = args.add_special,
                                              .parse_special = !args.no_parse_special});
    if (args.pieces) {
        for (int32_t id : ids) {
            const nlohmann::json piece = std::string(tokenizer.token_string(id));
            fmt::print("{}\t{}\n", id, piece.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace));
        }
        return;
    }
    fmt::print("{}\n", fmt::join(ids, " "));
}

void run_detokenize(const DetokenizeArgs& args) {
    const text::Tokenizer tokenizer = text::load_tokenizer(args.model);
    std::string joined;
    if (args.ids.empty()) joined = read_stdin();
    for (const auto& s : args.ids) joined += s + " ";
    // Streams like a generation loop would: each token's bytes as they come, whole characters only.
    text::StreamingDetokenizer stream(tokenizer, {.skip_special = args.skip_special});
    for (int32_t id : parse_token_ids(joined, "detokenize")) fmt::print("{}", stream.push(id));
    fmt::print("{}", stream.finish());
    std::fflush(stdout);
}

}  // namespace

void add_tokenize_commands(CLI::App& app) {
    auto tokenize_args = std::make_shared<TokenizeArgs>();
    CLI::App* tokenize = app.add_subcommand("tokenize", "Text to token ids (or pieces)");
    tokenize->add_option("-m,--model", tokenize_args->model, "tokenizer.json, Hugging Face folder or .gguf")->required();
    auto* ids_flag = tokenize->add_flag("--ids", tokenize_args->ids, "Print token ids on one line (the default)");
    auto* pieces_flag = tokenize->add_flag("--pieces", tokenize_args->pieces, "Print one token per line: id, tab, its spelling as JSON");
    ids_flag->excludes(pieces_flag);
    tokenize->add_flag("--add-special", tokenize_args->add_special, "Add the tokenizer's BOS/EOS template");
    tokenize->add_flag("--no-parse-special", tokenize_args->no_parse_special,
                       "Treat special-token strings in the text as ordinary text");
    tokenize->add_option("text", tokenize_args->text, "Text to tokenize (default: stdin)");
    tokenize->callback([tokenize_args] { run_tokenize(*tokenize_args); });

    auto detokenize_args = std::make_shared<DetokenizeArgs>();
    CLI::App* detokenize = app.add_subcommand("detokenize", "Token ids to text");
    detokenize->add_option("-m,--model", detokenize_args->model, "tokenizer.json, Hugging Face folder or .gguf")->required();
    detokenize->add_flag("--skip-special", detokenize_args->skip_special, "Leave special tokens out");
    detokenize->add_option("ids", detokenize_args->ids, "Token ids (default: stdin)");
    detokenize->callback([detokenize_args] { run_detokenize(*detokenize_args); });
}

}  // namespace deltabit::cli
