// The gated delta rule (gated DeltaNet's recurrence), in two forms that must agree: token by token
// (recurrent) and in chunks (the WY form transformers and fla use for prefill). Per value head h with
// key head kh = key_head(h), state S ∈ R^{d_k × d_v}, for each token t:
//
//   S ← exp(g[t][h]) · S                      decay
//   δ = beta[t][h] · (v[t][h] − Sᵀ k[t][kh])  read before write (a d_v-vector)
//   S ← S + k[t][kh] δᵀ                       write
//   o[t][h] = Sᵀ (q[t][kh] / sqrt(d_k))       read after write
//
// Layouts (row-major):
//   q, k   [T][n_key_heads][key_dim]      already L2-normalised (ops/l2_norm.h); q is scaled here
//   v      [T][n_value_heads][value_dim]
//   g, beta [T][n_value_heads]            log-decay (<= 0) and write strength (ops/gdn_gates.h)
//   state  [n_value_heads][key_dim][value_dim]  fp32, in/out (zeros at sequence start)
//   out    [T][n_value_heads][value_dim]
//
// Key-head mapping: qwen35 GGUFs order value heads tiled (h uses key head h % H_k); transformers and
// qwen3next GGUFs group them (h uses key head h / (H_v / H_k)). n_value_heads is a multiple of
// n_key_heads.
//
// Reference numerics: the recurrent form keeps S in fp32 between tokens (as the models do) and forms
// each sum in double; the chunked form works on each chunk in double and stores S in fp32 at chunk
// ends. They agree to fp32 rounding of the state.
#pragma once

#include <cstdint>

namespace deltabit::cpu {

enum class KeyHeadMap : uint8_t {
    tiled,    // value head h uses key head h % n_key_heads        (qwen35 / qwen35moe GGUF)
    grouped,  // value head h uses key head h / (H_v / H_k)         (transformers, qwen3next GGUF)
};

struct DeltaRuleDims {
    int64_t n_tokens = 0;
    int64_t n_key_heads = 0;
    int64_t n_value_heads = 0;
    int64_t key_dim = 0;
    int64_t value_dim = 0;
    KeyHeadMap key_head_map = KeyHeadMap::tiled;
};

inline int64_t key_head_of(int64_t value_head, const DeltaRuleDims& d) {
    return d.key_head_map == KeyHeadMap::tiled ? value_head % d.n_key_heads
                                               : value_head / (d.n_value_heads / d.n_key_heads);
}

void gated_delta_rule_recurrent(const float* q, const float* k, const float* v, const float* g, const float* beta,
                                const DeltaRuleDims& dims, float* state, float* out);

// Same contract; tokens are processed in chunks of chunk_size (64 in transformers and llama.cpp),
// the last chunk possibly shorter.
void gated_delta_rule_chunked(const float* q, const float* k, const float* v, const float* g, const float* beta,
                              const DeltaRuleDims& dims, float* state, float* out, int64_t chunk_size = 64);

}  // namespace deltabit::cpu
