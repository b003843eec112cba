// Per-column scale with a constant: y[r][i] = x[r][i] · w[i] · c. DiffusionGemma's router input is
// scale_columns(rms_norm_noscale(resid), router.scale, 1/√H) (../shared/reference/diffusion-gemma.md §2.5).
//   x, y  [rows][dim]   (y may equal x)
//   w     [dim]
// Reference numerics: the product in double, rounded to fp32 once.
#pragma once
#include <cstdint>
namespace deltabit::cpu {
void scale_columns(const float* x, const float* w, int64_t rows, int64_t dim, double c, float* y);
}  // namespace deltabit::cpu
