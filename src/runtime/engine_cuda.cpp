// The CUDA engine: models/model_cuda.h's forward, its argmax kernel for greedy decoding and the GPU
// sampler chain (sampling/sampler_cuda.h) for the rest; only chosen ids cross to the host. Both choosers
// also report a logit that is not finite (core/non_finite_choice.h), which stops generation with the CPU
// engine's message.
#include "runtime/engine.h"

#include "core/error.h"
#include "core/non_finite_choice.h"
#include "models/model.h"
#include "models/model_fingerprint.h"
#include "runtime/engine_checks.h"

#if DELTABIT_HAVE_CUDA
#include "backend/cuda_buffer.h"
#include "backend/cuda_probe.h"
#include "models/model_cuda.h"
#include "sampling/sampler_cuda.h"

#include <cuda_runtime.h>

#include <mutex>
#include <optional>
#include <vector>
#endif

namespace deltabit {

#if DELTABIT_HAVE_CUDA
namespace {

class CudaSequence final : public EngineSequence {
public:
    CudaSequence(const void* owner, EngineCounters* counters, const ModelConfig& config, const SequenceOptions& options)
        : owner_(owner), counters_(counters), config_(config), state_(config, options.max_positions, options.kv_format) {}

    // A run-ahead step is invisible from outside: the position is the consumed tokens', and anything
    // that reads or replaces the state undoes the step first.
    int64_t position() const override { return state_.position() - (ahead_ ? 1 : 0); }
    int64_t max_positions() const override { return state_.max_positions(); }
    KvFormat kv_format() const override { return state_.kv_format(); }

    StateImage save() const override {
        settle();
        return state_.save();
    }
    void load(const StateImage& image) override {
        settle();
        check_image_fits(image, state_.max_positions());
        state_.load(image);
        logits_serial_ = 0;
    }
    StateCheckpoint checkpoint() const override {
        settle();
        return state_.checkpoint();
    }
    void restore(const StateCheckpoint& checkpoint) override {
        settle();
        state_.restore(checkpoint);
        logits_serial_ = 0;
    }
    void reset() override {
        ahead_ = false;
        state_ = CudaSequenceState(config_, state_.max_positions(), state_.kv_format());
        logits_serial_ = 0;
    }

    // Undoes a run-ahead step (CudaSequenceState::undo_step: host bookkeeping only, the step's writes are
    // dead). The last logits stay those of the last consumed token (the engine kept a copy).
    void settle() const {
        if (!ahead_) return;
        state_.undo_step();
        ahead_ = false;
        ++counters_->run_ahead_undone;
    }

    const void* owner_;
    EngineCounters* counters_;
    ModelConfig config_;
    // Mutable: undoing a run-ahead step is not a logical change (position() never showed it).
    mutable CudaSequenceState state_;
    // The model's logits buffer is shared by every sequence: these logits are this sequence's only while
    // no other forward ran since (the engine's serial still equals this one). 0: none yet.
    const float* last_logits_ = nullptr;
    uint64_t logits_serial_ = 0;
    // This sequence's row in the last forward_batch, whose argmaxes are on their way to the host
    // (CudaModel::argmax_rows): valid while logits_serial_ is that batch's serial.
    int64_t batch_row_ = -1;
    // Greedy run-ahead (CudaEngine::next_token): the state is one decode step past position(), the step
    // that consumed ahead_token_, whose logits are at ahead_logits_ while the engine's serial is still
    // ahead_serial_.
    mutable bool ahead_ = false;
    int32_t ahead_token_ = 0;
    const float* ahead_logits_ = nullptr;
    uint64_t ahead_serial_ = 0;
};

// Greedy with no stage before the argmax that changes logits: the argmax kernel alone is the chain.
bool is_plain_greedy(const SamplingParams& p) {
    return p.temperature <= 0.0f && p.repeat_penalty == 1.0f && p.presence_penalty == 0.0f &&
           p.frequency_penalty == 0.0f && p.dry_multiplier == 0.0f;
}

class CudaEngine final : public Engine {
public:
    CudaEngine(std::shared_ptr<const Model> model, const LoadFraction& upload_progress)
        : host_(std::move(model)), model_(*host_, upload_progress), sampler_(host_->config().n_vocab),
          uploaded_logits_(size_t(host_->config().n_vocab) * sizeof(float)),
          held_logits_(size_t(host_->config().n_vocab) * sizeof(float)) {}

    const ModelConfig& config() const override { return model_.config(); }
    std::string_view backend_name() const override { return "cuda"; }
    std::string description() const override { return "cuda: " + cuda::device_summary(); }
    std::string fingerprint() const override {
        std::call_once(fingerprint_once_, [&] { fingerprint_ = model_fingerprint(host_->weights()); });
        return fingerprint_;
    }

