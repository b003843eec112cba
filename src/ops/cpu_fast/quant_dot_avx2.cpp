// The AVX2 + FMA + F16C row kernels of the CPU fast matmul (contract: ops/cpu_fast/quant_dot.h). Integer dot
// products with vpmaddubsw (unsigned × signed bytes into int16 pairs) and vpmaddwd (into int32), one
// weight block expanded to bytes once per tile of tokens; each block's int32 lanes are converted and
// multiplied by fp32(d·scale) into 8 fp32 lanes, summed across lanes once per row.
//
// Compiled for AVX2 with a target pragma; nothing but intrinsics is used here (quant_dot.h says why).
#pragma GCC target("avx2,fma,f16c")

#include "ops/cpu_fast/quant_dot.h"

#include <immintrin.h>

#include <cstdint>
#include <cstring>

namespace deltabit::cpu_fast {
namespace {

// Block sizes and layouts (core/quant_blocks.h, whose static_asserts pin them): fp16 d first, codes after.
constexpr int kQ8Bytes = 34, kQ4Bytes = 18, kQ1Bytes = 18, kQ2Bytes = 34, kQ2G64Bytes = 18;

inline float half_at(const uint8_t* p) {
    uint16_t h;
    std::memcpy(&h, p, 2);
    return _cvtsh_ss(h);
}

// Lanes summed in a fixed order: (0+4, 1+5, 2+6, 3+7), then pairs, then the last two.
inline float sum_lanes(__m256 v) {
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_shuffle_ps(s, s, 1));
    return _mm_cvtss_f32(s);
}

inline __m256i load32(const void* p) { return _mm256_loadu_si256(static_cast<const __m256i*>(p)); }
inline __m128i load16(const void* p) { return _mm_loadu_si128(static_cast<const __m128i*>(p)); }

// Σ over pairs of int16 lanes into 8 int32 lanes.
inline __m256i widen_pairs(__m256i s16) { return _mm256_madd_epi16(s16, _mm256_set1_epi16(1)); }

// Signed × signed bytes through vpmaddubsw: |w| (unsigned) × a with w's sign. Pairs stay within int16:
// 2·128·127 < 32768.
inline __m256i dot_signed(__m256i w, __m256i a) {
    return _mm256_maddubs_epi16(_mm256_sign_epi8(w, w), _mm256_sign_epi8(a, w));
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
            const __m256i value = widen_pairs(dot_signed(w, load32(tokens[t].q + b * 32)));
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
        const __m128i packed = load16(block + 2);
        // Elements 0..15 are the low nibbles, 16..31 the high ones (block_q4_0).
        const __m256i codes = _mm256_set_m128i(_mm_and_si128(_mm_srli_epi16(packed, 4), low_nibbles),
                                               _mm_and_si128(packed, low_nibbles));
        const __m256i w = _mm256_sub_epi8(codes, _mm256_set1_epi8(8));
        for (int t = 0; t < NT; ++t) {
            const __m256i value = widen_pairs(dot_signed(w, load32(tokens[t].q + b * 32)));
            acc[t] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(value), _mm256_set1_ps(d * tokens[t].scale[b]), acc[t]);
        }
    }
    for (int t = 0; t < NT; ++t) out[t] = sum_lanes(acc[t]);
}

