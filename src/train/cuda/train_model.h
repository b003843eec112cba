// The trainer's model on one GPU: fp32 master weights, optimizer state (AdamW moments, Muon momentum)
// and gradients resident on the device; the forward and backward of the layer loop of
// train/reference_model.cpp on the CUDA twins of its ops (train/cuda/kernels.h) with the matrix
// products on cuBLAS in bf16 (train/cuda/gemm.h).
//
// Same structure as the reference on purpose, so a difference points at one op: the forward keeps each
// layer's input residual [N][D]; the backward re-runs one layer's forward to get its intermediates
// (activation recomputation), then walks it back. Memory: (layers + 1)·N·D floats plus one layer's
// intermediates, N = sequences × length of the largest micro-batch seen. With set_keep_activations
// (run.activations, train/activation_plan.h) each layer's forward keeps the intermediates its backward
// reads in buffers of its own instead, and the backward reads them without re-running the forward:
// every layer's intermediates in memory, the same bits, the layers' forward once a step.
//
// Plain C++ (pimpl): train/trainer.cpp includes it when the build has CUDA.
#pragma once

#include "train/activation_plan.h"
#include "train/optimizer.h"
#include "train/parameters.h"
#include "train/step_profile.h"
#include "train/trainer.h"

#include <cstdint>
#include <memory>
#include <span>
#include <string>

namespace deltabit::train::cuda {

class TrainModel {
public:
    explicit TrainModel(const ParameterLayout& layout);
    ~TrainModel();
    TrainModel(const TrainModel&) = delete;
    TrainModel& operator=(const TrainModel&) = delete;

    // Master weights and optimizer state, between host (checkpoints, export) and device.
    void set_parameters(std::span<const float> params);
    void get_parameters(std::span<float> params) const;
    void set_optimizer_state(const AdamState& state);  // empty moments read as zeros
    void get_optimizer_state(AdamState& state) const;

    // The weights the forward uses: the master weights binarised at λ (train/qat.h; λ = 0 is the master
    // weights as they are), or explicit ones (evaluation of given weights, tests).
    void use_qat_weights(double lambda);
    void use_weights(std::span<const float> weights);
    void get_forward_weights(std::span<float> weights) const;

    // Whether the backward reads each layer's kept forward activations (true) or re-runs the layer's
    // forward (false, the default). Evaluation (loss) never keeps them: its forward has no backward.
    void set_keep_activations(bool keep);
    bool keeps_activations() const;
    // For micro-batches of batch × seq_len and evaluation batches of up to eval_sequences × seq_len:
    // the bytes every layer's kept activations take (exact: kept_activation_bytes() after a training
    // micro-batch of that size), the recompute design's own buffers (an estimate: the residual stream,
    // the LM head's, twice the largest layer's activations for the forward's and the backward's shared
    // buffers, the delta rule's scratch), and the device's free memory now.
    ActivationMemory activation_memory(int64_t batch, int64_t seq_len, int64_t eval_sequences) const;
    int64_t kept_activation_bytes() const;  // allocated now for the layers' own activation buffers

    void zero_gradients();
    // Forward and backward over the batch: adds scale·∂(Σ loss)/∂weights into the device gradients and
    // returns Σ loss (nats). Straight-through for QAT: the gradient of the forward weights is the
    // gradient applied to the master weights.
    double accumulate_gradient(const Batch& batch, double scale);
    double loss(const Batch& batch);
    void get_gradients(std::span<float> grads) const;

    // Clips the device gradients to o.clip by global norm and applies one step of o.kind to the master
    // weights: AdamW (train/optimizer.h's arithmetic), or Muon on the hidden matrices and AdamW on the
    // rest (train/muon.h; `lr` is AdamW's scheduled rate). Returns the norm before clipping.
    double optimizer_step(const OptimizerSection& o, double lr);
    int64_t optimizer_steps() const;

    // `deltabit train --profile` (train/step_profile.h): with a sink, every launch group between
    // profile_step_begin and profile_step_end (after optimizer_step, given the step's wall time) is
    // timed with CUDA events (train/cuda/profile_events.h) and the host's waits with the wall clock.
    // Null (the default) turns it off: each op then costs one more branch, nothing else.
    void set_profile(StepProfile* sink);
    void profile_step_begin();
    void profile_step_end(double wall_ms);

    std::string device_name() const;
    double peak_memory_gib() const;  // the device's memory in use (total − free), GiB

private:
    struct Impl;
    std::unique_ptr<Impl> impl_;
};

// A GradientBackend on the GPU (deltabit eval, and the CPU trainer's step with CUDA arithmetic):
// every call uploads the weights it is handed.
std::unique_ptr<GradientBackend> make_backend(const ParameterLayout& layout);

}  // namespace deltabit::train::cuda
