#include "convert/convert_check.h"

#include "core/error.h"
#include "core/half.h"
#include "core/quant.h"

#include <algorithm>
#include <cfloat>
#include <cmath>
#include <cstring>

namespace deltabit {

namespace {

constexpr double kHalfUlpF16 = 1.0 / 2048.0;        // 2⁻¹¹: fp16 has an 11-bit significand
constexpr double kHalfUlpBf16 = 1.0 / 256.0;        // 2⁻⁸: bf16 has an 8-bit significand
constexpr double kF16SubnormalHalfUlp = 1.0 / 33554432.0;  // 2⁻²⁵: half the spacing of fp16 subnormals
// The quantisers compute x·(1/d) in fp32: a few fp32 roundings of |x| on top of every bound.
constexpr double kFp32Slack = 8.0 * FLT_EPSILON;

// The block's fp16 scale, read from the first two bytes (every quantised block stores d first).
double block_scale(const uint8_t* block) {
    uint16_t bits;
    std::memcpy(&bits, block, 2);
    return double(half_to_float(bits));
}

double element_bound(DType type, double x, double y, double d) {
    const double ax = std::abs(x), ay = std::abs(y), ad = std::abs(d);
    // Codes come from the fp32 scale, values from the fp16 one: |y|·(relative rounding of d), or —
    // when d fell into fp16's subnormal range — the largest level times its absolute rounding.
    const auto scale_rounding = [&](double max_level) {
        return ay * (2.0 * kHalfUlpF16) + max_level * kF16SubnormalHalfUlp;
    };
    switch (type) {
        case DType::F32: return 0.0;
        case DType::F16: return std::max(ax * kHalfUlpF16, kF16SubnormalHalfUlp);
        case DType::BF16: return ax * kHalfUlpBf16 + DBL_MIN;
        case DType::Q8_0: return 0.5 * ad * (1.0 + 4.0 * kHalfUlpF16) + scale_rounding(127) + ax * kFp32Slack;
        case DType::Q2_0:
        case DType::Q2_0_G64: {
            // Codes are the nearest of the levels {−d, 0, d, 2d} to x under the stored d, which need
            // not be amax (quant.cpp): a value past an end level is off by its distance to that level.
            double nearest = ax;
            for (int level = -1; level <= 2; ++level) nearest = std::min(nearest, std::abs(x - level * d));
            return nearest + 2.0 * ad * kHalfUlpF16 + scale_rounding(2) + ax * kFp32Slack;
        }
        case DType::Q4_0: return ad * (1.0 + 4.0 * kHalfUlpF16) + scale_rounding(8) + ax * kFp32Slack;
        case DType::Q1_0: return std::max(ax, ad);
        case DType::I32: break;
    }
    fail("convert: no error bound for {}", dtype_name(type));
}

// |stored d − exact| within fp16 rounding of `exact` (half an ulp, relative or subnormal) plus the
// fp32 arithmetic the quantiser used to get it.
bool scale_matches(double stored, double exact) {
    const double bound = std::max(std::abs(exact) * (kHalfUlpF16 + 1.0 / 65536.0), kF16SubnormalHalfUlp);
    return std::abs(stored - exact) <= bound;
}

}  // namespace

TensorErrorStats check_round_trip(const std::string& name, DType type, int64_t row_length,
                                  std::span<const uint8_t> bytes, const std::vector<float>& source) {
    const int64_t n = int64_t(source.size());
    const int64_t rows = n / row_length;
    const uint64_t row_bytes = dtype_bytes(type, uint64_t(row_length));
    if (rows * row_length != n || bytes.size() != row_bytes * uint64_t(rows))
        fail("convert: tensor {}: {} bytes in the file but {} rows of {} {} values need {}", name, bytes.size(), rows,
             row_length, dtype_name(type), row_bytes * uint64_t(rows));
    const DTypeInfo& info = dtype_info(type);
    TensorErrorStats stats;
    double sum_err2 = 0.0, sum_x2 = 0.0;
    std::vector<float> decoded(static_cast<size_t>(row_length));
    for (int64_t r = 0; r < rows; ++r) {
        const uint8_t* row = bytes.data() + uint64_t(r) * row_bytes;
        dequantize_row(type, row, decoded.data(), row_length);
        for (int64_t j = 0; j < row_length; ++j) {
            const double x = source[size_t(r * row_length + j)], y = decoded[size_t(j)];
            if (!std::isfinite(x)) fail("convert: tensor {}: row {} col {}: the source value is {}", name, r, j, x);
            if (!std::isfinite(y))
                fail("convert: tensor {}: row {} col {}: source {} is stored as {} in {}", name, r, j, x, y,
                     dtype_name(type));
            const double d = info.quantized ? block_scale(row + uint64_t(j / info.block_elems) * info.block_bytes) : 0.0;
            const double err = std::abs(y - x);
            if (err > element_bound(type, x, y, d))
                fail("convert: tensor {}: row {} col {}: stored {} differs from source {} by {:.3g}, beyond the {} "
                     "bound {:.3g} (block scale {})",
                     name, r, j, y, x, err, dtype_name(type), element_bound(type, x, y, d), d);
            if (y != x) {
                stats.lossless = false;
                ++stats.changed;
            }
            stats.max_abs = std::max(stats.max_abs, err);
            sum_err2 += err * err;
            sum_x2 += x * x;
        }
    }
    stats.sum_err2 = sum_err2;
    stats.sum_x2 = sum_x2;
    stats.rms_rel = sum_err2 == 0.0 ? 0.0 : sum_x2 == 0.0 ? INFINITY : std::sqrt(sum_err2 / sum_x2);
    return stats;
}

int64_t check_block_scales(const std::string& name, DType type, int64_t row_length, std::span<const uint8_t> bytes,
                           const std::vector<float>& source) {
    const DTypeInfo& info = dtype_info(type);
    if (!info.quantized) return 0;
    const int64_t block = info.block_elems;
    const int64_t n_blocks = int64_t(source.size()) / block;
    if (uint64_t(n_blocks) * info.block_bytes != bytes.size() || row_length % block != 0)
        fail("convert: tensor {}: {} bytes do not hold {} blocks of {}", name, bytes.size(), n_blocks, dtype_name(type));
    for (int64_t b = 0; b < n_blocks; ++b) {
        const uint8_t* raw = bytes.data() + uint64_t(b) * info.block_bytes;
        const float* x = source.data() + b * block;
        const double d = block_scale(raw);
        const int64_t row = b * block / row_length, col = b * block % row_length;
        if (!std::isfinite(d))
            fail("convert: tensor {}: row {} block at col {}: stored scale d is {}", name, row, col, d);
        double sum_abs = 0.0, amax = 0.0;
        for (int64_t j = 0; j < block; ++j) {
            sum_abs += std::abs(double(x[j]));
            amax = std::max(amax, std::abs(double(x[j])));
        }
        double expected = 0.0;
        const char* formula = "";
        switch (type) {
            case DType::Q1_0: expected = sum_abs / double(block), formula = "mean|x|"; break;
            case DType::Q8_0: expected = amax / 127.0, formula = "amax/127"; break;
            case DType::Q4_0: expected = amax / 8.0, formula = "amax/8"; break;
            case DType::Q2_0:
            case DType::Q2_0_G64:
                expected = q2_0_block_scale(x, int(block)), formula = "the least-squared-error scale (quant.cpp)";
                break;
            default: fail("convert: tensor {}: no scale rule for {}", name, dtype_name(type));
        }
        // Q2_0's scale is signed (a negative d puts its 2× level below zero); the others store |scale|.
        const bool is_q2 = type == DType::Q2_0 || type == DType::Q2_0_G64;
        if (!scale_matches(is_q2 ? d : std::abs(d), expected))
            fail("convert: tensor {}: row {} block at col {}: stored scale {} but {} of the source block is {}", name,
                 row, col, d, formula, expected);
        if (type == DType::Q1_0) {
            const uint8_t* signs = raw + 2;  // after the fp16 d: bit j%8 of byte j/8, 1 = +d
            for (int64_t j = 0; j < block; ++j) {
                const bool bit = (signs[j / 8] >> (j % 8)) & 1;
                if (bit != (x[j] >= 0.0f))
                    fail("convert: tensor {}: row {} col {}: sign bit {} but the source value is {}", name, row,
                         col + j, int(bit), x[j]);
            }
        }
    }
    return n_blocks;
}

}  // namespace deltabit
