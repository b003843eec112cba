// Inputs and bounds shared by the CUDA diffusion-step test (test_diffusion_step_cuda.cpp) and its host
// emulation (tests/tools/cuda_emulation_diffusion_step.cpp): logits of hostile kinds, the CPU step of
// runtime/diffusion_step.h run on given uniforms, and the rounding bounds of runtime/diffusion_step_cuda.h,
// derived here once.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <random>
#include <span>
#include <string>
#include <vector>

#include "runtime/diffusion_step.h"

namespace deltabit::test {

enum class LogitKind {
    random,      // normal(0, 3): entropies near log V, only the lowest accepted
    peaked,      // noise plus one spike per row, spike heights spread so entropies range from ~0 to large
    ties,        // integers in {0, 1, 2}: many equal maxima (argmax ties) and identical rows (entropy ties)
    one_hot,     // 0 at one token, −1000 elsewhere: exp underflows, p = 1 exactly, entropy exactly 0
    equal_rows,  // every row the same: all entropies tie, acceptance is a prefix of positions
};

inline const char* logit_kind_name(LogitKind k) {
    switch (k) {
        case LogitKind::random: return "random";
        case LogitKind::peaked: return "peaked";
        case LogitKind::ties: return "ties";
        case LogitKind::one_hot: return "one_hot";
        case LogitKind::equal_rows: return "equal_rows";
    }
    return "?";
}

inline std::vector<float> diffusion_logits(int64_t L, int64_t V, LogitKind kind, uint64_t seed) {
    std::mt19937_64 rng(seed);
    std::normal_distribution<float> normal(0.0f, 1.0f);
    std::vector<float> x(size_t(L * V));
    for (int64_t r = 0; r < L; ++r) {
        float* row = x.data() + r * V;
        const int64_t hot = int64_t(rng() % uint64_t(V));
        for (int64_t v = 0; v < V; ++v) {
            switch (kind) {
                case LogitKind::random: row[v] = 3.0f * normal(rng); break;
                case LogitKind::peaked: row[v] = normal(rng); break;
                case LogitKind::ties: row[v] = float(rng() % 3); break;
                case LogitKind::one_hot: row[v] = v == hot ? 0.0f : -1000.0f; break;
                case LogitKind::equal_rows: row[v] = r == 0 ? 3.0f * normal(rng) : x[size_t(v)]; break;
            }
        }
        // Spikes from 8 to 8 + 4·log V above the noise: entropies from ~log V down to ~1e-6.
        if (kind == LogitKind::peaked) row[hot] = 8.0f + 4.0f * std::log(float(V)) * float(r % 11) / 10.0f;
        // Rows 1 and 2 repeat row 0: identical rows give identical entropies on either backend.
        if (kind == LogitKind::ties && r > 0 && r < 3) std::copy(x.begin(), x.begin() + V, row);
    }
    return x;
}

constexpr double kUnitRoundoff = 0x1p-53;

// |H_gpu − H_cpu| for one row. Both sides compute the same terms; they differ by (a) exp and log, each
// within 1 ulp on either side, and (b) the order of the sums. log Σ: the sum of V positive terms in any
// order is within (V − 1)·u relative of the exact sum, so the two sides' denominators differ by at most
// 2V·u relatively (plus 2u from the exp of each term), and log Σ by that much absolutely (plus its own
// ulp, ≤ u·|log V| ≤ u·V). Each log p then moves by δ ≤ 3V·u, each p by δ relatively, and each term
// p·log p by p·|1 + log p|·δ plus 3u of its own rounding: Σ over terms ≤ δ·(1 + H) + 3u·H. The two
// sums of the terms differ by at most 2V·u·H. Total ≤ (3V + 3 + 2V)·u·(1 + H) ≤ 8·V·u·(1 + H) for V ≥ 1.
inline double entropy_tolerance(int64_t V, double h) { return 8.0 * double(V) * kUnitRoundoff * (1.0 + h); }

// The largest |H_gpu − H_cpu| over a row set with entropies at most `h_max`.
inline double entropy_tolerance_max(int64_t V, std::span<const double> entropy) {
    double h_max = 0.0;
    for (double h : entropy) h_max = std::max(h_max, h);
    return entropy_tolerance(V, h_max);
}

// A categorical pick that differs from the CPU's is a rounding difference, not a bug, when u·Σp lies within
// the sums' rounding of a running-sum boundary between the two picks. The GPU's float p may be one float
// ulp from the host's (its double exp may round to the neighbouring double, and the float rounding of the
// two neighbours may differ): Σ_v ulp(p_v) ≤ 2^-23·Σp; the two orders of the double running sums differ
// by ≤ 2·V·u·Σp, and u·Σp by as much again through Σp: ≤ Σp·(2^-23 + 4·V·u).
inline bool pick_within_rounding(std::span<const float> p, double unit, int32_t cpu, int32_t gpu) {
    double total = 0.0;
    for (float q : p) total += q;
    const double u = unit * total;
    const double tolerance = total * (0x1p-23 + 4.0 * double(p.size()) * kUnitRoundoff);
    const int32_t lo = std::min(cpu, gpu), hi = std::max(cpu, gpu);
    double acc = 0.0;
    for (int32_t v = 0; v < hi; ++v) {
        acc += p[size_t(v)];
        if (v >= lo && std::abs(acc - u) <= tolerance) return true;
    }
    return false;
}

// A row whose every other scaled logit is more than 750 below its maximum: each exp(x − max) is below
// 2^-1080 and rounds to 0 on either backend, so p is exactly one-hot and the entropy exactly 0 on both.
inline bool exactly_one_hot(std::span<const float> row) {
    const float max = *std::max_element(row.begin(), row.end());
    int64_t near = 0;
    for (float x : row) near += double(x) - double(max) > -750.0;
    return near == 1;
}

// Whether accepted_positions gives the same set on entropies each moved by at most `tolerance`. The set is
// the k lowest-ranked positions, k = how many sums S_j of the j lowest entropies (j = 0 .. L − 1) are ≤ the
// bound; each S_j moves by at most j·tolerance (plus its rounding), so k holds when every S_j is farther
// than that from the bound. The order inside the set does not matter (near-zero entropies may rank
// differently on the two backends: their log Σ differs by rounding); only the cut does: the k-th and
// (k+1)-th lowest must be more than 2·tolerance apart, or equal on either backend by construction
// (bit-identical rows of `scaled` [L][V]: the same code on the same bits; or two exactly one-hot rows).
inline bool acceptance_is_decided(std::span<const double> entropy, std::span<const float> scaled, int64_t V,
                                  double bound, double tolerance) {
    std::vector<size_t> order(entropy.size());
    for (size_t i = 0; i < order.size(); ++i) order[i] = i;
    std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) { return entropy[a] < entropy[b]; });
    const auto row = [&](size_t r) { return scaled.subspan(r * size_t(V), size_t(V)); };
    const auto equal_by_construction = [&](size_t a, size_t b) {
        return std::ranges::equal(row(a), row(b)) || (exactly_one_hot(row(a)) && exactly_one_hot(row(b)));
    };
    double before = 0.0;  // S_j
    size_t k = 0;
    for (size_t j = 0; j < order.size(); ++j) {
        const double margin = double(j) * tolerance + double(j) * kUnitRoundoff * before;
        if (std::abs(before - bound) <= margin) return false;
        k += before <= bound;
        before += entropy[order[j]];
    }
    if (k == 0 || k == order.size()) return true;
    const size_t last_in = order[k - 1], first_out = order[k];
    return entropy[first_out] - entropy[last_in] > 2.0 * tolerance || equal_by_construction(last_in, first_out);
}

