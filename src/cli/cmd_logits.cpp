// `deltabit logits`: a forward pass from the command line, for comparing the engine with other
// implementations (and its backends with each other) position by position.
//
//   deltabit logits -m MODEL --ids 1,2,3 [--mode prompt|steps|split:N] -o OUT.bin [--dump NAME]
//                   [--backend cpu|cuda|auto]
//
// OUT.bin is raw float32 little-endian logits [positions][vocab], no header. --backend picks the
// engine (runtime/engine.h; auto = CUDA when present). With --dump NAME the named intermediate (e.g.
// blk.3.attn.out) is written instead, [positions][width], so two runs can be diffed at one point of the
// network: the CPU reference's (--backend cpu or auto) or the GPU's (--backend cuda; the same names,
// models/model_cuda.h). Modes: `prompt` runs
// the ids in one call, `steps` one token per call, `split:N` the first N then the rest; all three
// must give the same logits (tests/models).
//
// A block-diffusion model (DiffusionGemma) takes --canvas IDS: the encoder runs over --ids (fed as --mode
// says), then the decoder over the canvas, with --sc-logits FILE (float32 [canvas][vocab]) as the
// self-conditioning logits when given; OUT.bin is the decoder's logits [canvas][vocab] (CPU reference).
#include "cli/commands.h"
#include "cli/engine_options.h"
#include "cli/token_ids.h"
#include "core/error.h"
#include "backend/backend.h"
#include "models/diffusion_gemma.h"
#include "models/model.h"
#include "runtime/engine.h"

#if DELTABIT_HAVE_CUDA
#include "models/model_cuda.h"
#endif

#include <fmt/format.h>

#include <bit>
#include <cstdint>
#include <fstream>
#include <memory>
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
    std::string canvas;     // block diffusion: the canvas to denoise after encoding the ids
    std::string sc_logits;  // block diffusion: float32 [canvas][vocab] self-conditioning logits
    EngineArgs engine;
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

void write_floats(const std::string& path, const std::vector<float>& values) {
    std::ofstream out(path, std::ios::binary | std::ios::trunc);
    if (!out) fail("logits: {}: cannot open for writing", path);
    out.write(reinterpret_cast<const char*>(values.data()), std::streamsize(values.size() * sizeof(float)));
    if (!out.flush()) fail("logits: {}: write failed", path);
}

// The logits through an engine on the chosen backend, fed in the same chunks.
void write_engine_logits(const LogitsArgs& args, const std::vector<int32_t>& ids, const std::vector<size_t>& chunks) {
    std::unique_ptr<Engine> engine = open_engine(args.model, args.engine.backend);
    engine->set_cpu_threads(cpu_threads(args.engine));
    std::unique_ptr<EngineSequence> sequence =
        engine->new_sequence(SequenceOptions{.max_positions = int64_t(ids.size()), .kv_format = KvFormat::f32});
    std::vector<float> logits;
    size_t start = 0;
    for (size_t size : chunks) {
        const std::vector<float> part = engine->forward_all(*sequence, std::span<const int32_t>(ids).subspan(start, size));
        logits.insert(logits.end(), part.begin(), part.end());
        start += size;
    }
    write_floats(args.out, logits);
    fmt::print("{}: {} positions x {} vocab float32 ({} mode, {}) -> {}\n", args.model, ids.size(),
               engine->config().n_vocab, args.mode, engine->backend_name(), args.out);
}

std::vector<float> read_floats(const std::string& path, size_t expected, std::string_view what) {
    std::ifstream in(path, std::ios::binary | std::ios::ate);
    if (!in) fail("logits: {} {}: cannot open", what, path);
    const auto bytes = size_t(in.tellg());
    if (bytes != expected * sizeof(float))
        fail("logits: {} {}: {} bytes, expected {} (float32 [canvas][vocab])", what, path, bytes, expected * sizeof(float));
    std::vector<float> values(expected);
    in.seekg(0);
    in.read(reinterpret_cast<char*>(values.data()), std::streamsize(bytes));
    if (!in) fail("logits: {} {}: read failed", what, path);
    return values;
}

