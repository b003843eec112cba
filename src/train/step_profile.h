// Where a training step's time goes (`deltabit train --profile N`, docs/train.md § Profiling a run):
// the time of every kind of op in the step, the arithmetic and memory traffic its shapes imply, and
// the step's wall time beside the sum of the ops' time, whose difference is what no op accounts for
// (kernel launches, host work, the host waiting).
//
// The CUDA backend times each launch group with a pair of CUDA events (train/cuda/profile_events.h);
// the CPU backend times its four phases with the wall clock (the reference's forward and backward are
// one call there, not split by op). Only the recording lives here: plain C++, no CUDA types.
//
// FLOPs are the algorithm's (2 per multiply-add of the products the shapes imply, causal halves
// counted once); bytes are the fp32 tensors an op must read and write at least, each once. Both are
// estimates for reading the measured times against the H200's ceilings, not counters.
#pragma once

#include <array>
#include <cstdint>
#include <map>
#include <string>
#include <string_view>

namespace deltabit::train {

enum class ProfileKind : uint8_t {
    embedding,             // the token embedding lookup and its gradient (atomics)
    norm,                  // RMS norms (layers, q/k, the DeltaNet gated norm), the delta rule's L2 norms
    gemm_forward,          // y = x·Wᵀ (cuBLAS), the LM head's included
    gemm_backward_data,    // dx += dy·W
    gemm_backward_weight,  // dW += dyᵀ·x
    attention_forward,     // causal GQA attention (flash on the bf16 path)
    attention_backward,
    delta_rule_forward,    // the chunked gated delta rule
    delta_rule_backward,
    causal_conv,           // DeltaNet's depthwise causal conv + SiLU
    pointwise,             // SwiGLU, the attention output gate, rope, DeltaNet gates, residual adds
    zero_and_copy,         // buffer zeroing, device copies, column copies (splitting fused projections)
    lm_head_loss,          // softmax + cross entropy on the LM head's logit chunks
    qat_weights,           // the forward's 1-bit weights from the master weights
    gradient_norm,         // Σ g² for clipping (the clip factor is applied inside the optimizer)
    optimizer,             // AdamW (and Muon's matrices)
    upload,                // host → device: the batch's tokens and targets
    cpu_reference,         // the CPU backend's forward and backward (one call, not split by op)
    // Host-side, measured with the wall clock, overlapping the device's time rather than adding to it:
    host_data,             // drawing the batch from the training text
    host_wait,             // the host blocked at a synchronisation (loss and norm downloads, syncs)
    count
};
inline constexpr size_t kProfileKinds = size_t(ProfileKind::count);
std::string_view profile_kind_name(ProfileKind kind);
bool profile_kind_is_host(ProfileKind kind);

// Which part of the step a span belongs to (the backward re-runs each layer's forward, "recompute",
// unless run.activations keeps the forward's activations: then there are no recompute spans).
enum class ProfilePass : uint8_t { forward, recompute, backward, update, count };
inline constexpr size_t kProfilePasses = size_t(ProfilePass::count);
std::string_view profile_pass_name(ProfilePass pass);

struct ProfileTotals {
    double ms = 0.0, flops = 0.0, bytes = 0.0;
    int64_t spans = 0;
    void add(double span_ms, double span_flops, double span_bytes) {
        ms += span_ms;
        flops += span_flops;
        bytes += span_bytes;
        ++spans;
    }
};

// The ceilings the report reads achieved rates against (0: not printed).
struct ProfileCeilings {
    double tflops = 0.0;    // dense bf16 tensor rate
    double gbytes_s = 0.0;  // memory bandwidth
};

class StepProfile {
public:
    // One timed span; `detail` (may be empty) groups spans of one shape for the GEMM table.
    void add(ProfileKind kind, ProfilePass pass, double ms, double flops, double bytes, std::string_view detail = {});
    // One kernel of a multi-kernel op (the delta rule, flash attention's backward, …): its share of
    // the op's span, reported in a table of its own (the span's kind already counts it).
    void add_kernel(std::string_view kernel, double ms);
    // Closes a step: its wall time on the host, and on the device the time from its first span's
    // start to its last span's end (0 where there is no device).
    void end_step(double wall_ms, double device_span_ms);

    int64_t steps() const { return steps_; }
    const ProfileTotals& kind(ProfileKind k) const { return kinds_[size_t(k)]; }
    const ProfileTotals& pass(ProfilePass p) const { return passes_[size_t(p)]; }
    const ProfileTotals* kernel(std::string_view name) const;  // null: never marked
    double wall_ms() const { return wall_ms_; }
    double device_span_ms() const { return device_span_ms_; }
    double device_ms() const;  // Σ of the non-host kinds' time

    // The table, per step (every figure divided by steps()); `title` heads it. With `mfu_flops` (a step's
    // FLOPs as MFU counts them: train_flops_per_token · tokens, train/trainer.h) a line sets the FLOPs
    // the spans executed beside it: the backward's recomputation shows there.
    std::string report(std::string_view title, const ProfileCeilings& ceilings, double mfu_flops = 0.0) const;

private:
    std::array<ProfileTotals, kProfileKinds> kinds_{};
    std::array<ProfileTotals, kProfilePasses> passes_{};
    std::map<std::string, ProfileTotals, std::less<>> details_, kernels_;
    int64_t steps_ = 0;
    double wall_ms_ = 0.0, device_span_ms_ = 0.0;
};

}  // namespace deltabit::train
