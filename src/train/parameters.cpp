#include "train/parameters.h"

#include "core/error.h"

#include <fmt/format.h>

#include <cmath>

namespace deltabit::train {

void ParameterLayout::add(std::string name, std::vector<int64_t> shape, ParameterRole role, bool hidden_matrix) {
    ParameterInfo info;
    info.name = std::move(name);
    info.shape = std::move(shape);
    info.size = 1;
    for (int64_t d : info.shape) info.size *= d;
    info.offset = total_;
    info.role = role;
    info.hidden_matrix = hidden_matrix;
    total_ += info.size;
    params_.push_back(std::move(info));
}

ParameterLayout::ParameterLayout(const ModelConfig& c) : config_(c) {
    const int64_t D = c.n_embd, V = c.n_vocab, F = c.n_ff;
    const bool hybrid = c.arch == Arch::qwen35;
    const auto hidden = [this](std::string name, std::vector<int64_t> shape) {
        add(std::move(name), std::move(shape), ParameterRole::matrix, true);
    };
    add("model.embed_tokens.weight", {V, D}, ParameterRole::embedding);
    for (int64_t l = 0; l < c.n_layer(); ++l) {
        const std::string p = fmt::format("model.layers.{}.", l);
        add(p + "input_layernorm.weight", {D}, ParameterRole::norm);
        if (c.layers[size_t(l)] == LayerKind::full_attention) {
            const int64_t q_rows = c.n_head * c.head_dim * (c.attn_output_gate ? 2 : 1);
            hidden(p + "self_attn.q_proj.weight", {q_rows, D});
            hidden(p + "self_attn.k_proj.weight", {c.n_head_kv * c.head_dim, D});
            hidden(p + "self_attn.v_proj.weight", {c.n_head_kv * c.head_dim, D});
            hidden(p + "self_attn.o_proj.weight", {D, c.n_head * c.head_dim});
            add(p + "self_attn.q_norm.weight", {c.head_dim}, ParameterRole::norm);
            add(p + "self_attn.k_norm.weight", {c.head_dim}, ParameterRole::norm);
        } else {
            const int64_t value_dim = c.ssm_n_value_heads * c.ssm_value_dim;
            hidden(p + "linear_attn.in_proj_qkv.weight", {c.ssm_conv_channels(), D});
            hidden(p + "linear_attn.in_proj_z.weight", {value_dim, D});
            add(p + "linear_attn.in_proj_b.weight", {c.ssm_n_value_heads, D}, ParameterRole::matrix);
            add(p + "linear_attn.in_proj_a.weight", {c.ssm_n_value_heads, D}, ParameterRole::matrix);
            add(p + "linear_attn.conv1d.weight", {c.ssm_conv_channels(), 1, c.ssm_conv_kernel}, ParameterRole::vector);
            add(p + "linear_attn.dt_bias", {c.ssm_n_value_heads}, ParameterRole::vector);
            add(p + "linear_attn.A_log", {c.ssm_n_value_heads}, ParameterRole::vector);
            add(p + "linear_attn.norm.weight", {c.ssm_value_dim}, ParameterRole::norm);
            hidden(p + "linear_attn.out_proj.weight", {D, value_dim});
        }
        add(p + "post_attention_layernorm.weight", {D}, ParameterRole::norm);
        hidden(p + "mlp.gate_proj.weight", {F, D});
        hidden(p + "mlp.up_proj.weight", {F, D});
        hidden(p + "mlp.down_proj.weight", {D, F});
    }
    add("model.norm.weight", {D}, ParameterRole::norm);
    if (!c.tied_embeddings) add("lm_head.weight", {V, D}, ParameterRole::matrix);
    (void)hybrid;
}

const ParameterInfo* ParameterLayout::find(const std::string& name) const {
    for (const ParameterInfo& p : params_)
        if (p.name == name) return &p;
    return nullptr;
}

const ParameterInfo& ParameterLayout::get(const std::string& name) const {
    if (const ParameterInfo* p = find(name)) return *p;
    fail("train: the model has no parameter {}", name);
}

namespace {

bool ends_with(const std::string& s, const std::string& suffix) {
    return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

}  // namespace

std::vector<float> initial_parameters(const ParameterLayout& layout, double init_std, uint64_t seed) {
    const ModelConfig& c = layout.config();
    std::vector<float> values(size_t(layout.total()));
    std::mt19937_64 rng(seed);
    const bool one_plus_norms = c.arch == Arch::qwen35;
    const double residual_scale = 1.0 / std::sqrt(2.0 * double(c.n_layer()));
    for (const ParameterInfo& p : layout.all()) {
        float* v = values.data() + p.offset;
        auto fill_normal = [&](double std) {
            std::normal_distribution<double> normal(0.0, std);
            for (int64_t i = 0; i < p.size; ++i) v[i] = float(normal(rng));
        };
        if (p.role == ParameterRole::matrix || p.role == ParameterRole::embedding) {
            const bool residual_out = ends_with(p.name, "o_proj.weight") || ends_with(p.name, "out_proj.weight") ||
                                      ends_with(p.name, "down_proj.weight");
            fill_normal(init_std * (residual_out ? residual_scale : 1.0));
        } else if (ends_with(p.name, "linear_attn.norm.weight")) {
            std::fill(v, v + p.size, 1.0f);  // the gated norm multiplies by plain w
        } else if (p.role == ParameterRole::norm) {
            std::fill(v, v + p.size, one_plus_norms ? 0.0f : 1.0f);
        } else if (ends_with(p.name, "conv1d.weight")) {
            const double bound = 1.0 / std::sqrt(double(p.shape.back()));
            std::uniform_real_distribution<double> uniform(-bound, bound);
            for (int64_t i = 0; i < p.size; ++i) v[i] = float(uniform(rng));
        } else if (ends_with(p.name, "A_log")) {
            std::uniform_real_distribution<double> uniform(1.0, 16.0);
            for (int64_t i = 0; i < p.size; ++i) v[i] = float(std::log(uniform(rng)));
        } else if (ends_with(p.name, "dt_bias")) {
            std::fill(v, v + p.size, 1.0f);
        } else {
            fail("train: no initialiser for parameter {}", p.name);
        }
    }
    return values;
}

}  // namespace deltabit::train
