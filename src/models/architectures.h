// The architecture table: how each Arch binds its tensors to the shared blocks. Adding an
// architecture is one row in architectures.cpp and one bind function in its own file.
#pragma once

#include "models/model.h"

#include <string>
#include <string_view>

namespace deltabit {

using BindFunction = ModelParts (*)(const ModelWeights& weights);

struct Architecture {
    Arch arch;
    BindFunction bind;
};

const Architecture& architecture_of(Arch arch);

// Per-architecture bind functions (qwen35.cpp, qwen3.cpp, diffusion_gemma.cpp).
ModelParts bind_qwen35(const ModelWeights& weights);  // qwen35, qwen35moe, qwen3next
ModelParts bind_qwen3(const ModelWeights& weights);
ModelParts bind_diffusion_gemma(const ModelWeights& weights);  // diffusion_gemma.cpp

// Shared binding helpers (bind.cpp); `blk` is the layer's GGUF prefix, "blk.N.".
void bind_globals(const ModelWeights& weights, ModelParts& parts);
AttentionWeights bind_attention(const ModelWeights& weights, const std::string& blk);
DeltaNetWeights bind_deltanet(const ModelWeights& weights, const std::string& blk);
FfnWeights bind_ffn(const ModelWeights& weights, const std::string& blk);
MoeWeights bind_moe(const ModelWeights& weights, const std::string& blk);

}  // namespace deltabit
