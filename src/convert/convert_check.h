// The two per-tensor proofs of `deltabit convert`, run on the bytes read back from the written file.
// They are built so one bug cannot fool both:
//
//  1. Round trip: the stored row, decoded by the engine's dequantize_row, against the source values
//     (after the conventions), element by element, within what the format can promise:
//       f32 exact; f16 within half an ulp (|x|·2⁻¹¹, 2⁻²⁵ below the normal range); bf16 |x|·2⁻⁸;
//       q8_0 and q2_0 d/2, q4_0 d (its top code is clamped) — d the block's stored fp16 scale, with
//       |y|·2⁻¹⁰ more because the codes were computed from the unrounded fp32 scale;
//       q1_0: max(|x|, d), which holds exactly when the sign is right.
//     Plus statistics for the report: lossless (every value equal), max |error|, RMS error / RMS value.
//  2. Scales, decoded here from the raw block bytes without the engine's dequantiser: every fp16 d is
//     finite and equals its formula recomputed from the source in double — q1_0 mean|x| (and every
//     sign bit is x ≥ 0), q8_0 amax/127, q4_0 amax/8, q2_0 amax — within fp16 rounding.
//
// Both throw deltabit::Error naming the tensor, row, column or block, the values and the bound.
#pragma once

#include "core/dtype.h"

#include <cstdint>
#include <span>
#include <string>
#include <vector>

namespace deltabit {

struct TensorErrorStats {
    bool lossless = true;   // every stored value equals its source value
    double max_abs = 0.0;   // max |stored − source|
    double rms_rel = 0.0;   // sqrt(Σ(stored − source)²) / sqrt(Σ source²); 0 when both are 0
    int64_t changed = 0;    // values that differ
    double sum_err2 = 0.0, sum_x2 = 0.0;  // for totals over several tensors
};

// Proof 1. `bytes` is the tensor's payload in the file (rows of row_length values), `source` the
// values it must hold. `name` is for messages.
TensorErrorStats check_round_trip(const std::string& name, DType type, int64_t row_length,
                                  std::span<const uint8_t> bytes, const std::vector<float>& source);

// Proof 2. Returns the number of block scales checked (0 for plain float types, whose values are
// only checked to be finite where the source is).
int64_t check_block_scales(const std::string& name, DType type, int64_t row_length, std::span<const uint8_t> bytes,
                           const std::vector<float>& source);

}  // namespace deltabit
