#include "train/cuda/train_model.h"

#include "backend/cuda_buffer.h"
#include "core/error.h"
#include "train/cuda/gemm.h"
#include "train/cuda/kernels.h"
#include "train/cuda/muon_update.h"
#include "train/cuda/profile_events.h"
#include "train/cuda/profiled_ops.h"
#include "train/muon.h"
#include "train/qat.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <unordered_map>

namespace deltabit::train::cuda {
namespace {

using deltabit::cuda::cuda_check;
using deltabit::cuda::DeviceBuffer;

// transformers' l2norm inside the delta rule (reference_model.cpp kL2NormEps).
constexpr float kL2NormEps = 1e-6f;
// The LM head forms logits for at most this many values at a time (rows = this / V).
constexpr int64_t kLogitChunkValues = int64_t(1) << 21;

}  // namespace

// The ops are ProfiledOps' members (profiled_ops.h): the same calls, timed under `--profile`.
struct TrainModel::Impl : ProfiledOps {
    const ParameterLayout& layout;
    const ModelConfig& c;
    const int64_t P, D, V, F;
    const bool one_plus;  // qwen35's 1+w norms
    std::unordered_map<std::string, int64_t> offsets;

    // m holds Muon's momentum in the hidden matrices' slots under optimizer.kind = "muon" (train/muon.h).
    DeviceBuffer params, weights, grads, m, v, adam_flags;
    int64_t adam_step = 0;
    MuonWorkspace muon_workspace;
    bool weights_are_params = false;  // λ = 0 with no explicit weights: the forward reads the master weights

    // Activations, by name, grown to the largest micro-batch; the layer inputs are one buffer.
    std::map<std::string, DeviceBuffer> buffers;
    // With keep_activations a layer's forward in training writes what its backward reads (kept()) into
    // buffers of its own, named with `scope` = "L3." while layer 3 runs forward or backward; "" is the
    // shared set the recomputing backward and evaluation use. Temporaries of the forward and the
    // backward's gradients (buf()) stay shared: one layer's worth, whatever the mode.
    bool keep_activations = false;
    std::string scope;
    DeviceBuffer tokens, targets, loss_sum;
    int64_t B = 0, T = 0, N = 0;
    // Set by set_profile; `events` (ProfiledOps) points at it only inside a profiled training step, so
    // an evaluation between steps records nothing.
    std::unique_ptr<ProfileEvents> profile_events;

    explicit Impl(const ParameterLayout& l)
        : layout(l), c(l.config()), P(l.total()), D(c.n_embd), V(c.n_vocab), F(c.n_ff), one_plus(c.arch == Arch::qwen35),
          params(size_t(P) * 4), weights(size_t(P) * 4), grads(size_t(P) * 4), m(size_t(P) * 4), v(size_t(P) * 4),
          adam_flags(size_t(P)), loss_sum(sizeof(double)) {
        const bool has_deltanet = std::any_of(c.layers.begin(), c.layers.end(),
                                              [](LayerKind k) { return k != LayerKind::full_attention; });
        if (has_deltanet && c.ssm_key_dim > kDeltaMaxKeyDim)
            fail("train cuda: deltanet key dim {} is more than the GPU delta rule's {} (the CPU backend has no limit)",
                 c.ssm_key_dim, kDeltaMaxKeyDim);
        for (const ParameterInfo& p : layout.all()) offsets[p.name] = p.offset;
        std::vector<uint8_t> flags(size_t(P), kAdamFlagNoDecay);
        for (const ParameterInfo& p : layout.all())
            if (p.role == ParameterRole::matrix || p.role == ParameterRole::embedding)
                std::fill_n(flags.begin() + p.offset, p.size, p.hidden_matrix ? kAdamFlagHiddenMatrix : kAdamFlagDecay);
        adam_flags.upload(flags.data(), flags.size());
        zero(m.get<float>(), P);
        zero(v.get<float>(), P);
        zero(grads.get<float>(), P);
    }

    int64_t offset(const std::string& name) const {
        const auto it = offsets.find(name);
        if (it == offsets.end()) fail("train cuda: the model has no parameter {}", name);
        return it->second;
    }
    const float* W(const std::string& name) const {
        return (weights_are_params ? params : weights).get<float>() + offset(name);
    }
    float* G(const std::string& name) const { return grads.get<float>() + offset(name); }

    float* buf(const std::string& name, int64_t n) {
        DeviceBuffer& b = buffers[name];
        const size_t bytes = size_t(std::max<int64_t>(n, 1)) * sizeof(float);
        if (b.bytes() < bytes) b = DeviceBuffer(bytes);
        return b.get<float>();
    }
    // An activation the layer's backward reads (the forward writes it, nothing else does).
    float* kept(const std::string& name, int64_t n) { return buf(scope + name, n); }
    float* zeroed(const std::string& name, int64_t n) {
        float* p = buf(name, n);
        zero(p, n);
        return p;
    }
    float* layer_input(int64_t l) { return buf("layer_inputs", (c.n_layer() + 1) * N * D) + l * N * D; }

