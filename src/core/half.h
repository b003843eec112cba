// IEEE binary16 and bfloat16 <-> float conversions, exact and portable (no F16C dependency, so the
// naive references give the same bits on every machine). float -> half/bf16 rounds to nearest even.
#pragma once

#include <cstdint>
#include <cstring>

namespace deltabit {

inline float bits_to_float(uint32_t bits) {
    float f;
    std::memcpy(&f, &bits, sizeof f);
    return f;
}

inline uint32_t float_to_bits(float f) {
    uint32_t bits;
    std::memcpy(&bits, &f, sizeof bits);
    return bits;
}

inline float half_to_float(uint16_t h) {
    const uint32_t sign = uint32_t(h & 0x8000u) << 16;
    uint32_t exponent = (h >> 10) & 0x1fu;
    uint32_t mantissa = h & 0x3ffu;
    if (exponent == 0x1f) {  // inf or NaN: keep the payload
        return bits_to_float(sign | 0x7f800000u | (mantissa << 13));
    }
    if (exponent == 0) {
        if (mantissa == 0) return bits_to_float(sign);
        // subnormal half: normalise into a float
        exponent = 127 - 15 + 1;
        while ((mantissa & 0x400u) == 0) {
            mantissa <<= 1;
            --exponent;
        }
        mantissa &= 0x3ffu;
        return bits_to_float(sign | (exponent << 23) | (mantissa << 13));
    }
    return bits_to_float(sign | ((exponent + 127 - 15) << 23) | (mantissa << 13));
}

inline uint16_t float_to_half(float f) {
    const uint32_t bits = float_to_bits(f);
    const uint16_t sign = uint16_t((bits >> 16) & 0x8000u);
    const uint32_t abs = bits & 0x7fffffffu;
    if (abs >= 0x7f800000u) {  // inf or NaN (NaN stays a quiet NaN)
        return uint16_t(sign | 0x7c00u | (abs > 0x7f800000u ? 0x200u : 0u));
    }
    if (abs >= 0x477ff000u) return uint16_t(sign | 0x7c00u);  // rounds past 65504: inf
    if (abs < 0x38800000u) {                                  // below the smallest normal half
        if (abs < 0x33000000u) return sign;                   // below half the smallest subnormal
        const uint32_t mantissa = (abs & 0x7fffffu) | 0x800000u;
        const int shift = 126 - int(abs >> 23);               // 14..24
        const uint32_t kept = mantissa >> shift;
        const uint32_t rest = mantissa & ((1u << shift) - 1);
        const uint32_t halfway = 1u << (shift - 1);
        const uint32_t rounded = kept + ((rest > halfway || (rest == halfway && (kept & 1u))) ? 1u : 0u);
        return uint16_t(sign | rounded);
    }
    const uint32_t rebased = abs - ((127u - 15u) << 23);
    const uint32_t kept = rebased >> 13;
    const uint32_t rest = rebased & 0x1fffu;
    const uint32_t rounded = kept + ((rest > 0x1000u || (rest == 0x1000u && (kept & 1u))) ? 1u : 0u);
    return uint16_t(sign | rounded);
}

inline float bf16_to_float(uint16_t b) { return bits_to_float(uint32_t(b) << 16); }

inline uint16_t float_to_bf16(float f) {
    const uint32_t bits = float_to_bits(f);
    if ((bits & 0x7fffffffu) > 0x7f800000u) return uint16_t((bits >> 16) | 0x40u);  // quiet NaN
    const uint32_t rounding = 0x7fffu + ((bits >> 16) & 1u);
    return uint16_t((bits + rounding) >> 16);
}

}  // namespace deltabit
