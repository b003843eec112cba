#include "runtime/diffusion_replay.h"

#include "core/error.h"

#include <fmt/format.h>

#include <algorithm>

namespace deltabit {

namespace {

// The record's draws in the loop's order (runtime/diffusion_generate.h): a block's canvas (its step 1
// canvas), then per step the samples and the noise. Past the record's end it hands out zeros; the step
// callback reports the overrun before anything uses them twice.
class RecordedDraws : public DiffusionRandomness {
public:
    explicit RecordedDraws(const std::vector<DiffusionRecordStep>& steps) : steps_(steps) {}

    void uniform_tokens(int64_t, std::span<int32_t> out) override {
        if (in_step_) {
            copy(&DiffusionRecordStep::noise, out);
            in_step_ = false;
        } else {
            copy(&DiffusionRecordStep::canvas, out);
        }
    }
    void sample(std::span<const float>, int64_t, std::span<int32_t> out) override {
        copy(&DiffusionRecordStep::sampled, out);
        in_step_ = true;
    }
    void advance() { ++next_; }

private:
    void copy(std::vector<int32_t> DiffusionRecordStep::*field, std::span<int32_t> out) const {
        if (next_ < steps_.size()) std::copy((steps_[next_].*field).begin(), (steps_[next_].*field).end(), out.begin());
        else std::fill(out.begin(), out.end(), 0);
    }
    const std::vector<DiffusionRecordStep>& steps_;
    size_t next_ = 0;
    bool in_step_ = false;
};

template <typename T>
std::optional<std::string> first_difference(std::string_view what, std::span<const T> recorded, std::span<const T> replayed) {
    for (size_t i = 0; i < recorded.size(); ++i)
        if (recorded[i] != replayed[i])
            return fmt::format("{} differs at position {} (recorded {}, replayed {})", what, i, int64_t(recorded[i]),
                               int64_t(replayed[i]));
    return std::nullopt;
}

// What differs between the record's step and the replay's, or nothing; in the order the step computes
// them, so the first named is the cause of the rest.
std::optional<std::string> compare_step(const DiffusionRecordStep& r, const DiffusionStep& s, bool compare_draws) {
    if (r.block != s.block || r.step != s.step)
        return fmt::format("the replay is at block {} step {} where the record has block {} step {} (a block "
                           "stopped early in one of them only)",
                           s.block, s.step, r.block, r.step);
    if (auto d = first_difference<int32_t>("the canvas", r.canvas, s.canvas)) return d;
    const uint64_t hash = diffusion_logits_hash(s.logits);
    if (hash != r.logits_xxh3)
        return fmt::format("the decoder's logits differ (XXH3 recorded {:016x}, replayed {:016x})", r.logits_xxh3, hash);
    if (auto d = first_difference<int32_t>("the argmax", r.argmax, s.argmax)) return d;
    if (compare_draws)
        if (auto d = first_difference<int32_t>("the sample", r.sampled, s.sampled)) return d;
    if (auto d = first_difference<uint8_t>("acceptance", r.accepted, s.accepted)) return d;
    if (compare_draws)
        if (auto d = first_difference<int32_t>("the noise", r.noise, s.noise)) return d;
    return std::nullopt;
}

}  // namespace

void check_replayable(const DiffusionRecord& record, const ModelConfig& c, const std::string& fingerprint,
                      const std::string& backend, const std::string& name) {
    if (record.fingerprint != fingerprint)
        fail("replay: {} was recorded with another model (fingerprint {}; this model is {})", name, record.fingerprint,
             fingerprint);
    if (record.backend != backend)
        fail("replay: {} was recorded on {}; a record replays on the backend it was made on, and this is {}", name,
             record.backend, backend);
    if (record.canvas_length != c.canvas_length || record.n_vocab != c.n_vocab)
        fail("replay: {}: canvas {} and vocabulary {}; the model has {} and {}", name, record.canvas_length,
             record.n_vocab, c.canvas_length, c.n_vocab);
    for (int32_t id : record.prompt)
        if (id < 0 || id >= c.n_vocab) fail("replay: {}: prompt token {} is outside the vocabulary", name, id);
}

DiffusionReplayCheck::DiffusionReplayCheck(const DiffusionRecord& record, bool compare_draws)
    : record_(record), compare_draws_(compare_draws) {}

void DiffusionReplayCheck::differ(int64_t block, int64_t step, std::string what) {
    result_.difference = DiffusionDifference{.index = int64_t(next_) + 1, .block = block, .step = step, .what = std::move(what)};
}

bool DiffusionReplayCheck::step(const DiffusionStep& s) {
    if (next_ >= record_.steps.size()) {
        differ(s.block, s.step, fmt::format("the replay runs past the record's last step ({})", record_.steps.size()));
        return false;
    }
    if (std::optional<std::string> what = compare_step(record_.steps[next_], s, compare_draws_)) {
        differ(s.block, s.step, std::move(*what));
        return false;
    }
    ++next_;
    ++result_.steps_replayed;
    return true;
}

DiffusionReplayResult DiffusionReplayCheck::finish(const DiffusionGeneration& got) {
    if (result_.difference) return result_;
    if (next_ < record_.steps.size()) {
        const DiffusionRecordStep& r = record_.steps[next_];
        differ(r.block, r.step, fmt::format("the replay ended after {} steps; the record has {}", next_, record_.steps.size()));
    } else if (got.tokens != record_.tokens || got.steps_per_block != record_.steps_per_block) {
        const DiffusionRecordStep& r = record_.steps.back();
        next_ = record_.steps.size() - 1;
        differ(r.block, r.step, "every step matches, but the committed tokens differ (the record's header was edited?)");
    }
    return result_;
}

DiffusionReplayResult replay_diffusion(const DiffusionGemma& model, const DiffusionRecord& record) {
    RecordedDraws draws(record.steps);
    DiffusionReplayCheck check(record, /*compare_draws=*/false);  // the draws are the record's own
    const DiffusionStepCallback on_step = [&](const DiffusionStep& s) {
        if (!check.step(s)) return false;
        draws.advance();
        return true;
    };
    return check.finish(generate_diffusion(model, record.prompt, record.settings, draws, {}, {}, on_step));
}

}  // namespace deltabit
