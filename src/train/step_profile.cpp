#include "train/step_profile.h"

#include <fmt/format.h>

#include <algorithm>
#include <vector>

namespace deltabit::train {
namespace {

// How many of the most expensive GEMM shapes the report lists.
constexpr size_t kDetailRows = 16;

struct KindInfo {
    std::string_view name;
    bool host;
};
constexpr std::array<KindInfo, kProfileKinds> kKindInfo = {{
    {"embedding", false},
    {"norms", false},
    {"gemm forward", false},
    {"gemm backward data", false},
    {"gemm backward weight", false},
    {"attention forward", false},
    {"attention backward", false},
    {"delta rule forward", false},
    {"delta rule backward", false},
    {"causal conv", false},
    {"pointwise", false},
    {"zero + copy", false},
    {"lm head loss", false},
    {"qat weights", false},
    {"gradient norm", false},
    {"optimizer", false},
    {"upload (h2d)", false},
    {"cpu reference fwd+bwd", false},
    {"host: data", true},
    {"host: waits at syncs", true},
}};

std::string rate(double amount, double ms, double unit) {
    return amount > 0 && ms > 0 ? fmt::format("{:.1f}", amount / unit / (ms * 1e-3)) : std::string("-");
}
std::string amount(double value, double unit) { return value > 0 ? fmt::format("{:.1f}", value / unit) : "-"; }
// The rate of `value` over `ms` as a percentage of `ceiling` (in units a second); "-" when unknown.
std::string share(double value, double ms, double unit, double ceiling) {
    return ceiling > 0 && value > 0 && ms > 0 ? fmt::format("{:.1f}", 100.0 * value / unit / (ms * 1e-3) / ceiling)
                                              : std::string("-");
}

using NamedTotals = std::map<std::string, ProfileTotals, std::less<>>;
std::vector<const NamedTotals::value_type*> by_time(const NamedTotals& totals) {
    std::vector<const NamedTotals::value_type*> rows;
    for (const auto& entry : totals) rows.push_back(&entry);
    std::stable_sort(rows.begin(), rows.end(), [](auto* a, auto* b) { return a->second.ms > b->second.ms; });
    return rows;
}

}  // namespace

std::string_view profile_kind_name(ProfileKind kind) { return kKindInfo[size_t(kind)].name; }
bool profile_kind_is_host(ProfileKind kind) { return kKindInfo[size_t(kind)].host; }

std::string_view profile_pass_name(ProfilePass pass) {
    constexpr std::array<std::string_view, kProfilePasses> names = {"forward", "recompute", "backward", "update"};
    return names[size_t(pass)];
}

void StepProfile::add(ProfileKind kind, ProfilePass pass, double ms, double flops, double bytes,
                      std::string_view detail) {
    kinds_[size_t(kind)].add(ms, flops, bytes);
    if (!profile_kind_is_host(kind)) passes_[size_t(pass)].add(ms, flops, bytes);
    if (detail.empty()) return;
    auto it = details_.find(detail);
    if (it == details_.end()) it = details_.emplace(std::string(detail), ProfileTotals{}).first;
    it->second.add(ms, flops, bytes);
}

void StepProfile::add_kernel(std::string_view kernel, double ms) {
    auto it = kernels_.find(kernel);
    if (it == kernels_.end()) it = kernels_.emplace(std::string(kernel), ProfileTotals{}).first;
    it->second.add(ms, 0.0, 0.0);
}

const ProfileTotals* StepProfile::kernel(std::string_view name) const {
    const auto it = kernels_.find(name);
    return it == kernels_.end() ? nullptr : &it->second;
}

void StepProfile::end_step(double wall_ms, double device_span_ms) {
    ++steps_;
    wall_ms_ += wall_ms;
    device_span_ms_ += device_span_ms;
}

double StepProfile::device_ms() const {
    double sum = 0.0;
    for (size_t k = 0; k < kProfileKinds; ++k)
        if (!kKindInfo[k].host) sum += kinds_[k].ms;
    return sum;
}

std::string StepProfile::report(std::string_view title, const ProfileCeilings& ceilings, double mfu_flops) const {
    const double n = double(std::max<int64_t>(steps_, 1));
    const double wall = wall_ms_ / n, device = device_ms() / n;
    std::string out = fmt::format("{}\n", title);
    const auto ceiling_note = [&](double value, const char* unit) {
        return value > 0 ? fmt::format("{:.0f} {}", value, unit) : std::string("unknown");
    };
    out += fmt::format("per step, mean of {} step{}; ceilings: {} bf16, {} memory\n", steps_, steps_ == 1 ? "" : "s",
                       ceiling_note(ceilings.tflops, "TFLOP/s"), ceiling_note(ceilings.gbytes_s, "GB/s"));
    const std::string header = fmt::format("{:<24}{:>10}{:>8}{:>10}{:>9}{:>7}{:>9}{:>9}{:>7}{:>9}\n", "kind",
                                           "ms/step", "% step", "GFLOP", "TFLOP/s", "% pk", "GB", "GB/s", "% bw",
                                           "spans");
    out += header;
    out += std::string(header.size() - 1, '-') + "\n";
    std::vector<size_t> order;
    for (size_t k = 0; k < kProfileKinds; ++k)
        if (kinds_[k].spans > 0) order.push_back(k);
    // Device kinds by time, then the host's rows (they overlap the device's time: not in its sum).
    std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) {
        if (kKindInfo[a].host != kKindInfo[b].host) return !kKindInfo[a].host;
        return kinds_[a].ms > kinds_[b].ms;
    });
    bool host_rule = false;
    for (const size_t k : order) {
        const ProfileTotals& t = kinds_[k];
        if (kKindInfo[k].host && !host_rule) {
            out += fmt::format("{:<24}{:>10.2f}{:>8.1f}   (Σ of the kinds above; the host rows below overlap it)\n",
                               "timed total", device, wall > 0 ? 100.0 * device / wall : 0.0);
            host_rule = true;
        }
        const double ms = t.ms / n, flops = t.flops / n, bytes = t.bytes / n;
        out += fmt::format("{:<24}{:>10.2f}{:>8.1f}{:>10}{:>9}{:>7}{:>9}{:>9}{:>7}{:>9}\n", kKindInfo[k].name, ms,
                           wall > 0 ? 100.0 * ms / wall : 0.0, amount(flops, 1e9), rate(flops, ms, 1e12),
                           share(flops, ms, 1e12, ceilings.tflops), amount(bytes, 1e9), rate(bytes, ms, 1e9),
                           share(bytes, ms, 1e9, ceilings.gbytes_s), fmt::format("{:.0f}", double(t.spans) / n));
    }
    if (!host_rule)
        out += fmt::format("{:<24}{:>10.2f}{:>8.1f}   (Σ of the kinds above)\n", "timed total", device,
                           wall > 0 ? 100.0 * device / wall : 0.0);
    out += std::string(header.size() - 1, '-') + "\n";
    double all_flops = 0.0;
    for (size_t k = 0; k < kProfileKinds; ++k)
        if (!kKindInfo[k].host) all_flops += kinds_[k].flops / n;
    out += fmt::format("step wall time (host)   {:>10.2f} ms; {} GFLOP counted above → {} TFLOP/s over the step\n",
                       wall, amount(all_flops, 1e9), rate(all_flops, wall, 1e12));
    if (mfu_flops > 0 && all_flops > 0)
        out += fmt::format("MFU's count             {:>10.1f} GFLOP a step; the spans executed {:.2f}× that\n",
                           mfu_flops / 1e9, all_flops / mfu_flops);
    if (device_span_ms_ > 0) {
        const double span = device_span_ms_ / n, idle = std::max(0.0, span - device);
        out += fmt::format("device span             {:>10.2f} ms from the step's first span to its last; idle between "
                           "spans {:.2f} ms ({:.1f}%)\n",
                           span, idle, span > 0 ? 100.0 * idle / span : 0.0);
    }
    out += fmt::format("not in any span         {:>10.2f} ms ({:.1f}% of the wall: launches, host work, waits)\n",
                       std::max(0.0, wall - device), wall > 0 ? 100.0 * std::max(0.0, wall - device) / wall : 0.0);
    std::string passes;
    const bool split_by_op = passes_[size_t(ProfilePass::forward)].spans > 0;
    for (size_t p = 0; p < kProfilePasses; ++p) {
        if (split_by_op && passes_[p].spans == 0 && ProfilePass(p) == ProfilePass::recompute) {
            passes += ", recompute none";  // the backward read the activations the forward kept
            continue;
        }
        if (passes_[p].spans > 0)
            passes += fmt::format("{}{} {:.2f} ms{}", passes.empty() ? "" : ", ", profile_pass_name(ProfilePass(p)),
                                  passes_[p].ms / n,
                                  passes_[p].flops > 0
                                      ? fmt::format(" ({} TFLOP/s)", rate(passes_[p].flops, passes_[p].ms, 1e12))
                                      : std::string());
    }
    // Only a backend that splits the step by op (the GPU's) has passes worth a line: there the backward
    // re-runs each layer's forward ("recompute") unless the forward kept its activations.
    if (split_by_op) out += "by pass: " + passes + "\n";
    if (!details_.empty()) {
        const auto rows = by_time(details_);
        out += fmt::format("\nGEMM shapes by time ({} of {}; n × in → out as in gemm.h):\n",
                           std::min(kDetailRows, rows.size()), rows.size());
        out += fmt::format("{:<44}{:>10}{:>8}{:>10}{:>9}{:>7}{:>9}\n", "shape", "ms/step", "% step", "GFLOP", "TFLOP/s",
                           "% pk", "calls");
        for (size_t i = 0; i < std::min(kDetailRows, rows.size()); ++i) {
            const ProfileTotals& t = rows[i]->second;
            const double ms = t.ms / n, flops = t.flops / n;
            out += fmt::format("{:<44}{:>10.2f}{:>8.1f}{:>10}{:>9}{:>7}{:>9}\n", rows[i]->first, ms,
                               wall > 0 ? 100.0 * ms / wall : 0.0, amount(flops, 1e9), rate(flops, ms, 1e12),
                               share(flops, ms, 1e12, ceilings.tflops), fmt::format("{:.0f}", double(t.spans) / n));
        }
    }
    if (!kernels_.empty()) {
        const auto rows = by_time(kernels_);
        out += "\nKernels of the multi-kernel ops (inside their kinds' rows above):\n";
        out += fmt::format("{:<44}{:>10}{:>8}{:>9}\n", "kernel", "ms/step", "% step", "calls");
        for (const auto* r : rows)
            out += fmt::format("{:<44}{:>10.2f}{:>8.1f}{:>9}\n", r->first, r->second.ms / n,
                               wall > 0 ? 100.0 * r->second.ms / n / wall : 0.0,
                               fmt::format("{:.0f}", double(r->second.spans) / n));
    }
    return out;
}

}  // namespace deltabit::train
