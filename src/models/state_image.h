// Byte images of one sequence's state, the currency between the model's state objects (CPU
// SequenceState, GPU CudaSequenceState) and the runtime that keeps them (sessions, snapshots).
//
// Two kinds, for two jobs:
//   - StateImage: everything, to save a session to disk and restore it byte for byte. Chunks are named
//     after the intermediate they hold ("blk.3.attn.k", "blk.0.gdn.recurrent") and laid out the same on
//     every backend, so a CPU snapshot and a GPU snapshot of the same sequence hold the same bytes.
//   - StateCheckpoint: only what cannot be recovered by cutting the KV cache back, so a sequence that
//     has since advanced can return to `position` exactly (prefix reuse): DeltaNet conv windows and
//     recurrent states, and for a quantising KV format (KIVI) whatever a later quantisation step
//     overwrote (its exact residual window). Everything else is the sequence's own KV prefix.
//
// Restoring a checkpoint is valid only on the sequence it was taken from, or one restored from the same
// history, and only while that sequence still holds the checkpoint's first `position` tokens unchanged:
// the session that keeps checkpoints guarantees it (runtime/session.h).
#pragma once

#include "models/kv_format.h"

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace deltabit {

struct StateChunk {
    std::string name;
    std::vector<std::byte> bytes;
};

struct StateImage {
    int64_t position = 0;
    KvFormat kv_format = KvFormat::f32;
    std::vector<StateChunk> chunks;
};

struct StateCheckpoint {
    int64_t position = 0;
    std::vector<StateChunk> chunks;

    size_t byte_size() const {
        size_t n = 0;
        for (const StateChunk& c : chunks) n += c.bytes.size();
        return n;
    }
};

}  // namespace deltabit
