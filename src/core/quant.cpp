// Reference (de)quantisers. Each quantiser follows the matching quantize_row_*_ref of llama.cpp's
// ggml/src/ggml-quants.c step by step (same fp32 operations in the same order, same rounding
// functions), because GGUF files we write must hold the bytes llama.cpp would write. Facts read from
// upstream ggml-org/llama.cpp @ 01243c58 and PrismML-Eng/llama.cpp @ 811dce5d; no code copied.
//
// dequantize_row decodes with explicit byte/bit arithmetic; dot_row decodes through the shared
// accessors of quant_blocks.h. Keeping the two independent is what lets the test "dot_row equals
// dequantise-then-dot" catch a wrong accessor.
#include "core/quant.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "core/error.h"
#include "core/half.h"
#include "core/quant_blocks.h"

namespace deltabit {

namespace {

void check_row(const char* what, DType t, int64_t k) {
    if (t == DType::I32) fail("quant: {}: i32 is not a weight type", what);
    const int64_t block = dtype_info(t).block_elems;
    if (k < 0 || k % block != 0) {
        fail("quant: {}: a {} row of {} values is not a whole number of {}-value blocks", what, dtype_name(t), k,
             block);
    }
}

// ---- quantisers --------------------------------------------------------------------------------

// quantize_row_q8_0_ref: d = amax / 127, q = roundf(x / d) (roundf: halves away from zero).
void quantize_q8_0(const float* x, BlockQ8_0* y, int64_t nblocks) {
    for (int64_t b = 0; b < nblocks; ++b) {
        const float* xb = x + b * kQ8_0BlockElems;
        float amax = 0.0f;
        for (int j = 0; j < kQ8_0BlockElems; ++j) amax = std::max(amax, std::fabs(xb[j]));
        const float d = amax / 127.0f;
        const float id = d != 0.0f ? 1.0f / d : 0.0f;
        y[b].d = float_to_half(d);
        for (int j = 0; j < kQ8_0BlockElems; ++j) y[b].qs[j] = int8_t(std::roundf(xb[j] * id));
    }
}

// quantize_row_q4_0_ref: the value of largest magnitude, sign included, maps to level −8, so
// d = max / −8; q = min(15, trunc(x / d + 8.5)) — truncation toward zero, not rounding.
void quantize_q4_0(const float* x, BlockQ4_0* y, int64_t nblocks) {
    constexpr int half = kQ4_0BlockElems / 2;
    for (int64_t b = 0; b < nblocks; ++b) {
        const float* xb = x + b * kQ4_0BlockElems;
        float amax = 0.0f;
        float max = 0.0f;
        for (int j = 0; j < kQ4_0BlockElems; ++j) {
            if (amax < std::fabs(xb[j])) {  // strict: the first of equal magnitudes wins
                amax = std::fabs(xb[j]);
                max = xb[j];
            }
        }
        const float d = max / -8.0f;
        const float id = d != 0.0f ? 1.0f / d : 0.0f;
        y[b].d = float_to_half(d);
        for (int j = 0; j < half; ++j) {
            const int lo = std::min(15, int(int8_t(xb[j] * id + 8.5f)));
            const int hi = std::min(15, int(int8_t(xb[j + half] * id + 8.5f)));
            y[b].qs[j] = uint8_t(lo | (hi << 4));
        }
    }
}

// quantize_row_q1_0_ref: d = Σ|x| / 128 with the sum taken sequentially in fp32; bit = (x >= 0), so
// −0.0 and +0.0 both give +d.
void quantize_q1_0(const float* x, BlockQ1_0* y, int64_t nblocks) {
    for (int64_t b = 0; b < nblocks; ++b) {
        const float* xb = x + b * kQ1_0BlockElems;
        float sum_abs = 0.0f;
        for (int j = 0; j < kQ1_0BlockElems; ++j) sum_abs += std::fabs(xb[j]);
        y[b].d = float_to_half(sum_abs / float(kQ1_0BlockElems));
        std::memset(y[b].qs, 0, sizeof y[b].qs);
        for (int j = 0; j < kQ1_0BlockElems; ++j) {
            if (xb[j] >= 0.0f) y[b].qs[j / 8] |= uint8_t(1u << (j % 8));
        }
    }
}

// Q2_0's levels are (code − 1)·d for codes 0..3: {−d, 0, +d, +2d}. llama.cpp's quantize_row_q2_0_ref
// (the PrismML fork with QK2_0 = 128, upstream with 64) takes d = amax and code = round(x / d) + 1, so
// |x / d| ≤ 1 and code 3 is never used: the block is ternary {−amax, 0, +amax}, and on Gaussian-like
// weights most values round to 0 — its error (rms rel 0.73 on tests/fixtures/qwen3_5_float) is larger
// than Q1_0's 1 bit (0.58). Any fp16 d, negative included, is a valid block for every dequantiser
// (y = (code − 1)·d), so this quantiser picks the d that minimises the block's squared error:
//   - both signs of d (a negative d puts the 2× level on the negative side);
//   - for each, starts from amax/2 (the largest value on the 2× level) to amax (the reference) on a grid
//     of kQ2_0ScaleSteps; each start's nearest-level codes give a least-squares d, which is scored;
//   - the reference d = amax is the first candidate and a later one must be strictly better, so blocks
//     the reference quantises exactly (ternary ±a/0 and binary ±a weights) come out the same.
// The chosen d is rounded to fp16 and the codes are assigned again against the stored value.
constexpr int kQ2_0ScaleSteps = 8;

// Nearest level of {−1, 0, 1, 2} for x·inv (inv = 1/d); a half rounds away from zero, as roundf. Clamped
// in float before the truncating conversion (which equals roundf there), so loops vectorise: the
// quantiser scores 2 × (kQ2_0ScaleSteps + 1) scales per block.
inline int q2_0_code(float x, float inv) {
    const float v = std::clamp(x * inv, -1.5f, 2.5f);
    return std::clamp(int(v + (v >= 0.0f ? 0.5f : -0.5f)), -1, 2);
}

// Scores compare candidate scales of one block, so float sums in 8 independent lanes (which the compiler
// vectorises) are ample: their rounding (~1e-6 relative) is far below the differences between scales.
// n is a multiple of 8 (blocks of 64 or 128).
double q2_0_block_error(const float* x, int n, float d) {
    const float inv = d != 0.0f ? 1.0f / d : 0.0f;
    float lanes[8] = {};
    for (int j = 0; j < n; j += 8)
        for (int l = 0; l < 8; ++l) {
            const float diff = x[j + l] - float(q2_0_code(x[j + l], inv)) * d;
            lanes[l] += diff * diff;
        }
    double e = 0.0;
    for (const float v : lanes) e += v;
    return e;
}

// The least-squares scale for the nearest-level codes under d: Σ x·q / Σ q².
float q2_0_refit(const float* x, int n, float d) {
    const float inv = 1.0f / d;
    float xq[8] = {}, qq[8] = {};
    for (int j = 0; j < n; j += 8)
        for (int l = 0; l < 8; ++l) {
            const float q = float(q2_0_code(x[j + l], inv));
            xq[l] += x[j + l] * q;
            qq[l] += q * q;
        }
    double sum_xq = 0.0, sum_qq = 0.0;
    for (int l = 0; l < 8; ++l) sum_xq += xq[l], sum_qq += qq[l];
    return sum_qq > 0.0 ? float(sum_xq / sum_qq) : d;
}

float q2_0_best_scale(const float* x, int n) {
    float amax = 0.0f;
    for (int j = 0; j < n; ++j) amax = std::max(amax, std::fabs(x[j]));
    if (amax == 0.0f) return 0.0f;
    float best = amax;
    double best_error = q2_0_block_error(x, n, half_to_float(float_to_half(amax)));
    // Each start's own error is never below its refit's for the same codes, so only refits are scored.
    for (const float sign : {1.0f, -1.0f}) {
        for (int step = 0; step <= kQ2_0ScaleSteps; ++step) {
            const float start = sign * amax * (0.5f + 0.5f * float(step) / float(kQ2_0ScaleSteps));
            const float d = q2_0_refit(x, n, start);
            if (!(std::fabs(d) > 0.0f) || !std::isfinite(d)) continue;
            const double error = q2_0_block_error(x, n, half_to_float(float_to_half(d)));
            if (error < best_error) best = d, best_error = error;
        }
    }
    return best;
}

void quantize_q2_0(const float* x, uint16_t* d_out, uint8_t* qs, int block_elems) {
    *d_out = float_to_half(q2_0_best_scale(x, block_elems));
    const float d = half_to_float(*d_out);
    std::memset(qs, 0, size_t(block_elems / 4));
    const float inv = d != 0.0f ? 1.0f / d : 0.0f;
    for (int j = 0; j < block_elems; ++j) {
        const int code = q2_0_code(x[j], inv) + 1;
        qs[j / 4] |= uint8_t(code << (2 * (j % 4)));
    }
}

// ---- dequantisers ------------------------------------------------------------------------------

void dequantize_q8_0(const BlockQ8_0* x, float* y, int64_t nblocks) {
    for (int64_t b = 0; b < nblocks; ++b) {
        const float d = half_to_float(x[b].d);
        for (int j = 0; j < kQ8_0BlockElems; ++j) y[b * kQ8_0BlockElems + j] = float(x[b].qs[j]) * d;
    }
}

void dequantize_q4_0(const BlockQ4_0* x, float* y, int64_t nblocks) {
    constexpr int half = kQ4_0BlockElems / 2;
    for (int64_t b = 0; b < nblocks; ++b) {
        const float d = half_to_float(x[b].d);
        float* yb = y + b * kQ4_0BlockElems;
        for (int j = 0; j < half; ++j) {
            yb[j] = float(int(x[b].qs[j] & 0x0f) - 8) * d;
            yb[j + half] = float(int(x[b].qs[j] >> 4) - 8) * d;
        }
    }
}

void dequantize_q1_0(const BlockQ1_0* x, float* y, int64_t nblocks) {
    for (int64_t b = 0; b < nblocks; ++b) {
        const float d = half_to_float(x[b].d);
        for (int byte = 0; byte < kQ1_0BlockElems / 8; ++byte) {
            for (int bit = 0; bit < 8; ++bit) {
                const bool set = (x[b].qs[byte] >> bit) & 1;
                y[b * kQ1_0BlockElems + byte * 8 + bit] = set ? d : -d;
            }
        }
    }
}

void dequantize_q2_0(uint16_t d_bits, const uint8_t* qs, float* y, int block_elems) {
    const float d = half_to_float(d_bits);
    for (int byte = 0; byte < block_elems / 4; ++byte) {
        for (int slot = 0; slot < 4; ++slot) {
            const int code = (qs[byte] >> (2 * slot)) & 0x03;
            y[byte * 4 + slot] = float(code - 1) * d;
        }
    }
}

}  // namespace

float q2_0_block_scale(const float* x, int n) { return q2_0_best_scale(x, n); }

namespace {

// The first of `count` little-endian words (of type Word) whose exponent bits are all ones (inf or NaN),
// or -1. Chunks are OR-reduced without branches so the compiler vectorises the common all-finite case.
template <typename Word>
int64_t first_all_ones_exponent(const uint8_t* bytes, int64_t count, Word exponent, uint64_t stride = sizeof(Word)) {
    constexpr int64_t kChunk = 4096;
    for (int64_t start = 0; start < count; start += kChunk) {
        const int64_t end = std::min(count, start + kChunk);
        bool any = false;
        for (int64_t i = start; i < end; ++i) {
            Word w;
            std::memcpy(&w, bytes + uint64_t(i) * stride, sizeof w);
            any |= (w & exponent) == exponent;
        }
        if (!any) continue;
        for (int64_t i = start; i < end; ++i) {
            Word w;
            std::memcpy(&w, bytes + uint64_t(i) * stride, sizeof w);
            if ((w & exponent) == exponent) return i;
        }
    }
    return -1;
}

}  // namespace

int64_t first_non_finite(DType t, const void* data, int64_t count) {
    const auto* bytes = static_cast<const uint8_t*>(data);
    switch (t) {
        case DType::F32: return first_all_ones_exponent<uint32_t>(bytes, count, 0x7F800000u);
        case DType::F16: return first_all_ones_exponent<uint16_t>(bytes, count, 0x7C00u);
        case DType::BF16: return first_all_ones_exponent<uint16_t>(bytes, count, 0x7F80u);
        case DType::I32: return -1;
        default: {
            // Every quantised block starts with its fp16 scale d (quant_blocks.h); the codes are integers.
            const DTypeInfo& info = dtype_info(t);
            const int64_t block =
                first_all_ones_exponent<uint16_t>(bytes, count / info.block_elems, 0x7C00u, info.block_bytes);
            return block < 0 ? -1 : block * info.block_elems;
        }
    }
}

void dequantize_row(DType t, const void* row, float* out, int64_t k) {
    check_row("dequantize_row", t, k);
    const int64_t nblocks = k / dtype_info(t).block_elems;
    switch (t) {
        case DType::F32: std::memcpy(out, row, size_t(k) * sizeof(float)); return;
        case DType::F16: {
            const auto* h = static_cast<const uint16_t*>(row);
            for (int64_t j = 0; j < k; ++j) out[j] = half_to_float(h[j]);
            return;
        }
        case DType::BF16: {
            const auto* h = static_cast<const uint16_t*>(row);
            for (int64_t j = 0; j < k; ++j) out[j] = bf16_to_float(h[j]);
            return;
        }
        case DType::Q8_0: dequantize_q8_0(static_cast<const BlockQ8_0*>(row), out, nblocks); return;
        case DType::Q4_0: dequantize_q4_0(static_cast<const BlockQ4_0*>(row), out, nblocks); return;
        case DType::Q1_0: dequantize_q1_0(static_cast<const BlockQ1_0*>(row), out, nblocks); return;
        case DType::Q2_0: {
            const auto* blocks = static_cast<const BlockQ2_0*>(row);
            for (int64_t b = 0; b < nblocks; ++b)
                dequantize_q2_0(blocks[b].d, blocks[b].qs, out + b * kQ2_0BlockElems, kQ2_0BlockElems);
            return;
        }
        case DType::Q2_0_G64: {
            const auto* blocks = static_cast<const BlockQ2_0G64*>(row);
            for (int64_t b = 0; b < nblocks; ++b)
                dequantize_q2_0(blocks[b].d, blocks[b].qs, out + b * kQ2_0G64BlockElems, kQ2_0G64BlockElems);
            return;
        }
        case DType::I32: break;
    }
    fail("quant: dequantize_row: unhandled dtype {}", dtype_name(t));
}

void quantize_row(DType t, const float* x, void* row, int64_t k) {
    check_row("quantize_row", t, k);
    const int64_t nblocks = k / dtype_info(t).block_elems;
    switch (t) {
        case DType::F32: std::memcpy(row, x, size_t(k) * sizeof(float)); return;
        case DType::F16: {
            auto* h = static_cast<uint16_t*>(row);
            for (int64_t j = 0; j < k; ++j) h[j] = float_to_half(x[j]);
            return;
        }
        case DType::BF16: {
            auto* h = static_cast<uint16_t*>(row);
            for (int64_t j = 0; j < k; ++j) h[j] = float_to_bf16(x[j]);
            return;
        }
        case DType::Q8_0: quantize_q8_0(x, static_cast<BlockQ8_0*>(row), nblocks); return;
        case DType::Q4_0: quantize_q4_0(x, static_cast<BlockQ4_0*>(row), nblocks); return;
        case DType::Q1_0: quantize_q1_0(x, static_cast<BlockQ1_0*>(row), nblocks); return;
        case DType::Q2_0: {
            auto* blocks = static_cast<BlockQ2_0*>(row);
            for (int64_t b = 0; b < nblocks; ++b)
                quantize_q2_0(x + b * kQ2_0BlockElems, &blocks[b].d, blocks[b].qs, kQ2_0BlockElems);
            return;
        }
        case DType::Q2_0_G64: {
            auto* blocks = static_cast<BlockQ2_0G64*>(row);
            for (int64_t b = 0; b < nblocks; ++b)
                quantize_q2_0(x + b * kQ2_0G64BlockElems, &blocks[b].d, blocks[b].qs, kQ2_0G64BlockElems);
            return;
        }
        case DType::I32: break;
    }
    fail("quant: quantize_row: unhandled dtype {}", dtype_name(t));
}

float dot_row(DType t, const void* row, const float* x, int64_t k) {
    check_row("dot_row", t, k);
    const int64_t nblocks = k / dtype_info(t).block_elems;
    double sum = 0.0;
    // w is formed in fp32 exactly as dequantize_row forms it, then widened.
    auto add = [&](float w, float xj) { sum += double(w) * double(xj); };
    switch (t) {
        case DType::F32: {
            const auto* w = static_cast<const float*>(row);
            for (int64_t j = 0; j < k; ++j) add(w[j], x[j]);
            break;
        }
        case DType::F16: {
            const auto* w = static_cast<const uint16_t*>(row);
            for (int64_t j = 0; j < k; ++j) add(half_to_float(w[j]), x[j]);
            break;
        }
        case DType::BF16: {
            const auto* w = static_cast<const uint16_t*>(row);
            for (int64_t j = 0; j < k; ++j) add(bf16_to_float(w[j]), x[j]);
            break;
        }
        case DType::Q8_0: {
            const auto* blocks = static_cast<const BlockQ8_0*>(row);
            for (int64_t b = 0; b < nblocks; ++b) {
                const float d = half_to_float(blocks[b].d);
                for (int j = 0; j < kQ8_0BlockElems; ++j) add(float(blocks[b].qs[j]) * d, x[b * kQ8_0BlockElems + j]);
            }
            break;
        }
        case DType::Q4_0: {
            const auto* blocks = static_cast<const BlockQ4_0*>(row);
            for (int64_t b = 0; b < nblocks; ++b) {
                const float d = half_to_float(blocks[b].d);
                for (int j = 0; j < kQ4_0BlockElems; ++j)
                    add(float(q4_0_code(blocks[b], j) - 8) * d, x[b * kQ4_0BlockElems + j]);
            }
            break;
        }
        case DType::Q1_0: {
            const auto* blocks = static_cast<const BlockQ1_0*>(row);
            for (int64_t b = 0; b < nblocks; ++b) {
                const float d = half_to_float(blocks[b].d);
                for (int j = 0; j < kQ1_0BlockElems; ++j)
                    add(float(q1_0_sign(blocks[b], j)) * d, x[b * kQ1_0BlockElems + j]);
            }
            break;
        }
        case DType::Q2_0: {
            const auto* blocks = static_cast<const BlockQ2_0*>(row);
            for (int64_t b = 0; b < nblocks; ++b) {
                const float d = half_to_float(blocks[b].d);
                for (int j = 0; j < kQ2_0BlockElems; ++j)
                    add(float(q2_0_level(blocks[b].qs, j)) * d, x[b * kQ2_0BlockElems + j]);
            }
            break;
        }
        case DType::Q2_0_G64: {
            const auto* blocks = static_cast<const BlockQ2_0G64*>(row);
            for (int64_t b = 0; b < nblocks; ++b) {
                const float d = half_to_float(blocks[b].d);
                for (int j = 0; j < kQ2_0G64BlockElems; ++j)
                    add(float(q2_0_level(blocks[b].qs, j)) * d, x[b * kQ2_0G64BlockElems + j]);
            }
            break;
        }
        case DType::I32: fail("quant: dot_row: unhandled dtype {}", dtype_name(t));
    }
    return float(sum);
}

}  // namespace deltabit
