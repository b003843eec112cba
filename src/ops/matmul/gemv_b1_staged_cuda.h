// The binary tensor-core GEMV fed from a shared-memory ring (gemv_q1_0_b1_staged). EXPERIMENT: measured by
// bench_gemv_cuda --b1-staged and tested against the CPU reference and gemv_q1_0_b1
// (tests/cuda/test_gemv_cuda.cpp, GemvB1StagedCuda), not planned by the engine.
//
// Why (docs/bench-notes.md, "The binary tensor-core GEMV fed from a ring"): each decode GEMV alone pays its DRAM
// ramp and drain. The staged GEMV (a ring of weights requested BEFORE the wait for the kernel before, so the
// next GEMV's weights stream while this one drains) won on chains but lost in the model because its 8 warps an
// SM ran the dp4a dot (~0.6 instructions a weight); the b1 GEMV's dot is ~0.1 instructions a weight but it
// holds only one batch of codes in registers across the wait. This kernel is the two together: a few warps
// doing the b1 dot keep up with DRAM, and a ring of several KB a warp streams across the kernel boundary.
//
// Work. 16-row tiles, `splits` warps a tile, each a K slice of the unit groups (gemv_q1_0_b1's tiles and
// slices); block b takes tiles b·T + i + r·grid·T (T = warps / splits tiles a round, as gemv_q1_0_b1). Each warp
// streams its own (tile, slice) pieces through its own ring of `stages` stages of `stage_groups` unit groups
// (16 rows × 4 units × 16 bytes = 1 KB of codes a group, plus the rows' fp16 scales as the aligned 4-byte
// words that hold them), by 16- and 4-byte cp.async; all `stages` are requested before
// wait_for_predecessor() — weights depend on no kernel of the step — and each is refilled as soon as the warp
// has computed it, so a warp never waits at a block barrier for its copies. After the wait the block copies x's
// bit planes and group sums into shared memory (they depend on the kernel before), then runs the b1 dot from
// shared memory. Rounds with splits > 1 meet at one block barrier, the slices added in slice order.
//
// Numerics: the terms and their order are gemv_q1_0_b1's with the same `splits` (a lane adds its units in
// group order, the quad by two xor shuffles, the slices in order), so y equals gemv_q1_0_b1's bit for bit for
// the same splits, whatever the warps, stages, stage size and grid (ops/matmul/gemv_b1_device.cuh).
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

#include "ops/matmul/gemv_b1_cuda.h"
#include "ops/matmul/matmul_cuda.h"

namespace deltabit::cuda {

// The knobs the bench sweeps. Shared memory a block: warps · stages · (1152 · stage_groups + 64) bytes of ring,
// plus K's planes (128 bytes a unit) and group sums (8 bytes a unit).
struct GemvB1StagedConfig {
    int warps_per_block = 8;  // 1..8, a multiple of splits
    int splits = 4;           // warps sharing a 16-row tile, each a K slice (the y bits follow it: see above)
    int stages = 4;           // ring stages a warp, all requested before the wait: 2, 3, 4, 6 or 8
    int stage_groups = 2;     // unit groups a stage holds (1 KB of codes each): 1, 2, 4 or 8
    int blocks_per_sm = 1;    // blocks the grid puts on an SM at most; the rest of the SM is the next kernel's
    int max_grid = 0;         // at most this many blocks (0: no cap) — for tests, so blocks walk many rounds
    // As few blocks as take the same number of rounds (e.g. 320 tiles of 2 a block: 80 blocks of two rounds, not
    // 132 blocks of which 28 run a second): the same makespan in rounds, and the SMs left free take the next
    // kernel's blocks, which stream their weights meanwhile.
    bool balanced_grid = false;
};

// What a launch used: for the bench's lines and the tests.
struct GemvB1StagedLaunch {
    int64_t grid = 0;
    size_t smem_bytes = 0;    // dynamic shared memory a block
    int resident_per_sm = 0;  // blocks of this shape an SM can hold (registers, shared memory, threads)
    int64_t ring_bytes = 0;   // weights a block has in flight before its wait
};

// The launch `config` gives for a matrix of `cols` inputs and `rows` rows on this device, without launching.
// Throws deltabit::Error on a config it cannot run (its message names the knob).
GemvB1StagedLaunch gemv_b1_staged_shape(int64_t rows, int64_t cols, const GemvB1StagedConfig& config);

// y = W·x for a Q1_0 matrix (w.cols == x.cols, a multiple of 128) and x's planes, built from this x — the
// contract of gemv_q1_0_b1: a plain activations view only, no epilogues. Launched programmatically (its
// weights are requested before the wait for the kernel before). Throws deltabit::Error on a mismatch.
GemvB1StagedLaunch gemv_q1_0_b1_staged(const QuantizedActivationsView& x, const ActivationBitPlanes& planes,
                                       const GemvWeightView& w, float* y, cudaStream_t stream,
                                       const GemvB1StagedConfig& config = {});

}  // namespace deltabit::cuda
