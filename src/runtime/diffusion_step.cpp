#include "runtime/diffusion_step.h"

#include <algorithm>
#include <cmath>
#include <numeric>

namespace deltabit {

DiffusionStepStats scale_and_measure(std::span<const float> logits, int64_t L, int64_t V, float temperature) {
    DiffusionStepStats s;
    s.scaled.resize(logits.size());
    s.probs.resize(logits.size());
    s.entropy.resize(size_t(L));
    s.argmax.resize(size_t(L));
    // torch divides the fp32 logits by the fp32 temperature tensor element by element.
    for (size_t i = 0; i < logits.size(); ++i) s.scaled[i] = logits[i] / temperature;
    for (int64_t r = 0; r < L; ++r) {
        const float* x = s.scaled.data() + r * V;
        const int64_t best = std::max_element(x, x + V) - x;  // first of equal maxima, as torch.argmax
        s.argmax[size_t(r)] = int32_t(best);
        double denom = 0.0;
        for (int64_t v = 0; v < V; ++v) denom += std::exp(double(x[v]) - double(x[best]));
        const double log_denom = std::log(denom);
        double h = 0.0;
        for (int64_t v = 0; v < V; ++v) {
            const double log_p = double(x[v]) - double(x[best]) - log_denom;
            const double p = std::exp(log_p);
            s.probs[size_t(r * V + v)] = float(p);
            if (p > 0.0) h -= p * log_p;
        }
        s.entropy[size_t(r)] = h;
    }
    return s;
}

std::vector<uint8_t> accepted_positions(std::span<const double> entropy, double bound) {
    std::vector<size_t> order(entropy.size());
    std::iota(order.begin(), order.end(), size_t(0));
    std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) { return entropy[a] < entropy[b]; });
    std::vector<uint8_t> accepted(entropy.size(), 0);
    double before = 0.0;  // the sum of strictly lower-ranked entropies
    for (size_t j = 0; j < order.size(); ++j) {
        accepted[order[j]] = uint8_t(before <= bound);
        before += entropy[order[j]];
    }
    return accepted;
}

int32_t categorical_pick(std::span<const float> p, double unit) {
    const int64_t V = int64_t(p.size());
    double total = 0.0;
    for (int64_t v = 0; v < V; ++v) total += p[size_t(v)];
    const double u = unit * total;
    double acc = 0.0;
    int64_t pick = V - 1;
    for (int64_t v = 0; v < V; ++v) {
        acc += p[size_t(v)];
        if (u < acc && p[size_t(v)] > 0.0f) {
            pick = v;
            break;
        }
    }
    while (pick > 0 && p[size_t(pick)] == 0.0f) --pick;  // never a zero-probability token from rounding at the end
    return int32_t(pick);
}

double mean_entropy(std::span<const double> entropy) {
    double sum = 0.0;
    for (double h : entropy) sum += h;
    return sum / double(entropy.size());
}

DiffusionStopRule::DiffusionStopRule(int64_t stability_threshold, int64_t canvas_length, double confidence_threshold)
    : history_(size_t(stability_threshold), std::vector<int32_t>(size_t(canvas_length), -1)),
      confidence_threshold_(confidence_threshold) {}

bool DiffusionStopRule::finished(std::span<const int32_t> argmax, std::span<const double> entropy) const {
    bool stable = true;
    for (const std::vector<int32_t>& old : history_) stable = stable && std::ranges::equal(old, argmax);
    return stable && mean_entropy(entropy) < confidence_threshold_;
}

void DiffusionStopRule::record(std::span<const int32_t> argmax) {
    if (history_.empty()) return;
    history_.pop_front();
    history_.emplace_back(argmax.begin(), argmax.end());
}

bool apply_eos_and_pad(std::span<int32_t> committed, std::span<const int64_t> eos_ids, int64_t pad_id) {
    bool has_eos = false;
    for (int32_t& token : committed) {
        const bool eos = std::find(eos_ids.begin(), eos_ids.end(), int64_t(token)) != eos_ids.end();
        if (has_eos && pad_id >= 0) token = int32_t(pad_id);  // after the first EOS
        has_eos = has_eos || eos;
    }
    return has_eos;
}

}  // namespace deltabit