    std::unique_ptr<EngineSequence> new_sequence(const SequenceOptions& options) const override {
        check_sequence_options(options);
        return std::make_unique<CudaSequence>(this, &counters_, config(), options);
    }

    void forward(EngineSequence& sequence, std::span<const int32_t> ids) override {
        CudaSequence& s = own(sequence);
        check_forward(config(), ids, s.position(), s.max_positions());
        note_forward(s);
        if (s.ahead_ && ids.size() == 1 && ids[0] == s.ahead_token_ && s.ahead_serial_ == serial_) {
            // The token the run-ahead step already consumed: keep the step, nothing to compute.
            s.ahead_ = false;
            s.last_logits_ = s.ahead_logits_;
            s.logits_serial_ = ++serial_;
            return;
        }
        s.settle();
        s.last_logits_ = model_.forward_last(s.state_, ids);
        s.logits_serial_ = ++serial_;
    }

    // One decode step of every row, the weights read once (CudaModel::forward_batch). Each row's logits are
    // its row of the model's buffer, all under one serial: every row's token can be drawn before the next
    // forward call. No run-ahead follows a batch (a step run ahead would overwrite the other rows' logits).
    void forward_batch(std::span<EngineSequence* const> sequences, std::span<const int32_t> ids) override {
        check_forward_batch(config(), sequences, ids);
        std::vector<CudaSequence*> rows;
        std::vector<CudaSequenceState*> states;
        for (EngineSequence* sequence : sequences) rows.push_back(&own(*sequence));
        for (CudaSequence* s : rows) {
            s->settle();
            states.push_back(&s->state_);
        }
        const float* logits = model_.forward_batch(states, ids);
        // Every row's greedy choice, started now and copied back in one piece: a plain-greedy row's
        // next_token then waits once for the whole batch, not a round trip a row (the server's 64 streams:
        // 64 synchronisations a step). Rows that sample read their logits as before.
        model_.argmax_rows(logits, int64_t(rows.size()));
        const uint64_t serial = ++serial_;
        batch_serial_ = serial;
        for (size_t i = 0; i < rows.size(); ++i) {
            rows[i]->last_logits_ = logits + i * size_t(config().n_vocab);
            rows[i]->logits_serial_ = serial;
            rows[i]->batch_row_ = int64_t(i);
        }
        interleaved_ = true;
        last_forward_ = nullptr;
    }

    // Plain greedy runs one step ahead (CudaModel::argmax_and_step): the step that consumes the chosen
    // token starts before the id reaches the host, so the GPU is busy while the caller detokenizes, checks
    // stops and calls forward() with that id — which then finds the step done. When the caller stops
    // instead (EOS, a stop string, max tokens), the step is undone on the sequence's next use: the session
    // ends exactly after the token that ended it, as without run-ahead. Not when the last two forward
    // calls were on different sequences (below).
    int32_t next_token(EngineSequence& sequence, Sampler& sampler, const TokenHistory& history) override {
        CudaSequence& s = own(sequence);
        s.settle();
        const float* logits = logits_of(s);
        if (!is_plain_greedy(sampler.params()))
            return checked(sampler_.sample(logits, sampler, history, model_.stream()), logits, s);
        if (s.logits_serial_ == batch_serial_ && s.batch_row_ >= 0) {
            ++counters_.batched_argmax_rows;
            return checked(model_.row_argmax(s.batch_row_), logits, s);
        }
        // The caller interleaves sequences (the server's scheduler: each one's forward call, then its
        // token): the next forward call is most likely another sequence's, which would undo a step run
        // ahead here after the GPU had spent it — so none is started.
        if (interleaved_) return checked(model_.argmax(logits), logits, s);
        // The step overwrites the model's logits buffer: this sequence's last logits move to a copy first,
        // so that settling the step leaves them readable.
        float* held = held_logits_.get<float>();
        if (logits != held)
            cuda::cuda_check(cudaMemcpyAsync(held, logits, held_logits_.bytes(), cudaMemcpyDeviceToDevice, model_.stream()),
                             "engine: keep logits");
        const float* step_logits = nullptr;
        if (const std::optional<int32_t> id = model_.argmax_and_step(s.state_, held, &step_logits)) {
            s.last_logits_ = held;
            s.logits_serial_ = ++serial_;
            s.ahead_ = true;
            s.ahead_token_ = *id;
            s.ahead_logits_ = step_logits;
            s.ahead_serial_ = serial_;
            ++counters_.run_ahead_steps;
            if (is_non_finite_choice(*id)) s.settle();  // the step consumed no token: undo it before reporting
            return checked(*id, held, s);
        }
        return checked(model_.argmax(held), held, s);
    }

    EngineCounters counters() const override { return counters_; }

