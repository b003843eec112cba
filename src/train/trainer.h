// A training run: the data, the step loop (micro-batches → gradients → AdamW or Muon), evaluation in
// bits per byte on a fixed held-out window, and checkpoints that resume bit-exactly. The arithmetic of a step
// sits behind GradientBackend, so the CUDA trainer replaces only that: the step, optimizer, schedule,
// data order and checkpoints are this code on every backend.
#pragma once

#include "train/optimizer.h"
#include "train/parameters.h"
#include "train/step_profile.h"
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

namespace cuda {
class TrainModel;
}

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
    // must be the same text as config_text). config.run.backend picks the arithmetic: cpu (the double
    // reference), cuda (weights, gradients and the optimizer on the GPU: train/cuda/train_model.h),
    // auto (cuda when the build has CUDA and a GPU is present).
    Trainer(TrainConfig config, std::string config_text);
    ~Trainer();

    const TrainConfig& config() const { return config_; }
    const ParameterLayout& layout() const { return layout_; }
    int64_t step() const { return step_; }
    bool finished() const { return step_ >= config_.run.steps; }
    std::span<const float> parameters() const;  // the latent (master) weights
    bool on_gpu() const { return device_ != nullptr; }
    std::string backend_description() const;  // "cpu reference" or "cuda (NVIDIA H200)"
    // On the GPU, whether the backward reads the activations each layer's forward kept or re-runs the
    // forward (run.activations, train/activation_plan.h), and the run header's line saying which, the
    // GiB and the FLOPs it executes against MFU's count; false and "" on the CPU, which ignores the key.
    bool keeps_activations() const;
    const std::string& activations_summary() const { return activations_summary_; }
    // GiB in use on the GPU (the device's total less its free memory; the trainer's buffers only grow,
    // so after a step this is their peak); 0 on the CPU.
    double device_memory_gib() const;
    // The weights the forward uses at the current step: the parameters, or with qat.enabled the
    // binarised ones at λ(step) (train/qat.h); at the end of a QAT run, fully binary.
    std::vector<float> forward_weights() const;

    StepReport train_step();

    // `deltabit train --profile`: from now on every train_step is timed by kind of op into profile()
    // (train/step_profile.h): CUDA events on the GPU, the wall clock around the CPU backend's four
    // phases (data, QAT weights, the reference's forward and backward, the optimizer). The arithmetic
    // is the same as an unprofiled step's.
    void enable_profile();
    const StepProfile* profile() const { return profile_.get(); }
    // Bits per byte over the held-out window (the first eval.bytes bytes of data.heldout, cut into
    // sequences of run.seq_len predicted bytes, each starting from an empty context).
    double evaluate_bpb();

    // Atomic: written to PATH.tmp, then renamed over PATH.
    void save_checkpoint(const std::filesystem::path& path) const;
    void load_checkpoint(const std::filesystem::path& path);

private:
    Batch next_batch();
    Batch next_batch_profiled();  // next_batch, its time recorded as host_data when profiling
    void sync_from_device() const;  // the GPU run's weights and moments into params_ and adam_


    TrainConfig config_;
    std::string config_text_;
    ParameterLayout layout_;
    std::vector<uint8_t> train_bytes_, heldout_bytes_;
    mutable std::vector<float> params_;
    std::vector<float> grads_;
    mutable AdamState adam_;
    std::mt19937_64 data_rng_;
    int64_t step_ = 0;
    int64_t sequences_drawn_ = 0;
    std::unique_ptr<GradientBackend> backend_;
    std::unique_ptr<cuda::TrainModel> device_;  // set for the cuda backend
    mutable bool host_stale_ = false;           // the device holds newer weights than params_
    std::unique_ptr<StepProfile> profile_;      // set by enable_profile
    std::string activations_summary_;
};

// Bits per byte of `text` under the model, over consecutive windows of `seq_len` predicted bytes (the
// windows overlap by one byte: window i reads bytes [i·L, i·L + L] and predicts the last L).
double bits_per_byte(GradientBackend& backend, std::span<const float> params, std::span<const uint8_t> text,
                     int64_t seq_len);
// The same windows, scored by any loss function (Σ nats over a batch); windows of equal length go
// together, up to kEvalWindowsPerBatch per call.
inline constexpr int64_t kEvalWindowsPerBatch = 32;
double bits_per_byte(const std::function<double(const Batch&)>& batch_loss, std::span<const uint8_t> text,
                     int64_t seq_len);

// Training arithmetic per token for MFU: 6 FLOPs per matrix weight (forward 2, backward 4; the token
// embedding is a lookup, not counted), plus the causal attention scores and mixing (6·T·heads·head_dim
// per full-attention layer on average over positions) and the delta rule's state products
// (18·value_heads·dk·dv per DeltaNet layer: three dk×dv products forward, twice that backward).
double train_flops_per_token(const ModelConfig& config, int64_t seq_len);
// What the backward's recomputation of every layer's forward adds to that, counted the same way: the
// layers' forward, 2 FLOPs per matrix weight (the LM head is not recomputed) plus a third of the
// attention and delta-rule terms.
double recompute_flops_per_token(const ModelConfig& config, int64_t seq_len);

}  // namespace deltabit::train
