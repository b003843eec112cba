// How a sequence stores the keys and values of its full-attention layers.
//   f32   exact, 4 bytes per value (the reference)
//   f16   2 bytes per value (IEEE half, round to nearest even)
//   kivi4 KIVI 4-bit: the first `sinks` tokens and the newest `residual` tokens exact (f32 on the CPU),
//         the tokens between quantised to 4 bits (keys per channel, values per token, in groups), once the
//         residual window fills; sinks + quantised + residual = sequence length. Layout and rounding:
//         models/kv_cache.h.
#pragma once

#include <optional>
#include <string_view>

namespace deltabit {

enum class KvFormat { f32, f16, kivi4 };

inline std::string_view kv_format_name(KvFormat f) {
    switch (f) {
        case KvFormat::f32: return "f32";
        case KvFormat::f16: return "f16";
        case KvFormat::kivi4: return "kivi4";
    }
    return "?";
}

inline std::optional<KvFormat> parse_kv_format(std::string_view s) {
    if (s == "f32") return KvFormat::f32;
    if (s == "f16") return KvFormat::f16;
    if (s == "kivi4" || s == "kivi") return KvFormat::kivi4;
    return std::nullopt;
}

}  // namespace deltabit
