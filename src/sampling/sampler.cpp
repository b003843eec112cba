#include "sampling/sampler.h"

#include "sampling/dry.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <unordered_map>

namespace deltabit {

Sampler::Sampler(const SamplingParams& params) : params_(params), rng_(params.seed) {}

int32_t argmax_lowest_id(std::span<const float> logits) {
    int32_t best = 0;
    for (size_t i = 1; i < logits.size(); ++i) {
        if (logits[i] > logits[size_t(best)]) best = int32_t(i);
    }
    return best;
}

void apply_penalties(std::vector<float>& logits, const TokenHistory& history, const SamplingParams& params) {
    const bool any = params.repeat_penalty != 1.0f || params.presence_penalty != 0.0f ||
                     params.frequency_penalty != 0.0f;
    if (!any || params.penalty_last_n == 0 || history.tokens.empty()) return;
    const size_t n = history.tokens.size();
    const size_t last_n = params.penalty_last_n < 0 ? n : std::min(n, size_t(params.penalty_last_n));
    std::unordered_map<int32_t, int> counts;
    for (size_t i = n - last_n; i < n; ++i) ++counts[history.tokens[i]];
    for (const auto& [token, count] : counts) {
        if (token < 0 || size_t(token) >= logits.size()) continue;
        float& logit = logits[size_t(token)];
        logit = logit > 0.0f ? logit / params.repeat_penalty : logit * params.repeat_penalty;
        logit -= params.presence_penalty + params.frequency_penalty * float(count);
    }
}

void apply_dry(std::vector<float>& logits, const TokenHistory& history, const SamplingParams& params) {
    if (params.dry_multiplier == 0.0f || params.dry_allowed_length < 1) return;
    for (const DryMatch& match : dry_find_repeats(history.tokens, history.generated, params.dry_window,
                                                  params.dry_allowed_length)) {
        if (match.token < 0 || size_t(match.token) >= logits.size()) continue;
        const float penalty =
            params.dry_multiplier * std::pow(params.dry_base, float(match.length - params.dry_allowed_length));
        logits[size_t(match.token)] -= penalty;
    }
}

std::vector<LogitAdjustment> logit_adjustments(const TokenHistory& history, const SamplingParams& params,
                                               size_t n_vocab) {
    std::vector<LogitAdjustment> out;
    auto entry = [&](int32_t token) -> LogitAdjustment& {  // `out` stays sorted by token
        auto it = std::lower_bound(out.begin(), out.end(), token,
                                   [](const LogitAdjustment& a, int32_t t) { return a.token < t; });
        if (it == out.end() || it->token != token) it = out.insert(it, LogitAdjustment{token, false, false, 0.0f, 0.0f});
        return *it;
    };
    // Mirrors apply_penalties: same window, same count, same float expression.
    const bool any = params.repeat_penalty != 1.0f || params.presence_penalty != 0.0f ||
                     params.frequency_penalty != 0.0f;
    if (any && params.penalty_last_n != 0 && !history.tokens.empty()) {
        const size_t n = history.tokens.size();
        const size_t last_n = params.penalty_last_n < 0 ? n : std::min(n, size_t(params.penalty_last_n));
        std::unordered_map<int32_t, int> counts;
        for (size_t i = n - last_n; i < n; ++i) ++counts[history.tokens[i]];
        for (const auto& [token, count] : counts) {
            if (token < 0 || size_t(token) >= n_vocab) continue;
            LogitAdjustment& a = entry(token);
            a.penalised = true;
            a.penalty = params.presence_penalty + params.frequency_penalty * float(count);
        }
    }
    // Mirrors apply_dry.
    if (params.dry_multiplier != 0.0f && params.dry_allowed_length >= 1) {
        for (const DryMatch& match : dry_find_repeats(history.tokens, history.generated, params.dry_window,
                                                      params.dry_allowed_length)) {
            if (match.token < 0 || size_t(match.token) >= n_vocab) continue;
            LogitAdjustment& a = entry(match.token);
            a.dried = true;
            a.dry = params.dry_multiplier * std::pow(params.dry_base, float(match.length - params.dry_allowed_length));
        }
    }
    return out;
}

float apply_logit_adjustment(float logit, const LogitAdjustment& adjustment, float repeat_penalty) {
    if (adjustment.penalised) {
        logit = logit > 0.0f ? logit / repeat_penalty : logit * repeat_penalty;
        logit -= adjustment.penalty;
    }
    if (adjustment.dried) logit -= adjustment.dry;
    return logit;
}

std::vector<Candidate> Sampler::candidates(std::span<const float> raw_logits, const TokenHistory& history) const {
    std::vector<float> logits(raw_logits.begin(), raw_logits.end());
    apply_penalties(logits, history, params_);
    apply_dry(logits, history, params_);

    std::vector<Candidate> kept;
    if (params_.temperature <= 0.0f) {  // greedy: one candidate
        const int32_t best = argmax_lowest_id(logits);
        kept.push_back({best, logits[size_t(best)]});
        return kept;
    }
    kept.reserve(logits.size());
    for (size_t i = 0; i < logits.size(); ++i) {
        if (std::isnan(logits[i]) || logits[i] == -std::numeric_limits<float>::infinity()) continue;
        kept.push_back({int32_t(i), logits[i] / params_.temperature});
    }
    std::sort(kept.begin(), kept.end(), [](const Candidate& a, const Candidate& b) {
        return a.logit != b.logit ? a.logit > b.logit : a.token < b.token;
    });
    if (kept.empty()) return kept;

    if (params_.top_k > 0 && size_t(params_.top_k) < kept.size()) kept.resize(size_t(params_.top_k));

    if (params_.top_p < 1.0f) {
        // Smallest prefix whose probability mass reaches top_p (probabilities over what top-k left).
        const double max_logit = kept.front().logit;
        double total = 0.0;
        for (const Candidate& c : kept) total += std::exp(double(c.logit) - max_logit);
        double mass = 0.0;
        size_t keep = kept.size();
        for (size_t i = 0; i < kept.size(); ++i) {
            mass += std::exp(double(kept[i].logit) - max_logit) / total;
            if (mass >= double(params_.top_p)) {
                keep = i + 1;
                break;
            }
        }
        kept.resize(keep);
    }

    if (params_.min_p > 0.0f) {
        // min-p as a logit threshold: p ≥ min_p·p_max  ⇔  logit ≥ max + ln(min_p).
        const float threshold = kept.front().logit + std::log(params_.min_p);
        size_t keep = 1;
        while (keep < kept.size() && kept[keep].logit >= threshold) ++keep;
        kept.resize(keep);
    }
    return kept;
}

int32_t Sampler::sample(std::span<const float> logits, const TokenHistory& history) {
    const std::vector<Candidate> kept = candidates(logits, history);
    if (kept.empty()) return argmax_lowest_id(logits);  // every logit was NaN or −inf
    if (kept.size() == 1) return kept.front().token;
    const double max_logit = kept.front().logit;
    std::vector<double> weights(kept.size());
    double total = 0.0;
    for (size_t i = 0; i < kept.size(); ++i) {
        weights[i] = std::exp(double(kept[i].logit) - max_logit);
        total += weights[i];
    }
    // Inverse-CDF draw over the candidates in their sorted order.
    const double target = rng_.next_unit() * total;
    double cumulative = 0.0;
    for (size_t i = 0; i < kept.size(); ++i) {
        cumulative += weights[i];
        if (target < cumulative) return kept[i].token;
    }
    return kept.back().token;
}

}  // namespace deltabit