// Whether the mean entropy is farther than the entropy tolerance from the confidence threshold.
inline bool confidence_is_decided(std::span<const double> entropy, double threshold, double tolerance) {
    return std::abs(mean_entropy(entropy) - threshold) > tolerance + double(entropy.size()) * kUnitRoundoff * threshold;
}

// The CPU step on given uniforms: what runtime/diffusion_generate.cpp computes for one step.
struct CpuStep {
    DiffusionStepStats stats;
    std::vector<int32_t> sampled, noise, canvas;
    std::vector<uint8_t> accepted;
};

inline CpuStep cpu_step(std::span<const float> logits, int64_t L, int64_t V, float temperature,
                        std::span<const double> units, double entropy_bound) {
    CpuStep s;
    s.stats = scale_and_measure(logits, L, V, temperature);
    s.sampled.resize(size_t(L));
    s.noise.resize(size_t(L));
    s.canvas.resize(size_t(L));
    for (int64_t r = 0; r < L; ++r)
        s.sampled[size_t(r)] = categorical_pick(std::span<const float>(s.stats.probs).subspan(size_t(r * V), size_t(V)),
                                                units[size_t(r)]);
    s.accepted = accepted_positions(s.stats.entropy, entropy_bound);
    for (int64_t i = 0; i < L; ++i) {
        s.noise[size_t(i)] = uniform_token(units[size_t(L + i)], V);
        s.canvas[size_t(i)] = s.accepted[size_t(i)] ? s.sampled[size_t(i)] : s.noise[size_t(i)];
    }
    return s;
}

}  // namespace deltabit::test
