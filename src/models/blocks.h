// The shared blocks every architecture is built from, on the CPU reference ops (src/ops). Each block
// takes the already-normed hidden states of T new tokens, x[T][n_embd] row-major, and writes its
// output (to be added to the residual) to out[T][n_embd]; out must not overlap x. Math:
// ../shared/reference/qwen35-transformers.md §2.3–2.5 (hybrids) and §5 (qwen3), in the GGUF
// conventions of models/weights.h.
#pragma once

#include "core/tensor.h"
#include "core/thread_pool.h"
#include "models/model_config.h"
#include "models/sequence_state.h"

#include <cstdint>
#include <functional>
#include <string_view>

namespace deltabit {

// Sees every named intermediate ("blk.3.attn.out", [T][...] row-major, n values) when set; the
// same names on every backend let two runs be diffed.
using ActivationObserver = std::function<void(std::string_view name, const float* data, int64_t n)>;

// How the reference computes products with stored weights: exactly in f32 (the default, what rung 2
// certifies), or with activations rounded as the CUDA engine rounds them (so the GPU path can be checked
// against a reference with the same rounding; ops/matmul.h): int8_activations to int8 per 128, as its GEMV
// and its int8 prompt GEMM do; int8_and_f16_prompts the same except for Q1_0 products of at least
// cpu::kPromptGemmMinTokens tokens, which its prompt GEMM on Hopper computes on f16 activations
// (cpu::matmul_f16_activations; ops/matmul/gemm_cuda.h gemm_q1_0_half).
// int8_weight_blocks is the CPU fast path's own rounding (ops/cpu_fast/matmul_cpu_fast.h): quantised weights' products
// on activations rounded to int8 per group of the weight's block size.
enum class MatmulNumerics { f32, int8_activations, int8_and_f16_prompts, int8_weight_blocks };

// With a pool, f32 and int8_weight_blocks run on the CPU fast path (cpu_fast::matmul on the pool's threads);
// without one, on the naive reference (int8_weight_blocks: cpu::matmul_int8_activations with the weight's
// block as group). int8_activations and int8_and_f16_prompts mirror the CUDA engine and always run the
// reference.
void matmul_with(MatmulNumerics numerics, const float* x, const WeightView& w, int64_t n_tokens, float* y,
                 ThreadPool* pool = nullptr);

struct BlockContext {
    const ModelConfig& config;
    int64_t layer = 0;
    const ActivationObserver* observer = nullptr;  // may be null
    MatmulNumerics numerics = MatmulNumerics::f32;
    ThreadPool* pool = nullptr;  // the CPU fast path's threads; null: the reference

    void observe(std::string_view what, const float* data, int64_t n) const;
    void matmul(const float* x, const WeightView& w, int64_t n_tokens, float* y) const {
        matmul_with(numerics, x, w, n_tokens, y, pool);
    }
};

// The weights of each block, one description for every backend: M is how a matrix is held (WeightView on
// the CPU; the uploaded form on a GPU, models/weights_cuda.h), vectors are F32 pointers (host or device).
// map_layer (models/model.h) visits every tensor in one place, so a backend takes a bound model as it is.
template <class M>
struct AttentionWeightsOf {
    M q;        // [n_head·head_dim·(gate ? 2 : 1)][n_embd]; with the gate, per head [q_h | gate_h]
    M k, v;     // [n_head_kv·head_dim][n_embd]
    M output;   // [n_embd][n_head·head_dim]
    const float* q_norm = nullptr;  // [head_dim] (1+w already added for the hybrids)
    const float* k_norm = nullptr;
};

template <class M>
struct DeltaNetWeightsOf {
    M qkv;      // [2·H_k·d_k + H_v·d_v][n_embd], output [q | k | v]
    M gate;     // z, [H_v·d_v][n_embd]
    M beta;     // [H_v][n_embd]
    M alpha;    // [H_v][n_embd]
    M output;   // [n_embd][H_v·d_v]
    const float* conv = nullptr;     // [channels][K] (GGUF ssm_conv1d {K, channels})
    const float* ssm_a = nullptr;    // [H_v], −exp(A_log)
    const float* dt_bias = nullptr;  // [H_v]
    const float* norm = nullptr;     // [d_v], plain w
};

template <class M>
struct FfnWeightsOf {
    M gate, up;  // [n_ff][n_embd]
    M down;      // [n_embd][n_ff]
};

template <class M>
struct MoeWeightsOf {
    M router;       // [n_expert][n_embd]
    M gate, up;     // experts stacked: [n_expert·expert_ff][n_embd]; expert e's rows [e·expert_ff, +expert_ff)
    M down;         // [n_expert·n_embd][expert_ff]; expert e's rows [e·n_embd, +n_embd)
    bool has_shared = false;
    FfnWeightsOf<M> shared;  // width shared_expert_ff
    M shared_gate;  // [1][n_embd]: sigmoid gate of the shared expert's output
};

using AttentionWeights = AttentionWeightsOf<WeightView>;
using DeltaNetWeights = DeltaNetWeightsOf<WeightView>;
using FfnWeights = FfnWeightsOf<WeightView>;
using MoeWeights = MoeWeightsOf<WeightView>;

// Full attention with its KV cache: appends the T new keys/values to state.k/v at positions
// n_past .. n_past+T−1 and attends over all of them as the cache's format reads them back (the new ones
// in their per-token form; then KIVI compresses: models/kv_cache.h). The sigmoid output gate is used
// when config.attn_output_gate (the hybrids).
void attention_block(const BlockContext& ctx, const AttentionWeights& w, const float* x, int64_t n_tokens,
                     int64_t n_past, LayerState& state, float* out);

// Gated DeltaNet: conv window and recurrent state carried in `state`.
void gated_deltanet_block(const BlockContext& ctx, const DeltaNetWeights& w, const float* x, int64_t n_tokens,
                          LayerState& state, float* out);

// down(silu(gate x) ⊙ up x).
void swiglu_ffn(const BlockContext& ctx, const FfnWeights& w, const float* x, int64_t n_tokens, float* out);

// Σ_top-k p_e · expert_e(x) + sigmoid(shared_gate · x) · shared(x).
void moe_ffn(const BlockContext& ctx, const MoeWeights& w, const float* x, int64_t n_tokens, float* out);

}  // namespace deltabit
