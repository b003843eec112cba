// Snapshot files (DESIGN.md §5): one sequence's whole state, its token ledger, the checkpoints its
// session keeps for prefix reuse, and the identity of the model and KV format they belong to, so a
// conversation can be parked on disk and resumed exactly — including how much later turns reuse.
//
// Layout, version 3 (every integer little-endian; offsets from the start of the file):
//
//   0        magic          8 bytes  "DBSNAP" 0x00 0x01 — never changes; the version follows
//   8        version        u32      3 (1 and 2 are still read: see below)
//   12       header_bytes   u32      H ≤ 1 MiB
//   16       header_xxh3    u64      XXH3-64 of the H header bytes
//   24       header         H bytes  JSON object: "fingerprint" (models/model_fingerprint.h),
//                                    "kv_format" ("f32" | "f16" | "kivi4"), "position" (tokens held),
//                                    "chunks" (how many follow, checkpoints' included), "checkpoints"
//                                    (below), "model" (model_config_summary, for people and for
//                                    messages; not checked), "writer"
//   24+H     ledger_xxh3    u64      XXH3-64 of the ledger bytes
//   32+H     ledger         position × i32 token ids, then position × u8 generated flags (0 or 1)
//   then     chunks × "chunks", each:
//              name_bytes u32 (1..4096) | name | data_bytes u64 | xxh3 u64 (XXH3-64 of name then data) | data
//   end      nothing: the file ends after the last chunk's data
//
// The chunks are the sequence's StateImage (models/state_image.h), named and sized as
// models/sequence_state.h lays them out, and then every checkpoint's chunks. "checkpoints" is a list
// of {"position": P, "end_of_prompt": true|false}, plus "turn_start": true for a checkpoint taken where a
// model's turn begins (runtime/session.h; absent means false), in the order the session took them
// (oldest first: the order it evicts in), at distinct positions 0 ≤ P ≤ "position", at most kMaxSnapshotCheckpoints;
// checkpoint i's chunks are those of state_checkpoint_layout() at P, each named "checkpoint.<i>." +
// its name ("checkpoint.0.blk.1.gdn.recurrent"). read_snapshot() checks every chunk against these
// layouts for the header's positions, so every length is known before any large read or allocation.
// Chunks may come in any order; the writer puts the state's first, then checkpoint 0's, 1's, ...
//
// Version 1 is version 2 without "checkpoints" (and so without checkpoint chunks). It still loads, as
// a snapshot with no checkpoints (Snapshot::version says which was read): its state is complete and
// exact, and only later prefix reuse is poorer, which refusing it would not mend.
//
// Version 2 is version 3 with the kivi4 cache of before layer_kv_format (models/kv_format.h): it
// quantised layer 0 too, which kivi4 now keeps in f16. A version 1 or 2 kivi4 snapshot of a model whose
// layer 0 is full attention (qwen3) is therefore refused, saying so; its bytes were never a state this
// build's cache can hold. Every other version 1 or 2 file (f32, f16, or kivi4 of a model that starts
// with DeltaNet layers) holds the same bytes as version 3 and loads.
//
// Writing goes through AtomicFile (core/file_io.h): a temporary file beside FILE, fsync'ed and renamed
// over it, so a crash leaves the old FILE or the new one, never a mix; a FILE that is not a regular
// file (a device, a FIFO, a folder) is refused before anything is written. Reading verifies every byte of the file
// before returning anything, so a caller that installs the result only after read_snapshot() returns
// never half-loads.
#pragma once

#include "models/kv_format.h"
#include "models/model_config.h"
#include "models/state_image.h"
#include "runtime/token_ledger.h"

#include <array>
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace deltabit {

inline constexpr std::array<char, 8> kSnapshotMagic = {'D', 'B', 'S', 'N', 'A', 'P', '\0', '\1'};
inline constexpr uint32_t kSnapshotVersion = 3;        // what write_snapshot() writes
inline constexpr uint32_t kOldestSnapshotVersion = 1;  // read_snapshot() reads this one up to kSnapshotVersion
inline constexpr uint32_t kFirstSnapshotVersionWithCheckpoints = 2;
// More than any session keeps (8 by default; each is a whole DeltaNet state, ~157 MB for Bonsai-27B); it
// bounds what a damaged header can make the reader expect before it reads a chunk.
inline constexpr size_t kMaxSnapshotCheckpoints = 1024;

// A session's checkpoint as a snapshot holds it. Shared, not copied: a session's checkpoints can be
// gigabytes, and both the session and the snapshot only read them.
struct SnapshotCheckpoint {
    std::shared_ptr<const StateCheckpoint> state;  // position ≤ the snapshot's position
    bool end_of_prompt = false;                     // taken at the end of a turn's prompt (session.h)
    // Taken where a model's turn begins (session.h). An optional header key added within version 3: a
    // build from before it ignores the key and keeps such a checkpoint as an interval one (it evicts it
    // sooner), and this build reads its files as having none — both load, and reuse stays exact.
    bool turn_start = false;
};

struct Snapshot {
    std::string fingerprint;  // of the model the state belongs to
    std::vector<std::pair<std::string, std::string>> model_summary;  // model_config_summary(), informative
    TokenLedger ledger;       // ledger.size() == state.position
    StateImage state;
    std::vector<SnapshotCheckpoint> checkpoints;  // oldest first; distinct positions
    uint32_t version = kSnapshotVersion;  // the file's, when read (1: it could not hold checkpoints)
};

// What the reader requires. Checked in this order, each refusal an Error that names the file, what
// was wrong and the byte offset it concerns: magic, version, header (length, checksum, fields),
// fingerprint, KV format, capacity, checkpoints (only where this model's state needs them), ledger
// (checksum, ids in the vocabulary, flags 0/1), every chunk (name known and not repeated, length as laid
// out, checksum), no chunk missing, nothing after the end.
struct SnapshotExpectation {
    std::string fingerprint;
    KvFormat kv_format = KvFormat::f32;
    const ModelConfig* config = nullptr;  // vocabulary and state layout
    int64_t max_positions = 0;            // the receiving sequence's capacity
};

// Whether this build can write and read snapshots (it needs xxhash; CMakeLists.txt says where it looks).
bool snapshots_available();

void write_snapshot(const std::filesystem::path& file, const Snapshot& snapshot);
Snapshot read_snapshot(const std::filesystem::path& file, const SnapshotExpectation& expect);
// read_snapshot() over bytes already in memory, with the same checks and messages; `name` stands for
// the file in them. The fuzz target (fuzz/fuzz_snapshot.cpp) drives the reader through it.
Snapshot parse_snapshot(std::span<const std::byte> bytes, const SnapshotExpectation& expect, std::string_view name);

}  // namespace deltabit