    void load_batch(const Batch& batch) {
        if (batch.n_sequences <= 0 || batch.length <= 0) fail("train cuda: an empty batch");
        B = batch.n_sequences;
        T = batch.length;
        N = B * T;
        for (int32_t t : batch.tokens)
            if (t < 0 || t >= V) fail("train cuda: token {} is outside 0..{}", t, V - 1);
        for (int32_t t : batch.targets)
            if (t >= V) fail("train cuda: target {} is outside 0..{}", t, V - 1);
        if (int64_t(batch.tokens.size()) != N || int64_t(batch.targets.size()) != N)
            fail("train cuda: a batch of {}×{} holds {} tokens and {} targets", B, T, batch.tokens.size(),
                 batch.targets.size());
        if (tokens.bytes() < size_t(N) * 4) {
            tokens = DeviceBuffer(size_t(N) * 4);
            targets = DeviceBuffer(size_t(N) * 4);
        }
        timed(ProfileKind::upload, 0, 8.0 * double(N), [&] {
            tokens.upload(batch.tokens.data(), size_t(N) * 4);
            targets.upload(batch.targets.data(), size_t(N) * 4);
        });
    }

    // ---- full attention ----

    struct AttentionDims {
        int64_t Hq, Hkv, dh, per_head;
        bool gated;
    };
    AttentionDims attention_dims() const {
        const bool gated = c.attn_output_gate;
        return {c.n_head, c.n_head_kv, c.head_dim, gated ? 2 * c.head_dim : c.head_dim, gated};
    }

    void attention_forward_layer(const std::string& p, const float* h, float* out) {
        const auto [Hq, Hkv, dh, per_head, gated] = attention_dims();
        // Per head, q then (gated) the gate: the q norm and the gate read them in place, per_head apart.
        float* qg = kept("att.qg", N * Hq * per_head);
        linear_forward(h, W(p + "q_proj.weight"), N, D, Hq * per_head, qg);
        float* k_raw = kept("att.k_raw", N * Hkv * dh);
        float* vv = kept("att.v", N * Hkv * dh);
        linear_forward(h, W(p + "k_proj.weight"), N, D, Hkv * dh, k_raw);
        linear_forward(h, W(p + "v_proj.weight"), N, D, Hkv * dh, vv);
        float* q_r = kept("att.q_r", N * Hq * dh);
        float* k_r = kept("att.k_r", N * Hkv * dh);
        rms_norm_forward(qg, W(p + "q_norm.weight"), N * Hq, dh, c.rms_eps, one_plus, q_r, per_head);
        rms_norm_forward(k_raw, W(p + "k_norm.weight"), N * Hkv, dh, c.rms_eps, one_plus, k_r);
        rope_apply(q_r, B, T, Hq, dh, c.rope_dim, c.rope_theta, 1.0f);
        rope_apply(k_r, B, T, Hkv, dh, c.rope_dim, c.rope_theta, 1.0f);
        float* att = kept("att.att", N * Hq * dh);
        float* lse = kept("att.lse", N * Hq);
        const float scale = float(1.0 / std::sqrt(double(dh)));
        attention_forward(q_r, k_r, vv, B, T, Hq, Hkv, dh, scale, att, lse);
        const float* gated_out = att;
        if (gated) {
            float* g = kept("att.gated", N * Hq * dh);
            sigmoid_gate_forward(att, qg + dh, per_head, N * Hq, dh, g);
            gated_out = g;
        }
        linear_forward(gated_out, W(p + "o_proj.weight"), N, Hq * dh, D, out);
    }

