// Everything one sequence carries from one forward call to the next: its position, the KV cache of
// every full-attention layer (f32), and the conv window and recurrent state of every gated DeltaNet
// layer. The model only borrows it; copying the object is a snapshot, assigning one back restores it.
#pragma once

#include "models/model_config.h"

#include <cstdint>
#include <vector>

namespace deltabit {

struct LayerState {
    // Full attention: keys (after k_norm and RoPE) and values of every position so far,
    // [n_positions][n_head_kv][head_dim] each.
    std::vector<float> k, v;
    // Gated DeltaNet: the last K−1 conv inputs, oldest first, [K−1][conv channels] (zeros at start);
    // and the recurrent state S, [n_value_heads][key_dim][value_dim], in the file's value-head order.
    std::vector<float> conv;
    std::vector<float> recurrent;
};

class SequenceState {
public:
    explicit SequenceState(const ModelConfig& config);

    int64_t position() const { return position_; }  // tokens consumed so far
    void advance(int64_t n_tokens) { position_ += n_tokens; }
    LayerState& layer(int64_t i) { return layers_[size_t(i)]; }
    const LayerState& layer(int64_t i) const { return layers_[size_t(i)]; }
    int64_t n_layer() const { return int64_t(layers_.size()); }
    // Back to an empty sequence (zero states, empty caches), keeping the allocations' shapes.
    void reset();

private:
    int64_t position_ = 0;
    std::vector<LayerState> layers_;
};

}  // namespace deltabit
