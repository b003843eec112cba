#include "train/activation_plan.h"

#include "core/error.h"

#include <fmt/format.h>

namespace deltabit::train {
namespace {

double gib(int64_t bytes) { return double(bytes) / double(int64_t(1) << 30); }
// GiB with `digits` decimals, or MiB below one GiB (a small model's few MiB would read "0.00 GiB").
std::string size_text(int64_t bytes, int digits) {
    if (bytes < int64_t(1) << 30) return fmt::format("{:.1f} MiB", double(bytes) / double(1 << 20));
    return fmt::format("{:.{}f} GiB", gib(bytes), digits);
}

}  // namespace

ActivationChoice choose_activations(std::string_view setting, const ActivationMemory& m, std::string_view source) {
    const int64_t needed = m.kept_bytes + m.other_bytes;
    const bool fits = double(needed) <= kKeepActivationsShare * double(m.free_bytes);
    const int share = int(100.0 * kKeepActivationsShare + 0.5);
    if (setting == "keep" && !fits)
        fail("train: {}: run.activations = keep: every layer's activations take {} and the step's other buffers "
             "{}, more than {}% of the {} free on the GPU; set run.activations = \"auto\" or \"recompute\"",
             source, size_text(m.kept_bytes, 1), size_text(m.other_bytes, 1), share, size_text(m.free_bytes, 1));
    ActivationChoice choice;
    choice.keep = setting == "keep" || (setting == "auto" && fits);
    if (choice.keep)
        choice.summary = fmt::format(
            "activations kept for the backward: {} for {} layers (run.activations = {}; with the step's other "
            "buffers {} of the {} free)",
            size_text(m.kept_bytes, 2), m.layers, setting, size_text(needed, 1), size_text(m.free_bytes, 1));
    else if (setting == "auto")
        choice.summary = fmt::format(
            "activations recomputed in the backward (run.activations = auto: keeping them takes {}, with the step's "
            "other buffers {}, more than {}% of the {} free)",
            size_text(m.kept_bytes, 2), size_text(needed, 1), share, size_text(m.free_bytes, 1));
    else
        choice.summary = fmt::format(
            "activations recomputed in the backward (run.activations = {}; keeping them would take {})", setting,
            size_text(m.kept_bytes, 2));
    return choice;
}

}  // namespace deltabit::train
