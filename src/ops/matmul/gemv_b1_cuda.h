// The Q1_0 decode GEMV on binary tensor cores (mma.m16n8k128.b1.and.popc). EXPERIMENT: measured by
// bench_gemv_cuda --b1 and tested against the CPU reference (tests/cuda/test_gemv_cuda.cpp), not planned by
// the engine yet.
//
// Why: the classic kernel's dp4a dot spends ~0.6 instructions per weight, ~0.34 of them on the half-rate
// integer ALU, and the ALU is what keeps a 12 MB GEMV at ~2.6 TB/s even when its weights sit in L2
// (bench/gemv_cuda.cpp's header). The binary mma does a row's 128-weight unit against a bit plane of the
// activations in one instruction per 16 rows: ~0.1 instructions per weight, almost none of them ALU.
//
// The arithmetic. With b the weight bits (1 = +1, 0 = −1) and q the int8 activations of a 128-input group,
// Σ sign·q = 2·Σ_{b=1} q − Σq, and Σ_{b=1} q = Σ_p w_p · popc(b AND plane_p(q)) over the eight bit planes of
// q's two's complement (w_p = 2^p, w_7 = −128). The integer dot is exact, so y differs from the classic
// kernel's only in the order of its fp32 additions.
//
// The fragments (PTX ISA, mma.m16n8k128 with .b1; g = lane / 4, t = lane % 4): A a0 = row g, a1 = row g + 8,
// each 32 k-bits [32t, 32t + 32); B b0 = k-bits [32t, 32t + 32) of column g; C c0, c1 = (g, 2t), (g, 2t + 1),
// c2, c3 = (g + 8, 2t), (g + 8, 2t + 1). A warp owns 16 rows and walks their units four at a time: lane-quad
// thread t loads unit 4i + t of its two rows (16 bytes each, the repacked layout of weight_repack.h as it
// is) and mma j (j = 0..3) takes word j of it. Column n of B is nonzero only on the k-bits of thread n / 2,
// so C's columns 2t, 2t + 1 see unit 4i + t alone — each thread's results are for the unit it loaded, whose
// scale it holds (config.splits warps may share a tile, each a slice of the unit groups). B column parity
// picks the plane pair: four mmas (plane pairs) × four words per unit group,
// the four words accumulated in the mma's C. The planes are built once per activation vector
// (build_activation_bit_planes), in the bit order of the repacked words (bit 8B + s of word j pairs with
// input 32j + 4s + B), so A's bits and B's line up without moving either.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "backend/cuda_buffer.h"
#include "ops/matmul/matmul_cuda.h"

namespace deltabit::cuda {

// The mma exists from compute capability 8.0.
bool gemv_b1_supported();

// The eight bit planes of an activation vector's int8 codes, laid out for the kernel: per unit of 128 inputs
// (units rounded up to 4, the padding zero), per word j, per column parity, four 32-bit planes (parity 0:
// planes 0, 2, 4, 6; parity 1: 1, 3, 5, 7); then one zero 16-byte word, what B's inactive lanes read.
struct ActivationBitPlanes {
    DeviceBuffer buffer;
    int64_t max_cols = 0;
    explicit ActivationBitPlanes(int64_t max_cols);
};
// Builds the planes of x's codes (x.cols a multiple of 128, at most planes.max_cols).
void build_activation_bit_planes(const QuantizedActivationsView& x, const ActivationBitPlanes& planes,
                                 cudaStream_t stream);

struct GemvB1Config {
    int warps_per_block = 4;  // 1..8, a multiple of splits
    int batch = 4;            // unit groups (4 units of each of a lane's 2 rows) loaded at once: 2, 4 or 8
    // Warps sharing one 16-row tile, each a slice of K (their sums meet in shared memory, added in slice
    // order): small-N matrices need them to fill the card (N / 16 tiles alone are a few warps per SM).
    int splits = 1;
};
// y = W·x for a Q1_0 matrix (w.cols == x.cols, a multiple of 128) and x's planes, built from this x.
// A plain activations view only (no deferred norm); no epilogues. Throws deltabit::Error on a mismatch.
void gemv_q1_0_b1(const QuantizedActivationsView& x, const ActivationBitPlanes& planes, const GemvWeightView& w,
                  float* y, cudaStream_t stream, const GemvB1Config& config = {});

}  // namespace deltabit::cuda