// Block diffusion: encode the ids in the mode's chunks, then the decoder's logits (or --dump's
// intermediate of the decoder pass) for the canvas.
void write_canvas_logits(const LogitsArgs& args, const std::vector<int32_t>& ids, const std::vector<size_t>& chunks) {
    if (args.engine.backend == "cuda") fail("logits: --canvas runs on the CPU reference only (--backend cpu)");
    const std::vector<int32_t> canvas = parse_token_ids(args.canvas, "logits: --canvas");
    const Model model = Model::load(args.model);
    if (model.config().arch != Arch::diffusion_gemma)
        fail("logits: --canvas: {} is a {} model, not a block-diffusion one", args.model, model.config().arch_name);
    const DiffusionGemma dg(model);
    const int64_t V = model.config().n_vocab;
    const std::vector<float> sc =
        args.sc_logits.empty() ? std::vector<float>{} : read_floats(args.sc_logits, canvas.size() * size_t(V), "--sc-logits");
    std::vector<float> dumped;
    const ActivationObserver observer = [&](std::string_view name, const float* data, int64_t n) {
        if (name == args.dump) dumped.insert(dumped.end(), data, data + n);
    };
    DiffusionCache cache = dg.new_cache();
    size_t start = 0;
    for (size_t size : chunks) {
        dg.encode(cache, std::span<const int32_t>(ids).subspan(start, size));
        start += size;
    }
    std::vector<float> logits = dg.denoise(cache, canvas, sc, args.dump.empty() ? nullptr : &observer);
    if (!args.dump.empty()) {
        if (dumped.empty())
            fail("logits: --dump {}: the decoder has no intermediate of that name (e.g. blk.0.attn.out, blk.1.out, "
                 "canvas_in)", args.dump);
        logits = std::move(dumped);
    }
    write_floats(args.out, logits);
    fmt::print("{}: {} {} float32 values (canvas of {} after {} ids, {}) -> {}\n", args.model,
               args.dump.empty() ? "logits" : args.dump, logits.size(), canvas.size(), ids.size(),
               sc.empty() ? "no self-conditioning" : "self-conditioned", args.out);
}

void run_logits(const LogitsArgs& args) {
    static_assert(std::endian::native == std::endian::little, "OUT.bin is written as little-endian floats");
    const std::vector<int32_t> ids = parse_token_ids(args.ids, "logits: --ids");
    const std::vector<size_t> chunks = chunk_sizes(args.mode, ids.size());
    if (!args.sc_logits.empty() && args.canvas.empty()) fail("logits: --sc-logits needs --canvas");
    if (!args.canvas.empty()) {
        write_canvas_logits(args, ids, chunks);
        return;
    }
    if (args.dump.empty()) {
        write_engine_logits(args, ids, chunks);
        return;
    }
    // Named intermediates from the CPU reference (models/model.h's observer), or with --backend cuda from the
    // GPU forward pass, which hands out the same names (models/model_cuda.h).
    const bool cuda = args.engine.backend == "cuda";
    if (cuda) make_backend("cuda");  // the reason CUDA is unavailable, before a long load
    const Model model = Model::load(args.model);

    std::vector<float> logits;
    std::vector<float> dumped;
    size_t dump_hits = 0;
    const ActivationObserver observer = [&](std::string_view name, const float* data, int64_t n) {
        if (name != args.dump) return;
        dumped.insert(dumped.end(), data, data + n);
        ++dump_hits;
    };
    // Feeds the chunks to forward(span, observer) of one sequence.
    auto feed = [&](auto&& forward) {
        size_t start = 0;
        for (size_t size : chunks) {
            const std::vector<float> part = forward(std::span<const int32_t>(ids).subspan(start, size), &observer);
            logits.insert(logits.end(), part.begin(), part.end());
            start += size;
        }
    };
    if (cuda) {
#if DELTABIT_HAVE_CUDA
        CudaModel gpu(model);
        CudaSequenceState state = gpu.new_sequence(int64_t(ids.size()), KvFormat::f32);
        feed([&](std::span<const int32_t> part, const ActivationObserver* o) { return gpu.forward(state, part, o); });
#endif
    } else {
        SequenceState state = model.new_sequence();
        feed([&](std::span<const int32_t> part, const ActivationObserver* o) { return model.forward(state, part, o); });
    }
    if (!args.dump.empty()) {
        if (dump_hits == 0)
            fail("logits: --dump {}: no intermediate has that name (names look like blk.0.attn.out, "
                 "blk.1.gdn.conv_out, blk.2.out)",
                 args.dump);
        logits = std::move(dumped);
    }

    write_floats(args.out, logits);
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
    CLI::App* cmd = app.add_subcommand("logits", "Write the logits of a token sequence (float32 [positions][vocab])");
    cmd->add_option("-m,--model", args->model, "GGUF file or Hugging Face folder")->required();
    cmd->add_option("--ids", args->ids, "token ids, comma-separated")->required();
    cmd->add_option("--mode", args->mode, "prompt (one call), steps (one token per call) or split:N")
        ->capture_default_str();
    cmd->add_option("-o,--output", args->out, "output file")->required();
    add_backend_option(*cmd, args->engine);
    cmd->add_option("--dump", args->dump, "write this named intermediate instead of the logits (e.g. blk.0.gdn.out)");
    cmd->add_option("--canvas", args->canvas,
                    "block-diffusion models: denoise these canvas ids after encoding --ids; writes [canvas][vocab]");
    cmd->add_option("--sc-logits", args->sc_logits,
                    "with --canvas: float32 [canvas][vocab] file of the previous step's logits (self-conditioning)");
    cmd->callback([args] { run_logits(*args); });
}

}  // namespace deltabit::cli
