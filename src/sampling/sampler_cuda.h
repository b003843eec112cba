// The sampler chain on the GPU: the same stages, order and seed consumption as Sampler::sample
// (sampling/sampler.h, docs/sampling.md), reading the logits where the model left them. Only the chosen
// id and a few status bytes come back to the host; the vocabulary never crosses. Logits that are not
// finite are reported instead of sampled (core/non_finite_choice.h), found in the pass that reads them.
//
// How it stays equal to the CPU chain:
//   - Stages 1–2 touch only tokens in the history; their effect per token is computed on the host
//     (logit_adjustments, the CPU's own float expressions) and uploaded as a short list. The device
//     applies the list with non-contracted IEEE operations (__fdiv_rn, __fmul_rn, __fsub_rn), so every
//     logit, and every logit ÷ T, is bit-identical to the CPU's.
//   - Candidates are ordered by (logit desc, id asc) like the CPU's std::sort. Only a superset of what
//     can survive top-k / top-p / min-p is sorted: a histogram of (max − logit) bins bounds it.
//   - Top-p mass and the draw need prefix sums in that order. The CPU adds sequentially in double; the
//     GPU adds in parallel (a different rounding) and then checks a rounding-error certificate: when the
//     decision (mass ≥ top_p, target < cumulative) is farther from the threshold than the worst-case
//     difference of the two summation orders, the decisions agree; otherwise it redoes the sums
//     sequentially in the CPU's order. What can still differ: CUDA's double exp() and the host libm's
//     may round the same argument to neighbouring doubles (both are within 1 ulp), which moves a sum by
//     ~1e-16 relative; a token differs only if the draw falls that close to a boundary.
//   - The RNG is drawn only when more than one candidate survives, as on the CPU.
//   - With no truncating stage (top_k 0, top_p 1, min_p 0) the draw goes through the histogram: the
//     bin that holds unit · total is found from the bins' masses and only that bin is sorted, under
//     the same certificate; a crowded bin or a failed certificate falls back to sorting everything.
// Cost: each pass is replayed from a CUDA graph captured per (logits pointer, pass), so a call is one
// upload, one graph launch and one 72-byte read-back (the state's head; the non-finite report took what was
// padding), plus a radix sort only in the fallback.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <vector>

#include "backend/cuda_buffer.h"
#include "sampling/sampler.h"

namespace deltabit::cuda {

// Which way the last sample() went, for tests and logs (a fast path proves it ran).
struct GpuSamplerStats {
    int64_t greedy = 0;             // temperature ≤ 0: one argmax pass
    int64_t shortlist = 0;          // the bounded candidate set fit the one-block sort
    int64_t histogram_draw = 0;     // no truncating stage: drew through the histogram, sorted one bin
    int64_t full_sort = 0;          // sorted the whole vocabulary (flat distributions, top-k/p/min-p off)
    int64_t sequential_sums = 0;    // the certificate failed or the sums were not finite: CPU-order sums
    int64_t non_finite = 0;         // calls answered with a non-finite report instead of a token
    int64_t graph_launches = 0;     // passes replayed from a captured CUDA graph
};

class GpuSampler {
public:
    explicit GpuSampler(int64_t n_vocab);  // scratch sized once
    ~GpuSampler();
    GpuSampler(const GpuSampler&) = delete;
    GpuSampler& operator=(const GpuSampler&) = delete;

    // Draws the next token from device logits [n_vocab] (left unchanged), applying the same chain as
    // Sampler::sample with the same params and advancing sampler's RNG exactly as Sampler::sample would;
    // copies back only the chosen id (and a few bytes), never the vocabulary. Waits for `stream`.
    // When a raw logit (before stages 1–2) is NaN or ±inf it returns non_finite_choice(i) for the lowest
    // such i (a negative id) and leaves the RNG untouched: the CPU engine refuses those logits before it
    // calls Sampler::sample, so the chain is never asked to pick from them.
    int32_t sample(const float* device_logits, Sampler& sampler, const TokenHistory& history, cudaStream_t stream);

    int64_t n_vocab() const { return n_vocab_; }
    const GpuSamplerStats& stats() const { return stats_; }
    // Tests only: skip the parallel sums and always add in the CPU's order (one thread; slow).
    void set_force_sequential_sums(bool on) { force_sequential_ = on; }
    // The untruncated draw through the histogram (on by default); off, it sorts the vocabulary.
    void set_histogram_draw(bool on) { histogram_draw_ = on; }
    // Replay each pass from a captured CUDA graph (on by default); off, launch kernel by kernel.
    void set_use_graphs(bool on) { use_graphs_ = on; }

private:
    enum class Pass : int;
    struct CachedGraph;
    void reserve_call(size_t adjustments);
    void drop_graphs();
    void enqueue_pass(const float* logits, Pass pass, bool need_mass, cudaStream_t stream);
    void run_pass(const float* logits, Pass pass, bool need_mass, cudaStream_t stream);

    int64_t n_vocab_;
    bool force_sequential_ = false;
    bool histogram_draw_ = true;
    bool use_graphs_ = true;
    GpuSamplerStats stats_;
    DeviceBuffer keys_;           // uint32 [n_vocab]: descending-order key of logit ÷ T (~0u = not a candidate)
    DeviceBuffer keys_sorted_;    // uint32 [n_vocab]
    DeviceBuffer ids_;            // int32 [n_vocab]: 0..n_vocab−1, the sort's input values
    DeviceBuffer ids_sorted_;     // int32 [n_vocab]
    DeviceBuffer override_;       // int32 [n_vocab]: index into the uploaded list, −1 for untouched tokens
    DeviceBuffer shortlist_;      // uint64 [4096]: (key << 32 | id) of the bounded candidates
    DeviceBuffer state_;          // the per-call reductions, histogram and result (sampler_cuda.cu)
    DeviceBuffer sort_temp_;      // cub radix sort scratch
    size_t sort_temp_bytes_ = 0;
    DeviceBuffer call_;           // this call's parameters, then its stage 1–2 list
    void* host_call_ = nullptr;   // pinned staging for call_
    size_t call_capacity_ = 0;    // list entries call_ holds
    void* host_result_ = nullptr; // pinned: the head of the state (result, argmax)
    cudaStream_t capture_stream_ = nullptr;
    std::vector<CachedGraph> graphs_;
};

}  // namespace deltabit::cuda
