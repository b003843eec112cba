#include "train/activation_plan.h"

#include "core/error.h"

#include <fmt/format.h>

namespace deltabit::train {
namespace {

double gib(int64_t bytes) { return double(bytes) / double(int64_t(1) << 30); }

}  // namespace

ActivationChoice choose_activations(std::string_view setting, const ActivationMemory& m, std::string_view source) {
    const int64_t needed = m.kept_bytes + m.other_bytes;
    const bool fits = double(needed) <= kKeepActivationsShare * double(m.free_bytes);
    const int share = int(100.0 * kKeepActivationsShare + 0.5);
    if (setting == "keep" && !fits)
        fail("train: {}: run.activations = keep: every layer's activations take {:.1f} GiB and the step's other "
             "buffers {:.1f} GiB, more than {}% of the {:.1f} GiB free on the GPU; set run.activations = \"auto\" or "
             "\"recompute\"",
             source, gib(m.kept_bytes), gib(m.other_bytes), share, gib(m.free_bytes));
    ActivationChoice choice;
    choice.keep = setting == "keep" || (setting == "auto" && fits);
    if (choice.keep)
        choice.summary = fmt::format(
            "activations kept for the backward: {:.2f} GiB for {} layers (run.activations = {}; with the step's "
            "other buffers {:.1f} GiB of the {:.1f} GiB free)",
            gib(m.kept_bytes), m.layers, setting, gib(needed), gib(m.free_bytes));
    else if (setting == "auto")
        choice.summary = fmt::format(
            "activations recomputed in the backward (run.activations = auto: keeping them takes {:.2f} GiB, with the "
            "step's other buffers {:.1f} GiB, more than {}% of the {:.1f} GiB free)",
            gib(m.kept_bytes), gib(needed), share, gib(m.free_bytes));
    else
        choice.summary = fmt::format(
            "activations recomputed in the backward (run.activations = {}; keeping them would take {:.2f} GiB)",
            setting, gib(m.kept_bytes));
    return choice;
}

}  // namespace deltabit::train