    void attention_backward_layer(const std::string& p, const float* h, const float* dout, float* dh_out) {
        const auto [Hq, Hkv, dh, per_head, gated] = attention_dims();
        const int64_t n_q = N * Hq * dh, n_kv = N * Hkv * dh;
        const float* att = kept("att.att", n_q);
        const float* gated_out = gated ? kept("att.gated", n_q) : att;
        float* dgated = buf("att.dgated", n_q);
        linear_backward_input(dout, W(p + "o_proj.weight"), N, Hq * dh, D, dgated, false);
        linear_backward_weight(dout, gated_out, N, Hq * dh, D, G(p + "o_proj.weight"));
        // dq and (gated) the gate's gradient land side by side in dqg, as q and the gate in qg.
        const float* qg = kept("att.qg", N * Hq * per_head);
        float* dqg = buf("att.dqg", N * Hq * per_head);
        float* datt = dgated;
        if (gated) {
            datt = buf("att.datt", n_q);
            sigmoid_gate_backward(att, qg + dh, per_head, dgated, N * Hq, dh, datt, dqg + dh);
        }
        // The attention's backward overwrites its three gradients (kernels.h's "(=)"): no memsets.
        float* dq_r = buf("att.dq_r", n_q);
        float* dk_r = buf("att.dk_r", n_kv);
        float* dv = buf("att.dv", n_kv);
        const float scale = float(1.0 / std::sqrt(double(dh)));
        attention_backward(kept("att.q_r", n_q), kept("att.k_r", n_kv), kept("att.v", n_kv), att,
                           kept("att.lse", N * Hq), datt, B, T, Hq, Hkv, dh, scale, dq_r, dk_r, dv,
                           buf("att.workspace", N * Hq));
        rope_apply(dq_r, B, T, Hq, dh, c.rope_dim, c.rope_theta, -1.0f);
        rope_apply(dk_r, B, T, Hkv, dh, c.rope_dim, c.rope_theta, -1.0f);
        float* dk_raw = buf("att.dk_raw", n_kv);
        rms_norm_backward(qg, W(p + "q_norm.weight"), dq_r, N * Hq, dh, c.rms_eps, one_plus, dqg,
                          G(p + "q_norm.weight"), per_head, false);
        rms_norm_backward(kept("att.k_raw", n_kv), W(p + "k_norm.weight"), dk_r, N * Hkv, dh, c.rms_eps, one_plus,
                          dk_raw, G(p + "k_norm.weight"), 0, false);
        const float* qg_in = h;
        linear_backward_input(dqg, W(p + "q_proj.weight"), N, D, Hq * per_head, dh_out, false);
        linear_backward_weight(dqg, qg_in, N, D, Hq * per_head, G(p + "q_proj.weight"));
        linear_backward_input(dk_raw, W(p + "k_proj.weight"), N, D, Hkv * dh, dh_out);
        linear_backward_weight(dk_raw, h, N, D, Hkv * dh, G(p + "k_proj.weight"));
        linear_backward_input(dv, W(p + "v_proj.weight"), N, D, Hkv * dh, dh_out);
        linear_backward_weight(dv, h, N, D, Hkv * dh, G(p + "v_proj.weight"));
    }

    // ---- Gated DeltaNet ----

    struct DeltaDims {
        int64_t Hk, Hv, dk, dv, key_dim, value_dim, C, K;
    };
    DeltaDims delta_dims() const {
        const int64_t Hk = c.ssm_n_key_heads, Hv = c.ssm_n_value_heads, dk = c.ssm_key_dim, dv = c.ssm_value_dim;
        return {Hk, Hv, dk, dv, Hk * dk, Hv * dv, c.ssm_conv_channels(), c.ssm_conv_kernel};
    }

    void deltanet_forward_layer(const std::string& p, const float* h, float* out) {
        const auto [Hk, Hv, dk, dv, key_dim, value_dim, C, K] = delta_dims();
        float* mixed = kept("dn.mixed", N * C);
        float* z = kept("dn.z", N * value_dim);
        float* b = kept("dn.b", N * Hv);
        float* a = kept("dn.a", N * Hv);
        linear_forward(h, W(p + "in_proj_qkv.weight"), N, D, C, mixed);
        linear_forward(h, W(p + "in_proj_z.weight"), N, D, value_dim, z);
        linear_forward(h, W(p + "in_proj_b.weight"), N, D, Hv, b);
        linear_forward(h, W(p + "in_proj_a.weight"), N, D, Hv, a);
        // The conv's output lands split: q|k [N][2·key_dim] (the l2 norms read q and k in place) and v.
        float* qk = kept("dn.qk", N * 2 * key_dim);
        float* vv = kept("dn.v", N * value_dim);
        conv_silu_forward(mixed, W(p + "conv1d.weight"), B, T, C, K, 2 * key_dim, qk, vv);
        float* q_hat = kept("dn.q_hat", N * key_dim);
        float* k_hat = kept("dn.k_hat", N * key_dim);
        l2_norm_forward(qk, 2 * key_dim, N, Hk, dk, kL2NormEps, float(1.0 / std::sqrt(double(dk))), q_hat);
        l2_norm_forward(qk + key_dim, 2 * key_dim, N, Hk, dk, kL2NormEps, 1.0f, k_hat);
        float* beta = kept("dn.beta", N * Hv);
        float* g = kept("dn.g", N * Hv);
        gdn_gates_forward(b, a, W(p + "A_log"), W(p + "dt_bias"), N, Hv, beta, g);
        float* o = kept("dn.o", N * value_dim);
        float* saved = kept("dn.delta_saved", delta_rule_saved_floats(B, T, Hv, dk, dv));
        delta_rule_forward(q_hat, k_hat, vv, g, beta, B, T, Hk, Hv, dk, dv, o, saved);
        float* y = kept("dn.y", N * value_dim);
        gated_rms_norm_forward(o, z, W(p + "norm.weight"), N * Hv, dv, c.rms_eps, y);
        linear_forward(y, W(p + "out_proj.weight"), N, value_dim, D, out);
    }

