// Snapshot files (DESIGN.md §5): one sequence's whole state, its token ledger and the identity of the
// model and KV format it belongs to, so a conversation can be parked on disk and resumed exactly.
//
// Layout, version 1 (every integer little-endian; offsets from the start of the file):
//
//   0        magic          8 bytes  "DBSNAP" 0x00 0x01 — never changes; the version follows
//   8        version        u32      1
//   12       header_bytes   u32      H ≤ 1 MiB
//   16       header_xxh3    u64      XXH3-64 of the H header bytes
//   24       header         H bytes  JSON object: "fingerprint" (models/model_fingerprint.h),
//                                    "kv_format" ("f32" | "f16" | "kivi4"), "position" (tokens held),
//                                    "chunks" (how many follow), "model" (model_config_summary, for
//                                    people and for messages; not checked), "writer"
//   24+H     ledger_xxh3    u64      XXH3-64 of the ledger bytes
//   32+H     ledger         position × i32 token ids, then position × u8 generated flags (0 or 1)
//   then     chunks × "chunks", each:
//              name_bytes u32 (1..4096) | name | data_bytes u64 | xxh3 u64 (XXH3-64 of name then data) | data
//   end      nothing: the file ends after the last chunk's data
//
// The chunks are the sequence's StateImage (models/state_image.h), named and sized as
// models/sequence_state.h lays them out: read_snapshot() checks the set against state_image_layout()
// for the header's position, so every length is known before any large read or allocation.
//
// Writing goes to FILE.tmp, which is fsync'ed and renamed over FILE (then the folder is fsync'ed):
// a crash leaves the old FILE or the new one, never a mix. Reading verifies every byte of the file
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
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace deltabit {

inline constexpr std::array<char, 8> kSnapshotMagic = {'D', 'B', 'S', 'N', 'A', 'P', '\0', '\1'};
inline constexpr uint32_t kSnapshotVersion = 1;

struct Snapshot {
    std::string fingerprint;  // of the model the state belongs to
    std::vector<std::pair<std::string, std::string>> model_summary;  // model_config_summary(), informative
    TokenLedger ledger;       // ledger.size() == state.position
    StateImage state;
};

// What the reader requires. Checked in this order, each refusal an Error that names the file, what
// was wrong and the byte offset it concerns: magic, version, header (length, checksum, fields),
// fingerprint, KV format, capacity, ledger (checksum, ids in the vocabulary, flags 0/1), every chunk
// (name known and not repeated, length as laid out, checksum), no chunk missing, nothing after the end.
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
