// Everything of a block-diffusion denoising step after the model's logits, on the GPU: the same rules as
// the CPU step (runtime/diffusion_step.h, the reference these kernels are tested against) and the same
// random numbers, enqueued on a stream with no host synchronisation and no host reads, so a host can
// enqueue several steps ahead and read the early-stop flag when it chooses.
//
// Random numbers: the contract. The device holds a SamplerRng state (sampling/rng.h, xoshiro256**: 4
// uint64 words in device memory), seeded on the host exactly as SamplerRng(seed). One device thread
// advances it and writes the uniforms (SamplerRng::next_unit) into a buffer that the parallel kernels
// read: per block L uniforms for the initial canvas, then per denoising step 2L — the first L for the
// samples (position order), the next L for the noise tokens (position order). That is the order in which
// the CPU loop's SeededDiffusionRandomness draws, so for a given seed both backends draw the same numbers.
// A halted step (below) draws nothing, as the CPU loop draws nothing after it stops.
//
// Early stop: a device int `finished` (DiffusionStepFlags) set by the step that meets the stop rule.
// Every step kernel reads it first and does nothing when it is set, so steps enqueued after the finishing
// one change nothing (no draw, no canvas, no self-conditioning, no step count); only the model's forward
// for them is wasted. begin_block clears it.
//
// How close to the CPU step:
//   - scaled logits (x ÷ T, one IEEE fp32 division), argmax (first of equal maxima): bit-identical.
//   - entropy: the same per-element formula in double, summed in a different order (a block's tree),
//     with CUDA's double exp and log, each within 1 ulp, where the host's libm may round to the
//     neighbouring double. The entropies agree to a few ulp per term plus the summation difference:
//     |ΔH| ≤ 8·V·2^-53·(1 + H) (derivation in tests/cuda/test_diffusion_step_cuda.cpp).
//   - acceptance, mean entropy and the stop rule: given the same entropies, bit-identical (the sort is
//     stable by position; the sum of lower-ranked entropies and the mean are added in the CPU's order by
//     one thread: 256 dependent adds, about a microsecond, to keep the decisions identical). Given this
//     backend's entropies, the accepted set differs from the CPU's only where a sum of the j lowest
//     entropies lies within j times the entropy difference above of the bound, or the last accepted and
//     the first refused entropy lie within twice it of each other. The ranking inside the accepted set
//     may differ (near-zero entropies of peaked rows differ by the rounding of log Σ, ~1e-13 at V = 1000)
//     and does not matter: the set is what the step uses.
//   - the categorical sample: the CPU's rule (first v with u·Σp < p[0] + … + p[v] and p[v] > 0) with the
//     running sum formed as a parallel prefix in double, and the float probabilities rounded from the
//     device's exp (occasionally one float ulp from the host's). A pick differs from the CPU's only when
//     u·Σp lies within that rounding (≤ Σp·(2^-23 + 4·V·2^-53)) of a boundary of the running sum.
//   - noise tokens, the next canvas, the stability compare, EOS/pad: bit-identical.
// Logits must be finite (the model softcaps them); NaN and ±inf are outside this contract.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <vector>

#include "backend/cuda_buffer.h"
#include "sampling/rng.h"

