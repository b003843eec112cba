// The [model] section the trainer's command tests share: a 2-layer qwen35 hybrid (one DeltaNet layer, one
// attention layer) that the CPU reference trains in milliseconds.
#pragma once

namespace deltabit::test {

inline constexpr const char* kTinyModelSection = R"([model]
hidden = 16
layers = 2
full_attention_interval = 2
heads = 2
kv_heads = 1
head_dim = 8
ffn = 24
deltanet_key_heads = 1
deltanet_value_heads = 2
deltanet_key_dim = 4
deltanet_value_dim = 8
)";

}  // namespace deltabit::test
