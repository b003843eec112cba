// Prompt rows rounded to f16 at their power-of-two scale for the f16 GEMM (ops/matmul/gemm_cuda.h,
// ops/matmul/f16_activations.h): one block a row — the row's max|x| by the block, then every value scaled and
// rounded to nearest even. Two sources of rows:
//   - rows of x (round_activation_rows_f16); the second pass reads the row again (L1/L2);
//   - rows of silu(gate) · up computed here (round_swiglu_rows_f16): the FFN's activations rounded for
//     ffn_down without their fp32 copy ever reaching memory. The products of the first pass wait in shared
//     memory for the second (rows up to kMaxCachedCols values; longer rows compute them again). Each product
//     is the swiglu kernel's expression (ops/elementwise/swiglu_cuda.cu), so the bits are round_activation_rows_f16's of
//     swiglu's output.
#include "backend/cuda_buffer.h"
#include "ops/matmul/gemm_cuda.h"

#include <cuda_fp16.h>

#include <algorithm>
#include <cstdint>
#include <string>

#include "ops/cuda/cuda_launch.h"
#include "ops/cuda/cuda_math.cuh"
#include "ops/matmul/f16_activations.h"

namespace deltabit::cuda {

namespace {

constexpr int kRoundThreads = 256;
// A Bonsai-27B FFN row (17408 products, 68 KB) fits three blocks on an SM; 512 threads keep enough of the
// gate and up rows' loads in flight for three such blocks to stream at the card's bandwidth.
constexpr int kSwigluThreads = 512;
constexpr int64_t kMaxCachedCols = 24576;  // 96 KB of products

// One row: `first(i)` gives values 4i..4i+3 for the max, `again(i)` the same values for the rounding.
template <int kThreads, class First, class Again>
__device__ __forceinline__ void round_row(First first, Again again, int64_t quads, uint2* out, float* inv_scale,
                                          float* warp_max) {
    float amax = 0.0f;
    for (int64_t i = threadIdx.x; i < quads; i += kThreads) {
        const float4 v = first(i);
        amax = fmaxf(amax, fmaxf(fmaxf(fabsf(v.x), fabsf(v.y)), fmaxf(fabsf(v.z), fabsf(v.w))));
    }
#pragma unroll
    for (int offset = 16; offset > 0; offset /= 2) amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, offset));
    if (threadIdx.x % 32 == 0) warp_max[threadIdx.x / 32] = amax;
    __syncthreads();  // also: whatever first() stored for again() is visible
    amax = warp_max[0];
#pragma unroll
    for (int w = 1; w < kThreads / 32; ++w) amax = fmaxf(amax, warp_max[w]);
    const int e = f16_activation_exponent(__float_as_uint(amax));
    const float s = __uint_as_float(power_of_two_bits(e)), inv = __uint_as_float(power_of_two_bits(-e));
    if (threadIdx.x == 0) *inv_scale = inv;
    for (int64_t i = threadIdx.x; i < quads; i += kThreads) {
        const float4 v = again(i);
        const __half2 lo = __halves2half2(__float2half_rn(v.x * s), __float2half_rn(v.y * s));
        const __half2 hi = __halves2half2(__float2half_rn(v.z * s), __float2half_rn(v.w * s));
        out[i] = make_uint2(*reinterpret_cast<const uint32_t*>(&lo), *reinterpret_cast<const uint32_t*>(&hi));
    }
    __syncthreads();  // warp_max and the row's shared memory are rewritten by the next row
}

__global__ void __launch_bounds__(kRoundThreads) round_rows_f16_kernel(const float* x, uint16_t* h, float* inv_scale,
                                                                      int64_t rows, int64_t cols) {
    __shared__ float warp_max[kRoundThreads / 32];
    for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
        const float4* row = reinterpret_cast<const float4*>(x + r * cols);
        auto read = [&](int64_t i) { return row[i]; };
        round_row<kRoundThreads>(read, read, cols / 4, reinterpret_cast<uint2*>(h + r * cols), inv_scale + r, warp_max);
    }
}

__device__ __forceinline__ float4 swiglu4(float4 g, float4 u) {
    return make_float4(silu_f(g.x) * u.x, silu_f(g.y) * u.y, silu_f(g.z) * u.z, silu_f(g.w) * u.w);
}

// `cached`: the row's products stay in dynamic shared memory (cols floats) between the passes.
__global__ void __launch_bounds__(kSwigluThreads) round_swiglu_rows_f16_kernel(const float* gate, const float* up,
                                                                              uint16_t* h, float* inv_scale,
                                                                              int64_t rows, int64_t cols, bool cached) {
    extern __shared__ float4 products[];
    __shared__ float warp_max[kSwigluThreads / 32];
    for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
        const float4* g = reinterpret_cast<const float4*>(gate + r * cols);
        const float4* u = reinterpret_cast<const float4*>(up + r * cols);
        auto first = [&](int64_t i) {
            const float4 v = swiglu4(g[i], u[i]);
            if (cached) products[i] = v;
            return v;
        };
        auto again = [&](int64_t i) { return cached ? products[i] : swiglu4(g[i], u[i]); };
        round_row<kSwigluThreads>(first, again, cols / 4, reinterpret_cast<uint2*>(h + r * cols), inv_scale + r, warp_max);
    }
}

void check_rows(const char* what, const HalfActivationRows& out) {
    if (out.cols % 4 != 0)
        fail_message(std::string("cuda ") + what + ": " + std::to_string(out.cols) +
                     " values a row (a multiple of 4 is needed)");
}

bool aligned16(const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; }

}  // namespace

void round_activation_rows_f16(const float* x, const HalfActivationRows& out, cudaStream_t stream) {
    if (out.rows == 0 || out.cols == 0) return;
    check_rows("round_activation_rows_f16", out);
    const unsigned blocks = unsigned(std::min<int64_t>(out.rows, 65535));
    round_rows_f16_kernel<<<blocks, kRoundThreads, 0, stream>>>(x, out.h, out.inv_scale, out.rows, out.cols);
    cuda_check_launch("round_rows_f16_kernel");
}

void round_swiglu_rows_f16(const float* gate, const float* up, const HalfActivationRows& out, cudaStream_t stream) {
    if (out.rows == 0 || out.cols == 0) return;
    check_rows("round_swiglu_rows_f16", out);
    if (!aligned16(gate) || !aligned16(up))
        fail_message("cuda round_swiglu_rows_f16: gate and up must be 16-byte aligned");
    static const bool attribute_set = [] {
        cuda_check(cudaFuncSetAttribute(round_swiglu_rows_f16_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                        int(kMaxCachedCols * sizeof(float))),
                   "round_swiglu_rows_f16 shared memory");
        return true;
    }();
    (void)attribute_set;
    const bool cached = out.cols <= kMaxCachedCols;
    const size_t smem = cached ? size_t(out.cols) * sizeof(float) : 0;
    const unsigned blocks = unsigned(std::min<int64_t>(out.rows, 65535));
    round_swiglu_rows_f16_kernel<<<blocks, kSwigluThreads, smem, stream>>>(gate, up, out.h, out.inv_scale, out.rows,
                                                                         out.cols, cached);
    cuda_check_launch("round_swiglu_rows_f16_kernel");
}

}  // namespace deltabit::cuda
