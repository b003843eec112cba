// Logit soft-capping: y = cap · tanh(x / cap), which bounds |y| below cap and is ~x for |x| ≪ cap
// (DiffusionGemma's final logits, cap 30). In place allowed.
//   x, y  [n]   cap > 0
// Reference numerics: double.
#pragma once
#include <cstdint>
namespace deltabit::cpu {
void softcap(const float* x, int64_t n, float cap, float* y);
}  // namespace deltabit::cpu