    void deltanet_backward_layer(const std::string& p, const float* h, const float* dout, float* dh_out) {
        const auto [Hk, Hv, dk, dv, key_dim, value_dim, C, K] = delta_dims();
        float* dy = buf("dn.dy", N * value_dim);
        linear_backward_input(dout, W(p + "out_proj.weight"), N, value_dim, D, dy, false);
        linear_backward_weight(dout, kept("dn.y", N * value_dim), N, value_dim, D, G(p + "out_proj.weight"));
        float* d_o = buf("dn.do", N * value_dim);
        float* dz = buf("dn.dz", N * value_dim);
        gated_rms_norm_backward(kept("dn.o", N * value_dim), kept("dn.z", N * value_dim), W(p + "norm.weight"), dy,
                                N * Hv, dv, c.rms_eps, d_o, dz, G(p + "norm.weight"));
        // The delta rule overwrites its five gradients (kernels.h's "(=)"): no memsets.
        float* dq_hat = buf("dn.dq_hat", N * key_dim);
        float* dk_hat = buf("dn.dk_hat", N * key_dim);
        float* dv_ = buf("dn.dv", N * value_dim);
        float* dg = buf("dn.dg", N * Hv);
        float* dbeta = buf("dn.dbeta", N * Hv);
        const float* beta = kept("dn.beta", N * Hv);
        const float* g = kept("dn.g", N * Hv);
        delta_rule_backward(kept("dn.q_hat", N * key_dim), kept("dn.k_hat", N * key_dim), kept("dn.v", N * value_dim),
                            g, beta, d_o, kept("dn.delta_saved", delta_rule_saved_floats(B, T, Hv, dk, dv)), B, T,
                            Hk, Hv, dk, dv, dq_hat, dk_hat, dv_, dg, dbeta,
                            buf("dn.scratch", delta_rule_scratch_floats(B, T, Hv, dk, dv)));
        float* db = buf("dn.db", N * Hv);
        float* da = buf("dn.da", N * Hv);
        gdn_gates_backward(kept("dn.b", N * Hv), kept("dn.a", N * Hv), W(p + "A_log"), W(p + "dt_bias"), dbeta, dg, N,
                           Hv, db, da, G(p + "A_log"), G(p + "dt_bias"));
        // dq|dk land side by side as the forward's q|k; the conv's backward reads them and dv apart.
        const float* qk = kept("dn.qk", N * 2 * key_dim);
        float* dqk = buf("dn.dqk", N * 2 * key_dim);
        l2_norm_backward(qk, 2 * key_dim, dq_hat, N, Hk, dk, kL2NormEps, float(1.0 / std::sqrt(double(dk))), dqk);
        l2_norm_backward(qk + key_dim, 2 * key_dim, dk_hat, N, Hk, dk, kL2NormEps, 1.0f, dqk + key_dim);
        float* dmixed = buf("dn.dmixed", N * C);
        conv_silu_backward(kept("dn.mixed", N * C), W(p + "conv1d.weight"), dqk, dv_, B, T, C, K, 2 * key_dim, dmixed,
                           G(p + "conv1d.weight"));
        linear_backward_input(dmixed, W(p + "in_proj_qkv.weight"), N, D, C, dh_out, false);
        linear_backward_weight(dmixed, h, N, D, C, G(p + "in_proj_qkv.weight"));
        linear_backward_input(dz, W(p + "in_proj_z.weight"), N, D, value_dim, dh_out);
        linear_backward_weight(dz, h, N, D, value_dim, G(p + "in_proj_z.weight"));
        linear_backward_input(db, W(p + "in_proj_b.weight"), N, D, Hv, dh_out);
        linear_backward_weight(db, h, N, D, Hv, G(p + "in_proj_b.weight"));
        linear_backward_input(da, W(p + "in_proj_a.weight"), N, D, Hv, dh_out);
        linear_backward_weight(da, h, N, D, Hv, G(p + "in_proj_a.weight"));
    }

    // ---- SwiGLU ----

    void ffn_forward_layer(const std::string& p, const float* h, float* out) {
        float* gate = kept("ffn.gate", N * F);
        float* up = kept("ffn.up", N * F);
        linear_forward(h, W(p + "gate_proj.weight"), N, D, F, gate);
        linear_forward(h, W(p + "up_proj.weight"), N, D, F, up);
        float* act = kept("ffn.act", N * F);
        swiglu_forward(gate, up, N * F, act);
        linear_forward(act, W(p + "down_proj.weight"), N, F, D, out);
    }

