// A chain of decode GEMVs in ONE persistent launch (sm_90, Q1_0): one block per SM runs the chain's matrices
// in order, a grid-wide barrier between two (each may read what the one before wrote), while a producer warp
// per block has the copy engine stream every matrix's weights, one after the other, into a ring of
// shared-memory slots — it never waits for the barriers, only for free slots. So the weights of the next
// GEMV are already arriving while the last blocks finish this one, the barrier, and the copy of the new
// activations: the DRAM ramp and drain a kernel pays alone (deltabit bench's floors line: one kernel
// streams 12 MiB at half the copy bandwidth) is paid once per chain instead of once per matrix.
//
// An experiment, not used by the model: measured on a Bonsai-27B layer's four GEMVs it is slower than the
// calls (docs/bench.md, "The GEMV chain"): each op's barrier, activation copy and epilogue are serial L2
// round trips (~6 µs an op), and its consumer warps compute the dp4a dots no faster than the classic kernel.
//
// Each op is one of the decode GEMV calls of ops/matmul_cuda.h (group, SwiGLU with or without its quantised
// output, add-norm), with that call's checks and its planned lanes per row; a row's terms are summed in the
// same order as the classic kernel's (the unit dots, fmaf and butterfly of ops/gemv_device.cuh), so every
// output, residual, code, group scale and sum equals what the same calls made one by one give, bit for bit
// (tests/cuda/test_gemv_chain_cuda.cpp).
//
// Rules: the blocks of a launch spin on a counter for the barriers, so all of them must be resident at once:
// one block per SM (the launch refuses a device where that block does not fit), and nothing the chain waits
// for may wait for the chain. Activations the chain itself writes are read at L2 (never through the read-only
// path). The counters live in a GemvChainScratch that the launch leaves zeroed, so one scratch serves every
// chain launched one after another on one stream (a graph replays them as they were recorded).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <span>
#include <vector>

#include "backend/cuda_buffer.h"
#include "ops/matmul_cuda.h"

namespace deltabit::cuda {

// Whether chains can run here: a device of compute capability 9.0 or above.
bool gemv_chain_supported();

// The barrier counters of chains launched one after another on one stream (zeroed here and at the end of
// every launch).
struct GemvChainScratch {
    DeviceBuffer counters;
    GemvChainScratch();
};

// What a launch did.
struct GemvChainReport {
    int ops = 0;
    int64_t blocks = 0;   // the grid: one block per SM
    int slots = 0;        // ring slots a block cycles through
    int slot_bytes = 0;
};

class GemvChain {
public:
    static constexpr int kMaxOps = 16;
    explicit GemvChain(const GemvChainScratch& scratch);

    // The ops, in the order they run; each the same checks, planned shape and outputs as the call named.
    // Q1_0 weights only; throws deltabit::Error naming what is wrong (nothing is recorded then).
    void group(const QuantizedActivationsView& x, std::span<const GemvOutput> outputs);  // gemv_quantized_group
    void gemv(const QuantizedActivationsView& x, const GemvWeightView& w, float* y);     // gemv_quantized
    void swiglu(const QuantizedActivationsView& x, const GemvWeightView& gate, const GemvWeightView& up, float* y,
                const QuantizedActivationsView* y_quantized = nullptr);  // gemv_quantized_swiglu
    void add_norm(const QuantizedActivationsView& x, const GemvWeightView& w, float* residual, const float* norm_w,
                  const QuantizedActivationsView& out);  // gemv_quantized_add_norm

    int size() const { return int(ops_.size()); }
    // One launch of the recorded ops (programmatic: the first op's activations are read after the kernel before
    // has finished; its weights are requested before). The chain is kept (launch it again, or clear it).
    GemvChainReport launch(cudaStream_t stream) const;
    void clear() { ops_.clear(); }

    // A recorded op: the call's arguments.
    enum class Kind { group, swiglu, add_norm };
    struct Op {
        Kind kind = Kind::group;
        QuantizedActivationsView x;
        GemvOutput outputs[kMaxGemvGroup];
        int n_outputs = 0;
        GemvWeightView up;                        // swiglu
        bool quantised_output = false;            // swiglu with y_quantized, add_norm
        QuantizedActivationsView y_quantized;     // swiglu's y_quantized, add_norm's out
        const float* norm_w = nullptr;            // add_norm
    };

private:
    void add(const Op& op);
    const GemvChainScratch* scratch_;
    std::vector<Op> ops_;
};

}  // namespace deltabit::cuda
