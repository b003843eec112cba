// Embedding lookup (ggml get_rows): out[t] = table[ids[t]] as floats, for a table in any weight dtype.
//
//   table  W[n_vocab][D]   (WeightView: rows = n_vocab, cols = D)
//   ids    [T]             each in [0, n_vocab); an id outside throws deltabit::Error naming it
//   out    [T][D]          row-major
#pragma once

#include <cstdint>

#include "core/tensor.h"

namespace deltabit::cpu {

void embedding_lookup(const WeightView& table, const int32_t* ids, int64_t n_tokens, float* out);

}  // namespace deltabit::cpu
