// The AVX-512 (F, BW, VL, VNNI) row kernels of the CPU fast matmul (contract: ops/cpu_fast/quant_dot.h). vpdpbusd
// sums four unsigned × signed byte products into each int32 lane in one instruction, without the int16
// saturation of vpmaddubsw. The 1-bit signs load straight into a 64-bit mask register (bit j = weight j,
// the Q1_0 order), so a block's set bits become bytes of 1 with one masked move, shared by the tokens of a
// tile. The fp16/bf16 conversions are the AVX2 ones (memory-bound; nothing to gain).
//
// Compiled for AVX-512 with a target pragma; nothing but intrinsics is used here (quant_dot.h says why).
#pragma GCC target("avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")
// GCC 12's AVX-512 headers start many intrinsics from _mm*_undefined_*() (a self-initialised local) and, once
// they are inlined here, report it as used uninitialised (GCC bug 105593, fixed in GCC 13): some seventy
// false warnings with long traces in every build's output, `make run`'s included. Off for this file only.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif

#include "ops/cpu_fast/quant_dot.h"

#include <immintrin.h>

#include <cstdint>
#include <cstring>

namespace deltabit::cpu_fast {
namespace {

constexpr int kQ8Bytes = 34, kQ4Bytes = 18, kQ1Bytes = 18, kQ2Bytes = 34, kQ2G64Bytes = 18;

inline float half_at(const uint8_t* p) {
    uint16_t h;
    std::memcpy(&h, p, 2);
    return _cvtsh_ss(h);
}

inline float sum_lanes(__m256 v) {
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_shuffle_ps(s, s, 1));
    return _mm_cvtss_f32(s);
}
inline float sum_lanes(__m512 v) {
    return sum_lanes(_mm256_add_ps(_mm512_castps512_ps256(v), _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(v), 1))));
}

inline __m256i load32(const void* p) { return _mm256_loadu_si256(static_cast<const __m256i*>(p)); }
inline __m512i load64(const void* p) { return _mm512_loadu_si512(p); }

// Signed × signed bytes: |w| (unsigned) × a with w's sign, four products per int32 lane.
inline __m256i dot_signed(__m256i w, __m256i a) {
    return _mm256_dpbusd_epi32(_mm256_setzero_si256(), _mm256_sign_epi8(w, w), _mm256_sign_epi8(a, w));
}

template <int NT>
void q8_0_tile(const uint8_t* row, int64_t n_blocks, const Int8Token* tokens, float* out) {
    __m256 acc[NT];
    for (int t = 0; t < NT; ++t) acc[t] = _mm256_setzero_ps();
    for (int64_t b = 0; b < n_blocks; ++b) {
        const uint8_t* block = row + b * kQ8Bytes;
        const float d = half_at(block);
        const __m256i w = load32(block + 2);
        for (int t = 0; t < NT; ++t) {
            const __m256i value = dot_signed(w, load32(tokens[t].q + b * 32));
            acc[t] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(value), _mm256_set1_ps(d * tokens[t].scale[b]), acc[t]);
        }
    }
    for (int t = 0; t < NT; ++t) out[t] = sum_lanes(acc[t]);
}

template <int NT>
void q4_0_tile(const uint8_t* row, int64_t n_blocks, const Int8Token* tokens, float* out) {
    __m256 acc[NT];
    for (int t = 0; t < NT; ++t) acc[t] = _mm256_setzero_ps();
    const __m128i low_nibbles = _mm_set1_epi8(0x0f);
    for (int64_t b = 0; b < n_blocks; ++b) {
        const uint8_t* block = row + b * kQ4Bytes;
        const float d = half_at(block);
        const __m128i packed = _mm_loadu_si128(reinterpret_cast<const __m128i*>(block + 2));
        const __m256i codes = _mm256_set_m128i(_mm_and_si128(_mm_srli_epi16(packed, 4), low_nibbles),
                                               _mm_and_si128(packed, low_nibbles));
        const __m256i w = _mm256_sub_epi8(codes, _mm256_set1_epi8(8));
        for (int t = 0; t < NT; ++t) {
            const __m256i value = dot_signed(w, load32(tokens[t].q + b * 32));
            acc[t] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(value), _mm256_set1_ps(d * tokens[t].scale[b]), acc[t]);
        }
    }
    for (int t = 0; t < NT; ++t) out[t] = sum_lanes(acc[t]);
}

// Q1_0: Σ ±q = 2·Σ_{bit set} q − Σ q (as in the AVX2 kernel).
template <int NT>
void q1_0_tile(const uint8_t* row, int64_t n_blocks, const Int8Token* tokens, float* out) {
    __m512 acc[NT];
    float offset[NT];
    for (int t = 0; t < NT; ++t) acc[t] = _mm512_setzero_ps(), offset[t] = 0.0f;
    const __m512i ones = _mm512_set1_epi8(1);
    for (int64_t b = 0; b < n_blocks; ++b) {
        const uint8_t* block = row + b * kQ1Bytes;
        const float d = half_at(block);
        uint64_t low, high;
        std::memcpy(&low, block + 2, 8);
        std::memcpy(&high, block + 10, 8);
        const __m512i set_low = _mm512_maskz_mov_epi8(__mmask64(low), ones);
        const __m512i set_high = _mm512_maskz_mov_epi8(__mmask64(high), ones);
        for (int t = 0; t < NT; ++t) {
            const int8_t* q = tokens[t].q + b * 128;
            const __m512i s = _mm512_dpbusd_epi32(_mm512_dpbusd_epi32(_mm512_setzero_si512(), set_low, load64(q)),
                                                  set_high, load64(q + 64));
            const float ds = d * tokens[t].scale[b];
            acc[t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(s), _mm512_set1_ps(2.0f * ds), acc[t]);
            offset[t] -= ds * float(tokens[t].sum[b]);
        }
    }
    for (int t = 0; t < NT; ++t) out[t] = sum_lanes(acc[t]) + offset[t];
}

