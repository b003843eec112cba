// Causal grouped-query attention over a KV history, with an optional sigmoid output gate
// (Qwen3.5 full-attention layers; Qwen3 passes no gate).
//
//   q     [T][n_head][head_dim]                 queries of the T new tokens (normed and roped)
//   k, v  [n_past + T][n_kv_head][head_dim]     the whole history, the T new tokens included, by position
//   gate  [T][n_head][head_dim] or nullptr      out ← out ⊙ sigmoid(gate)
//   out   [T][n_head][head_dim]
//
// Query t sits at position n_past + t and attends keys 0 .. n_past + t. Query head h reads kv head
// h / (n_head / n_kv_head) (consecutive grouping, transformers' repeat_kv). Scores are q·k / sqrt(head_dim)
// (the full head_dim, also under partial RoPE); softmax over the visible keys.
// Reference numerics: scores, softmax and the weighted sum of v in double.
#pragma once

#include <cstdint>

namespace deltabit::cpu {

struct AttentionDims {
    int64_t n_tokens = 0;   // T, new queries
    int64_t n_past = 0;     // positions already in k/v before the new tokens
    int64_t n_head = 0;
    int64_t n_kv_head = 0;  // divides n_head
    int64_t head_dim = 0;
};

void attention(const float* q, const float* k, const float* v, const float* gate, const AttentionDims& dims,
               float* out);

}  // namespace deltabit::cpu
