// A sequence's state on the GPU: the KV caches of its full-attention layers and the conv and recurrent
// states of its DeltaNet layers, byte for byte the CPU SequenceState's layout (models/sequence_state.h).
// CUDA builds only (DELTABIT_HAVE_CUDA).
//
// It stays in models/ beside the CPU SequenceState (not runtime/) because both models' forward passes take
// it: runtime/ depends on models/, so a state in runtime/ would make the dependency a cycle.
#pragma once

#if DELTABIT_HAVE_CUDA

#include <cstdint>
#include <string>
#include <vector>

#include "backend/cuda_buffer.h"
#include "models/kv_format.h"
#include "models/model_config.h"
#include "models/state_image.h"
#include "ops/attention/kv_cuda.h"

namespace deltabit {

// The most tokens one forward call hands the layers at once: prompts are cut into chunks of this many
// (CudaModel::kPromptChunk), which bounds the prompt arena and a kivi4 cache's ring of exact rows.
inline constexpr int64_t kCudaMaxCallTokens = 512;

// One side (keys or values) of one full-attention layer's KV cache, in the sequence's KV format
// (ops/attention/kv_cuda.h has the device layouts); `view` points into the buffers.
struct CudaKvSide {
    cuda::DeviceBuffer data;               // f32/f16: [capacity][row]; kivi4: exact rows (sinks + ring)
    cuda::DeviceBuffer codes, min, scale;  // kivi4 only
    cuda::KvCacheView view;
};

// Per-layer device state: the KV cache (filled up to the sequence's position) of full-attention layers;
// the conv window and recurrent state of DeltaNet layers, in the layouts of models/sequence_state.h (f32),
// twice: copy [sequence.parity()] is the state at the sequence's position. A decode step reads it and
// writes the other copy, then the sequence flips parity — so the step can be undone (undo_step) by
// flipping back, which is what lets greedy decoding run one token ahead of the host (the engine's EOS
// rewind). Prompt chunks update the current copy in place.
struct CudaLayerState {
    CudaKvSide k, v;
    cuda::DeviceBuffer conv[2], recurrent[2];
};

class CudaSequenceState {
public:
    // Room for `max_positions` tokens in every KV cache, stored as `kv` (models/kv_cache.h: f32, f16 =
    // IEEE half rounded to nearest even, or kivi4); zero conv and recurrent states. Error when the model's
    // geometry does not suit the format (kivi4: head_dim a multiple of kKiviGroup).
    CudaSequenceState(const ModelConfig& config, int64_t max_positions, KvFormat kv = KvFormat::f32);

    int64_t position() const { return position_; }
    int64_t max_positions() const { return max_positions_; }
    KvFormat kv_format() const { return kv_format_; }
    // Which DeltaNet copy holds the current state (CudaLayerState).
    int parity() const { return parity_; }
    // After a prompt chunk of n tokens (DeltaNet states updated in place).
    void advance(int64_t n_tokens) {
        position_ += n_tokens;
        undoable_ = false;
    }
    // After a decode step (DeltaNet states written to the other copy).
    void advance_step() {
        ++position_;
        parity_ ^= 1;
        undoable_ = true;
    }
    // Back to the position before the last decode step, exactly (its KV row is dead, its DeltaNet copy
    // is the old one). Only right after a decode step: Error otherwise (nothing else changed the state
    // since, so the old copy is intact).
    void undo_step();
    CudaLayerState& layer(int64_t i) { return layers_[size_t(i)]; }
    int64_t n_layer() const { return int64_t(layers_.size()); }
    // Names this state's device buffers for the model's cached decode graph; moves with them.
    uint64_t id() const { return id_; }

    // The whole state as named chunks, byte for byte the CPU SequenceState's (state_image_layout in
    // models/sequence_state.h; kivi4's exact residual rows gathered from the ring in position order).
    StateImage save() const;
    // Validates everything first (validate_state_image: KV format, position, every chunk's name and
    // size; then the position against this sequence's capacity) and throws a deltabit::Error naming the
    // problem with the state untouched.
    void load(const StateImage& image);
    // What cannot be rewound (state_checkpoint_layout: the DeltaNet chunks, kivi4's residual windows)
    // and the position; restore() goes back to it (the KV beyond it is dead).
    StateCheckpoint checkpoint() const;
    void restore(const StateCheckpoint& checkpoint);

private:
    // A piece of device memory, several of which make one chunk (kivi4's residual may wrap the ring).
    struct DevicePiece {
        const cuda::DeviceBuffer* buffer = nullptr;
        size_t offset = 0, bytes = 0;
    };
    struct DeviceChunk {
        std::string name;
        size_t bytes = 0;
        std::vector<DevicePiece> pieces;
    };
    // The chunks of an image (or, with checkpoint_only, of a checkpoint) at `position`, in the order of
    // the CPU layout functions, checked against them.
    std::vector<DeviceChunk> device_chunks(int64_t position, bool checkpoint_only) const;
    void kv_side_chunks(const CudaKvSide& side, const std::string& prefix, int64_t position, bool checkpoint_only,
                        std::vector<DeviceChunk>& out) const;
    static void download(const DeviceChunk& chunk, StateChunk& into);
    static void upload(const DeviceChunk& chunk, const StateChunk& from);

    ModelConfig config_;
    int64_t position_ = 0;
    int64_t max_positions_ = 0;
    KvFormat kv_format_ = KvFormat::f32;
    int64_t kv_row_ = 0;  // elements of one position of one layer's K (or V): n_head_kv · head_dim
    int parity_ = 0;
    bool undoable_ = false;
    uint64_t id_ = 0;
    std::vector<CudaLayerState> layers_;
};

}  // namespace deltabit

#endif  // DELTABIT_HAVE_CUDA