    void ffn_backward_layer(const std::string& p, const float* h, const float* dout, float* dh_out) {
        float* dact = buf("ffn.dact", N * F);
        linear_backward_input(dout, W(p + "down_proj.weight"), N, F, D, dact, false);
        linear_backward_weight(dout, kept("ffn.act", N * F), N, F, D, G(p + "down_proj.weight"));
        float* dgate = buf("ffn.dgate", N * F);
        float* dup = buf("ffn.dup", N * F);
        swiglu_backward(kept("ffn.gate", N * F), kept("ffn.up", N * F), dact, N * F, dgate, dup);
        linear_backward_input(dgate, W(p + "gate_proj.weight"), N, D, F, dh_out, false);
        linear_backward_weight(dgate, h, N, D, F, G(p + "gate_proj.weight"));
        linear_backward_input(dup, W(p + "up_proj.weight"), N, D, F, dh_out);
        linear_backward_weight(dup, h, N, D, F, G(p + "up_proj.weight"));
    }

    // ---- one decoder layer: x → x + mixer(norm(x)) → + ffn(norm(·)) ----

    static std::string prefix(int64_t l) { return fmt::format("model.layers.{}.", l); }
    bool is_attention(int64_t l) const { return c.layers[size_t(l)] == LayerKind::full_attention; }

    void layer_forward(int64_t l, const float* x_in, float* x_out) {
        const std::string p = prefix(l);
        const int64_t ND = N * D;
        float* h1 = kept("layer.h1", ND);
        rms_norm_forward(x_in, W(p + "input_layernorm.weight"), N, D, c.rms_eps, one_plus, h1);
        float* mixer_out = buf("layer.mixer_out", ND);
        if (is_attention(l))
            attention_forward_layer(p + "self_attn.", h1, mixer_out);
        else
            deltanet_forward_layer(p + "linear_attn.", h1, mixer_out);
        float* x_mid = kept("layer.x_mid", ND);
        residual_add(x_in, mixer_out, ND, x_mid);
        float* h2 = kept("layer.h2", ND);
        rms_norm_forward(x_mid, W(p + "post_attention_layernorm.weight"), N, D, c.rms_eps, one_plus, h2);
        float* ffn_out = buf("layer.ffn_out", ND);
        ffn_forward_layer(p + "mlp.", h2, ffn_out);
        residual_add(x_mid, ffn_out, ND, x_out);
    }

    // dx: the gradient of the layer's output on entry, of its input on return (the residual passes it on).
    // The blocks' *_backward_layer overwrite their dh_out (the first product into it does not accumulate).
    void layer_backward(int64_t l, const float* x_in, float* dx) {
        const std::string p = prefix(l);
        const int64_t ND = N * D;
        float* dh2 = buf("layer.dh2", ND);  // the FFN's backward overwrites it
        ffn_backward_layer(p + "mlp.", kept("layer.h2", ND), dx, dh2);
        rms_norm_backward(kept("layer.x_mid", ND), W(p + "post_attention_layernorm.weight"), dh2, N, D, c.rms_eps,
                          one_plus, dx, G(p + "post_attention_layernorm.weight"));
        float* dh1 = buf("layer.dh1", ND);  // the mixer's backward overwrites it
        if (is_attention(l))
            attention_backward_layer(p + "self_attn.", kept("layer.h1", ND), dx, dh1);
        else
            deltanet_backward_layer(p + "linear_attn.", kept("layer.h1", ND), dx, dh1);
        rms_norm_backward(x_in, W(p + "input_layernorm.weight"), dh1, N, D, c.rms_eps, one_plus, dx,
                          G(p + "input_layernorm.weight"));
    }

    const char* head_name() const { return c.tied_embeddings ? "model.embed_tokens.weight" : "lm_head.weight"; }

    // Where layer l's kept() buffers live in training: its own ("L3.") when the backward reads what
    // the forward kept, the shared set ("") when it recomputes them.
    std::string layer_scope(int64_t l) const { return keep_activations ? fmt::format("L{}.", l) : std::string(); }

    // Embeddings, every layer (keeping each layer's input), the final norm into "final.h". Evaluation
    // (`training` false) writes the shared set: it has no backward to keep anything for.
    void forward_trunk(bool training) {
        pass = ProfilePass::forward;
        embedding_forward(W("model.embed_tokens.weight"), tokens.get<int32_t>(), N, D, layer_input(0));
        for (int64_t l = 0; l < c.n_layer(); ++l) {
            scope = training ? layer_scope(l) : std::string();
            layer_forward(l, layer_input(l), layer_input(l + 1));
        }
        scope.clear();
        rms_norm_forward(layer_input(c.n_layer()), W("model.norm.weight"), N, D, c.rms_eps, one_plus,
                         buf("final.h", N * D));
    }

