// Row layouts of fused projections that the loaders split into the engine's canonical tensors
// (../shared/reference/qwen35-transformers.md §2.4–2.5, llamacpp-formats-and-qwen35.md §2.2–2.3).
// Each function returns, for every output tensor, the source rows it takes, in order; the loaders
// copy those rows (whole rows, so any dtype works).
#pragma once

#include <cstdint>
#include <vector>

namespace deltabit {

struct RowSplit {
    std::vector<int64_t> first, second;
};

// Qwen3-Next in_proj_qkvz (HF) / legacy ssm_in (GGUF): per key head g, [q_g (dk) | k_g (dk) |
// v_g (r·dv) | z_g (r·dv)], r = Hv/Hk. first = attn_qkv rows [q_0..q_{Hk−1} | k_0.. | v_0..] (the
// flat layout of Qwen3.5's in_proj_qkv, value heads in grouped order), second = attn_gate rows (z).
inline RowSplit qkvz_rows(int64_t n_key_heads, int64_t key_dim, int64_t n_value_heads, int64_t value_dim) {
    const int64_t r = n_value_heads / n_key_heads;
    const int64_t group = 2 * key_dim + 2 * r * value_dim;
    RowSplit s;
    for (int64_t part = 0; part < 2; ++part)  // q then k
        for (int64_t g = 0; g < n_key_heads; ++g)
            for (int64_t i = 0; i < key_dim; ++i) s.first.push_back(g * group + part * key_dim + i);
    for (int64_t g = 0; g < n_key_heads; ++g)
        for (int64_t i = 0; i < r * value_dim; ++i) s.first.push_back(g * group + 2 * key_dim + i);
    for (int64_t g = 0; g < n_key_heads; ++g)
        for (int64_t i = 0; i < r * value_dim; ++i) s.second.push_back(g * group + 2 * key_dim + r * value_dim + i);
    return s;
}

// Qwen3-Next in_proj_ba (HF) / ssm_ba (GGUF): per key head g, [b_g (r) | a_g (r)].
// first = ssm_beta rows (b), second = ssm_alpha rows (a), value heads in grouped order.
inline RowSplit ba_rows(int64_t n_key_heads, int64_t n_value_heads) {
    const int64_t r = n_value_heads / n_key_heads;
    RowSplit s;
    for (int64_t g = 0; g < n_key_heads; ++g)
        for (int64_t i = 0; i < r; ++i) {
            s.first.push_back(g * 2 * r + i);
            s.second.push_back(g * 2 * r + r + i);
        }
    return s;
}

// Fused expert gate/up (HF experts.gate_up_proj [E, 2I, H], GGUF ffn_gate_up_exps): per expert e,
// rows [gate (I) | up (I)]. first = ffn_gate_exps rows, second = ffn_up_exps rows.
inline RowSplit gate_up_rows(int64_t n_expert, int64_t expert_ff) {
    RowSplit s;
    for (int64_t e = 0; e < n_expert; ++e)
        for (int64_t i = 0; i < expert_ff; ++i) {
            s.first.push_back(e * 2 * expert_ff + i);
            s.second.push_back(e * 2 * expert_ff + expert_ff + i);
        }
    return s;
}

}  // namespace deltabit
