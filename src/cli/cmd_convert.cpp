// `deltabit convert (HF_DIR | -m HF_DIR) -o OUT.gguf --type TYPE [--json] [--name NAME] [--no-logits-check]`:
// a Hugging Face folder to a GGUF file as llama.cpp lays it out, every tensor proven on the way out
// (convert/convert.h). Progress goes to stderr, one line per tensor; the report (or --json) to stdout.
#include "cli/commands.h"
#include "cli/engine_options.h"
#include "core/error.h"
#include "convert/convert.h"

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <cstdio>
#include <string>

namespace deltabit::cli {
namespace {

struct ConvertArgs {
    ModelArgument input;
    std::string output;
    std::string type;
    std::string name;
    bool json = false;
    bool quiet = false;
    bool no_logits_check = false;
    int64_t positions = 8;
};

void run_convert(const ConvertArgs& args) {
    ConvertOptions options;
    options.type = parse_convert_type(args.type);
    options.name = args.name;
    options.check_logits = !args.no_logits_check;
    if (args.positions < 1 || args.positions > 4096) fail("convert: --check-positions must be between 1 and 4096");
    options.logit_positions = args.positions;
    if (!args.quiet) {
        options.on_tensor = [](const TensorReport& t, size_t index, size_t count, bool proven) {
            if (!proven)
                fmt::print(stderr, "[{:>4}/{}] wrote  {:<36} {:<5}\n", index + 1, count, t.name, dtype_name(t.type));
            else
                fmt::print(stderr, "[{:>4}/{}] proved {:<36} {:<5} {}{}\n", index + 1, count, t.name, dtype_name(t.type),
                           t.lossless ? "lossless" : fmt::format("lossy max|err| {:.3g} rms rel {:.3g}", t.max_abs, t.rms_rel),
                           t.fallback ? "  (" + t.type_reason + ")" : "");
            std::fflush(stderr);
        };
    }
    const ConvertReport report = convert_hf_folder(model_argument(args.input, "convert"), args.output, options);
    if (args.json)
        fmt::print("{}\n", convert_report_to_json(report).dump(2));
    else
        fmt::print("{}", describe_convert_report(report));
}

}  // namespace

void add_convert_command(CLI::App& app) {
    auto args = std::make_shared<ConvertArgs>();
    CLI::App* cmd = app.add_subcommand(
        "convert", "Convert a Hugging Face folder to GGUF (llama.cpp's names and conventions), proving every tensor");
    add_model_argument(*cmd, args->input, "HF_DIR", "Hugging Face model folder (config.json + *.safetensors)");
    cmd->add_option("-o,--output", args->output, "output .gguf file (written beside it under a temporary name, renamed over it when proven; a device, FIFO or folder is refused)")->required();
    cmd->add_option("-t,--type", args->type, "storage type of the matrices: f32, f16, bf16, q8_0, q4_0, q1_0, q2_0")
        ->required();
    cmd->add_option("--name", args->name, "general.name (default: the folder's name)");
    cmd->add_flag("--json", args->json, "print the report as JSON");
    cmd->add_flag("-q,--quiet", args->quiet, "no per-tensor progress on stderr");
    cmd->add_flag("--no-logits-check", args->no_logits_check,
                  "skip the whole-model check (a CPU forward of both models; slow for large models)");
    cmd->add_option("--check-positions", args->positions, "prompt length of the whole-model check, 1 .. 4096")
        ->capture_default_str();
    cmd->callback([args] { run_convert(*args); });
}

}  // namespace deltabit::cli