    // The LM head and cross entropy, chunk by chunk; with `backward`, dh (overwritten here) and the head's
    // gradient receive scale·∂(Σ loss).
    double head_loss(bool backward, double scale) {
        const float* hf = buf("final.h", N * D);
        const float* head = W(head_name());
        const int64_t rows_per_chunk = std::clamp<int64_t>(kLogitChunkValues / V, 1, N);
        float* logits = buf("head.logits", rows_per_chunk * V);
        float* dh = backward ? buf("final.dh", N * D) : nullptr;  // each chunk overwrites its rows
        cuda_check(cudaMemset(loss_sum.get(), 0, sizeof(double)), "cudaMemset");
        for (int64_t begin = 0; begin < N; begin += rows_per_chunk) {
            const int64_t rows = std::min(rows_per_chunk, N - begin);
            pass = ProfilePass::forward;
            linear_forward(hf + begin * D, head, rows, D, V, logits);
            const int32_t* chunk_targets = targets.get<int32_t>() + begin;
            if (!backward) {
                cross_entropy_loss_rows(logits, chunk_targets, rows, V, loss_sum.get<double>());
                continue;
            }
            cross_entropy_rows(logits, chunk_targets, rows, V, float(scale), loss_sum.get<double>());
            pass = ProfilePass::backward;
            linear_backward_input(logits, head, rows, D, V, dh + begin * D, false);
            linear_backward_weight(logits, hf + begin * D, rows, D, V, G(head_name()));
        }
        double total = 0.0;
        host_wait([&] { loss_sum.download(&total, sizeof total); });  // synchronises: the kernels so far have run
        return total;
    }

    double accumulate(const Batch& batch, double scale) {
        load_batch(batch);
        forward_trunk(true);
        const double total = head_loss(true, scale);
        float* dx = zeroed("final.dx", N * D);
        rms_norm_backward(layer_input(c.n_layer()), W("model.norm.weight"), buf("final.dh", N * D), N, D, c.rms_eps,
                          one_plus, dx, G("model.norm.weight"));
        float* scratch_out = keep_activations ? nullptr : buf("layer.recomputed_out", N * D);
        for (int64_t l = c.n_layer() - 1; l >= 0; --l) {
            scope = layer_scope(l);  // kept: where layer l's forward wrote its activations
            if (!keep_activations) {
                pass = ProfilePass::recompute;
                layer_forward(l, layer_input(l), scratch_out);  // recompute this layer's intermediates
            }
            pass = ProfilePass::backward;
            layer_backward(l, layer_input(l), dx);
        }
        scope.clear();
        embedding_backward(dx, batch.tokens, V, D, G("model.embed_tokens.weight"));
        host_wait([] { cuda_check(cudaDeviceSynchronize(), "the training step"); });
        return total;
    }

    double loss(const Batch& batch) {
        load_batch(batch);
        forward_trunk(false);
        return head_loss(false, 0.0);
    }

    // Floats of layer l's kept() buffers for B sequences of T tokens, as its forward allocates them.
    int64_t kept_floats(int64_t l, int64_t B_, int64_t T_) const {
        const int64_t n = B_ * T_;
        int64_t floats = 3 * n * D + 3 * n * F;  // h1, x_mid, h2; the FFN's gate, up, act
        if (is_attention(l)) {
            const auto [Hq, Hkv, dh, per_head, gated] = attention_dims();
            // qg (q, and the gate when gated: two heads' widths), q_r, att (and gated); k_raw, k_r, v; lse
            floats += n * Hq * dh * (gated ? 5 : 3) + 3 * n * Hkv * dh + n * Hq;
        } else {
            const auto [Hk, Hv, dk, dv, key_dim, value_dim, C, K] = delta_dims();
            // mixed; z, v, o, y; qk (q|k), q_hat, k_hat; b, a, beta, g; the delta rule's saved states
            floats += n * C + 4 * n * value_dim + 4 * n * key_dim + 4 * n * Hv +
                      delta_rule_saved_floats(B_, T_, Hv, dk, dv);
        }
        return floats;
    }

