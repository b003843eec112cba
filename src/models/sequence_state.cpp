#include "models/sequence_state.h"

#include <algorithm>

namespace deltabit {

SequenceState::SequenceState(const ModelConfig& c) : layers_(size_t(c.n_layer())) {
    for (int64_t i = 0; i < c.n_layer(); ++i) {
        if (c.layers[size_t(i)] != LayerKind::linear_attention) continue;
        LayerState& s = layers_[size_t(i)];
        s.conv.assign(size_t((c.ssm_conv_kernel - 1) * c.ssm_conv_channels()), 0.0f);
        s.recurrent.assign(size_t(c.ssm_n_value_heads * c.ssm_key_dim * c.ssm_value_dim), 0.0f);
    }
}

void SequenceState::reset() {
    position_ = 0;
    for (LayerState& s : layers_) {
        s.k.clear();
        s.v.clear();
        std::fill(s.conv.begin(), s.conv.end(), 0.0f);
        std::fill(s.recurrent.begin(), s.recurrent.end(), 0.0f);
    }
}

}  // namespace deltabit
