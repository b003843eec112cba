// Everything one sequence carries from one forward call to the next: its position, the KV cache of
// every full-attention layer (in the format layer_kv_format gives that layer for the sequence's
// KvFormat — kivi4 keeps layer 0 in f16 when it attends; models/kv_format.h, kv_cache.h), and the
// conv window and recurrent state of every gated DeltaNet layer. The model only borrows it. Copying
// the object is an in-memory snapshot; save()/load() turn it into a StateImage (named byte chunks, for
// files and other backends); checkpoint()/restore() keep only what cannot be recovered by cutting the
// KV cache back (prefix reuse).
//
// State image chunks, per layer N in order, all little-endian (the GPU state writes the same ones):
//   full attention   blk.N.attn.k, blk.N.attn.v   [position][n_head_kv][head_dim], keys after k_norm
//                    and RoPE, values as projected; f32 or f16 per the layer's format. kivi4 splits
//                    each into .sink/.codes/.min/.scale/.residual (models/kv_cache.h has the exact
//                    layout); a kivi4 sequence's layer 0, when it attends, has the f16 chunks.
//   gated DeltaNet   blk.N.gdn.conv        f32 [ssm_conv_kernel − 1][ssm_conv_channels()]: the last
//                                          K−1 conv inputs, oldest first (zeros before the start)
//                    blk.N.gdn.recurrent   f32 [H_v][d_k][d_v]: the state S, value heads in the
//                                          model's own order (config.value_head_order)
// A checkpoint holds the two gdn chunks of every DeltaNet layer, and blk.N.attn.k.residual /
// blk.N.attn.v.residual of every attention layer stored as kivi4 (the exact residual window at its
// position).
#pragma once

#include "models/kv_cache.h"
#include "models/kv_format.h"
#include "models/model_config.h"
#include "models/state_image.h"

#include <cstdint>
#include <vector>

namespace deltabit {

struct LayerState {
    // Full attention: keys (after k_norm and RoPE) and values of every position so far.
    KvStore k, v;
    // Gated DeltaNet: the last K−1 conv inputs, oldest first, [K−1][conv channels] (zeros at start);
    // and the recurrent state S, [n_value_heads][key_dim][value_dim], in the file's value-head order.
    std::vector<float> conv;
    std::vector<float> recurrent;

    bool operator==(const LayerState&) const = default;
};

// The largest position an image or checkpoint may claim: bounds every byte count computed from it
// (2^40 positions × a row of 2^16 f32 values stays below 2^63).
inline constexpr int64_t kMaxStatePosition = int64_t(1) << 40;

// The exact chunk list (names in save() order, byte sizes) of a state at `position`.
std::vector<StateChunkSpec> state_image_layout(const ModelConfig& config, KvFormat kv, int64_t position);
// The chunks a checkpoint at `position` holds.
std::vector<StateChunkSpec> state_checkpoint_layout(const ModelConfig& config, KvFormat kv, int64_t position);
// Error naming the first thing in `image` that a sequence of this model and format cannot hold
// (format, position, a missing, unknown, repeated or misshapen chunk). Changes nothing.
void validate_state_image(const ModelConfig& config, KvFormat kv, const StateImage& image);
// The same for a checkpoint: its position (not negative, not past kMaxStatePosition) and its chunks
// against state_checkpoint_layout. Changes nothing; whether the position suits a sequence is the caller's.
void validate_state_checkpoint(const ModelConfig& config, KvFormat kv, const StateCheckpoint& checkpoint);

// Memory of one sequence, from the same layouts: the KV caches of every full-attention layer at
// n_positions (the attn chunks of an image), their cost per further token once long (kivi4: a whole
// group past the window, so the 5 bits per value of its settled middle, and 16 in a layer kept f16),
// and the DeltaNet states (fixed, whatever the position).
int64_t kv_cache_bytes(const ModelConfig& config, KvFormat kv, int64_t n_positions);
double kv_bytes_per_token(const ModelConfig& config, KvFormat kv);
int64_t deltanet_state_bytes(const ModelConfig& config);

class SequenceState {
public:
    // Error when the model's geometry does not suit the format (kivi4: head_dim % kKiviGroup).
    explicit SequenceState(const ModelConfig& config, KvFormat kv = KvFormat::f32);

    KvFormat kv_format() const { return kv_; }  // as asked; a layer's own: layer(i).k.format()
    int64_t position() const { return position_; }  // tokens consumed so far
    void advance(int64_t n_tokens) { position_ += n_tokens; }
    LayerState& layer(int64_t i) { return layers_[size_t(i)]; }
    const LayerState& layer(int64_t i) const { return layers_[size_t(i)]; }
    int64_t n_layer() const { return int64_t(layers_.size()); }
    // Back to an empty sequence (zero states, empty caches), keeping the allocations' shapes.
    void reset();

    // The whole state as chunks (layout above), and back. load() validates everything first
    // (validate_state_image) and leaves the state unchanged when it throws.
    StateImage save() const;
    void load(const StateImage& image);

    // What a return to the current position needs beyond this sequence's own KV prefix. restore()
    // validates the checkpoint (chunks, and a position no later than the current one) before changing
    // anything, then cuts every KV cache back to the checkpoint's position and puts the DeltaNet states
    // (and kivi4 residual windows) back, bit for bit. Valid only while this sequence still holds the
    // history the checkpoint was taken on (models/state_image.h).
    StateCheckpoint checkpoint() const;
    void restore(const StateCheckpoint& checkpoint);

    // Same position, format and every stored byte (configs are compared by shape only).
    bool operator==(const SequenceState& other) const {
        return position_ == other.position_ && kv_ == other.kv_ && layers_ == other.layers_;
    }

private:
    ModelConfig config_;
    KvFormat kv_ = KvFormat::f32;
    int64_t position_ = 0;
    std::vector<LayerState> layers_;
};

}  // namespace deltabit
