// The routed experts of an MoE feed-forward on the GPU, grouped by expert, with no host round trip: the
// device twin of the expert loop of models/blocks.cpp moe_ffn (and of models/diffusion_gemma.cpp's experts,
// whose GLU is GELU and whose experts carry a scale). For every token t and slot j < top_k, e = ids[t][j]:
//
//   out[t] = Σ_j p[t][j] · s[e] · down_e · act(gate_e · x[t], up_e · x[t])   (slots summed in order j = 0, 1, ...)
//            + sigmoid(shared_gate[t]) · shared[t]                             (when a shared expert is given)
//
//   x            [T][D]          f32, the FFN input
//   ids, p       [T][top_k]      the router's choices (ops/moe_router.h), on the device; ids in [0, E)
//   s            [E]             per-expert scale, or nullptr for 1
//   gate, up     E stacked [F][D] slices: expert e's rows are e·F .. e·F + F − 1
//   down         E stacked [D][F] slices: expert e's rows are e·D .. e·D + D − 1
//   act          GluActivation: silu(g)·u (ops/swiglu.h) or gelu_tanh(g)·u (ops/gelu_glu.h)
//   shared       [T][D] and shared_gate [T] (logits) or both nullptr
//   out          [T][D]          written (not accumulated); must not overlap the inputs or the scratch
//
// How (ops/moe/moe_experts_cuda.cu): a counting sort of the T·top_k (token, slot) pairs by expert on the
// device (within an expert by token, then slot: the order is the same every run), then one launch per matrix
// kind over all experts, each block a (non-empty expert, tile of output rows) walking that expert's rows; the
// experts' outputs land in rows of their own, and one last kernel sums each token's top_k rows in slot order
// (no float atomics: bit for bit the same every run). Nothing depends on the counts on the host, so the
// launches are the same for every routing and can live in a CUDA graph. Launches, whatever T and top_k: the
// sort, gate+up+act, down, the combine, and one more before each quantised product (its input rows to int8):
// 6 with quantised experts, 4 with plain ones. The products run on tensor cores (ops/moe/moe_experts_mma_cuda.cu:
// weight rows as the mma's M side, the expert's pairs as N) for quantised and BF16 weights, on CUDA cores for
// F32 and F16 weights, or for all when MoeExpertsArgs::tensor_cores is false or DELTABIT_MOE_MMA=0.
//
// Numerics. Quantised weights (Q1_0, Q2_0, Q2_0_G64, Q4_0, Q8_0 in the GEMV layout): the activations of each
// row (x, then act) are rounded to int8 per group of 128 by the decode GEMV's quantiser
// (ops/cuda/activation_quant.cuh, codes bit for bit those of cuda::quantize_activations), and each output is
// Σ d_w · scale_g · dot in fp32 over exact integer dots: on CUDA cores one dot per 16-byte unit (the GEMV's
// terms) summed per lane then by a butterfly; on tensor cores one dot per weight-scale group (the prompt GEMM's
// terms: the GEMV's, except that Q2_0 and Q8_0, whose GEMV units are half a scale group, have two units' dots in
// one term) added by fmaf in k order. So against
// cpu::matmul_int8_activations (the reference the model parity tests use) each product differs by fp32
// summation only, and act and the combine by fp32 rounding. Plain weights: F32 and F16 (and BF16 on CUDA
// cores) as fp32 products summed per lane in k order then by a butterfly, as cuda::matmul_plain; BF16 on tensor
// cores with the input split in three bf16 parts (x = hi + mid + lo within 2⁻²⁴·|x|, as
// ops/matmul/dense_gemm_cuda.h), each k16 step's exact products added by the tensor cores (aligned to the
// largest and truncated) into a fresh accumulator, the steps' sums added in k order — fp32-class, with a bound
// of its own. Either path gives the same bits on every run. The bounds are derived in
// tests/cuda/test_moe_experts_cuda.cpp.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

#include "core/tensor.h"
#include "ops/matmul/matmul_cuda.h"

namespace deltabit::cuda {

enum class GluActivation { silu, gelu_tanh };

// One stacked expert matrix on the device: quantised in the GEMV layout, or plain F32/F16/BF16 GGUF rows.
struct ExpertMatrixView {
    bool quantized = false;
    GemvWeightView q;
    WeightView plain;
    int64_t rows() const { return quantized ? q.rows : plain.rows; }
    int64_t cols() const { return quantized ? q.cols : plain.cols; }
    DType dtype() const { return quantized ? q.dtype : plain.dtype; }
};

struct MoeExpertsArgs {
    const float* x = nullptr;
    int64_t n_tokens = 0;  // T
    int64_t dim = 0;       // D
    int64_t n_expert = 0;  // E
    int64_t expert_ff = 0; // F
    int64_t top_k = 0;
    const int32_t* ids = nullptr;
    const float* weights = nullptr;
    const float* expert_scale = nullptr;
    ExpertMatrixView gate, up, down;
    GluActivation activation = GluActivation::silu;
    const float* shared = nullptr;
    const float* shared_gate = nullptr;
    float* out = nullptr;
    // false: every product on the CUDA-core kernels (tests compare both paths; DELTABIT_MOE_MMA=0 does the same).
    bool tensor_cores = true;
};

// What a call launched, so tests and callers can see the grouped path ran.
struct MoeLaunchReport {
    int launches = 0;
    int64_t expert_tiles = 0;  // (expert slot, row tile) items of the gate+up launch
    int mma_products = 0;      // of the two products (gate+up, down), those that ran on tensor cores
};

// Device scratch the call needs (256-byte aligned pieces); the same for every routing of T tokens.
size_t moe_experts_scratch_bytes(const MoeExpertsArgs& a);

// Checks the shapes (deltabit::Error naming what disagrees: E·F rows of gate and up, E·D of down, their
// columns, one dtype for gate and up, 1 <= top_k <= E) and enqueues the launches on `stream`.
// T = 0 launches nothing.
MoeLaunchReport moe_experts(const MoeExpertsArgs& a, void* scratch, cudaStream_t stream);

}  // namespace deltabit::cuda
