// Host stand-in for <cuda_bf16.h> (tools/cuda_emulation): __nv_bfloat16 as its bits, converted by the
// repository's round-to-nearest-even (core/half.h). No bf16 arithmetic.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "core/half.h"

struct __nv_bfloat16 {
    uint16_t bits;
    __nv_bfloat16() = default;
    __nv_bfloat16(float f) : bits(deltabit::float_to_bf16(f)) {}
    operator float() const { return deltabit::bf16_to_float(bits); }
};
struct alignas(4) __nv_bfloat162 {
    __nv_bfloat16 x, y;
};
inline __nv_bfloat16 __ushort_as_bfloat16(unsigned short v) {
    __nv_bfloat16 h;
    h.bits = v;
    return h;
}
inline unsigned short __bfloat16_as_ushort(__nv_bfloat16 h) { return h.bits; }
inline __nv_bfloat16 __float2bfloat16_rn(float f) { return __nv_bfloat16(f); }
inline __nv_bfloat16 __float2bfloat16(float f) { return __nv_bfloat16(f); }
inline float __bfloat162float(__nv_bfloat16 h) { return float(h); }
inline __nv_bfloat162 __floats2bfloat162_rn(float x, float y) { return {__nv_bfloat16(x), __nv_bfloat16(y)}; }
inline float2 __bfloat1622float2(__nv_bfloat162 v) { return {float(v.x), float(v.y)}; }
