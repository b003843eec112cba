// `deltabit replay FILE [-m MODEL] [--json]`: re-runs a block-diffusion run recorded by
// `deltabit run --record FILE` (runtime/diffusion_record.h, docs/replay.md) and says whether every step
// came out the same, bit for bit — "identical: N steps" — or names the first step that differs.
// MODEL defaults to the path the record was made with; the record's model fingerprint must match it. It
// replays on the backend it was recorded on (cpu, or cuda: that needs a CUDA build and a GPU).
// Exit status: 0 identical, 1 an error (a bad record, another model), 2 a difference.
#include "backend/backend.h"
#include "cli/commands.h"
#include "core/error.h"
#include "models/diffusion_gemma.h"
#include "models/model.h"
#include "models/model_fingerprint.h"
#include "runtime/diffusion_record.h"
#include "runtime/diffusion_replay.h"

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>

namespace deltabit::cli {
namespace {

struct ReplayArgs {
    std::string record;
    std::string model;
    bool json = false;
};

// The exit status of a replay that ran and found a difference: not an error in the command (1).
constexpr int kDifferentExit = 2;

void run_replay(const ReplayArgs& args) {
    const DiffusionRecord record = read_diffusion_record(args.record);
    const std::string model_path = args.model.empty() ? record.model_path : args.model;
    const Model model = Model::load(model_path);
    if (model.config().arch != Arch::diffusion_gemma)
        fail("replay: {} is a {} model; records are of block-diffusion runs", model_path, model.config().arch_name);
    // The backend the record was made on, when this build and machine have it: anything else is refused
    // below as recorded elsewhere.
    if (record.backend == "cuda" && !cuda_backend_available())
        fail("replay: {} was recorded on cuda; a record replays on the backend it was made on, and {}", args.record,
#if DELTABIT_HAVE_CUDA
             "this machine has no CUDA device"
#else
             "this build has no CUDA"
#endif
        );
    const std::string backend = record.backend == "cuda" ? "cuda" : "cpu";
    check_replayable(record, model.config(), model_fingerprint(model.weights()), backend, args.record);

    DiffusionReplayResult result;
    try {
        if (backend == "cuda") {
            result = replay_diffusion_cuda(model, record);
        } else {
            const DiffusionGemma diffusion(model);
            result = replay_diffusion(diffusion, record);
        }
    } catch (const Error& e) {  // settings or tokens the loop refuses: the record's header was edited
        fail("replay: {}: {}", args.record, e.what());
    }
    if (args.json) {
        nlohmann::ordered_json out;
        out["record"] = args.record;
        out["model"] = model_path;
        out["backend"] = backend;
        out["steps"] = record.steps.size();
        out["identical"] = !result.difference;
        out["steps_replayed"] = result.steps_replayed;
        if (result.difference)
            out["first_difference"] = {{"step", result.difference->index},
                                       {"block", result.difference->block},
                                       {"block_step", result.difference->step},
                                       {"what", result.difference->what}};
        fmt::print("{}\n", out.dump());
    } else if (!result.difference) {
        fmt::print("identical: {} steps\n", result.steps_replayed);
    } else {
        const DiffusionDifference& d = *result.difference;
        fmt::print("differs at step {} (block {}, denoising step {}): {}; the {} steps before it are identical\n",
                   d.index, d.block, d.step, d.what, result.steps_replayed);
    }
    if (result.difference) {
        std::fflush(stdout);
        std::exit(kDifferentExit);
    }
}

}  // namespace

void add_replay_command(CLI::App& app) {
    auto args = std::make_shared<ReplayArgs>();
    CLI::App* cmd = app.add_subcommand("replay", "Re-run a recorded block-diffusion run on the backend it ran on and find the first step that differs");
    cmd->add_option("record", args->record, "FILE written by `deltabit run --record FILE`")->required();
    cmd->add_option("-m,--model", args->model, "the model to replay on (default: the path in the record)");
    cmd->add_flag("--json", args->json, "print one JSON object");
    cmd->callback([args] { run_replay(*args); });
}

}  // namespace deltabit::cli