// Q1_0: Σ ±q = 2·Σ_{bit set} q − Σ q. The set bits become byte masks (each byte picks its bit from the
// bytes of the 32 signs it covers), the masked activations are summed; the row adds 2·fp32(d·s)·S per
// block on the lanes and subtracts fp32(d·s)·Σq in a scalar.
template <int NT>
void q1_0_tile(const uint8_t* row, int64_t n_blocks, const Int8Token* tokens, float* out) {
    __m256 acc[NT];
    float offset[NT];
    for (int t = 0; t < NT; ++t) acc[t] = _mm256_setzero_ps(), offset[t] = 0.0f;
    const __m256i byte_of_bit = _mm256_setr_epi8(0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1,  //
                                                 2, 2, 2, 2, 2, 2, 2, 2, 3, 3, 3, 3, 3, 3, 3, 3);
    const __m256i bit = _mm256_set1_epi64x(int64_t(0x8040201008040201ull));
    const __m256i ones = _mm256_set1_epi8(1);
    for (int64_t b = 0; b < n_blocks; ++b) {
        const uint8_t* block = row + b * kQ1Bytes;
        const float d = half_at(block);
        __m256i mask[4];
        for (int c = 0; c < 4; ++c) {
            int32_t signs;
            std::memcpy(&signs, block + 2 + 4 * c, 4);
            const __m256i spread = _mm256_shuffle_epi8(_mm256_set1_epi32(signs), byte_of_bit);
            mask[c] = _mm256_cmpeq_epi8(_mm256_and_si256(spread, bit), bit);
        }
        for (int t = 0; t < NT; ++t) {
            const int8_t* q = tokens[t].q + b * 128;
            __m256i s16 = _mm256_setzero_si256();  // 4 chunks of ≤ 2·127 per lane: far inside int16
            for (int c = 0; c < 4; ++c)
                s16 = _mm256_add_epi16(s16, _mm256_maddubs_epi16(ones, _mm256_and_si256(mask[c], load32(q + 32 * c))));
            const float ds = d * tokens[t].scale[b];
            acc[t] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(widen_pairs(s16)), _mm256_set1_ps(2.0f * ds), acc[t]);
            offset[t] -= ds * float(tokens[t].sum[b]);
        }
    }
    for (int t = 0; t < NT; ++t) out[t] = sum_lanes(acc[t]) + offset[t];
}

// Q2_0 (group 128): codes c ∈ 0..3, level c − 1, so Σ level·q = Σ c·q − Σ q. Shifting the 32 code bytes by
// 2·s picks the codes of elements 4·b + s, which the activations hold contiguously (quant_dot.h).
template <int NT>
void q2_0_tile(const uint8_t* row, int64_t n_blocks, const Int8Token* tokens, float* out) {
    __m256 acc[NT];
    float offset[NT];
    for (int t = 0; t < NT; ++t) acc[t] = _mm256_setzero_ps(), offset[t] = 0.0f;
    const __m256i two_bits = _mm256_set1_epi8(3);
    for (int64_t b = 0; b < n_blocks; ++b) {
        const uint8_t* block = row + b * kQ2Bytes;
        const float d = half_at(block);
        const __m256i packed = load32(block + 2);
        const __m256i codes[4] = {_mm256_and_si256(packed, two_bits),
                                  _mm256_and_si256(_mm256_srli_epi16(packed, 2), two_bits),
                                  _mm256_and_si256(_mm256_srli_epi16(packed, 4), two_bits),
                                  _mm256_and_si256(_mm256_srli_epi16(packed, 6), two_bits)};
        for (int t = 0; t < NT; ++t) {
            const int8_t* q = tokens[t].q + b * 128;
            __m256i s16 = _mm256_setzero_si256();  // 4 × 2·3·127 per lane
            for (int s = 0; s < 4; ++s) s16 = _mm256_add_epi16(s16, _mm256_maddubs_epi16(codes[s], load32(q + 32 * s)));
            const float ds = d * tokens[t].scale[b];
            acc[t] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(widen_pairs(s16)), _mm256_set1_ps(ds), acc[t]);
            offset[t] -= ds * float(tokens[t].sum[b]);
        }
    }
    for (int t = 0; t < NT; ++t) out[t] = sum_lanes(acc[t]) + offset[t];
}

