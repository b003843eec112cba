// What one token costs a model, counted from its tensors and geometry: the bytes a batch-1 decode step
// must move through device memory (the floor of its time at the card's copy bandwidth) and the
// floating-point operations a prefill must do (the floor at the tensor-core rate). DESIGN.md §7.
//
// Decode bytes per token at context depth n (the step that consumes the token at position n):
//   weights  every tensor once (matrices in their stored bytes, norm vectors, conv taps), except:
//            token_embd contributes one row (a lookup) unless it is also the tied LM head; MoE expert
//            stacks contribute n_expert_used / n_expert of their bytes; MTP layers (blk.N, N ≥ n_layer)
//            nothing, since the forward pass never runs them;
//   kv       per full-attention layer, keys and values of positions 0..n read, and position n's
//            written: 2·H_kv·d_h·kv_bytes·(n + 2) for f32 (4 bytes) and f16 (2); kivi4 reads its stored
//            bytes at n + 1 positions (kv_cache_bytes: sinks and window in f32, the middle at 5 bits)
//            and writes position n's exact rows;
//   state    per DeltaNet layer, the recurrent state H_v·d_k·d_v and the conv window (K−1)·channels,
//            f32, each read and written back: 2·4·(H_v·d_k·d_v + (K−1)·channels).
// Activations (a few vectors of n_embd or n_ff floats per matrix, under 0.1% of the weights for every
// geometry in synthetic_model.h) are left out. The measured copy bandwidth counts read + write bytes, and
// so does this count.
//
// Prefill FLOPs of T tokens after n_past: 2 per weight of every matrix (and conv tap) per token, except
// the LM head, counted for `lm_head_tokens` tokens (1 when only the last token's logits are computed);
// plus attention, 4·H·d_h per (query, visible key) pair in each full-attention layer (QKᵀ and PV), with
// query t seeing n_past + t + 1 keys. Norms, activations and the DeltaNet recurrence (~7·d_k·d_v per
// head per token: under 0.1% for the bench geometries) are left out.
#pragma once

#include "models/kv_format.h"
#include "models/model_config.h"
#include "models/weights.h"

#include <cstdint>

namespace deltabit {

struct DecodeTraffic {
    uint64_t weight_bytes = 0;
    uint64_t kv_bytes = 0;
    uint64_t state_bytes = 0;
    uint64_t total() const { return weight_bytes + kv_bytes + state_bytes; }
};

class InferenceCost {
public:
    // `kv`: the KV cache format of the sequence (models/kv_cache.h).
    explicit InferenceCost(const ModelWeights& weights, KvFormat kv = KvFormat::f32);

    DecodeTraffic decode_traffic(int64_t depth) const;
    double prefill_flops(int64_t n_past, int64_t n_tokens, int64_t lm_head_tokens) const;

    uint64_t weight_bytes_per_token() const { return weight_bytes_per_token_; }
    uint64_t stored_weight_bytes() const { return stored_weight_bytes_; }  // every tensor, as stored
    double parameters() const { return parameters_; }                    // every element of every tensor

private:
    ModelConfig config_;
    KvFormat kv_ = KvFormat::f32;
    uint64_t weight_bytes_per_token_ = 0;
    uint64_t stored_weight_bytes_ = 0;
    double parameters_ = 0;
    double matrix_weights_ = 0;   // elements multiplied per token, LM head excluded
    double lm_head_weights_ = 0;  // n_vocab · n_embd
};

}  // namespace deltabit
