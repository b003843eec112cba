// Residual add then scale, y[i] = (x[i] + r[i]) · s, or y[i] = x[i] · s without r: DiffusionGemma's
// layer_scalar, which multiplies the whole stream after a layer, residual included, and its embedding
// scale √H (../shared/reference/diffusion-gemma.md §2.1, §2.4).
//   x, y  [n]   (y may equal x)
//   r     [n]   or nullptr
// Reference numerics: fp32, the add rounded, then the product rounded, as the model's float arithmetic
// (and transformers' in the hidden dtype) does — so a kernel doing the same two roundings is exact.
#pragma once
#include <cstdint>
namespace deltabit::cpu {
void add_scale(const float* x, const float* r, int64_t n, float s, float* y);
}  // namespace deltabit::cpu
