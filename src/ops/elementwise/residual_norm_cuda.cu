// add_rms_norm_quantize (ops/elementwise/elementwise_cuda.h): the decode step's seam between blocks in one launch.
//
// One block of 1024 threads holds the row in registers, four consecutive elements per thread per pass of
// 4096 (at most four passes: kResidualNormMaxDim). The layout makes every activation group of 128 one
// warp's four-element slices in one pass, so the quantiser's max and sum are warp butterflies with no
// shared memory. Order of work: add the residual and store x, Σx² per thread (fmaf in pass order) then
// the block sum, scale, h = x · scale · w stored, and each warp quantises its groups with the one
// quantiser every activation kernel shares (ops/cuda/activation_quant.cuh).
#include <string>

#include "backend/cuda_buffer.h"
#include "ops/cuda/activation_quant.cuh"
#include "ops/cuda/cuda_math.cuh"
#include "ops/elementwise/elementwise_cuda.h"
#include "ops/cuda/programmatic_launch.cuh"

namespace deltabit::cuda {

namespace {

constexpr int kThreads = 1024;
constexpr int kPassElems = 4 * kThreads;
constexpr int kMaxPasses = int(kResidualNormMaxDim / kPassElems);
static_assert(kPassElems == 32 * kActivationGroup, "a group of 128 is one warp's slice of a pass");

struct Args {
    float* x;
    const float* residual;
    const float* w;
    float* h;
    int8_t* q;
    ActivationGroupMeta* meta;
    int dim;
    float eps;
    bool one_plus;
};

__global__ void __launch_bounds__(kThreads) add_rms_norm_quantize_kernel(Args a) {
    __shared__ float scratch[32];
    const int tid = int(threadIdx.x), lane = tid & 31, warp = tid >> 5;
    // The norm weights are constant: pull this thread's lines into L2 while the kernel before finishes.
#pragma unroll
    for (int p = 0; p < kMaxPasses; ++p) {
        const int e = p * kPassElems + 4 * tid;
        if (e < a.dim) asm volatile("prefetch.global.L2 [%0];" ::"l"(a.w + e));
    }
    wait_for_predecessor();
    allow_dependents();

    float v[kMaxPasses][4];
    float sum_sq = 0.0f;
#pragma unroll
    for (int p = 0; p < kMaxPasses; ++p) {
        const int e = p * kPassElems + 4 * tid;
        if (e + 4 <= a.dim) {
            float4 x4 = *reinterpret_cast<const float4*>(a.x + e);
            if (a.residual != nullptr) {
                const float4 r4 = *reinterpret_cast<const float4*>(a.residual + e);
                x4 = make_float4(x4.x + r4.x, x4.y + r4.y, x4.z + r4.z, x4.w + r4.w);
                *reinterpret_cast<float4*>(a.x + e) = x4;
            }
            v[p][0] = x4.x;
            v[p][1] = x4.y;
            v[p][2] = x4.z;
            v[p][3] = x4.w;
        } else {
#pragma unroll
            for (int i = 0; i < 4; ++i) {
                float xi = 0.0f;
                if (e + i < a.dim) {
                    xi = a.x[e + i];
                    if (a.residual != nullptr) {
                        xi += a.residual[e + i];
                        a.x[e + i] = xi;
                    }
                }
                v[p][i] = xi;
            }
        }
#pragma unroll
        for (int i = 0; i < 4; ++i) sum_sq = fmaf(v[p][i], v[p][i], sum_sq);
    }
    // cuda::rms_norm's scale and element formula (rms_norm_cuda.cu).
    const float scale = 1.0f / sqrtf(block_sum(sum_sq, scratch) / float(a.dim) + a.eps);

#pragma unroll
    for (int p = 0; p < kMaxPasses; ++p) {
        const int group = p * 32 + warp;
        if (group * kActivationGroup >= a.dim) continue;  // whole warps: the butterflies below stay full
        const int e = p * kPassElems + 4 * tid;
        float hv[4];
#pragma unroll
        for (int i = 0; i < 4; ++i) {
            hv[i] = 0.0f;
            if (e + i < a.dim) {
                const float wi = a.one_plus ? 1.0f + a.w[e + i] : a.w[e + i];
                hv[i] = v[p][i] * scale * wi;
                a.h[e + i] = hv[i];
            }
        }
        const ActivationGroupMeta meta = quantize_group_by_warp(hv, lane, a.q + group * kActivationGroup);
        if (lane == 0) a.meta[group] = meta;
    }
}

}  // namespace

void add_rms_norm_quantize(float* x, const float* residual, const float* w, int64_t dim, float eps,
                           cpu::NormWeight weight, float* h, const QuantizedActivationsView& hq, cudaStream_t stream) {
    if (dim <= 0 || dim > kResidualNormMaxDim)
        fail_message("cuda add_rms_norm_quantize: a row of " + std::to_string(dim) + " elements; this kernel takes 1 to " +
                     std::to_string(kResidualNormMaxDim));
    if (hq.cols != dim)
        fail_message("cuda add_rms_norm_quantize: quantised view of " + std::to_string(hq.cols) + " inputs for a row of " +
                     std::to_string(dim));
    require_plain_view(hq, "cuda add_rms_norm_quantize");
    if (weight == cpu::NormWeight::none) fail_message("cuda add_rms_norm_quantize: a scale-free norm is not supported here");
    const Args args{x, residual, w, h, hq.q, hq.meta, int(dim), eps, weight == cpu::NormWeight::one_plus};
    launch_programmatic(add_rms_norm_quantize_kernel, dim3(1), dim3(kThreads), 0, stream, "add_rms_norm_quantize",
                        args);
}

}  // namespace deltabit::cuda