// Q2_0_G64: 16 code bytes; shifts 0 and 2 fill one register (elements 4b and 4b+1), 4 and 6 the other.
template <int NT>
void q2_0_g64_tile(const uint8_t* row, int64_t n_blocks, const Int8Token* tokens, float* out) {
    __m256 acc[NT];
    float offset[NT];
    for (int t = 0; t < NT; ++t) acc[t] = _mm256_setzero_ps(), offset[t] = 0.0f;
    const __m256i two_bits = _mm256_set1_epi8(3);
    for (int64_t b = 0; b < n_blocks; ++b) {
        const uint8_t* block = row + b * kQ2G64Bytes;
        const float d = half_at(block);
        const __m128i packed = load16(block + 2);
        const __m256i codes01 = _mm256_and_si256(_mm256_set_m128i(_mm_srli_epi16(packed, 2), packed), two_bits);
        const __m256i codes23 =
            _mm256_and_si256(_mm256_set_m128i(_mm_srli_epi16(packed, 6), _mm_srli_epi16(packed, 4)), two_bits);
        for (int t = 0; t < NT; ++t) {
            const int8_t* q = tokens[t].q + b * 64;
            const __m256i s16 = _mm256_add_epi16(_mm256_maddubs_epi16(codes01, load32(q)),
                                                 _mm256_maddubs_epi16(codes23, load32(q + 32)));
            const float ds = d * tokens[t].scale[b];
            acc[t] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(widen_pairs(s16)), _mm256_set1_ps(ds), acc[t]);
            offset[t] -= ds * float(tokens[t].sum[b]);
        }
    }
    for (int t = 0; t < NT; ++t) out[t] = sum_lanes(acc[t]) + offset[t];
}

// Two accumulators per token over 16 values a step (an FMA's latency would otherwise bound one token's
// decode), then 8, then a scalar tail.
template <int NT>
void f32_tile(const float* w, int64_t k, const float* const* x, float* out) {
    __m256 acc0[NT], acc1[NT];
    for (int t = 0; t < NT; ++t) acc0[t] = _mm256_setzero_ps(), acc1[t] = _mm256_setzero_ps();
    int64_t i = 0;
    for (; i + 16 <= k; i += 16) {
        const __m256 w0 = _mm256_loadu_ps(w + i), w1 = _mm256_loadu_ps(w + i + 8);
        for (int t = 0; t < NT; ++t) {
            acc0[t] = _mm256_fmadd_ps(w0, _mm256_loadu_ps(x[t] + i), acc0[t]);
            acc1[t] = _mm256_fmadd_ps(w1, _mm256_loadu_ps(x[t] + i + 8), acc1[t]);
        }
    }
    if (i + 8 <= k) {
        const __m256 w0 = _mm256_loadu_ps(w + i);
        for (int t = 0; t < NT; ++t) acc0[t] = _mm256_fmadd_ps(w0, _mm256_loadu_ps(x[t] + i), acc0[t]);
        i += 8;
    }
    for (int t = 0; t < NT; ++t) {
        float tail = 0.0f;
        for (int64_t j = i; j < k; ++j) tail += w[j] * x[t][j];
        out[t] = sum_lanes(_mm256_add_ps(acc0[t], acc1[t])) + tail;
    }
}

DELTABIT_CPU_FAST_ENTRY_POINTS()

void f16_to_f32(const void* row, int64_t k, float* out) {
    const auto* h = static_cast<const uint16_t*>(row);
    int64_t i = 0;
    for (; i + 8 <= k; i += 8) _mm256_storeu_ps(out + i, _mm256_cvtph_ps(load16(h + i)));
    for (; i < k; ++i) out[i] = _cvtsh_ss(h[i]);
}

void bf16_to_f32(const void* row, int64_t k, float* out) {
    const auto* h = static_cast<const uint16_t*>(row);
    int64_t i = 0;
    for (; i + 8 <= k; i += 8)
        _mm256_storeu_si256(reinterpret_cast<__m256i*>(out + i), _mm256_slli_epi32(_mm256_cvtepu16_epi32(load16(h + i)), 16));
    for (; i < k; ++i) {
        const uint32_t bits = uint32_t(h[i]) << 16;
        std::memcpy(out + i, &bits, 4);
    }
}

}  // namespace

const KernelTable& avx2_kernels() {
    static const KernelTable table{"avx2", q8_0, q4_0, q1_0, q2_0, q2_0_g64, f32_dot, f16_to_f32, bf16_to_f32};
    return table;
}

}  // namespace deltabit::cpu_fast
