// The decode step's attention prologue as device functions: rms_norm and rope_neox of one head by one
// warp, and the store of a new key or value element into a cache. Both the standalone prologue kernel
// (attention_decode_prologue) and the split kernels that fold the prologue in (attention_cached with
// AttentionDecodeFolds::prologue) call them, so the two give the same bits. Internal to src/ops.
#pragma once

#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>

#include "ops/cuda_math.cuh"
#include "ops/decode_cuda.h"
#include "ops/kv_cuda.h"

namespace deltabit::cuda {

// Dims of a head a lane holds: lane l holds dims l, l + 32, ... (head_dim <= kAttentionDecodeMaxHeadDim).
inline constexpr int kPrologueLaneDims = int(kAttentionDecodeMaxHeadDim / 32);

// Element `index` of position p's row (kivi4: its exact row; quantisation comes later, kivi_compress).
__device__ __forceinline__ void store_kv(const KvCacheView& cache, int64_t p, int64_t row_elems, int64_t index,
                                         float value) {
    const int64_t at = kv_data_row(cache, p) * row_elems + index;
    if (cache.element == KvElement::f16) static_cast<__half*>(cache.data)[at] = __float2half_rn(value);
    else static_cast<float*>(cache.data)[at] = value;
}

// The lane's norm weights w[lane + 32c] (0 past head_dim): the model's, written by no kernel of the step,
// so a kernel may load them before it waits for its predecessor.
struct PrologueNormLanes {
    float w[kPrologueLaneDims];
};
__device__ __forceinline__ PrologueNormLanes load_norm_lanes(const float* w, int64_t d, int lane) {
    PrologueNormLanes n;
#pragma unroll
    for (int c = 0; c < kPrologueLaneDims; ++c) {
        const int64_t i = lane + 32 * c;
        n.w[c] = w != nullptr && i < d ? w[i] : 0.0f;
    }
    return n;
}

struct PrologueShape {
    int64_t head_dim, rope_dim;
    float rope_theta, rms_eps;
    const double* rope_table;  // rope_decode_table's cos/sin pairs for the position, or nullptr
};

// cos and sin of the rotation of dim pair j at `position`, as cuda::rope_neox forms them.
__device__ __forceinline__ double2 rope_angle(int64_t j, int64_t rope_dim, float rope_theta, int64_t position) {
    const float exponent = float(2 * j) / float(rope_dim);
    const float inv_freq = 1.0f / float(pow(double(rope_theta), double(exponent)));
    const float angle = float(int32_t(position)) * inv_freq;
    double sn, cs;
    sincos(double(angle), &sn, &cs);
    return make_double2(cs, sn);
}

// row[0 .. d) = rope_neox(rms_norm(src[0 .. d), w), position), by the 32 lanes of one warp; row is shared
// memory (used in place) and the warp is synchronised on return. The values are cuda::rms_norm's and
// cuda::rope_neox's: Σx² in the order a block_sum over one thread per dim adds it (a butterfly over each
// 32 dims, then one over those eight sums), 1/sqrt(mean + eps), x·scale·w; the angle in fp32, cos/sin and
// the rotation in double (the angles from s.rope_table when there is one: the same bits).
__device__ __forceinline__ void norm_rope_head(const float* src, const PrologueNormLanes& w, const PrologueShape& s,
                                               int64_t position, float* row, int lane) {
    const int64_t d = s.head_dim, half = s.rope_dim / 2;
    float x[kPrologueLaneDims];
    double2 rot[kPrologueLaneDims];  // requested with the inputs, used after the norm
#pragma unroll
    for (int c = 0; c < kPrologueLaneDims; ++c) {
        const int64_t i = lane + 32 * c;
        x[c] = i < d ? src[i] : 0.0f;
        const int64_t j = i < half ? i : i - half;
        rot[c] = s.rope_table != nullptr && i < s.rope_dim ? reinterpret_cast<const double2*>(s.rope_table)[j]
                                                           : make_double2(1.0, 0.0);
    }
    float sum_here = 0.0f;  // lane c < 8 holds the sum of dims [32c, 32c + 32)
#pragma unroll
    for (int c = 0; c < kPrologueLaneDims; ++c) {
        const float part = warp_sum(x[c] * x[c]);
        if (lane == c) sum_here = part;
    }
    const float scale = 1.0f / sqrtf(warp_sum(sum_here) / float(d) + s.rms_eps);
#pragma unroll
    for (int c = 0; c < kPrologueLaneDims; ++c) {
        const int64_t i = lane + 32 * c;
        x[c] = i < d ? x[c] * scale * w.w[c] : 0.0f;
        if (i < d) row[i] = x[c];
    }
    __syncwarp();
#pragma unroll
    for (int c = 0; c < kPrologueLaneDims; ++c) {
        const int64_t i = lane + 32 * c;
        if (i >= s.rope_dim) continue;
        const int64_t j = i < half ? i : i - half;
        const double2 r = s.rope_table != nullptr ? rot[c] : rope_angle(j, s.rope_dim, s.rope_theta, position);
        const double cs = r.x, sn = r.y;
        const double x0 = row[j], x1 = row[j + half];
        x[c] = i < half ? float(__dsub_rn(__dmul_rn(x0, cs), __dmul_rn(x1, sn)))
                        : float(__dadd_rn(__dmul_rn(x1, cs), __dmul_rn(x0, sn)));
    }
    __syncwarp();  // every lane has read the normed row before it is overwritten
#pragma unroll
    for (int c = 0; c < kPrologueLaneDims; ++c) {
        const int64_t i = lane + 32 * c;
        if (i < d) row[i] = x[c];
    }
    __syncwarp();
}

}  // namespace deltabit::cuda