namespace deltabit::cuda {

// The acceptance sort runs in one block of up to 1024 threads, one position each.
constexpr int64_t kDiffusionMaxCanvas = 1024;

// Per position, what the sample needs from the softmax pass.
struct DiffusionRowStats {
    float max;              // the largest scaled logit
    int32_t last_positive;  // the last v with float p[v] > 0, −1 when none (the CPU's fallback pick)
    double log_denom;       // log Σ exp(x − max)
    double total;           // Σ float p[v], added in double: the sample's u is unit · total
};

// The step's device-resident state that the host may read.
struct DiffusionStepFlags {
    int32_t finished;      // the early-stop flag: set by the step that met the stop rule; halts later steps
    int32_t steps;         // steps run in this block (halted ones not counted)
    int32_t history_head;  // the stability ring's oldest entry
    int32_t has_eos;       // commit_block: the committed block holds an EOS
    double mean_entropy;   // the last step's
};

struct DiffusionStepSettings {
    double entropy_bound = 0.1;
    int64_t stability_threshold = 1;
    double confidence_threshold = 0.005;
    std::vector<int64_t> eos_ids;  // empty: no EOS rule at commit
    int64_t pad_id = -1;           // < 0: no pad replacement
};

// ---- the kernels' entry points, each enqueued on `stream` without synchronising. `halt` points to a
// device int32: when it is non-zero at the kernel's start, the kernel does nothing. Layouts as in
// runtime/diffusion_step.h: [L][V] row-major, [L] per position. DiffusionStepCuda composes them; the
// tests call them one by one.

// units[0..n) = the next n SamplerRng::next_unit() of the state at rng_state (4 words), advanced.
void diffusion_draw_units(uint64_t* rng_state, int64_t n, double* units, const int32_t* halt, cudaStream_t stream);

// out[i] = uniform_token(units[i], V) for i < n (n ≤ kDiffusionMaxCanvas), or first[i] when first is set.
void diffusion_uniform_tokens(const double* units, int64_t n, int64_t V, const int32_t* first, int32_t* out,
                              const int32_t* halt, cudaStream_t stream);

// scale_and_measure without the probabilities: scaled[L][V], entropy[L], argmax[L] and the row stats.
void diffusion_measure_rows(const float* logits, int64_t L, int64_t V, float temperature, float* scaled,
                            double* entropy, int32_t* argmax, DiffusionRowStats* stats, const int32_t* halt,
                            cudaStream_t stream);

// sampled[r] = categorical_pick(softmax(scaled[r]), units[r]) by the rule above.
void diffusion_sample_rows(const float* scaled, const DiffusionRowStats* stats, int64_t L, int64_t V,
                           const double* units, int32_t* sampled, const int32_t* halt, cudaStream_t stream);

// What settles a step once sampled, entropy and argmax exist.
struct DiffusionSettleArgs {
    const double* entropy;        // [L]
    const int32_t* sampled;       // [L]
    const int32_t* argmax;        // [L]
    const double* noise_units;    // [L]: the step's second L uniforms
    uint8_t* accepted;            // [L] out
    int32_t* noise;               // [L] out
    int32_t* canvas;              // [L] out: accepted ? sampled : noise
    int32_t* history;             // [stability_threshold][L]: the last argmax canvases, a ring
    DiffusionStepFlags* flags;    // steps++, mean_entropy, finished, history_head; flags->finished is the halt
    int64_t L, V;
    double entropy_bound;
    int64_t stability_threshold;
    double confidence_threshold;
};
// accepted_positions, noise tokens, the next canvas, then DiffusionStopRule::finished and record.
void diffusion_settle_step(const DiffusionSettleArgs& args, cudaStream_t stream);

// The state of one canvas's denoising on the device, reused block after block.
class DiffusionStepCuda {
public:
    // Error, before anything is allocated, when canvas_length is not in [1, kDiffusionMaxCanvas],
    // n_vocab not in [1, 2^31 − 1], or stability_threshold < 0.
    DiffusionStepCuda(int64_t canvas_length, int64_t n_vocab, DiffusionStepSettings settings, uint64_t seed);

    // A block's start: clears the flags and the stability history, draws L uniforms and writes the
    // initial canvas (uniform tokens, or first_canvas [L] when it is not null: drawn all the same).
    void begin_block(int32_t* canvas, const int32_t* first_canvas, cudaStream_t stream);
    // One step after the model wrote logits [L][V] for `canvas`: draws 2L uniforms, then measure,
    // sample, accept, noise, and writes the next canvas into `canvas`; a no-op once the flag is set.
    void run_step(const float* logits, float temperature, int32_t* canvas, cudaStream_t stream);
    // The block's commit: committed[L] = the last step's argmax (the initial canvas when no step ran),
    // with the EOS/pad rule applied; flags.has_eos says whether it holds an EOS. Runs even when halted.
    void commit_block(int32_t* committed, cudaStream_t stream);

    // Host reads: each waits for `stream`.
    DiffusionStepFlags read_flags(cudaStream_t stream) const;
    SamplerRng::State read_rng_state(cudaStream_t stream) const;

    // Device views, valid until the next step.
    const int32_t* finished_flag() const { return &flags_.get<DiffusionStepFlags>()->finished; }
    // The last run step's scaled logits [L][V]: the next step's self-conditioning input (pass null on a
    // block's first step, as the CPU loop does).
    const float* self_conditioning() const { return scaled_.get<float>(); }
    const double* entropy() const { return entropy_.get<double>(); }
    const int32_t* argmax() const { return argmax_.get<int32_t>(); }
    const int32_t* sampled() const { return sampled_.get<int32_t>(); }
    const uint8_t* accepted() const { return accepted_.get<uint8_t>(); }
    const int32_t* noise() const { return noise_.get<int32_t>(); }
    const double* units() const { return units_.get<double>(); }
    int64_t canvas_length() const { return L_; }
    int64_t n_vocab() const { return V_; }

private:
    int64_t L_, V_;
    DiffusionStepSettings settings_;
    DeviceBuffer rng_state_;  // uint64 [4]
    DeviceBuffer units_;      // double [2L]
    DeviceBuffer scaled_;     // float [L][V]
    DeviceBuffer stats_;      // DiffusionRowStats [L]
    DeviceBuffer entropy_;    // double [L]
    DeviceBuffer argmax_;     // int32 [L]
    DeviceBuffer sampled_;    // int32 [L]
    DeviceBuffer accepted_;   // uint8 [L]
    DeviceBuffer noise_;      // int32 [L]
    DeviceBuffer history_;    // int32 [stability_threshold][L]
    DeviceBuffer flags_;      // DiffusionStepFlags
    DeviceBuffer eos_ids_;    // int64 [eos_ids.size()]
};

}  // namespace deltabit::cuda
