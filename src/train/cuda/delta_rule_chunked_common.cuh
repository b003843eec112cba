// What the two implementations of the trainer's chunked delta rule share: the fp32 CUDA-core kernels
// (delta_rule_chunked_kernels.cu, GemmMath::fp32 and the oracle) and the bf16 tensor-core kernels
// (delta_rule_chunked_mma_kernels.cu, GemmMath::bf16). Both write the same `saved` buffer, which the
// backward reads whichever forward filled it, so its layout is stated here once:
//   states   [B][Hv][chunks][dk][dv]   the state entering every chunk (fp32)
//   v_new    [B·T][Hv][dv]             every token's δ = V'
//   factors  [B][Hv][chunks][kFactorFloats]: T [L][L], M [L][L], e^{γ_i} [L], e^{γ_ℓ−γ_i} [L]
// and so are the decays (γ summed in double) and T = (I + A)^{-1} (fp32 forward substitution).
#pragma once

#include "backend/cuda_buffer.h"
#include "train/cuda/kernels.h"

#include <cuda_runtime.h>

#include <cstdint>
#include <string>

namespace deltabit::train::cuda::delta_chunked {

constexpr int L = int(kDeltaChunk);
constexpr int kSquareRow = L + 1;  // padded fp32 [L][L] rows
constexpr int64_t kFactorFloats = 2 * L * L + 2 * L;

struct Dims {
    int64_t B, T, Hk, Hv, dk, dv, chunks;
    __host__ __device__ int64_t key_head(int64_t h) const { return h / (Hv / Hk); }
    __host__ __device__ int key_row() const { return int(dk | 1); }  // odd: conflict-free column reads
    __host__ __device__ int64_t state_offset(int64_t b, int64_t h, int64_t c) const {
        return ((b * Hv + h) * chunks + c) * dk * dv;
    }
    __host__ __device__ int64_t factor_offset(int64_t b, int64_t h, int64_t c) const {
        return ((b * Hv + h) * chunks + c) * kFactorFloats;
    }
    __host__ __device__ int64_t token(int64_t b, int64_t t) const { return b * T + t; }
};

inline Dims dims_of(int64_t B, int64_t T, int64_t Hk, int64_t Hv, int64_t dk, int64_t dv) {
    return {B, T, Hk, Hv, dk, dv, (T + L - 1) / L};
}

__device__ inline int chunk_length(const Dims& d, int64_t c) { return int(min(int64_t(L), d.T - c * L)); }

// γ_i = Σ_{m≤i} g_m in double, γ held constant past len (those tokens neither decay nor write).
__device__ inline void cumulative_decay(const float* g, const Dims& d, int64_t b, int64_t h, int64_t t0, int len,
                                        double* gamma) {
    if (threadIdx.x == 0) {
        double sum = 0.0;
        for (int i = 0; i < L; ++i) gamma[i] = sum += i < len ? double(g[d.token(b, t0 + i) * d.Hv + h]) : 0.0;
    }
}

__device__ inline float quad_sum(float x) {
    x += __shfl_xor_sync(0xffffffffu, x, 1);
    return x + __shfl_xor_sync(0xffffffffu, x, 2);
}

// (I + A) T = I by forward substitution, a and t_mat [L][kSquareRow], 256 threads: the 4 lanes of
// column `col` split each row's sum. Row r of column col needs rows < r of the same column only,
// written by the same 4 lanes (one warp).
__device__ inline void unit_lower_inverse(const float* a, float* t_mat) {
    const int col = threadIdx.x / 4, lane4 = threadIdx.x % 4;
    for (int r = 0; r < L; ++r) {
        float sum = 0.0f;
        for (int j = lane4; j < r; j += 4) sum += a[r * kSquareRow + j] * t_mat[j * kSquareRow + col];
        sum = quad_sum(sum);
        if (lane4 == 0) t_mat[r * kSquareRow + col] = (r == col ? 1.0f : 0.0f) - sum;
        __syncwarp();
    }
}

// The parts of the forward's saved buffer (layout above).
struct Saved {
    float *states, *v_new, *factors;
    Saved(float* base, const Dims& d)
        : states(base), v_new(states + d.B * d.Hv * d.chunks * d.dk * d.dv), factors(v_new + d.B * d.T * d.Hv * d.dv) {}
};

inline void check_shape(const Dims& d) {
    if (d.B > 65535 || d.Hv > 65535 || d.Hk <= 0 || d.Hv % d.Hk != 0 || d.dk <= 0 || d.dk > kDeltaMaxKeyDim ||
        d.dv <= 0)
        fail_message("train cuda: delta rule: unsupported shape B=" + std::to_string(d.B) + " heads " +
                     std::to_string(d.Hk) + "/" + std::to_string(d.Hv) + " dims " + std::to_string(d.dk) + "/" +
                     std::to_string(d.dv) + " (key dim at most " + std::to_string(kDeltaMaxKeyDim) + ")");
}

// Shared memory grows with dk (a chunk's keys and queries stay in it): up to 140 KB a block, within
// Hopper's 227 KB but not every GPU's.
template <typename Kernel>
void allow_shared(Kernel kernel, size_t bytes, const Dims& d, const char* what) {
    const int limit = deltabit::cuda::device_attribute(cudaDevAttrMaxSharedMemoryPerBlockOptin, "shared memory limit");
    if (bytes > size_t(limit))
        fail_message(std::string("train cuda: delta rule: ") + what + " needs " + std::to_string(bytes) +
                     " bytes of shared memory at key dim " + std::to_string(d.dk) + ", the device allows " +
                     std::to_string(limit));
    if (bytes > 48 * 1024)
        deltabit::cuda::cuda_check(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(bytes)),
                                   what);
}

}  // namespace deltabit::train::cuda::delta_chunked
