// The CUDA engine: models/model_cuda.h's forward, its argmax kernel for greedy decoding and the GPU
// sampler chain (sampling/sampler_cuda.h) for the rest; only chosen ids cross to the host.
#include "runtime/engine.h"

#include "core/error.h"
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
#endif

namespace deltabit {

#if DELTABIT_HAVE_CUDA
namespace {

class CudaSequence final : public EngineSequence {
public:
    CudaSequence(const void* owner, const ModelConfig& config, const SequenceOptions& options)
        : owner_(owner), config_(config), state_(config, options.max_positions, options.kv_format) {}

    int64_t position() const override { return state_.position(); }
    int64_t max_positions() const override { return state_.max_positions(); }
    KvFormat kv_format() const override { return state_.kv_format(); }

    StateImage save() const override { return state_.save(); }
    void load(const StateImage& image) override {
        check_image_fits(image, state_.max_positions());
        state_.load(image);
        logits_serial_ = 0;
    }
    StateCheckpoint checkpoint() const override { return state_.checkpoint(); }
    void restore(const StateCheckpoint& checkpoint) override {
        state_.restore(checkpoint);
        logits_serial_ = 0;
    }
    void reset() override {
        state_ = CudaSequenceState(config_, state_.max_positions(), state_.kv_format());
        logits_serial_ = 0;
    }

    const void* owner_;
    ModelConfig config_;
    CudaSequenceState state_;
    // The model's logits buffer is shared by every sequence: these logits are this sequence's only while
    // no other forward ran since (the engine's serial still equals this one). 0: none yet.
    const float* last_logits_ = nullptr;
    uint64_t logits_serial_ = 0;
};

// Greedy with no stage before the argmax that changes logits: the argmax kernel alone is the chain.
bool is_plain_greedy(const SamplingParams& p) {
    return p.temperature <= 0.0f && p.repeat_penalty == 1.0f && p.presence_penalty == 0.0f &&
           p.frequency_penalty == 0.0f && p.dry_multiplier == 0.0f;
}

class CudaEngine final : public Engine {
public:
    explicit CudaEngine(std::shared_ptr<const Model> model)
        : host_(std::move(model)), model_(*host_), sampler_(host_->config().n_vocab),
          uploaded_logits_(size_t(host_->config().n_vocab) * sizeof(float)) {}

    const ModelConfig& config() const override { return model_.config(); }
    std::string_view backend_name() const override { return "cuda"; }
    std::string description() const override { return "cuda: " + cuda::device_summary(); }
    std::string fingerprint() const override {
        std::call_once(fingerprint_once_, [&] { fingerprint_ = model_fingerprint(host_->weights()); });
        return fingerprint_;
    }

    std::unique_ptr<EngineSequence> new_sequence(const SequenceOptions& options) const override {
        check_sequence_options(options);
        return std::make_unique<CudaSequence>(this, config(), options);
    }

    void forward(EngineSequence& sequence, std::span<const int32_t> ids) override {
        CudaSequence& s = own(sequence);
        check_forward(config(), ids, s.position(), s.max_positions());
        s.last_logits_ = model_.forward_last(s.state_, ids);
        s.logits_serial_ = ++serial_;
    }

    int32_t next_token(EngineSequence& sequence, Sampler& sampler, const TokenHistory& history) override {
        const float* logits = logits_of(own(sequence));
        if (is_plain_greedy(sampler.params())) return model_.argmax(logits);
        return sampler_.sample(logits, sampler, history, model_.stream());
    }

    std::vector<float> last_logits(const EngineSequence& sequence) const override {
        const float* logits = logits_of(own(sequence));
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
    CudaSequence& own(EngineSequence& sequence) const {
        return const_cast<CudaSequence&>(own(static_cast<const EngineSequence&>(sequence)));
    }
    const CudaSequence& own(const EngineSequence& sequence) const {
        const auto* s = dynamic_cast<const CudaSequence*>(&sequence);
        if (s == nullptr || s->owner_ != this) fail("engine: a sequence was passed to an engine that did not make it");
        return *s;
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
    uint64_t serial_ = 0;  // forward calls so far; names the logits the model's buffer holds
    mutable std::once_flag fingerprint_once_;
    mutable std::string fingerprint_;
};

}  // namespace

std::unique_ptr<Engine> make_cuda_engine(std::shared_ptr<const Model> model) {
    if (cuda::device_count() == 0) fail("engine: cuda: no CUDA device is present; use --backend cpu");
    return std::make_unique<CudaEngine>(std::move(model));
}

#else

std::unique_ptr<Engine> make_cuda_engine(std::shared_ptr<const Model>) {
    fail("engine: this build of deltabit has no CUDA (nvcc was not found when it was built); use --backend cpu");
}

#endif

}  // namespace deltabit
