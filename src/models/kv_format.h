// How a sequence stores the keys and values of its full-attention layers.
//   f32   exact, 4 bytes per value (the reference)
//   f16   2 bytes per value (IEEE half, round to nearest even)
//   kivi4 KIVI 4-bit: the first `sinks` tokens and the newest `residual` tokens exact (f32 on the CPU),
//         the tokens between quantised to 4 bits (keys per channel, values per token, in groups), once the
//         residual window fills; sinks + quantised + residual = sequence length. Layout and rounding:
//         models/kv_cache.h. Layer 0, when it is full attention, stores f16 instead
//         (layer_kv_format below).
#pragma once

#include "models/model_config.h"

#include <cstdint>
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

// The format full-attention layer `layer` (an index into config.layers, counting every layer) stores
// in a sequence that asked for `requested`. Every backend builds its caches, and so its state images,
// from this one rule.
//
// kivi4 keeps layer 0 in f16 when layer 0 is full attention (qwen3; the hybrids start with DeltaNet
// layers and are not affected). Nothing mixes tokens before layer 0, so its keys and values are a
// function of the token id alone (its keys up to RoPE): every occurrence of a token carries the same
// quantisation error, and attention over many of them adds it up instead of averaging it out. Measured
// on tests/fixtures/qwen3_float (docs/kv_cache.md, rung-5 gate): quantising layer 0 alone gives mean KL
// 6.6e-3 and top-1 91.9% at depth 128-511 (gate: 0.005, 96.5%), each of layers 1-3 alone at most 9.4e-5
// and 98.4%; with layer 0 in f16 and the rest kivi4, 1.3e-4 and 98.2%, and it passes every bin to 4096
// tokens. Value groups of 16 or 8 channels instead do not pass (3.5e-3 / 94.8%, 2.2e-3 / 95.6%).
inline KvFormat layer_kv_format(const ModelConfig& config, KvFormat requested, int64_t layer) {
    const bool first_layer_attends = !config.layers.empty() && config.layers.front() == LayerKind::full_attention;
    if (requested == KvFormat::kivi4 && layer == 0 && first_layer_attends) return KvFormat::f16;
    return requested;
}

}  // namespace deltabit
