#include "text/byte_tokenizer.h"

#include <fmt/format.h>

namespace deltabit::text {

TokenizerSpec byte_tokenizer_spec(const std::vector<std::string>& extra_specials) {
    TokenizerSpec spec;
    spec.source = "byte tokenizer";
    spec.accepts_raw_bytes = true;
    spec.model.units = BpeUnits::Bytes;
    spec.decoder.byte_fallback = true;  // "<0xXX>" spellings decode to their byte
    for (int b = 0; b < 256; ++b) {
        spec.model.keys.emplace_back(1, static_cast<char>(b));
        spec.token_strings.push_back(fmt::format("<0x{:02X}>", b));
    }
    std::vector<std::string> specials = {"<|pad|>", "<|bos|>", "<|eos|>"};
    specials.insert(specials.end(), extra_specials.begin(), extra_specials.end());
    for (size_t i = 0; i < specials.size(); ++i) {
        spec.added_tokens.push_back({static_cast<int32_t>(256 + i), specials[i], true, false, false, false});
    }
    spec.pad_id = kBytePadId;
    spec.bos_id = kByteBosId;
    spec.eos_id = kByteEosId;
    spec.prefix_ids = {kByteBosId};
    return spec;
}

}  // namespace deltabit::text
