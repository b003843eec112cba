// Grouped-query attention where each query sees an explicit contiguous span of keys and the score
// scale is given: the form DiffusionGemma needs (../shared/reference/diffusion-gemma.md §2.3, §2.6–2.7):
// scale 1 (no 1/√d), a causal sliding window in the encoder, and no mask at all over cache ++ canvas in
// the decoder. cpu::attention (attention.h) is the causal special case with scale 1/√head_dim.
//
//   q      [n_queries][n_head][head_dim]
//   k, v   [n_keys][n_kv_head][head_dim]
//   key_begin, key_end  [n_queries]   query t attends keys key_begin[t] .. key_end[t] − 1
//                                     (0 <= begin < end <= n_keys: every query sees at least one key)
//   out    [n_queries][n_head][head_dim]
//
// Query head h reads kv head h / (n_head / n_kv_head) (transformers' repeat_kv). Scores scale · q·k,
// softmax over the span. Reference numerics: scores, softmax and the weighted sum of v in double.
#pragma once
#include <cstdint>
namespace deltabit::cpu {
struct AttentionSpanDims {
    int64_t n_queries = 0;
    int64_t n_keys = 0;
    int64_t n_head = 0;
    int64_t n_kv_head = 0;  // divides n_head
    int64_t head_dim = 0;
};
void attention_spans(const float* q, const float* k, const float* v, const AttentionSpanDims& dims, double scale,
                     const int64_t* key_begin, const int64_t* key_end, float* out);

// DiffusionGemma's spans (reference §2.6–2.7, §5.3) over keys = the layer's cache (n_cached rows: for a
// sliding layer already only the last W − 1 tokens) followed by the n_queries new tokens' own:
//   causal (the encoder): query t sees keys up to and including its own, n_cached + t, and with a window
//     W > 0 only the W most recent of them (itself and the W − 1 before it);
//   not causal (the decoder over the canvas): every query sees every key, cache and canvas, with no mask.
// The one rule the CPU forward and the CUDA path both use. begin, end [n_queries].
void diffusion_key_spans(int64_t n_queries, int64_t n_cached, bool causal, int64_t window, int64_t* key_begin,
                         int64_t* key_end);
}  // namespace deltabit::cpu
