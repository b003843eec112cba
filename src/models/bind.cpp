// Binding GGUF-named tensors to the blocks, with every shape checked against the config here, once,
// so the blocks can trust their inputs.
#include "models/architectures.h"

namespace deltabit {

void bind_globals(const ModelWeights& w, ModelParts& parts) {
    const ModelConfig& c = w.config();
    parts.token_embd = w.matrix("token_embd.weight", c.n_vocab, c.n_embd);
    parts.output_norm = w.floats("output_norm.weight", c.n_embd);
    // llama.cpp: a missing output.weight means tied embeddings.
    parts.output = w.find("output.weight") ? w.matrix("output.weight", c.n_vocab, c.n_embd) : parts.token_embd;
}

AttentionWeights bind_attention(const ModelWeights& w, const std::string& blk) {
    const ModelConfig& c = w.config();
    const int64_t q_rows = c.n_head * c.head_dim * (c.attn_output_gate ? 2 : 1);
    AttentionWeights a;
    a.q = w.matrix(blk + "attn_q.weight", q_rows, c.n_embd);
    a.k = w.matrix(blk + "attn_k.weight", c.n_head_kv * c.head_dim, c.n_embd);
    a.v = w.matrix(blk + "attn_v.weight", c.n_head_kv * c.head_dim, c.n_embd);
    a.output = w.matrix(blk + "attn_output.weight", c.n_embd, c.n_head * c.head_dim);
    a.q_norm = w.floats(blk + "attn_q_norm.weight", c.head_dim);
    a.k_norm = w.floats(blk + "attn_k_norm.weight", c.head_dim);
    return a;
}

DeltaNetWeights bind_deltanet(const ModelWeights& w, const std::string& blk) {
    const ModelConfig& c = w.config();
    const int64_t value_dim = c.ssm_n_value_heads * c.ssm_value_dim, channels = c.ssm_conv_channels();
    DeltaNetWeights d;
    d.qkv = w.matrix(blk + "attn_qkv.weight", channels, c.n_embd);
    d.gate = w.matrix(blk + "attn_gate.weight", value_dim, c.n_embd);
    d.beta = w.matrix(blk + "ssm_beta.weight", c.ssm_n_value_heads, c.n_embd);
    d.alpha = w.matrix(blk + "ssm_alpha.weight", c.ssm_n_value_heads, c.n_embd);
    d.output = w.matrix(blk + "ssm_out.weight", c.n_embd, value_dim);
    w.matrix(blk + "ssm_conv1d.weight", channels, c.ssm_conv_kernel);  // shape {K, channels}
    d.conv = w.floats(blk + "ssm_conv1d.weight", channels * c.ssm_conv_kernel);
    d.ssm_a = w.floats(blk + "ssm_a", c.ssm_n_value_heads);
    d.dt_bias = w.floats(blk + "ssm_dt.bias", c.ssm_n_value_heads);
    d.norm = w.floats(blk + "ssm_norm.weight", c.ssm_value_dim);
    return d;
}

FfnWeights bind_ffn(const ModelWeights& w, const std::string& blk) {
    const ModelConfig& c = w.config();
    return {w.matrix(blk + "ffn_gate.weight", c.n_ff, c.n_embd), w.matrix(blk + "ffn_up.weight", c.n_ff, c.n_embd),
            w.matrix(blk + "ffn_down.weight", c.n_embd, c.n_ff)};
}

MoeWeights bind_moe(const ModelWeights& w, const std::string& blk) {
    const ModelConfig& c = w.config();
    MoeWeights m;
    m.router = w.matrix(blk + "ffn_gate_inp.weight", c.n_expert, c.n_embd);
    m.gate = w.matrix3(blk + "ffn_gate_exps.weight", c.n_expert, c.expert_ff, c.n_embd);
    m.up = w.matrix3(blk + "ffn_up_exps.weight", c.n_expert, c.expert_ff, c.n_embd);
    m.down = w.matrix3(blk + "ffn_down_exps.weight", c.n_expert, c.n_embd, c.expert_ff);
    m.has_shared = c.shared_expert_ff > 0;
    if (m.has_shared) {
        const int64_t s = c.shared_expert_ff;
        m.shared = {w.matrix(blk + "ffn_gate_shexp.weight", s, c.n_embd), w.matrix(blk + "ffn_up_shexp.weight", s, c.n_embd),
                    w.matrix(blk + "ffn_down_shexp.weight", c.n_embd, s)};
        m.shared_gate = w.matrix(blk + "ffn_gate_inp_shexp.weight", 1, c.n_embd);
    }
    return m;
}

}  // namespace deltabit
