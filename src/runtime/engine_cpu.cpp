// The CPU engine: the forward pass of models/model.h with its products on the CPU fast path
// (ops/cpu_fast/matmul_cpu_fast.h: quantised weights on int8 activations rounded per weight block, MatmulNumerics::
// int8_weight_blocks; plain-float weights in fp32) over the engine's own threads, and the CPU sampler chain.
// DELTABIT_CPU_REFERENCE=1 at construction makes it the naive f32 reference, one thread, as it was before the
// fast path existed.
#include "runtime/engine.h"

#include "core/error.h"
#include "models/model.h"
#include "models/model_fingerprint.h"
#include "models/sequence_state.h"
#include "ops/cpu_fast/matmul_cpu_fast.h"
#include "runtime/engine_checks.h"

#include <fmt/format.h>

#include <cmath>
#include <mutex>
#include <utility>

namespace deltabit {
namespace {

class CpuSequence final : public EngineSequence {
public:
    CpuSequence(const void* owner, const ModelConfig& config, const SequenceOptions& options)
        : owner_(owner), state_(config, options.kv_format), max_positions_(options.max_positions) {}

    int64_t position() const override { return state_.position(); }
    int64_t max_positions() const override { return max_positions_; }
    KvFormat kv_format() const override { return state_.kv_format(); }

    StateImage save() const override { return state_.save(); }
    void load(const StateImage& image) override {
        check_image_fits(image, max_positions_);
        state_.load(image);
        last_logits_.clear();
    }
    StateCheckpoint checkpoint() const override { return state_.checkpoint(); }
    void restore(const StateCheckpoint& checkpoint) override {
        state_.restore(checkpoint);
        last_logits_.clear();
    }
    void reset() override {
        state_.reset();
        last_logits_.clear();
    }

    const void* owner_;
    SequenceState state_;
    int64_t max_positions_;
    std::vector<float> last_logits_;  // empty until forward()
};

class CpuEngine final : public Engine {
public:
    explicit CpuEngine(std::shared_ptr<const Model> model)
        : model_(std::move(model)), reference_(cpu_reference_switch()) {
        if (!reference_) pool_ = std::make_unique<ThreadPool>();
    }

    const ModelConfig& config() const override { return model_->config(); }
    std::string_view backend_name() const override { return "cpu"; }
    std::string description() const override {
        if (reference_) return "cpu (reference: naive f32 products, 1 thread; DELTABIT_CPU_REFERENCE=1)";
        const int threads = pool_->threads();
        return fmt::format("cpu ({}, {} thread{}; quantised weights on int8 activations)",
                           cpu_fast::isa_name(cpu_fast::best_isa()), threads, threads == 1 ? "" : "s");
    }
    void set_cpu_threads(int threads) override {
        if (reference_) return;
        const int wanted = threads <= 0 ? hardware_threads() : threads;
        if (wanted != pool_->threads()) pool_ = std::make_unique<ThreadPool>(wanted);
    }
    std::string fingerprint() const override {
        // Hashing every weight byte is a pass over the whole model: done once, and only when asked
        // (snapshots), never at load.
        std::call_once(fingerprint_once_, [&] { fingerprint_ = model_fingerprint(model_->weights()); });
        return fingerprint_;
    }

    std::unique_ptr<EngineSequence> new_sequence(const SequenceOptions& options) const override {
        check_sequence_options(options);
        return std::make_unique<CpuSequence>(this, config(), options);
    }

    void forward(EngineSequence& sequence, std::span<const int32_t> ids) override {
        CpuSequence& s = own(sequence);
        s.last_logits_ = run(s, ids, false);
    }

    // The rows in turn: each sequence keeps its own logits. Every row is checked (and found to be this
    // engine's) before the first runs, so a refused batch changes nothing.
    void forward_batch(std::span<EngineSequence* const> sequences, std::span<const int32_t> ids) override {
        check_forward_batch(config(), sequences, ids);
        for (EngineSequence* sequence : sequences) own(*sequence);
        for (size_t i = 0; i < sequences.size(); ++i) forward(*sequences[i], ids.subspan(i, 1));
    }

    int32_t next_token(EngineSequence& sequence, Sampler& sampler, const TokenHistory& history) override {
        const CpuSequence& s = own(sequence);
        const std::span<const float> logits = logits_of(s);
        // A forward pass never yields NaN or ±inf from finite weights and inputs unless something
        // overflowed or the file holds non-finite weights; sampling them would print noise with exit 0.
        // One pass over the vocabulary, next to a whole forward pass per token.
        for (size_t id = 0; id < logits.size(); ++id)
            if (!std::isfinite(logits[id])) fail_non_finite_logit(int64_t(id), s.position(), logits[id]);
        return sampler.sample(logits, history);
    }

    std::vector<float> last_logits(const EngineSequence& sequence) const override {
        const std::span<const float> l = logits_of(own(sequence));
        return {l.begin(), l.end()};
    }

    std::vector<float> forward_all(EngineSequence& sequence, std::span<const int32_t> ids) override {
        CpuSequence& s = own(sequence);
        std::vector<float> logits = run(s, ids, true);
        const size_t n_vocab = size_t(config().n_vocab);
        s.last_logits_.assign(logits.end() - std::ptrdiff_t(n_vocab), logits.end());
        return logits;
    }

private:
    std::vector<float> run(CpuSequence& s, std::span<const int32_t> ids, bool all_logits) {
        check_forward(config(), ids, s.position(), s.max_positions_);
        if (reference_) return model_->forward(s.state_, ids, nullptr, {MatmulNumerics::f32, nullptr, all_logits});
        return model_->forward(s.state_, ids, nullptr, {MatmulNumerics::int8_weight_blocks, pool_.get(), all_logits});
    }

    CpuSequence& own(EngineSequence& sequence) const { return const_cast<CpuSequence&>(own(std::as_const(sequence))); }
    const CpuSequence& own(const EngineSequence& sequence) const {
        const auto* s = dynamic_cast<const CpuSequence*>(&sequence);
        if (s == nullptr || s->owner_ != this) fail("engine: a sequence was passed to an engine that did not make it");
        return *s;
    }
    static std::span<const float> logits_of(const CpuSequence& s) {
        if (s.last_logits_.empty()) fail("engine: no logits yet: feed the sequence (forward) before choosing a token");
        return s.last_logits_;
    }

    std::shared_ptr<const Model> model_;
    bool reference_;
    std::unique_ptr<ThreadPool> pool_;  // null with the reference
    mutable std::once_flag fingerprint_once_;
    mutable std::string fingerprint_;
};

}  // namespace

std::unique_ptr<Engine> make_cpu_engine(const Model& model) {
    // Borrowed: an owner-less shared_ptr (aliasing constructor) that never deletes.
    return std::make_unique<CpuEngine>(std::shared_ptr<const Model>(std::shared_ptr<const Model>(), &model));
}

std::unique_ptr<Engine> make_cpu_engine(std::shared_ptr<const Model> model) {
    return std::make_unique<CpuEngine>(std::move(model));
}

}  // namespace deltabit
