// run.activations (docs/train.md): how the CUDA trainer's backward gets each layer's forward
// activations. "recompute" re-runs the layer's forward right before walking it back (memory: one
// layer's activations; arithmetic: every layer's forward twice a step), "keep" has each layer's forward
// write buffers of its own that the backward reads (memory: every layer's; the forward once), "auto"
// keeps them when the step's buffers fit the GPU's free memory. Both give the same bits: the same
// kernels on the same inputs (tests/train/test_cuda_step.cpp).
//
// Plain C++: the choice and the words the run prints, tested on the CPU; the byte counts come from the
// device model (train/cuda/train_model.h), the FLOPs from train/trainer.h.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

namespace deltabit::train {

struct ActivationMemory {
    int64_t kept_bytes = 0;   // every layer's activations its backward reads, at the largest micro-batch
    int64_t other_bytes = 0;  // the step's other activation and gradient buffers (an estimate)
    int64_t free_bytes = 0;   // the device's free memory with the weights, gradients and optimizer state in
    int64_t layers = 0;
};

// The share of the free memory that kept activations and the step's other buffers may take together
// under "auto" (and must fit under "keep"): the rest is for what the estimate leaves out (cuBLAS's
// and Muon's workspaces, the allocator's rounding, the CUDA context's growth).
inline constexpr double kKeepActivationsShare = 0.9;

struct ActivationChoice {
    bool keep = false;
    std::string summary;  // for the run's header: which, and the GiB it takes or would take
};

// `setting` is run.activations (auto, keep or recompute; validated by the config). "keep" that does not
// fit throws one line naming the bytes needed and free and the key; `source` (the config file) heads it.
ActivationChoice choose_activations(std::string_view setting, const ActivationMemory& memory,
                                    std::string_view source);

}  // namespace deltabit::train
