// CUDA moe_router (ops/moe_router.h): one warp per token (grid-stride), lanes striding over experts.
// Selection is by logit under the total order "larger logit first, then lower index": softmax is
// monotonic, so this is the reference's order by probability, ties included, and the ids match it
// exactly. Pick i is the best expert strictly after pick i−1 in that order, so nothing is marked or
// sorted: top_k passes over the logits (cached in L1 after the first). Weights are fp32:
// e^{l − max} / Σ_all e^{l − max}, or over the chosen experts only when renormalising.
#include <climits>
#include <cmath>
#include <string>

#include "backend/cuda_buffer.h"
#include "ops/cuda/cuda_launch.h"
#include "ops/cuda/cuda_math.cuh"
#include "ops/elementwise/elementwise_cuda.h"

namespace deltabit::cuda {

namespace {

constexpr int kWarpsPerBlock = 4;

struct Pick {
    float logit;
    int32_t index;  // INT_MAX: nothing yet
};

// a comes before b: larger logit, or the same logit and a lower index.
__device__ __forceinline__ bool before(const Pick& a, const Pick& b) {
    return a.logit > b.logit || (a.logit == b.logit && a.index < b.index);
}

// kPerLane > 0: each lane keeps its experts' logits (e = lane + 32·r) in registers, for n_expert <=
// 32·kPerLane, instead of re-reading them on each of the top_k passes (kPerLane = 0, any n_expert).
// Measured on an H200, one token, 512 experts, top 10: 25.9 µs re-reading, 22.5 µs from registers —
// so the re-reads were not the main cost; the serial passes of a single warp are (about 7K dependent
// cycles, and the SM clock need not ramp up for one warp of work). A block-wide selection is the
// next step if decode routing shows up in a profile.
template <int kPerLane>
__global__ void __launch_bounds__(32 * kWarpsPerBlock)
    moe_router_kernel(const float* logits, int64_t n_tokens, int64_t n_expert, int64_t top_k, bool renormalize,
                      int32_t* ids, float* weights) {
    const int lane = int(threadIdx.x) & 31;
    const int64_t warps_in_grid = int64_t(gridDim.x) * kWarpsPerBlock;
    for (int64_t t = int64_t(blockIdx.x) * kWarpsPerBlock + (threadIdx.x >> 5); t < n_tokens; t += warps_in_grid) {
        const float* lt = logits + t * n_expert;
        float cached[kPerLane > 0 ? kPerLane : 1];
        if constexpr (kPerLane > 0) {
#pragma unroll
            for (int r = 0; r < kPerLane; ++r) {
                const int64_t e = lane + 32 * r;
                cached[r] = e < n_expert ? lt[e] : -INFINITY;
            }
        }
        // Visits (logit, expert) for this lane's experts.
        auto for_each = [&](auto&& visit) {
            if constexpr (kPerLane > 0) {
#pragma unroll
                for (int r = 0; r < kPerLane; ++r) {
                    const int64_t e = lane + 32 * r;
                    if (e < n_expert) visit(cached[r], e);
                }
            } else {
                for (int64_t e = lane; e < n_expert; e += 32) visit(lt[e], e);
            }
        };

        float max_logit = -INFINITY;
        for_each([&](float l, int64_t) { max_logit = fmaxf(max_logit, l); });
#pragma unroll
        for (int offset = 16; offset > 0; offset >>= 1)
            max_logit = fmaxf(max_logit, __shfl_xor_sync(kFullWarpMask, max_logit, offset));
        float denom = 0.0f;
        for_each([&](float l, int64_t) { denom += expf(l - max_logit); });
        denom = warp_sum(denom);

        Pick previous{INFINITY, -1};  // before every expert
        float chosen_sum = 0.0f;
        for (int64_t i = 0; i < top_k; ++i) {
            Pick best{-INFINITY, INT_MAX};
            for_each([&](float l, int64_t e) {
                const Pick candidate{l, int32_t(e)};
                if (before(previous, candidate) && before(candidate, best)) best = candidate;
            });
#pragma unroll
            for (int offset = 16; offset > 0; offset >>= 1) {
                const Pick other{__shfl_xor_sync(kFullWarpMask, best.logit, offset),
                                 __shfl_xor_sync(kFullWarpMask, best.index, offset)};
                if (before(other, best)) best = other;
            }
            const float e_best = expf(best.logit - max_logit);
            chosen_sum += e_best;
            if (lane == 0) {
                ids[t * top_k + i] = best.index;
                weights[t * top_k + i] = e_best;
            }
            previous = best;
        }
        if (lane == 0) {
            const float divisor = renormalize ? chosen_sum : denom;
            for (int64_t i = 0; i < top_k; ++i) weights[t * top_k + i] /= divisor;
        }
    }
}

}  // namespace

void moe_router(const float* logits, int64_t n_tokens, int64_t n_expert, int64_t top_k, bool renormalize,
                int32_t* ids, float* weights, cudaStream_t stream) {
    if (top_k < 0 || top_k > n_expert) {
        fail_message("moe_router (cuda): top_k " + std::to_string(top_k) + " of " + std::to_string(n_expert) +
                     " experts");
    }
    if (n_tokens <= 0 || top_k == 0) return;
    const unsigned blocks = grid_blocks(n_tokens, kWarpsPerBlock);
    auto launch = [&](auto kernel) {
        kernel<<<blocks, 32 * kWarpsPerBlock, 0, stream>>>(logits, n_tokens, n_expert, top_k, renormalize, ids,
                                                           weights);
    };
    if (n_expert <= 32) launch(moe_router_kernel<1>);
    else if (n_expert <= 64) launch(moe_router_kernel<2>);
    else if (n_expert <= 128) launch(moe_router_kernel<4>);
    else if (n_expert <= 256) launch(moe_router_kernel<8>);
    else if (n_expert <= 512) launch(moe_router_kernel<16>);
    else launch(moe_router_kernel<0>);
    cuda_check_launch("moe_router");
}

}  // namespace deltabit::cuda