    std::vector<float> last_logits(const EngineSequence& sequence) const override {
        const CudaSequence& s = own(sequence);
        s.settle();
        const float* logits = logits_of(s);
        std::vector<float> host(size_t(config().n_vocab));
        cuda::cuda_check(cudaMemcpyAsync(host.data(), logits, host.size() * sizeof(float), cudaMemcpyDeviceToHost,
                                    model_.stream()),
                    "engine: download logits");
        cuda::cuda_check(cudaStreamSynchronize(model_.stream()), "engine: download logits");
        return host;
    }

    std::vector<float> forward_all(EngineSequence& sequence, std::span<const int32_t> ids) override {
        CudaSequence& s = own(sequence);
        check_forward(config(), ids, s.position(), s.max_positions());
        note_forward(s);
        s.settle();
        std::vector<float> logits = model_.forward(s.state_, ids);
        // forward() hands every row to the host; the last goes back up so next_token works as after forward().
        const size_t n_vocab = size_t(config().n_vocab);
        cuda::cuda_check(cudaMemcpyAsync(uploaded_logits_.get(), logits.data() + logits.size() - n_vocab,
                                    n_vocab * sizeof(float), cudaMemcpyHostToDevice, model_.stream()),
                    "engine: upload logits");
        cuda::cuda_check(cudaStreamSynchronize(model_.stream()), "engine: upload logits");
        s.last_logits_ = uploaded_logits_.get<float>();
        s.logits_serial_ = ++serial_;
        return logits;
    }

private:
    // Whether the last two forward calls were on different sequences (see next_token).
    void note_forward(const CudaSequence& s) {
        interleaved_ = last_forward_ != nullptr && last_forward_ != &s;
        last_forward_ = &s;
    }
    CudaSequence& own(EngineSequence& sequence) const {
        return const_cast<CudaSequence&>(own(static_cast<const EngineSequence&>(sequence)));
    }
    const CudaSequence& own(const EngineSequence& sequence) const {
        const auto* s = dynamic_cast<const CudaSequence*>(&sequence);
        if (s == nullptr || s->owner_ != this) fail("engine: a sequence was passed to an engine that did not make it");
        return *s;
    }
    // A chooser's answer, or (a non-finite report) the CPU engine's error, naming the token, the position and
    // the logit — the one read back from the device that only this failure path makes.
    int32_t checked(int32_t id, const float* device_logits, const CudaSequence& s) const {
        if (!is_non_finite_choice(id)) return id;
        const int64_t token = non_finite_index(id);
        float value = 0.0f;
        cuda::cuda_check(cudaMemcpyAsync(&value, device_logits + token, sizeof(float), cudaMemcpyDeviceToHost,
                                         model_.stream()),
                         "engine: read the non-finite logit");
        cuda::cuda_check(cudaStreamSynchronize(model_.stream()), "engine: read the non-finite logit");
        fail_non_finite_logit(token, s.position(), value);
    }
    const float* logits_of(const CudaSequence& s) const {
        if (s.logits_serial_ == 0) fail("engine: no logits yet: feed the sequence (forward) before choosing a token");
        if (s.logits_serial_ != serial_)
            fail("engine: cuda: another sequence ran a forward pass since this one's; feed this sequence again first");
        return s.last_logits_;
    }

    std::shared_ptr<const Model> host_;  // memory-mapped weights, kept for the fingerprint
    mutable CudaModel model_;
    cuda::GpuSampler sampler_;
    cuda::DeviceBuffer uploaded_logits_;
    cuda::DeviceBuffer held_logits_;  // the last logits of a sequence that runs ahead
    mutable EngineCounters counters_;  // sequences count their undone steps
    uint64_t serial_ = 0;  // forward calls so far (run-ahead steps too); names the logits the model's buffer holds
    uint64_t batch_serial_ = 0;  // the last forward_batch's serial: its rows' argmaxes are CudaModel::argmax_rows's
    const CudaSequence* last_forward_ = nullptr;  // compared, never dereferenced (it may be gone)
    bool interleaved_ = false;
    mutable std::once_flag fingerprint_once_;
    mutable std::string fingerprint_;
};

}  // namespace

std::unique_ptr<Engine> make_cuda_engine(std::shared_ptr<const Model> model, const LoadFraction& upload_progress) {
    if (cuda::device_count() == 0) fail("engine: cuda: no CUDA device is present; use --backend cpu");
    return std::make_unique<CudaEngine>(std::move(model), upload_progress);
}

#else

std::unique_ptr<Engine> make_cuda_engine(std::shared_ptr<const Model>, const LoadFraction&) {
    fail("engine: this build of deltabit has no CUDA (nvcc was not found when it was built); use --backend cpu");
}

#endif

}  // namespace deltabit
