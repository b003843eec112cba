// Helpers for the engine, session and snapshot tests: the fixtures as engines, an engine wrapper that
// records what a session asked of it, and an independent replay that recomputes those logits.
#pragma once

#include "backend/backend.h"
#include "core/error.h"
#include "models/model.h"
#include "runtime/engine.h"
#include "runtime/generate.h"

#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <functional>
#include <memory>
#include <random>
#include <string>
#include <vector>

namespace deltabit::test {

inline std::filesystem::path fixture_path(const std::string& name) {
    return std::filesystem::path(DELTABIT_SOURCE_DIR) / "tests" / "fixtures" / name;
}

inline constexpr KvFormat kAllKvFormats[] = {KvFormat::f32, KvFormat::f16, KvFormat::kivi4};

// The session and snapshot tests run on every backend this machine has; the CUDA cases skip elsewhere.
enum class Backend { cpu, cuda };
inline constexpr Backend kAllBackends[] = {Backend::cpu, Backend::cuda};
inline std::string backend_label(Backend b) { return b == Backend::cpu ? "cpu" : "cuda"; }

// An engine over `model` on `backend`, or nullptr when this build or machine has no CUDA (skip then).
inline std::unique_ptr<Engine> make_engine(std::shared_ptr<const Model> model, Backend backend) {
    if (backend == Backend::cpu) return make_cpu_engine(std::move(model));
    if (!cuda_backend_available()) return nullptr;
    return make_cuda_engine(std::move(model));
}

inline std::shared_ptr<const Model> load_model(const std::string& fixture) {
    return std::make_shared<const Model>(Model::load(fixture_path(fixture)));
}

// The same tensors under a copy of the config with other EOS ids: the fixtures' metadata has none, and
// EOS ids must come from a model's own config (runtime/generate.h). `base` must outlive the result.
inline std::shared_ptr<const Model> with_eos(const Model& base, std::vector<int64_t> eos_ids) {
    ModelConfig config = base.config();
    config.eos_ids = std::move(eos_ids);
    ModelWeights weights(config, base.weights().source() + " (test EOS)");
    for (const auto& [name, tensor] : base.weights().tensors()) weights.add(tensor);
    return std::make_shared<const Model>(std::move(weights));
}

// The message of the deltabit::Error `f` throws, or "(no error)".
inline std::string message_of(const std::function<void()>& f) {
    try {
        f();
    } catch (const Error& e) {
        return e.what();
    }
    return "(no error)";
}

inline bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
    return a.size() == b.size() && (a.empty() || std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0);
}

inline std::vector<int32_t> random_tokens(size_t n, uint32_t seed) {
    std::mt19937 rng(seed);
    std::vector<int32_t> ids(n);
    for (int32_t& id : ids) id = int32_t(rng() % 256);
    return ids;
}

inline GenerationOptions greedy_options(int64_t max_tokens) {
    GenerationOptions options;
    options.sampling.temperature = 0.0f;
    options.sampling.repeat_penalty = 1.3f;  // keeps the tiny models from settling into one token
    options.max_tokens = max_tokens;
    return options;
}

inline GenerationOptions sampled_options(int64_t max_tokens, uint64_t seed) {
    GenerationOptions options;
    options.sampling.temperature = 1.2f;
    options.sampling.top_k = 0;
    options.sampling.top_p = 1.0f;
    options.sampling.min_p = 0.0f;
    options.sampling.seed = seed;
    options.max_tokens = max_tokens;
    return options;
}

// Passes everything to `inner` and records every forward call (where it started, its ids, the last
// logits after it) and the logits every token was chosen from.
class RecordingEngine final : public Engine {
public:
    struct Call {
        int64_t start = 0;
        std::vector<int32_t> ids;
        std::vector<float> last_logits;
    };

    explicit RecordingEngine(Engine& inner) : inner_(inner) {}

    std::vector<Call> calls;
    std::vector<std::vector<float>> chosen_from;

    const ModelConfig& config() const override { return inner_.config(); }
    std::string_view backend_name() const override { return inner_.backend_name(); }
    std::string description() const override { return inner_.description(); }
    std::string fingerprint() const override { return inner_.fingerprint(); }
    std::unique_ptr<EngineSequence> new_sequence(const SequenceOptions& options) const override {
        return inner_.new_sequence(options);
    }
    void forward(EngineSequence& sequence, std::span<const int32_t> ids) override {
        const int64_t start = sequence.position();
        inner_.forward(sequence, ids);
        calls.push_back({start, {ids.begin(), ids.end()}, inner_.last_logits(sequence)});
    }
    int32_t next_token(EngineSequence& sequence, Sampler& sampler, const TokenHistory& history) override {
        chosen_from.push_back(inner_.last_logits(sequence));
        return inner_.next_token(sequence, sampler, history);
    }
    std::vector<float> last_logits(const EngineSequence& sequence) const override {
        return inner_.last_logits(sequence);
    }
    std::vector<float> forward_all(EngineSequence& sequence, std::span<const int32_t> ids) override {
        return inner_.forward_all(sequence, ids);
    }
    EngineCounters counters() const override { return inner_.counters(); }

private:
    Engine& inner_;
};

// Checks every recorded call against a fresh sequence of `engine` that is fed the same history: the
// calls in order, where a call starting before the end of the history so far means the session went
// back first — the reference does the same: it replays the history up to there in the same calls and,
// when that point falls inside a call (possible only where a KV cut returns anywhere), cuts back with a
// chunk-less checkpoint. Same operations, so this holds on every backend and for every KV format, kivi4
// included (whose results depend on call boundaries). Returns the token history at the end.
inline std::vector<int32_t> expect_calls_replay_exactly(Engine& engine, const SequenceOptions& options,
                                                      const std::vector<RecordingEngine::Call>& calls) {
    std::vector<RecordingEngine::Call> history;  // the calls that built the current state, in order
    std::unique_ptr<EngineSequence> reference = engine.new_sequence(options);
    auto cut_to = [&](int64_t position) {
        if (reference->position() > position) reference->restore(StateCheckpoint{position, {}});
    };
    for (size_t i = 0; i < calls.size(); ++i) {
        const RecordingEngine::Call& call = calls[i];
        if (call.start < reference->position()) {
            while (!history.empty() && history.back().start >= call.start) history.pop_back();
            reference->reset();
            for (const RecordingEngine::Call& c : history) {
                cut_to(c.start);
                engine.forward(*reference, c.ids);
            }
            cut_to(call.start);
        }
        EXPECT_EQ(call.start, reference->position()) << "call " << i << " starts past the history";
        engine.forward(*reference, call.ids);
        history.push_back(call);
        EXPECT_TRUE(same_bits(engine.last_logits(*reference), call.last_logits))
            << "call " << i << " (positions " << call.start << " .. " << call.start + int64_t(call.ids.size())
            << ") differs from a replay of the same history";
    }
    std::vector<int32_t> tokens;
    for (const RecordingEngine::Call& c : history) {
        tokens.resize(size_t(c.start));
        tokens.insert(tokens.end(), c.ids.begin(), c.ids.end());
    }
    return tokens;
}

}  // namespace deltabit::test
