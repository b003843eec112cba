// GELU-gated combine (GeGLU with the tanh approximation): out[i] = gelu_tanh(gate[i]) · up[i], where
// gelu_tanh(x) = 0.5·x·(1 + tanh(√(2/π)·(x + 0.044715·x³))) — transformers' "gelu_pytorch_tanh". The
// DiffusionGemma MLPs (dense, experts, self-conditioning) are down · gelu_glu(gate · x, up · x).
//   gate, up, out  [n]  (out may equal gate or up)
#pragma once
#include <cstdint>
namespace deltabit::cpu {
void gelu_glu(const float* gate, const float* up, int64_t n, float* out);
}  // namespace deltabit::cpu