// Q2_0: Σ level·q = Σ c·q − Σ q; the code bytes shifted by 0 and 2 (then 4 and 6) fill one register, in the
// order the activations are stored (quant_dot.h).
template <int NT>
void q2_0_tile(const uint8_t* row, int64_t n_blocks, const Int8Token* tokens, float* out) {
    __m512 acc[NT];
    float offset[NT];
    for (int t = 0; t < NT; ++t) acc[t] = _mm512_setzero_ps(), offset[t] = 0.0f;
    const __m512i two_bits = _mm512_set1_epi8(3);
    const __m512i shifts01 = _mm512_setr_epi64(0, 0, 0, 0, 2, 2, 2, 2), shifts23 = _mm512_setr_epi64(4, 4, 4, 4, 6, 6, 6, 6);
    for (int64_t b = 0; b < n_blocks; ++b) {
        const uint8_t* block = row + b * kQ2Bytes;
        const float d = half_at(block);
        const __m512i packed = _mm512_broadcast_i64x4(load32(block + 2));
        const __m512i codes01 = _mm512_and_si512(_mm512_srlv_epi64(packed, shifts01), two_bits);
        const __m512i codes23 = _mm512_and_si512(_mm512_srlv_epi64(packed, shifts23), two_bits);
        for (int t = 0; t < NT; ++t) {
            const int8_t* q = tokens[t].q + b * 128;
            const __m512i s = _mm512_dpbusd_epi32(_mm512_dpbusd_epi32(_mm512_setzero_si512(), codes01, load64(q)),
                                                  codes23, load64(q + 64));
            const float ds = d * tokens[t].scale[b];
            acc[t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(s), _mm512_set1_ps(ds), acc[t]);
            offset[t] -= ds * float(tokens[t].sum[b]);
        }
    }
    for (int t = 0; t < NT; ++t) out[t] = sum_lanes(acc[t]) + offset[t];
}

template <int NT>
void q2_0_g64_tile(const uint8_t* row, int64_t n_blocks, const Int8Token* tokens, float* out) {
    __m512 acc[NT];
    float offset[NT];
    for (int t = 0; t < NT; ++t) acc[t] = _mm512_setzero_ps(), offset[t] = 0.0f;
    const __m512i two_bits = _mm512_set1_epi8(3);
    const __m512i shifts = _mm512_setr_epi64(0, 0, 2, 2, 4, 4, 6, 6);
    for (int64_t b = 0; b < n_blocks; ++b) {
        const uint8_t* block = row + b * kQ2G64Bytes;
        const float d = half_at(block);
        const __m512i packed = _mm512_broadcast_i32x4(_mm_loadu_si128(reinterpret_cast<const __m128i*>(block + 2)));
        const __m512i codes = _mm512_and_si512(_mm512_srlv_epi64(packed, shifts), two_bits);
        for (int t = 0; t < NT; ++t) {
            const __m512i s = _mm512_dpbusd_epi32(_mm512_setzero_si512(), codes, load64(tokens[t].q + b * 64));
            const float ds = d * tokens[t].scale[b];
            acc[t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(s), _mm512_set1_ps(ds), acc[t]);
            offset[t] -= ds * float(tokens[t].sum[b]);
        }
    }
    for (int t = 0; t < NT; ++t) out[t] = sum_lanes(acc[t]) + offset[t];
}

template <int NT>
void f32_tile(const float* w, int64_t k, const float* const* x, float* out) {
    __m512 acc0[NT], acc1[NT];
    for (int t = 0; t < NT; ++t) acc0[t] = _mm512_setzero_ps(), acc1[t] = _mm512_setzero_ps();
    int64_t i = 0;
    for (; i + 32 <= k; i += 32) {
        const __m512 w0 = _mm512_loadu_ps(w + i), w1 = _mm512_loadu_ps(w + i + 16);
        for (int t = 0; t < NT; ++t) {
            acc0[t] = _mm512_fmadd_ps(w0, _mm512_loadu_ps(x[t] + i), acc0[t]);
            acc1[t] = _mm512_fmadd_ps(w1, _mm512_loadu_ps(x[t] + i + 16), acc1[t]);
        }
    }
    if (i + 16 <= k) {
        const __m512 w0 = _mm512_loadu_ps(w + i);
        for (int t = 0; t < NT; ++t) acc0[t] = _mm512_fmadd_ps(w0, _mm512_loadu_ps(x[t] + i), acc0[t]);
        i += 16;
    }
    for (int t = 0; t < NT; ++t) {
        float tail = 0.0f;
        for (int64_t j = i; j < k; ++j) tail += w[j] * x[t][j];
        out[t] = sum_lanes(_mm512_add_ps(acc0[t], acc1[t])) + tail;
    }
}

DELTABIT_CPU_FAST_ENTRY_POINTS()

}  // namespace

const KernelTable& avx512_kernels() {
    static const KernelTable table{"avx512", q8_0, q4_0, q1_0, q2_0, q2_0_g64, f32_dot,
                                   avx2_kernels().f16_to_f32, avx2_kernels().bf16_to_f32};
    return table;
}

}  // namespace deltabit::cpu_fast
