// Deterministic English-like prose for tokenizer tests and benchmarks: the same bytes on every
// machine for a given (size, seed), so a benchmark and its reference run read identical text without
// shipping megabytes in the repository. Words come from a list of common English words; sentences
// carry capitals, commas, contractions, quotes, numbers, dates and paragraph breaks.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

namespace deltabit::text {

std::string sample_english_text(size_t bytes, uint32_t seed = 1);

}  // namespace deltabit::text
