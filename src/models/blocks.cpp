#include "models/blocks.h"

#include "core/error.h"
#include "ops/activations.h"
#include "ops/attention.h"
#include "ops/conv1d.h"
#include "ops/delta_rule.h"
#include "ops/gated_rms_norm.h"
#include "ops/gdn_gates.h"
#include "ops/l2_norm.h"
#include "ops/matmul.h"
#include "ops/cpu_fast/matmul_cpu_fast.h"
#include "ops/moe_router.h"
#include "ops/rms_norm.h"
#include "ops/rope.h"
#include "ops/swiglu.h"

#include <algorithm>
#include <vector>

namespace deltabit {

namespace {

// transformers' l2norm uses a fixed 1e-6 inside the root, whatever rms_norm_eps is (reference §2.4
// step 7); llama.cpp uses rms_norm_eps, which is also 1e-6 in every published Qwen3.5 config.
constexpr float kL2NormEps = 1e-6f;

// transformers' torch_chunk_gated_delta_rule and llama.cpp both chunk by 64 tokens.
constexpr int64_t kDeltaRuleChunk = 64;

using Buffer = std::vector<float>;

Buffer buffer(int64_t n) { return Buffer(size_t(n)); }

}  // namespace

void matmul_with(MatmulNumerics numerics, const float* x, const WeightView& w, int64_t n_tokens, float* y,
                 ThreadPool* pool) {
    switch (numerics) {
        case MatmulNumerics::f32:
            if (pool)
                cpu_fast::matmul(x, w, n_tokens, y, cpu_fast::Activations::f32, *pool);
            else
                cpu::matmul(x, w, n_tokens, y);
            return;
        case MatmulNumerics::int8_weight_blocks:
            if (pool)
                cpu_fast::matmul(x, w, n_tokens, y, cpu_fast::Activations::int8, *pool);
            else
                cpu::matmul_int8_activations(x, w, n_tokens, y, cpu_fast::int8_group(w.dtype));
            return;
        case MatmulNumerics::int8_and_f16_prompts:
            if (w.dtype == DType::Q1_0 && n_tokens >= cpu::kPromptGemmMinTokens) {
                cpu::matmul_f16_activations(x, w, n_tokens, y);
                return;
            }
            [[fallthrough]];
        case MatmulNumerics::int8_activations: cpu::matmul_int8_activations(x, w, n_tokens, y); return;
    }
}

void BlockContext::observe(std::string_view what, const float* data, int64_t n) const {
    if (observer && *observer) (*observer)(fmt::format("blk.{}.{}", layer, what), data, n);
}

void attention_block(const BlockContext& ctx, const AttentionWeights& w, const float* x, int64_t n_tokens,
                     int64_t n_past, LayerState& state, float* out) {
    const ModelConfig& c = ctx.config;
    const int64_t T = n_tokens, H = c.n_head, H_kv = c.n_head_kv, dh = c.head_dim;
    const bool gated = c.attn_output_gate;
    const int64_t per_head = gated ? 2 * dh : dh;

    Buffer q_full = buffer(T * H * per_head);
    ctx.matmul(x, w.q, T, q_full.data());
    // With the output gate, q_proj's rows interleave per head: [q_h (dh) | gate_h (dh)].
    Buffer q = buffer(T * H * dh), gate = buffer(gated ? T * H * dh : 0);
    for (int64_t t = 0; t < T; ++t)
        for (int64_t h = 0; h < H; ++h) {
            const float* src = q_full.data() + (t * H + h) * per_head;
            std::copy(src, src + dh, q.data() + (t * H + h) * dh);
            if (gated) std::copy(src + dh, src + 2 * dh, gate.data() + (t * H + h) * dh);
        }
    Buffer k = buffer(T * H_kv * dh), v = buffer(T * H_kv * dh);
    ctx.matmul(x, w.k, T, k.data());
    ctx.matmul(x, w.v, T, v.data());

    // QK-norm per head, before RoPE.
    cpu::rms_norm(q.data(), w.q_norm, T * H, dh, c.rms_eps, cpu::NormWeight::plain, q.data());
    cpu::rms_norm(k.data(), w.k_norm, T * H_kv, dh, c.rms_eps, cpu::NormWeight::plain, k.data());
    std::vector<int32_t> positions(static_cast<size_t>(T));
    for (int64_t t = 0; t < T; ++t) positions[size_t(t)] = int32_t(n_past + t);
    cpu::rope_neox(q.data(), positions.data(), T, H, dh, c.rope_dim, c.rope_theta);
    cpu::rope_neox(k.data(), positions.data(), T, H_kv, dh, c.rope_dim, c.rope_theta);
    ctx.observe("attn.q", q.data(), T * H * dh);
    ctx.observe("attn.k", k.data(), T * H_kv * dh);
    ctx.observe("attn.v", v.data(), T * H_kv * dh);

    // The cache holds exactly the positions before this call; anything else is a caller bug that
    // would silently attend to the wrong keys.
    if (state.k.size() != n_past || state.v.size() != n_past)
        fail("blk.{}: KV cache holds {} keys and {} values but the sequence is at position {}", ctx.layer,
             state.k.size(), state.v.size(), n_past);
    // The new tokens enter in their per-token form and are attended that way; only then may a
    // quantising format (KIVI) compress what has left its exact window (models/kv_cache.h).
    state.k.append(k.data(), T);
    state.v.append(v.data(), T);
    const Buffer cached_k = state.k.read(), cached_v = state.v.read();

    Buffer attended = buffer(T * H * dh);
    const cpu::AttentionDims dims{T, n_past, H, H_kv, dh};
    cpu::attention(q.data(), cached_k.data(), cached_v.data(), gated ? gate.data() : nullptr, dims, attended.data());
    state.k.compress();
    state.v.compress();
    ctx.observe("attn.gated", attended.data(), T * H * dh);
    ctx.matmul(attended.data(), w.output, T, out);
    ctx.observe("attn.out", out, T * c.n_embd);
}

void gated_deltanet_block(const BlockContext& ctx, const DeltaNetWeights& w, const float* x, int64_t n_tokens,
                          LayerState& state, float* out) {
    const ModelConfig& c = ctx.config;
    const int64_t T = n_tokens, H_k = c.ssm_n_key_heads, H_v = c.ssm_n_value_heads;
    const int64_t d_k = c.ssm_key_dim, d_v = c.ssm_value_dim;
    const int64_t key_dim = H_k * d_k, value_dim = H_v * d_v, channels = c.ssm_conv_channels();

    Buffer mixed = buffer(T * channels), z = buffer(T * value_dim), b = buffer(T * H_v), a = buffer(T * H_v);
    ctx.matmul(x, w.qkv, T, mixed.data());
    ctx.matmul(x, w.gate, T, z.data());
    ctx.matmul(x, w.beta, T, b.data());
    ctx.matmul(x, w.alpha, T, a.data());

    Buffer conv = buffer(T * channels);
    cpu::conv1d_causal_silu(mixed.data(), w.conv, state.conv.data(), T, channels, c.ssm_conv_kernel, conv.data());
    ctx.observe("gdn.conv_out", conv.data(), T * channels);

    // Channels are [q (key_dim) | k (key_dim) | v (value_dim)].
    Buffer q = buffer(T * key_dim), k = buffer(T * key_dim), v = buffer(T * value_dim);
    for (int64_t t = 0; t < T; ++t) {
        const float* row = conv.data() + t * channels;
        std::copy(row, row + key_dim, q.data() + t * key_dim);
        std::copy(row + key_dim, row + 2 * key_dim, k.data() + t * key_dim);
        std::copy(row + 2 * key_dim, row + channels, v.data() + t * value_dim);
    }
    cpu::l2_norm(q.data(), T * H_k, d_k, kL2NormEps, q.data());
    cpu::l2_norm(k.data(), T * H_k, d_k, kL2NormEps, k.data());

    Buffer beta = buffer(T * H_v), g = buffer(T * H_v);
    cpu::gdn_gates(b.data(), a.data(), w.ssm_a, w.dt_bias, T, H_v, beta.data(), g.data());

    const cpu::DeltaRuleDims dims{T, H_k, H_v, d_k, d_v,
                                  c.value_head_order == ValueHeadOrder::tiled ? cpu::KeyHeadMap::tiled
                                                                              : cpu::KeyHeadMap::grouped};
    Buffer o = buffer(T * value_dim);
    // Mirror transformers: the chunked (WY) form for prompts, the recurrence for single tokens. Both
    // compute the same function; only fp32 rounding of the state differs. The CPU fast path (a pool) takes
    // the recurrence for prompts too: on a CPU it costs ~4·d_k·d_v a head and token, where the naive chunked
    // form spent most of a small model's prompt time in its per-chunk matrices and exponentials (profiled on
    // the qwen3_5 fixture, 512 tokens: 60% of the prompt). The numerics that mirror the CUDA engine keep the
    // chunked form the GPU runs.
    const bool fast_path = ctx.pool != nullptr && (ctx.numerics == MatmulNumerics::f32 ||
                                                   ctx.numerics == MatmulNumerics::int8_weight_blocks);
    if (T == 1 || fast_path)
        cpu::gated_delta_rule_recurrent(q.data(), k.data(), v.data(), g.data(), beta.data(), dims,
                                        state.recurrent.data(), o.data());
    else
        cpu::gated_delta_rule_chunked(q.data(), k.data(), v.data(), g.data(), beta.data(), dims,
                                      state.recurrent.data(), o.data(), kDeltaRuleChunk);
    ctx.observe("gdn.core_out", o.data(), T * value_dim);

    cpu::gated_rms_norm(o.data(), z.data(), w.norm, T * H_v, d_v, c.rms_eps, o.data());
    ctx.matmul(o.data(), w.output, T, out);
    ctx.observe("gdn.out", out, T * c.n_embd);
}

void swiglu_ffn(const BlockContext& ctx, const FfnWeights& w, const float* x, int64_t n_tokens, float* out) {
    const int64_t width = w.gate.rows;
    Buffer gate = buffer(n_tokens * width), up = buffer(n_tokens * width);
    ctx.matmul(x, w.gate, n_tokens, gate.data());
    ctx.matmul(x, w.up, n_tokens, up.data());
    cpu::swiglu(gate.data(), up.data(), n_tokens * width, gate.data());
    ctx.matmul(gate.data(), w.down, n_tokens, out);
}

void moe_ffn(const BlockContext& ctx, const MoeWeights& w, const float* x, int64_t n_tokens, float* out) {
    const ModelConfig& c = ctx.config;
    const int64_t T = n_tokens, D = c.n_embd, E = c.n_expert, top_k = c.n_expert_used, F = c.expert_ff;

    Buffer logits = buffer(T * E);
    ctx.matmul(x, w.router, T, logits.data());
    std::vector<int32_t> ids(size_t(T * top_k));
    Buffer weights = buffer(T * top_k);
    cpu::moe_router(logits.data(), T, E, top_k, c.norm_topk_prob, ids.data(), weights.data());

    std::fill(out, out + T * D, 0.0f);
    Buffer gate = buffer(F), up = buffer(F), down = buffer(D);
    for (int64_t t = 0; t < T; ++t) {
        const float* xt = x + t * D;
        for (int64_t j = 0; j < top_k; ++j) {
            const int64_t e = ids[size_t(t * top_k + j)];
            ctx.matmul(xt, w.gate.slice_rows(e * F, F), 1, gate.data());
            ctx.matmul(xt, w.up.slice_rows(e * F, F), 1, up.data());
            cpu::swiglu(gate.data(), up.data(), F, gate.data());
            ctx.matmul(gate.data(), w.down.slice_rows(e * D, D), 1, down.data());
            const float p = weights[size_t(t * top_k + j)];
            for (int64_t i = 0; i < D; ++i) out[t * D + i] += p * down[size_t(i)];
        }
    }
    if (w.has_shared) {
        Buffer shared = buffer(T * D), shared_gate = buffer(T);
        swiglu_ffn(ctx, w.shared, x, T, shared.data());
        ctx.matmul(x, w.shared_gate, T, shared_gate.data());
        for (int64_t t = 0; t < T; ++t) {
            const float s = float(cpu::sigmoid(shared_gate[size_t(t)]));
            for (int64_t i = 0; i < D; ++i) out[t * D + i] += s * shared[size_t(t * D + i)];
        }
    }
    ctx.observe("moe.out", out, T * D);
}

}  // namespace deltabit
