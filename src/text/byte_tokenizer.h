// The tokenizer of byte-level models (deltabit's own bytelm): one id per byte value, then a few
// special tokens. No normaliser, no merges, and any byte string is accepted as it is — invalid
// UTF-8 is not repaired on the way in, since every byte has its own id.
//
//   ids 0..255   the byte of that value (spelled "<0xXX>" by --pieces)
//   256          <|pad|>
//   257          <|bos|>    (added by add_special)
//   258          <|eos|>
//   259...       extra specials, in the order given
#pragma once

#include "text/tokenizer.h"

#include <string>
#include <vector>

namespace deltabit::text {

inline constexpr int32_t kBytePadId = 256;
inline constexpr int32_t kByteBosId = 257;
inline constexpr int32_t kByteEosId = 258;

TokenizerSpec byte_tokenizer_spec(const std::vector<std::string>& extra_specials = {});

inline Tokenizer make_byte_tokenizer(const std::vector<std::string>& extra_specials = {}) {
    return Tokenizer(byte_tokenizer_spec(extra_specials));
}

}  // namespace deltabit::text