    // The recompute design's own buffers, an estimate: the residual stream (layers + 1), the head's
    // final.h, dh, dx and a logit chunk, the layer's mixer_out, ffn_out, recomputed_out and its widest
    // projection (qg or conv), the shared kept() set and the backward's gradients (each about the
    // largest layer's activations), the delta rule's scratch.
    int64_t shared_floats(int64_t B_, int64_t T_) const {
        const int64_t n = B_ * T_;
        int64_t largest = 0;
        for (int64_t l = 0; l < c.n_layer(); ++l) largest = std::max(largest, kept_floats(l, B_, T_));
        const auto [Hk, Hv, dk, dv, key_dim, value_dim, C, K] = delta_dims();
        const bool has_deltanet = std::any_of(c.layers.begin(), c.layers.end(),
                                              [](LayerKind k) { return k != LayerKind::full_attention; });
        return (c.n_layer() + 1 + 3 + 3) * n * D + std::clamp<int64_t>(kLogitChunkValues / V, 1, n) * V +
               std::max(n * C, n * c.n_head * 2 * c.head_dim) + 2 * largest +
               (has_deltanet ? delta_rule_scratch_floats(B_, T_, Hv, dk, dv) : 0);
    }
};

TrainModel::TrainModel(const ParameterLayout& layout) : impl_(std::make_unique<Impl>(layout)) {}
TrainModel::~TrainModel() = default;

void TrainModel::set_parameters(std::span<const float> params) {
    if (int64_t(params.size()) != impl_->P)
        fail("train cuda: {} parameters handed in, the model has {}", params.size(), impl_->P);
    impl_->params.upload(params.data(), params.size_bytes());
}

void TrainModel::get_parameters(std::span<float> params) const {
    impl_->params.download(params.data(), size_t(impl_->P) * 4);
}

void TrainModel::set_optimizer_state(const AdamState& state) {
    if (state.m.empty()) {
        impl_->zero(impl_->m.get<float>(), impl_->P);
        impl_->zero(impl_->v.get<float>(), impl_->P);
    } else {
        if (int64_t(state.m.size()) != impl_->P || int64_t(state.v.size()) != impl_->P)
            fail("train cuda: optimizer state of {} values, the model has {}", state.m.size(), impl_->P);
        impl_->m.upload(state.m.data(), size_t(impl_->P) * 4);
        impl_->v.upload(state.v.data(), size_t(impl_->P) * 4);
    }
    impl_->adam_step = state.step;
}

void TrainModel::get_optimizer_state(AdamState& state) const {
    state.m.resize(size_t(impl_->P));
    state.v.resize(size_t(impl_->P));
    impl_->m.download(state.m.data(), size_t(impl_->P) * 4);
    impl_->v.download(state.v.data(), size_t(impl_->P) * 4);
    state.step = impl_->adam_step;
}

void TrainModel::use_qat_weights(double lambda) {
    Impl& I = *impl_;
    if (lambda == 0.0) {
        I.weights_are_params = true;
        return;
    }
    I.weights_are_params = false;
    I.pass = ProfilePass::update;
    // One span: the copy and a launch per binarised tensor (their bytes: every weight read and written).
    I.timed(ProfileKind::qat_weights, 0, 8.0 * double(I.P), [&] {
        // The plain copy, not I.copy_device: that would be a span inside this one.
        cuda_check(cudaMemcpy(I.weights.get<float>(), I.params.get<float>(), size_t(I.P) * sizeof(float),
                              cudaMemcpyDeviceToDevice),
                   "cudaMemcpy");
        for (const ParameterInfo& p : I.layout.all()) {
            if (!is_binarised(p)) continue;
            const int64_t row = p.shape.back();
            qat_binarise(I.params.get<float>() + p.offset, p.size / row, row, float(lambda), lambda == 1.0,
                         I.weights.get<float>() + p.offset);
        }
    });
}

void TrainModel::use_weights(std::span<const float> weights) {
    if (int64_t(weights.size()) != impl_->P)
        fail("train cuda: {} weights handed in, the model has {}", weights.size(), impl_->P);
    impl_->weights_are_params = false;
    impl_->weights.upload(weights.data(), weights.size_bytes());
}

void TrainModel::get_forward_weights(std::span<float> weights) const {
    const DeviceBuffer& source = impl_->weights_are_params ? impl_->params : impl_->weights;
    source.download(weights.data(), size_t(impl_->P) * 4);
}

void TrainModel::set_keep_activations(bool keep) {
    Impl& I = *impl_;
    I.keep_activations = keep;
    if (keep) return;
    for (auto it = I.buffers.begin(); it != I.buffers.end();)  // the layers' own buffers: no longer read
        it = it->first.starts_with('L') ? I.buffers.erase(it) : std::next(it);
}

bool TrainModel::keeps_activations() const { return impl_->keep_activations; }

ActivationMemory TrainModel::activation_memory(int64_t batch, int64_t seq_len, int64_t eval_sequences) const {
    const Impl& I = *impl_;
    ActivationMemory m;
    m.layers = I.c.n_layer();
    for (int64_t l = 0; l < m.layers; ++l) m.kept_bytes += int64_t(sizeof(float)) * I.kept_floats(l, batch, seq_len);
    m.other_bytes = int64_t(sizeof(float)) * I.shared_floats(std::max(batch, eval_sequences), seq_len);
    size_t free_bytes = 0, total_bytes = 0;
    cuda_check(cudaMemGetInfo(&free_bytes, &total_bytes), "cudaMemGetInfo");
    m.free_bytes = int64_t(free_bytes);
    return m;
}

int64_t TrainModel::kept_activation_bytes() const {
    int64_t bytes = 0;
    for (const auto& [name, buffer] : impl_->buffers)
        if (name.starts_with('L')) bytes += int64_t(buffer.bytes());
    return bytes;
}

void TrainModel::zero_gradients() {
    impl_->pass = ProfilePass::update;
    impl_->zero(impl_->grads.get<float>(), impl_->P);
}

double TrainModel::accumulate_gradient(const Batch& batch, double scale) { return impl_->accumulate(batch, scale); }

double TrainModel::loss(const Batch& batch) { return impl_->loss(batch); }

void TrainModel::get_gradients(std::span<float> grads) const {
    impl_->grads.download(grads.data(), size_t(impl_->P) * 4);
}

double TrainModel::optimizer_step(const OptimizerSection& o, double lr) {
    Impl& I = *impl_;
    I.pass = ProfilePass::update;
    I.timed(ProfileKind::gradient_norm, 0, 4.0 * double(I.P), [&] {
        cuda_check(cudaMemset(I.loss_sum.get(), 0, sizeof(double)), "cudaMemset");
        sum_of_squares(I.grads.get<float>(), I.P, I.loss_sum.get<double>());
    });
    double sum_sq = 0.0;
    I.host_wait([&] { I.loss_sum.download(&sum_sq, sizeof sum_sq); });
    const double norm = std::sqrt(sum_sq);
    const float factor = o.clip > 0 && norm > o.clip ? float(o.clip / norm) : 1.0f;
    ++I.adam_step;
    const double correction1 = 1.0 - std::pow(o.beta1, double(I.adam_step));
    const double correction2 = 1.0 - std::pow(o.beta2, double(I.adam_step));
    const bool muon = o.kind == "muon";
    // AdamW reads parameters, gradients, both moments and a flag byte and writes three of them back:
    // 29 bytes a value. Under Muon its Newton–Schulz products run inside this span too, uncounted.
    I.timed(ProfileKind::optimizer, 0, 29.0 * double(I.P), [&] {
        adamw_update(I.params.get<float>(), I.grads.get<float>(), I.m.get<float>(), I.v.get<float>(),
                     I.adam_flags.get<uint8_t>(), I.P, muon, factor, float(o.beta1), float(o.beta2), correction1,
                     correction2, lr, o.eps, o.weight_decay);
        if (!muon) return;
        const double matrix_lr = muon_learning_rate(o, lr);
        for (const ParameterInfo& p : I.layout.all())
            if (p.hidden_matrix)
                muon_update(I.params.get<float>() + p.offset, I.grads.get<float>() + p.offset,
                            I.m.get<float>() + p.offset, p.shape[0], p.shape[1], factor, o, matrix_lr,
                            I.muon_workspace);
    });
    I.host_wait([] { cuda_check(cudaDeviceSynchronize(), "the optimizer step"); });
    return norm;
}

int64_t TrainModel::optimizer_steps() const { return impl_->adam_step; }

void TrainModel::set_profile(StepProfile* sink) {
    Impl& I = *impl_;
    I.events = nullptr;
    I.profile_events = sink != nullptr ? std::make_unique<ProfileEvents>(*sink) : nullptr;
}

void TrainModel::profile_step_begin() {
    Impl& I = *impl_;
    I.events = I.profile_events.get();
    if (I.events != nullptr) I.events->begin_step();
}

void TrainModel::profile_step_end(double wall_ms) {
    Impl& I = *impl_;
    if (I.events == nullptr) return;
    I.events->end_step(wall_ms);
    I.events = nullptr;
}

std::string TrainModel::device_name() const {
    int device = 0;
    cuda_check(cudaGetDevice(&device), "cudaGetDevice");
    cudaDeviceProp prop{};
    cuda_check(cudaGetDeviceProperties(&prop, device), "cudaGetDeviceProperties");
    return prop.name;
}

double TrainModel::peak_memory_gib() const {
    size_t free_bytes = 0, total_bytes = 0;
    cuda_check(cudaMemGetInfo(&free_bytes, &total_bytes), "cudaMemGetInfo");
    return double(total_bytes - free_bytes) / double(1ull << 30);
}

namespace {

class CudaBackend final : public GradientBackend {
public:
    explicit CudaBackend(const ParameterLayout& layout) : model_(layout) {}

    double accumulate_gradient(std::span<const float> params, const Batch& batch, double scale,
                               std::span<float> grads) override {
        model_.use_weights(params);
        model_.zero_gradients();
        const double total = model_.accumulate_gradient(batch, scale);
        std::vector<float> device_grads(grads.size());
        model_.get_gradients(device_grads);
        for (size_t i = 0; i < grads.size(); ++i) grads[i] += device_grads[i];
        return total;
    }

    double loss(std::span<const float> params, const Batch& batch) override {
        model_.use_weights(params);
        return model_.loss(batch);
    }

private:
    TrainModel model_;
};

}  // namespace

std::unique_ptr<GradientBackend> make_backend(const ParameterLayout& layout) {
    return std::make_unique<CudaBackend>(layout);
}

}  // namespace deltabit::train::cuda
