// A training run: the data, the step loop (micro-batches → gradients → AdamW), evaluation in bits per
// byte on a fixed held-out window, and checkpoints that resume bit-exactly. The arithmetic of a step
// sits behind GradientBackend, so the CUDA trainer replaces only that: the step, optimizer, schedule,
// data order and checkpoints are this code on every backend.
#pragma once

#include "train/optimizer.h"
#include "train/parameters.h"
#include "train/train_config.h"

#include <cstdint>
#include <filesystem>
#include <functional>
#include <memory>
#include <random>
#include <span>
#include <string>
#include <vector>

namespace deltabit::train {

// Sequences of byte ids: tokens[b][T] and next-byte targets[b][T].
struct Batch {
    int64_t n_sequences = 0, length = 0;
    std::vector<int32_t> tokens, targets;
};

// Computes loss and gradients for one model on one backend.
class GradientBackend {
public:
    virtual ~GradientBackend() = default;
    // Adds scale · ∂(Σ loss)/∂params into grads (fp32, layout order); returns Σ loss (nats) over the batch.
    virtual double accumulate_gradient(std::span<const float> params, const Batch& batch, double scale,
                                       std::span<float> grads) = 0;
    // Σ loss (nats) over the batch, no gradient.
    virtual double loss(std::span<const float> params, const Batch& batch) = 0;
};

// The CPU reference (train/reference_model.h, double precision inside).
std::unique_ptr<GradientBackend> make_cpu_reference_backend(const ParameterLayout& layout);

struct StepReport {
    int64_t step = 0;          // optimizer steps done after this one
    double loss = 0.0;         // mean nats per predicted byte over the step's micro-batches
    double lr = 0.0;
    double grad_norm = 0.0;    // before clipping
    double seconds = 0.0;      // wall time of the step
};

class Trainer {
public:
    // A fresh run (parameters from the seed) or, when `checkpoint` exists, a resumed one (its config
    // must be the same text as config_text).
    Trainer(TrainConfig config, std::string config_text);

    const TrainConfig& config() const { return config_; }
    const ParameterLayout& layout() const { return layout_; }
    int64_t step() const { return step_; }
    bool finished() const { return step_ >= config_.run.steps; }
    std::span<const float> parameters() const { return params_; }  // the latent (master) weights
    // The weights the forward uses at the current step: the parameters, or with qat.enabled the
    // binarised ones at λ(step) (train/qat.h); at the end of a QAT run, fully binary.
    std::vector<float> forward_weights() const;

    StepReport train_step();
    // Bits per byte over the held-out window (the first eval.bytes bytes of data.heldout, cut into
    // sequences of run.seq_len predicted bytes, each starting from an empty context).
    double evaluate_bpb();

    // Atomic: written to PATH.tmp, then renamed over PATH.
    void save_checkpoint(const std::filesystem::path& path) const;
    void load_checkpoint(const std::filesystem::path& path);

private:
    Batch next_batch();

    TrainConfig config_;
    std::string config_text_;
    ParameterLayout layout_;
    std::vector<uint8_t> train_bytes_, heldout_bytes_;
    std::vector<float> params_, grads_;
    AdamState adam_;
    std::mt19937_64 data_rng_;
    int64_t step_ = 0;
    int64_t sequences_drawn_ = 0;
    std::unique_ptr<GradientBackend> backend_;
};

// Bits per byte of `text` under the model, over consecutive windows of `seq_len` predicted bytes (the
// windows overlap by one byte: window i reads bytes [i·L, i·L + L] and predicts the last L).
double bits_per_byte(GradientBackend& backend, std::span<const float> params, std::span<const uint8_t> text,
                     int64_t seq_len);

}  // namespace deltabit::train
