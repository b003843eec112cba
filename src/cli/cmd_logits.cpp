// `deltabit logits`: the CPU reference forward pass from the command line, for comparing the engine
// with other implementations position by position.
//
//   deltabit logits -m MODEL --ids 1,2,3 [--mode prompt|steps|split:N] -o OUT.bin [--dump NAME]
//
// OUT.bin is raw float32 little-endian logits [positions][vocab], no header. With --dump NAME the
// named intermediate (e.g. blk.3.attn.out) is written instead, [positions][width], so two runs or two
// backends can be diffed at one point of the network. Modes: `prompt` runs
// the ids in one call, `steps` one token per call, `split:N` the first N then the rest; all three
// must give the same logits (tests/models).
#include "cli/commands.h"
#include "cli/token_ids.h"
#include "core/error.h"
#include "models/model.h"

#include <fmt/format.h>

#include <bit>
#include <cstdint>
#include <fstream>
#include <string>
#include <vector>

namespace deltabit::cli {
namespace {

struct LogitsArgs {
    std::string model;
    std::string ids;
    std::string mode = "prompt";
    std::string out;
    std::string dump;  // a named intermediate instead of the logits
};

// The chunks the ids are fed in: one chunk (prompt), one per token (steps) or two (split:N).
std::vector<size_t> chunk_sizes(const std::string& mode, size_t n) {
    if (mode == "prompt") return {n};
    if (mode == "steps") return std::vector<size_t>(n, 1);
    if (mode.rfind("split:", 0) == 0) {
        const std::string count = mode.substr(6);
        if (count.empty() || count.size() > 9 || count.find_first_not_of("0123456789") != std::string::npos)
            fail("logits: --mode {}: expected split:N with N a number", mode);
        const size_t first = std::stoul(count);
        if (first == 0 || first >= n)
            fail("logits: --mode {}: N must be between 1 and {} (one less than the {} ids)", mode, n - 1, n);
        return {first, n - first};
    }
    fail("logits: --mode {:?}: expected prompt, steps or split:N", mode);
}

void run_logits(const LogitsArgs& args) {
    static_assert(std::endian::native == std::endian::little, "OUT.bin is written as little-endian floats");
    const std::vector<int32_t> ids = parse_token_ids(args.ids, "logits: --ids");
    const std::vector<size_t> chunks = chunk_sizes(args.mode, ids.size());
    const Model model = Model::load(args.model);

    SequenceState state = model.new_sequence();
    std::vector<float> logits;
    std::vector<float> dumped;
    size_t dump_hits = 0;
    const ActivationObserver observer = [&](std::string_view name, const float* data, int64_t n) {
        if (name != args.dump) return;
        dumped.insert(dumped.end(), data, data + n);
        ++dump_hits;
    };
    size_t start = 0;
    for (size_t size : chunks) {
        const std::vector<float> part = model.forward(state, std::span<const int32_t>(ids).subspan(start, size),
                                                      args.dump.empty() ? nullptr : &observer);
        logits.insert(logits.end(), part.begin(), part.end());
        start += size;
    }
    if (!args.dump.empty()) {
        if (dump_hits == 0)
            fail("logits: --dump {}: no intermediate has that name (names look like blk.0.attn.out, "
                 "blk.1.gdn.conv_out, blk.2.out)",
                 args.dump);
        logits = std::move(dumped);
    }

    std::ofstream out(args.out, std::ios::binary | std::ios::trunc);
    if (!out) fail("logits: {}: cannot open for writing", args.out);
    out.write(reinterpret_cast<const char*>(logits.data()), std::streamsize(logits.size() * sizeof(float)));
    if (!out.flush()) fail("logits: {}: write failed", args.out);
    if (args.dump.empty()) {
        fmt::print("{}: {} positions x {} vocab float32 ({} mode) -> {}\n", args.model, ids.size(),
                   model.config().n_vocab, args.mode, args.out);
    } else {
        fmt::print("{}: {} = {} float32 values ({} positions, {} mode) -> {}\n", args.model, args.dump,
                   logits.size(), ids.size(), args.mode, args.out);
    }
}

}  // namespace

void add_logits_command(CLI::App& app) {
    auto args = std::make_shared<LogitsArgs>();
    CLI::App* cmd = app.add_subcommand("logits", "Write the CPU reference logits of a token sequence (float32 [positions][vocab])");
    cmd->add_option("-m,--model", args->model, "GGUF file or Hugging Face folder")->required();
    cmd->add_option("--ids", args->ids, "token ids, comma-separated")->required();
    cmd->add_option("--mode", args->mode, "prompt (one call), steps (one token per call) or split:N")
        ->capture_default_str();
    cmd->add_option("-o,--output", args->out, "output file")->required();
    cmd->add_option("--dump", args->dump, "write this named intermediate instead of the logits (e.g. blk.0.gdn.out)");
    cmd->callback([args] { run_logits(*args); });
}

}  // namespace deltabit::cli
