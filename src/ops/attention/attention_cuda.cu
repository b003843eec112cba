// CUDA attention (ops/attention.h): causal GQA with the optional sigmoid output gate, straightforward
// and parallel. One block of kAttentionWarps warps per (query, head) item, grid-stride over the T·H
// items. Each warp takes every kAttentionWarps-th visible key and keeps its own online softmax
// (running max m, denominator l, weighted sum acc); lane i holds dims i, i+32, ... of q and acc. The
// warps' partial states are merged through shared memory at the end:
//   M = max_w m_w,  out = Σ_w e^{m_w − M} acc_w / Σ_w e^{m_w − M} l_w.
// Work per block grows with the context, and decode (T = 1) has only n_head blocks: the flash-style
// prefill and split-K decode kernels replace this where speed matters.
#include <cmath>
#include <string>

#include "backend/cuda_buffer.h"
#include "ops/cuda/cuda_launch.h"
#include "ops/cuda/cuda_math.cuh"
#include "ops/attention/attention_cuda.h"

namespace deltabit::cuda {

namespace {

constexpr int kThreads = 32 * kAttentionWarps;

struct AttentionArgs {
    const float* q;
    const float* k;
    const float* v;
    const float* gate;
    float* out;
    int64_t n_tokens, n_past, n_head, n_kv_head, head_dim;
    float scale;  // 1 / sqrt(head_dim)
};

// kPerLane = dims per lane, head_dim <= 32·kPerLane; dims past head_dim are masked to 0.
template <int kPerLane>
__global__ void __launch_bounds__(kThreads) attention_kernel(AttentionArgs a) {
    __shared__ float part_m[kAttentionWarps], part_l[kAttentionWarps];
    __shared__ float part_acc[kAttentionWarps][32 * kPerLane];
    const int lane = int(threadIdx.x) & 31;
    const int warp = int(threadIdx.x) >> 5;
    const int64_t d = a.head_dim;
    const int64_t group = a.n_head / a.n_kv_head;
    const int64_t items = a.n_tokens * a.n_head;

    for (int64_t item = blockIdx.x; item < items; item += gridDim.x) {
        const int64_t t = item / a.n_head, h = item % a.n_head;
        const int64_t kv_head = h / group;
        const int64_t n_visible = a.n_past + t + 1;
        const float* qh = a.q + item * d;  // item = t·n_head + h

        float q_reg[kPerLane], acc[kPerLane];
#pragma unroll
        for (int r = 0; r < kPerLane; ++r) {
            const int64_t i = lane + 32 * r;
            q_reg[r] = i < d ? qh[i] * a.scale : 0.0f;
            acc[r] = 0.0f;
        }
        float m = -INFINITY, l = 0.0f;
        for (int64_t p = warp; p < n_visible; p += kAttentionWarps) {
            const float* kp = a.k + (p * a.n_kv_head + kv_head) * d;
            const float* vp = a.v + (p * a.n_kv_head + kv_head) * d;
            float dot = 0.0f, v_reg[kPerLane];
#pragma unroll
            for (int r = 0; r < kPerLane; ++r) {
                const int64_t i = lane + 32 * r;
                const bool in = i < d;
                dot = fmaf(q_reg[r], in ? kp[i] : 0.0f, dot);
                v_reg[r] = in ? vp[i] : 0.0f;
            }
            const float s = warp_sum(dot);
            const float m_new = fmaxf(m, s);
            const float correction = expf(m - m_new);  // 0 on the first key (m = −inf)
            const float weight = expf(s - m_new);
            l = fmaf(l, correction, weight);
#pragma unroll
            for (int r = 0; r < kPerLane; ++r) acc[r] = fmaf(acc[r], correction, weight * v_reg[r]);
            m = m_new;
        }

        if (lane == 0) {
            part_m[warp] = m;
            part_l[warp] = l;
        }
#pragma unroll
        for (int r = 0; r < kPerLane; ++r) part_acc[warp][lane + 32 * r] = acc[r];
        __syncthreads();

        // Merge: thread i produces output dim i. Warps that saw no key have m = −inf and weigh 0.
        float m_all = -INFINITY;
#pragma unroll
        for (int w = 0; w < kAttentionWarps; ++w) m_all = fmaxf(m_all, part_m[w]);
        float l_all = 0.0f;
        float w_exp[kAttentionWarps];
#pragma unroll
        for (int w = 0; w < kAttentionWarps; ++w) {
            w_exp[w] = expf(part_m[w] - m_all);
            l_all = fmaf(part_l[w], w_exp[w], l_all);
        }
        for (int64_t i = threadIdx.x; i < d; i += kThreads) {
            float o = 0.0f;
#pragma unroll
            for (int w = 0; w < kAttentionWarps; ++w) o = fmaf(part_acc[w][i], w_exp[w], o);
            o /= l_all;
            if (a.gate != nullptr) o *= sigmoid_f(a.gate[item * d + i]);
            a.out[item * d + i] = o;
        }
        __syncthreads();  // the partial states are rewritten by the next item
    }
}

}  // namespace

void attention(const float* q, const float* k, const float* v, const float* gate, const AttentionDims& dims,
               float* out, cudaStream_t stream) {
    if (dims.head_dim <= 0 || dims.head_dim > kAttentionMaxHeadDim || dims.n_kv_head <= 0 ||
        dims.n_head % dims.n_kv_head != 0 || dims.n_past < 0) {
        fail_message("attention (cuda): head_dim " + std::to_string(dims.head_dim) + " (at most " +
                     std::to_string(kAttentionMaxHeadDim) + "), n_head " + std::to_string(dims.n_head) +
                     ", n_kv_head " + std::to_string(dims.n_kv_head) + ", n_past " + std::to_string(dims.n_past) +
                     " is not a supported shape");
    }
    const int64_t items = dims.n_tokens * dims.n_head;
    if (items <= 0) return;
    const AttentionArgs args{q,          k,           v,
                             gate,       out,         dims.n_tokens,
                             dims.n_past, dims.n_head, dims.n_kv_head,
                             dims.head_dim, float(1.0 / std::sqrt(double(dims.head_dim)))};
    const unsigned blocks = grid_blocks(items);
    if (dims.head_dim <= 32) {
        attention_kernel<1><<<blocks, kThreads, 0, stream>>>(args);
    } else if (dims.head_dim <= 64) {
        attention_kernel<2><<<blocks, kThreads, 0, stream>>>(args);
    } else if (dims.head_dim <= 128) {
        attention_kernel<4><<<blocks, kThreads, 0, stream>>>(args);
    } else {
        attention_kernel<8><<<blocks, kThreads, 0, stream>>>(args);
    }
    cuda_check_launch("attention");
}

}  // namespace deltabit::cuda
