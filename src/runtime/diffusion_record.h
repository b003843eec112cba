// Recorded block-diffusion runs (`deltabit run --record FILE`, `deltabit replay FILE`, docs/replay.md):
// every denoising step's inputs and outcome, so that a run can be repeated bit for bit on the backend it
// ran on and, when it is not, the first step that differs is named.
//
// Layout, version 1 (every integer little-endian; offsets from the start of the file):
//
//   0      magic         8 bytes  "DBDIFF" 0x00 0x01 — never changes; the version follows
//   8      version       u32      1
//   12     header_bytes  u32      H, 2 ≤ H ≤ 1 MiB
//   16     header        H bytes  JSON object: "fingerprint" (models/model_fingerprint.h), "model_path" (where
//                                 the model was loaded from, absolute: replay's default), "backend" ("cpu" or "cuda"),
//                                 "canvas_length" L, "n_vocab" V, "seed", "prompt" [ids], "settings" (every
//                                 DiffusionGenerationConfig field by name), "steps" S, "tokens" [the committed
//                                 ids], "steps_per_block" [...], "finished" (stopped on EOS), "model"
//                                 (model_config_summary, for people; not checked), "writer"
//   16+H   S steps, each 24 + 17·L bytes, in the order the loop ran them:
//            block i64 (0-based) | step i64 (1-based within the block) | logits_xxh3 u64 (XXH3-64 of the
//            decoder's float32 logits [L][V] as bytes) | canvas L×i32 (the decoder's input) |
//            sampled L×i32 (the step's first draw) | noise L×i32 (its second draw) |
//            accepted L×u8 (1 where the sample was kept) | argmax L×i32
//   end    nothing: the file ends after the last step
//
// A block's first canvas is its step 1 canvas, so the record holds every random draw of the run: replay
// needs no RNG, and a run whose draws came from elsewhere (transformers) records the same way. There is no
// checksum on purpose: every recorded value is checked by replaying it, and a checksum would name a
// damaged step no better than the replay does.
//
// Writing goes through AtomicFile (core/file_io.h). Reading checks the magic, the version, the header's
// fields and the exact file size before returning anything; each problem is one line naming the file.
#pragma once

#include "runtime/diffusion_generate.h"

#include <cstdint>
#include <filesystem>
#include <span>
#include <string>
#include <utility>
#include <vector>

namespace deltabit {

inline constexpr uint32_t kDiffusionRecordVersion = 1;

struct DiffusionRecordStep {
    int64_t block = 0;
    int64_t step = 0;
    uint64_t logits_xxh3 = 0;
    std::vector<int32_t> canvas, sampled, noise, argmax;
    std::vector<uint8_t> accepted;
};

struct DiffusionRecord {
    std::string fingerprint;
    std::string model_path;
    std::string backend;
    int64_t canvas_length = 0;
    int64_t n_vocab = 0;
    uint64_t seed = 0;
    std::vector<int32_t> prompt;
    DiffusionGenerationConfig settings;
    std::vector<int32_t> tokens;
    std::vector<int64_t> steps_per_block;
    bool finished = false;
    std::vector<DiffusionRecordStep> steps;
};

// XXH3-64 of the logits' bytes. Error in a build without xxhash (CMakeLists.txt says where it looks).
uint64_t diffusion_logits_hash(std::span<const float> logits);

// A step as the record holds it (copies the spans; hashes the logits).
DiffusionRecordStep record_step(const DiffusionStep& step);

// Error naming `path` for a target that cannot be written (core/file_io.h) or a build without xxhash.
void write_diffusion_record(const std::filesystem::path& path, const DiffusionRecord& record,
                            const std::vector<std::pair<std::string, std::string>>& model_summary);

// Error naming `path` and what is wrong: not a file, wrong magic, another version, a bad header,
// truncated or trailing bytes, a step out of order.
DiffusionRecord read_diffusion_record(const std::filesystem::path& path);

}  // namespace deltabit
