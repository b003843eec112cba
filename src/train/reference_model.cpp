#include "train/reference_model.h"

#include "core/error.h"
#include "train/reference_ops.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>

namespace deltabit::train::ref {
namespace {

// transformers' l2norm inside the delta rule: eps 1e-6 added to the sum of squares, whatever
// rms_norm_eps is (reference §2.4 step 7).
constexpr double kL2NormEps = 1e-6;

using Vec = std::vector<double>;
Vec zeros(int64_t n) { return Vec(static_cast<size_t>(n), 0.0); }

// Parameter access by name, for reading (p) and for gradients (g).
struct Params {
    const ParameterLayout& layout;
    std::span<const double> values;
    std::span<double> grads;  // empty when no backward

    const double* p(const std::string& name) const { return values.data() + layout.get(name).offset; }
    double* g(const std::string& name) const { return grads.data() + layout.get(name).offset; }
};

struct Dims {
    int64_t T, D, V, F;
    const ModelConfig& c;
    bool hybrid;
    bool one_plus() const { return hybrid; }
};

// ---- full attention ----

struct AttentionCache {
    Vec qg, q_raw, gate, k_raw, q_n, k_n, q_r, k_r, v, att, gated;
};

void attention_forward_layer(const Dims& d, const Params& P, const std::string& p, const double* h, double* out,
                             AttentionCache& a) {
    const ModelConfig& c = d.c;
    const int64_t T = d.T, Hq = c.n_head, Hkv = c.n_head_kv, dh = c.head_dim;
    const bool gated = c.attn_output_gate;
    const int64_t per_head = gated ? 2 * dh : dh;
    a.qg = zeros(T * Hq * per_head);
    linear_forward(h, P.p(p + "q_proj.weight"), T, d.D, Hq * per_head, a.qg.data());
    a.q_raw = zeros(T * Hq * dh);
    a.gate = zeros(gated ? T * Hq * dh : 0);
    for (int64_t t = 0; t < T; ++t)
        for (int64_t hd = 0; hd < Hq; ++hd) {
            const double* src = a.qg.data() + (t * Hq + hd) * per_head;
            std::copy(src, src + dh, a.q_raw.data() + (t * Hq + hd) * dh);
            if (gated) std::copy(src + dh, src + 2 * dh, a.gate.data() + (t * Hq + hd) * dh);
        }
    a.k_raw = zeros(T * Hkv * dh);
    a.v = zeros(T * Hkv * dh);
    linear_forward(h, P.p(p + "k_proj.weight"), T, d.D, Hkv * dh, a.k_raw.data());
    linear_forward(h, P.p(p + "v_proj.weight"), T, d.D, Hkv * dh, a.v.data());
    a.q_n = zeros(a.q_raw.size());
    a.k_n = zeros(a.k_raw.size());
    rms_norm_forward(a.q_raw.data(), P.p(p + "q_norm.weight"), T * Hq, dh, c.rms_eps, d.one_plus(), a.q_n.data());
    rms_norm_forward(a.k_raw.data(), P.p(p + "k_norm.weight"), T * Hkv, dh, c.rms_eps, d.one_plus(), a.k_n.data());
    a.q_r = a.q_n;
    a.k_r = a.k_n;
    rope_forward(a.q_r.data(), T, Hq, dh, c.rope_dim, c.rope_theta);
    rope_forward(a.k_r.data(), T, Hkv, dh, c.rope_dim, c.rope_theta);
    a.att = zeros(T * Hq * dh);
    const AttentionShape shape{T, Hq, Hkv, dh, 1.0 / std::sqrt(double(dh))};
    attention_forward(a.q_r.data(), a.k_r.data(), a.v.data(), shape, a.att.data());
    a.gated = a.att;
    if (gated)
        for (size_t i = 0; i < a.gated.size(); ++i) a.gated[i] *= sigmoid(a.gate[i]);
    linear_forward(a.gated.data(), P.p(p + "o_proj.weight"), T, Hq * dh, d.D, out);
}

void attention_backward_layer(const Dims& d, const Params& P, const std::string& p, const double* h,
                              const double* dout, const AttentionCache& a, double* dh_out) {
    const ModelConfig& c = d.c;
    const int64_t T = d.T, Hq = c.n_head, Hkv = c.n_head_kv, dh = c.head_dim;
    const bool gated = c.attn_output_gate;
    const int64_t per_head = gated ? 2 * dh : dh;
    Vec dgated = zeros(T * Hq * dh);
    linear_backward(a.gated.data(), P.p(p + "o_proj.weight"), dout, T, Hq * dh, d.D, dgated.data(),
                    P.g(p + "o_proj.weight"));
    Vec datt = dgated, dgate = zeros(a.gate.size());
    if (gated)
        for (size_t i = 0; i < datt.size(); ++i) {
            const double s = sigmoid(a.gate[i]);
            datt[i] = dgated[i] * s;
            dgate[i] = dgated[i] * a.att[i] * s * (1.0 - s);
        }
    Vec dq_r = zeros(a.q_r.size()), dk_r = zeros(a.k_r.size()), dv = zeros(a.v.size());
    const AttentionShape shape{T, Hq, Hkv, dh, 1.0 / std::sqrt(double(dh))};
    attention_backward(a.q_r.data(), a.k_r.data(), a.v.data(), datt.data(), shape, dq_r.data(), dk_r.data(), dv.data());
    rope_backward(dq_r.data(), T, Hq, dh, c.rope_dim, c.rope_theta);
    rope_backward(dk_r.data(), T, Hkv, dh, c.rope_dim, c.rope_theta);
    Vec dq_raw = zeros(a.q_raw.size()), dk_raw = zeros(a.k_raw.size());
    rms_norm_backward(a.q_raw.data(), P.p(p + "q_norm.weight"), dq_r.data(), T * Hq, dh, c.rms_eps, d.one_plus(),
                      dq_raw.data(), P.g(p + "q_norm.weight"));
    rms_norm_backward(a.k_raw.data(), P.p(p + "k_norm.weight"), dk_r.data(), T * Hkv, dh, c.rms_eps, d.one_plus(),
                      dk_raw.data(), P.g(p + "k_norm.weight"));
    Vec dqg = zeros(a.qg.size());
    for (int64_t t = 0; t < T; ++t)
        for (int64_t hd = 0; hd < Hq; ++hd) {
            double* dst = dqg.data() + (t * Hq + hd) * per_head;
            std::copy_n(dq_raw.data() + (t * Hq + hd) * dh, dh, dst);
            if (gated) std::copy_n(dgate.data() + (t * Hq + hd) * dh, dh, dst + dh);
        }
    linear_backward(h, P.p(p + "q_proj.weight"), dqg.data(), T, d.D, Hq * per_head, dh_out, P.g(p + "q_proj.weight"));
    linear_backward(h, P.p(p + "k_proj.weight"), dk_raw.data(), T, d.D, Hkv * dh, dh_out, P.g(p + "k_proj.weight"));
    linear_backward(h, P.p(p + "v_proj.weight"), dv.data(), T, d.D, Hkv * dh, dh_out, P.g(p + "v_proj.weight"));
}

// ---- Gated DeltaNet ----

struct DeltaNetCache {
    Vec mixed, z, b, a, conv, q, k, v, q_hat, k_hat, beta, g, o, y;
};

void deltanet_forward_layer(const Dims& d, const Params& P, const std::string& p, const double* h, double* out,
                            DeltaNetCache& n) {
    const ModelConfig& c = d.c;
    const int64_t T = d.T, Hk = c.ssm_n_key_heads, Hv = c.ssm_n_value_heads, dk = c.ssm_key_dim, dv = c.ssm_value_dim;
    const int64_t key_dim = Hk * dk, value_dim = Hv * dv, C = c.ssm_conv_channels(), K = c.ssm_conv_kernel;
    n.mixed = zeros(T * C);
    n.z = zeros(T * value_dim);
    n.b = zeros(T * Hv);
    n.a = zeros(T * Hv);
    linear_forward(h, P.p(p + "in_proj_qkv.weight"), T, d.D, C, n.mixed.data());
    linear_forward(h, P.p(p + "in_proj_z.weight"), T, d.D, value_dim, n.z.data());
    linear_forward(h, P.p(p + "in_proj_b.weight"), T, d.D, Hv, n.b.data());
    linear_forward(h, P.p(p + "in_proj_a.weight"), T, d.D, Hv, n.a.data());
    n.conv = zeros(T * C);
    conv_silu_forward(n.mixed.data(), P.p(p + "conv1d.weight"), T, C, K, n.conv.data());
    n.q = zeros(T * key_dim);
    n.k = zeros(T * key_dim);
    n.v = zeros(T * value_dim);
    for (int64_t t = 0; t < T; ++t) {
        const double* row = n.conv.data() + t * C;
        std::copy(row, row + key_dim, n.q.data() + t * key_dim);
        std::copy(row + key_dim, row + 2 * key_dim, n.k.data() + t * key_dim);
        std::copy(row + 2 * key_dim, row + C, n.v.data() + t * value_dim);
    }
    n.q_hat = zeros(n.q.size());
    n.k_hat = zeros(n.k.size());
    l2_norm_forward(n.q.data(), T * Hk, dk, kL2NormEps, 1.0 / std::sqrt(double(dk)), n.q_hat.data());
    l2_norm_forward(n.k.data(), T * Hk, dk, kL2NormEps, 1.0, n.k_hat.data());
    n.beta = zeros(T * Hv);
    n.g = zeros(T * Hv);
    gdn_gates_forward(n.b.data(), n.a.data(), P.p(p + "A_log"), P.p(p + "dt_bias"), T, Hv, n.beta.data(), n.g.data());
    const DeltaRuleShape shape{T, Hk, Hv, dk, dv};
    n.o = zeros(T * value_dim);
    delta_rule_forward(n.q_hat.data(), n.k_hat.data(), n.v.data(), n.g.data(), n.beta.data(), shape, n.o.data());
    n.y = zeros(T * value_dim);
    gated_rms_norm_forward(n.o.data(), n.z.data(), P.p(p + "norm.weight"), T * Hv, dv, c.rms_eps, n.y.data());
    linear_forward(n.y.data(), P.p(p + "out_proj.weight"), T, value_dim, d.D, out);
}

void deltanet_backward_layer(const Dims& d, const Params& P, const std::string& p, const double* h,
                             const double* dout, const DeltaNetCache& n, double* dh_out) {
    const ModelConfig& c = d.c;
    const int64_t T = d.T, Hk = c.ssm_n_key_heads, Hv = c.ssm_n_value_heads, dk = c.ssm_key_dim, dv = c.ssm_value_dim;
    const int64_t key_dim = Hk * dk, value_dim = Hv * dv, C = c.ssm_conv_channels(), K = c.ssm_conv_kernel;
    Vec dy = zeros(T * value_dim);
    linear_backward(n.y.data(), P.p(p + "out_proj.weight"), dout, T, value_dim, d.D, dy.data(),
                    P.g(p + "out_proj.weight"));
    Vec d_o = zeros(n.o.size()), dz = zeros(n.z.size());
    gated_rms_norm_backward(n.o.data(), n.z.data(), P.p(p + "norm.weight"), dy.data(), T * Hv, dv, c.rms_eps,
                            d_o.data(), dz.data(), P.g(p + "norm.weight"));
    Vec dq_hat = zeros(n.q_hat.size()), dk_hat = zeros(n.k_hat.size()), dv_ = zeros(n.v.size()),
        dg = zeros(n.g.size()), dbeta = zeros(n.beta.size());
    const DeltaRuleShape shape{T, Hk, Hv, dk, dv};
    delta_rule_backward(n.q_hat.data(), n.k_hat.data(), n.v.data(), n.g.data(), n.beta.data(), d_o.data(), shape,
                        dq_hat.data(), dk_hat.data(), dv_.data(), dg.data(), dbeta.data());
    Vec db = zeros(n.b.size()), da = zeros(n.a.size());
    gdn_gates_backward(n.b.data(), n.a.data(), P.p(p + "A_log"), P.p(p + "dt_bias"), dbeta.data(), dg.data(), T, Hv,
                       db.data(), da.data(), P.g(p + "A_log"), P.g(p + "dt_bias"));
    Vec dq = zeros(n.q.size()), dk_ = zeros(n.k.size());
    l2_norm_backward(n.q.data(), dq_hat.data(), T * Hk, dk, kL2NormEps, 1.0 / std::sqrt(double(dk)), dq.data());
    l2_norm_backward(n.k.data(), dk_hat.data(), T * Hk, dk, kL2NormEps, 1.0, dk_.data());
    Vec dconv = zeros(T * C);
    for (int64_t t = 0; t < T; ++t) {
        double* row = dconv.data() + t * C;
        std::copy_n(dq.data() + t * key_dim, key_dim, row);
        std::copy_n(dk_.data() + t * key_dim, key_dim, row + key_dim);
        std::copy_n(dv_.data() + t * value_dim, value_dim, row + 2 * key_dim);
    }
    Vec dmixed = zeros(T * C);
    conv_silu_backward(n.mixed.data(), P.p(p + "conv1d.weight"), dconv.data(), T, C, K, dmixed.data(),
                       P.g(p + "conv1d.weight"));
    linear_backward(h, P.p(p + "in_proj_qkv.weight"), dmixed.data(), T, d.D, C, dh_out, P.g(p + "in_proj_qkv.weight"));
    linear_backward(h, P.p(p + "in_proj_z.weight"), dz.data(), T, d.D, value_dim, dh_out, P.g(p + "in_proj_z.weight"));
    linear_backward(h, P.p(p + "in_proj_b.weight"), db.data(), T, d.D, Hv, dh_out, P.g(p + "in_proj_b.weight"));
    linear_backward(h, P.p(p + "in_proj_a.weight"), da.data(), T, d.D, Hv, dh_out, P.g(p + "in_proj_a.weight"));
}

// ---- SwiGLU ----

struct FfnCache {
    Vec gate, up, act;
};

void ffn_forward_layer(const Dims& d, const Params& P, const std::string& p, const double* h, double* out,
                       FfnCache& f) {
    f.gate = zeros(d.T * d.F);
    f.up = zeros(d.T * d.F);
    linear_forward(h, P.p(p + "gate_proj.weight"), d.T, d.D, d.F, f.gate.data());
    linear_forward(h, P.p(p + "up_proj.weight"), d.T, d.D, d.F, f.up.data());
    f.act = zeros(d.T * d.F);
    swiglu_forward(f.gate.data(), f.up.data(), d.T * d.F, f.act.data());
    linear_forward(f.act.data(), P.p(p + "down_proj.weight"), d.T, d.F, d.D, out);
}

void ffn_backward_layer(const Dims& d, const Params& P, const std::string& p, const double* h, const double* dout,
                        const FfnCache& f, double* dh_out) {
    Vec dact = zeros(d.T * d.F), dgate = zeros(d.T * d.F), dup = zeros(d.T * d.F);
    linear_backward(f.act.data(), P.p(p + "down_proj.weight"), dout, d.T, d.F, d.D, dact.data(),
                    P.g(p + "down_proj.weight"));
    swiglu_backward(f.gate.data(), f.up.data(), dact.data(), d.T * d.F, dgate.data(), dup.data());
    linear_backward(h, P.p(p + "gate_proj.weight"), dgate.data(), d.T, d.D, d.F, dh_out, P.g(p + "gate_proj.weight"));
    linear_backward(h, P.p(p + "up_proj.weight"), dup.data(), d.T, d.D, d.F, dh_out, P.g(p + "up_proj.weight"));
}

// ---- one decoder layer: x → x + mixer(norm(x)) → + ffn(norm(·)) ----

struct LayerCache {
    Vec h1, mixer_out, x_mid, h2;
    AttentionCache attention;
    DeltaNetCache deltanet;
    FfnCache ffn;
};

std::string layer_prefix(int64_t l) { return fmt::format("model.layers.{}.", l); }

void layer_forward(const Dims& d, const Params& P, int64_t l, const Vec& x_in, Vec& x_out, LayerCache& L) {
    const ModelConfig& c = d.c;
    const std::string p = layer_prefix(l);
    const int64_t TD = d.T * d.D;
    L.h1 = zeros(TD);
    rms_norm_forward(x_in.data(), P.p(p + "input_layernorm.weight"), d.T, d.D, c.rms_eps, d.one_plus(), L.h1.data());
    L.mixer_out = zeros(TD);
    if (c.layers[size_t(l)] == LayerKind::full_attention)
        attention_forward_layer(d, P, p + "self_attn.", L.h1.data(), L.mixer_out.data(), L.attention);
    else
        deltanet_forward_layer(d, P, p + "linear_attn.", L.h1.data(), L.mixer_out.data(), L.deltanet);
    L.x_mid = x_in;
    for (int64_t i = 0; i < TD; ++i) L.x_mid[size_t(i)] += L.mixer_out[size_t(i)];
    L.h2 = zeros(TD);
    rms_norm_forward(L.x_mid.data(), P.p(p + "post_attention_layernorm.weight"), d.T, d.D, c.rms_eps, d.one_plus(),
                     L.h2.data());
    Vec ffn_out = zeros(TD);
    ffn_forward_layer(d, P, p + "mlp.", L.h2.data(), ffn_out.data(), L.ffn);
    x_out = L.x_mid;
    for (int64_t i = 0; i < TD; ++i) x_out[size_t(i)] += ffn_out[size_t(i)];
}

// dx: gradient of the layer's output on entry, of its input on return.
void layer_backward(const Dims& d, const Params& P, int64_t l, const Vec& x_in, const LayerCache& L, Vec& dx) {
    const ModelConfig& c = d.c;
    const std::string p = layer_prefix(l);
    const int64_t TD = d.T * d.D;
    Vec dh2 = zeros(TD);
    ffn_backward_layer(d, P, p + "mlp.", L.h2.data(), dx.data(), L.ffn, dh2.data());
    Vec dx_mid = dx;  // the residual passes the gradient through
    rms_norm_backward(L.x_mid.data(), P.p(p + "post_attention_layernorm.weight"), dh2.data(), d.T, d.D, c.rms_eps,
                      d.one_plus(), dx_mid.data(), P.g(p + "post_attention_layernorm.weight"));
    Vec dh1 = zeros(TD);
    if (c.layers[size_t(l)] == LayerKind::full_attention)
        attention_backward_layer(d, P, p + "self_attn.", L.h1.data(), dx_mid.data(), L.attention, dh1.data());
    else
        deltanet_backward_layer(d, P, p + "linear_attn.", L.h1.data(), dx_mid.data(), L.deltanet, dh1.data());
    dx = dx_mid;
    rms_norm_backward(x_in.data(), P.p(p + "input_layernorm.weight"), dh1.data(), d.T, d.D, c.rms_eps, d.one_plus(),
                      dx.data(), P.g(p + "input_layernorm.weight"));
}

Dims dims_of(const ParameterLayout& layout, int64_t T) {
    const ModelConfig& c = layout.config();
    return Dims{T, c.n_embd, c.n_vocab, c.n_ff, c, c.arch == Arch::qwen35};
}

const char* head_name(const ModelConfig& c) { return c.tied_embeddings ? "model.embed_tokens.weight" : "lm_head.weight"; }

void check_tokens(const ParameterLayout& layout, std::span<const int32_t> tokens, std::span<const int32_t> targets) {
    const int64_t V = layout.config().n_vocab;
    for (size_t i = 0; i < tokens.size(); ++i)
        if (tokens[i] < 0 || tokens[i] >= V) fail("train: token {} at position {} is outside 0..{}", tokens[i], i, V - 1);
    for (size_t i = 0; i < targets.size(); ++i)
        if (targets[i] >= V) fail("train: target {} at position {} is outside 0..{}", targets[i], i, V - 1);
    if (!targets.empty() && targets.size() != tokens.size())
        fail("train: {} targets for {} tokens", targets.size(), tokens.size());
}

// Embeddings and every layer; returns the residual stream before the final norm, and (when inputs
// is set) each layer's input.
Vec forward_trunk(const Dims& d, const Params& P, std::span<const int32_t> tokens, std::vector<Vec>* inputs) {
    Vec x = zeros(d.T * d.D);
    const double* embed = P.p("model.embed_tokens.weight");
    for (int64_t t = 0; t < d.T; ++t) std::copy_n(embed + int64_t(tokens[size_t(t)]) * d.D, d.D, x.data() + t * d.D);
    LayerCache cache;
    for (int64_t l = 0; l < d.c.n_layer(); ++l) {
        if (inputs) inputs->push_back(x);
        Vec next;
        layer_forward(d, P, l, x, next, cache);
        x = std::move(next);
    }
    return x;
}

}  // namespace

SequenceLoss sequence_loss(const ParameterLayout& layout, std::span<const double> params,
                           std::span<const int32_t> tokens, std::span<const int32_t> targets, int64_t chunk) {
    check_tokens(layout, tokens, targets);
    const Dims d = dims_of(layout, int64_t(tokens.size()));
    const Params P{layout, params, {}};
    const Vec x = forward_trunk(d, P, tokens, nullptr);
    Vec hf = zeros(d.T * d.D);
    rms_norm_forward(x.data(), P.p("model.norm.weight"), d.T, d.D, d.c.rms_eps, d.one_plus(), hf.data());
    SequenceLoss result;
    result.loss_sum = lm_head_cross_entropy_forward(hf.data(), P.p(head_name(d.c)), targets.data(), d.T, d.D, d.V,
                                                    chunk, &result.counted);
    return result;
}

SequenceLoss sequence_loss_and_gradient(const ParameterLayout& layout, std::span<const double> params,
                                        std::span<const int32_t> tokens, std::span<const int32_t> targets,
                                        double scale, std::span<double> grads, int64_t chunk) {
    check_tokens(layout, tokens, targets);
    if (int64_t(grads.size()) != layout.total())
        fail("train: gradient buffer holds {} values, the model has {}", grads.size(), layout.total());
    const Dims d = dims_of(layout, int64_t(tokens.size()));
    const Params P{layout, params, grads};
    std::vector<Vec> inputs;
    const Vec x = forward_trunk(d, P, tokens, &inputs);
    Vec hf = zeros(d.T * d.D);
    rms_norm_forward(x.data(), P.p("model.norm.weight"), d.T, d.D, d.c.rms_eps, d.one_plus(), hf.data());
    SequenceLoss result;
    result.loss_sum = lm_head_cross_entropy_forward(hf.data(), P.p(head_name(d.c)), targets.data(), d.T, d.D, d.V,
                                                    chunk, &result.counted);

    Vec dhf = zeros(d.T * d.D);
    lm_head_cross_entropy_backward(hf.data(), P.p(head_name(d.c)), targets.data(), d.T, d.D, d.V, chunk, scale,
                                   dhf.data(), P.g(head_name(d.c)));
    Vec dx = zeros(d.T * d.D);
    rms_norm_backward(x.data(), P.p("model.norm.weight"), dhf.data(), d.T, d.D, d.c.rms_eps, d.one_plus(), dx.data(),
                      P.g("model.norm.weight"));
    LayerCache cache;
    for (int64_t l = d.c.n_layer() - 1; l >= 0; --l) {
        Vec unused;
        layer_forward(d, P, l, inputs[size_t(l)], unused, cache);  // recompute this layer's intermediates
        layer_backward(d, P, l, inputs[size_t(l)], cache, dx);
    }
    double* dembed = P.g("model.embed_tokens.weight");
    for (int64_t t = 0; t < d.T; ++t)
        for (int64_t i = 0; i < d.D; ++i) dembed[int64_t(tokens[size_t(t)]) * d.D + i] += dx[size_t(t * d.D + i)];
    return result;
}

std::vector<double> sequence_logits(const ParameterLayout& layout, std::span<const double> params,
                                    std::span<const int32_t> tokens) {
    check_tokens(layout, tokens, {});
    const Dims d = dims_of(layout, int64_t(tokens.size()));
    const Params P{layout, params, {}};
    const Vec x = forward_trunk(d, P, tokens, nullptr);
    Vec hf = zeros(d.T * d.D);
    rms_norm_forward(x.data(), P.p("model.norm.weight"), d.T, d.D, d.c.rms_eps, d.one_plus(), hf.data());
    Vec logits = zeros(d.T * d.V);
    linear_forward(hf.data(), P.p(head_name(d.c)), d.T, d.D, d.V, logits.data());
    return logits;
}

}  // namespace deltabit::train::ref
