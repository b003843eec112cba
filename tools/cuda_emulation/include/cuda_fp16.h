// Host stand-in for <cuda_fp16.h> (tools/cuda_emulation): __half as its bits, converted by the repository's
// round-to-nearest-even (core/half.h), as the device's _rn conversions round. No half arithmetic.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "core/half.h"

struct __half {
    uint16_t bits;
    __half() = default;
    __half(float f) : bits(deltabit::float_to_half(f)) {}
    operator float() const { return deltabit::half_to_float(bits); }
};
struct alignas(4) __half2 {
    __half x, y;
};
inline __half __ushort_as_half(unsigned short v) {
    __half h;
    h.bits = v;
    return h;
}
inline unsigned short __half_as_ushort(__half h) { return h.bits; }
inline __half __float2half_rn(float f) { return __half(f); }
inline __half __float2half(float f) { return __half(f); }
inline float __half2float(__half h) { return float(h); }
inline __half2 __halves2half2(__half x, __half y) { return {x, y}; }
inline __half2 __floats2half2_rn(float x, float y) { return {__half(x), __half(y)}; }
inline __half2 __float22half2_rn(float2 v) { return {__half(v.x), __half(v.y)}; }
inline float2 __half22float2(__half2 v) { return {float(v.x), float(v.y)}; }
inline __half __low2half(__half2 v) { return v.x; }
inline __half __high2half(__half2 v) { return v.y; }
