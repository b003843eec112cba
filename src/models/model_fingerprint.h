// A model's identity for snapshots (runtime/snapshot.h): a state saved with one model must never be
// loaded into another, and "another" includes the same architecture with different weights, a
// different quantisation of the same weights, and the same weights in another value-head order.
//
// The fingerprint is XXH3-128 over, in order: a domain tag with this scheme's version, the geometry
// (every ModelConfig field the forward pass or the state layout reads, each at a fixed width), then
// every tensor in name order — name, dtype, shape, byte count and every byte of its data as the engine
// holds it. Metadata the forward pass does not read (context_length, special tokens, rope_sections,
// which only image positions use) is left out, so a re-exported file with edited metadata keeps its
// identity. Written "xxh3-128:" + 32 lowercase hex digits, high half first.
//
// Cost: one pass over the weights at hashing speed (XXH3 runs at tens of GB/s; a 3.8 GB Q1_0 27B
// model is a fraction of a second once its pages are resident). Engines compute it on first use.
#pragma once

#include "models/weights.h"

#include <string>
#include <string_view>

namespace deltabit {

inline constexpr std::string_view kFingerprintScheme = "xxh3-128";

// Whether this build can hash (it was built with xxhash.h; CMakeLists.txt says where it looks).
bool fingerprint_available();

// Error naming the missing library in a build without xxhash.
std::string model_fingerprint(const ModelWeights& weights);

}  // namespace deltabit
