// Causal GQA attention for training, forward and backward, the straightforward way: one block per
// (query row, head) holds that row's scores in shared memory (T floats), a warp per key forms a score
// (lanes split the head dimension: coalesced rows), and the backward recomputes the probabilities from
// the saved log-sum-exp. dq is computed per query row; dk and dv per key row
// (one block per (key row, kv head) walks the later queries of every head in its group), so no
// gradient needs atomics and each is written once: dq, dk and dv are overwritten (kernels.h's "(=)"). O(T²·dh) CUDA-core work per head in fp32: the path of fp32 products
// (GemmMath::fp32, the tests that compare a whole step with the double reference) and of head dims the
// flash kernels are not built for; bf16 products at head_dim 64 / 128 go to the flash-style tensor-core
// kernels (attention_flash.h), tested against these.
#include "train/cuda/attention_flash.h"
#include "train/cuda/device_common.cuh"
#include "train/cuda/gemm.h"
#include "train/cuda/kernels.h"

#include <cstdint>
#include <initializer_list>
#include <string>

namespace deltabit::train::cuda {
namespace {

using deltabit::cuda::cuda_check;
using deltabit::cuda::cuda_check_launch;

constexpr int kThreads = 128;

template <typename Kernel>
void allow_shared(Kernel kernel, size_t bytes, const char* what) {
    const int limit = deltabit::cuda::device_attribute(cudaDevAttrMaxSharedMemoryPerBlockOptin, "shared memory limit");
    if (bytes > size_t(limit))
        fail_message(std::string("train cuda: ") + what + " needs " + std::to_string(bytes) +
                     " bytes of shared memory, the device allows " + std::to_string(limit) +
                     " (shorter sequences or fewer query heads per kv head)");
    if (bytes > 48 * 1024)
        cuda_check(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(bytes)), what);
}

// grid (T, Hq, B); shared: q (dh) then scores (T).
__global__ void attention_forward_kernel(const float* q, const float* k, const float* v, int64_t T, int64_t Hq,
                                         int64_t Hkv, int64_t dh, float scale, float* o, float* lse) {
    extern __shared__ float shared_mem[];
    __shared__ float reduce[32];
    float* qs = shared_mem;
    float* p = shared_mem + dh;
    const int64_t t = blockIdx.x, h = blockIdx.y, b = blockIdx.z, kvh = h / (Hq / Hkv);
    const int64_t row = (b * T + t) * Hq + h;
    for (int64_t d = threadIdx.x; d < dh; d += blockDim.x) qs[d] = q[row * dh + d];
    __syncthreads();
    // One warp per key: the lanes split the head dimension, so a key row is read coalesced.
    const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, warps = blockDim.x / 32;
    for (int64_t s = warp; s <= t; s += warps) {
        const float* ks = k + ((b * T + s) * Hkv + kvh) * dh;
        float dot = 0.0f;
        for (int64_t d = lane; d < dh; d += 32) dot += qs[d] * ks[d];
        dot = warp_sum(dot);
        if (lane == 0) p[s] = dot * scale;
    }
    __syncthreads();
    float local_max = -INFINITY;
    for (int64_t s = threadIdx.x; s <= t; s += blockDim.x) local_max = fmaxf(local_max, p[s]);
    const float row_max = block_max(local_max, reduce);
    float local_sum = 0.0f;
    for (int64_t s = threadIdx.x; s <= t; s += blockDim.x) {
        p[s] = expf(p[s] - row_max);
        local_sum += p[s];
    }
    const float sum = block_sum(local_sum, reduce);  // ends with a barrier: p[] is complete
    const float inv = 1.0f / sum;
    for (int64_t d = threadIdx.x; d < dh; d += blockDim.x) {
        float acc = 0.0f;
        for (int64_t s = 0; s <= t; ++s) acc += p[s] * v[((b * T + s) * Hkv + kvh) * dh + d];
        o[row * dh + d] = acc * inv;
    }
    if (threadIdx.x == 0) lse[row] = row_max + logf(sum);
}

// D[row] = Σ_d dout·o (the softmax backward's row term).
__global__ void attention_row_dot_kernel(const float* o, const float* dout, int64_t rows, int64_t dh, float* D) {
    const int64_t r = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
    if (r >= rows) return;
    float sum = 0.0f;
    for (int64_t d = 0; d < dh; ++d) sum += o[r * dh + d] * dout[r * dh + d];
    D[r] = sum;
}

// grid (T, Hq, B); shared: q, dout (2·dh) then ds (T).
__global__ void attention_dq_kernel(const float* q, const float* k, const float* v, const float* lse, const float* dout,
                                    const float* D, int64_t T, int64_t Hq, int64_t Hkv, int64_t dh, float scale,
                                    float* dq) {
    extern __shared__ float shared_mem[];
    float* qs = shared_mem;
    float* dos = shared_mem + dh;
    float* ds = shared_mem + 2 * dh;
    const int64_t t = blockIdx.x, h = blockIdx.y, b = blockIdx.z, kvh = h / (Hq / Hkv);
    const int64_t row = (b * T + t) * Hq + h;
    for (int64_t d = threadIdx.x; d < dh; d += blockDim.x) {
        qs[d] = q[row * dh + d];
        dos[d] = dout[row * dh + d];
    }
    __syncthreads();
    const float row_lse = lse[row], row_D = D[row];
    const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, warps = blockDim.x / 32;
    for (int64_t s = warp; s <= t; s += warps) {  // a warp per key, as the forward
        const float* ks = k + ((b * T + s) * Hkv + kvh) * dh;
        const float* vs = v + ((b * T + s) * Hkv + kvh) * dh;
        float dot = 0.0f, dp = 0.0f;
        for (int64_t d = lane; d < dh; d += 32) {
            dot += qs[d] * ks[d];
            dp += dos[d] * vs[d];
        }
        dot = warp_sum(dot);
        dp = warp_sum(dp);
        if (lane == 0) ds[s] = expf(dot * scale - row_lse) * (dp - row_D);
    }
    __syncthreads();
    for (int64_t d = threadIdx.x; d < dh; d += blockDim.x) {
        float acc = 0.0f;
        for (int64_t s = 0; s <= t; ++s) acc += ds[s] * k[((b * T + s) * Hkv + kvh) * dh + d];
        dq[row * dh + d] = scale * acc;
    }
}

// grid (T, Hkv, B) over key rows s; shared: k, v (2·dh) then p and ds for each head of the group (2·group·T).
__global__ void attention_dkv_kernel(const float* q, const float* k, const float* v, const float* lse,
                                     const float* dout, const float* D, int64_t T, int64_t Hq, int64_t Hkv, int64_t dh,
                                     float scale, float* dk, float* dv) {
    extern __shared__ float shared_mem[];
    const int64_t group = Hq / Hkv;
    float* ks = shared_mem;
    float* vs = shared_mem + dh;
    float* p = shared_mem + 2 * dh;           // [group][T]
    float* ds = p + group * T;                 // [group][T]
    const int64_t s = blockIdx.x, kvh = blockIdx.y, b = blockIdx.z;
    const int64_t kv_row = (b * T + s) * Hkv + kvh;
    for (int64_t d = threadIdx.x; d < dh; d += blockDim.x) {
        ks[d] = k[kv_row * dh + d];
        vs[d] = v[kv_row * dh + d];
    }
    __syncthreads();
    const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, warps = blockDim.x / 32;
    for (int64_t work = warp; work < group * (T - s); work += warps) {  // a warp per (head, query row)
        const int64_t g = work / (T - s), t = s + work % (T - s);
        const int64_t row = (b * T + t) * Hq + kvh * group + g;
        float dot = 0.0f, dp = 0.0f;
        for (int64_t d = lane; d < dh; d += 32) {
            dot += q[row * dh + d] * ks[d];
            dp += dout[row * dh + d] * vs[d];
        }
        dot = warp_sum(dot);
        dp = warp_sum(dp);
        if (lane == 0) {
            const float prob = expf(dot * scale - lse[row]);
            p[g * T + t] = prob;
            ds[g * T + t] = prob * (dp - D[row]);
        }
    }
    __syncthreads();
    for (int64_t d = threadIdx.x; d < dh; d += blockDim.x) {
        float acc_k = 0.0f, acc_v = 0.0f;
        for (int64_t g = 0; g < group; ++g)
            for (int64_t t = s; t < T; ++t) {
                const int64_t row = (b * T + t) * Hq + kvh * group + g;
                acc_k += ds[g * T + t] * q[row * dh + d];
                acc_v += p[g * T + t] * dout[row * dh + d];
            }
        dk[kv_row * dh + d] = scale * acc_k;
        dv[kv_row * dh + d] = acc_v;
    }
}

void check_shape(int64_t B, int64_t T, int64_t Hq, int64_t Hkv) {
    if (T > kAttentionMaxT || B > 65535 || Hq > 65535 || Hkv <= 0 || Hq % Hkv != 0)
        fail_message("train cuda: attention: unsupported shape B=" + std::to_string(B) + " T=" + std::to_string(T) +
                     " heads " + std::to_string(Hq) + "/" + std::to_string(Hkv));
}

// The flash kernels round their operands to bf16: only where the products run in bf16 anyway. They read
// and write rows 16 and 8 bytes at a time, so those arrays must be 16-byte aligned (the trainer's are).
bool use_flash(int64_t dh, std::initializer_list<const float*> arrays) {
    for (const float* a : arrays)
        if (reinterpret_cast<uintptr_t>(a) % 16 != 0) return false;
    return gemm_math() == GemmMath::bf16 && flash_attention_supported(dh);
}

}  // namespace

void attention_forward(const float* q, const float* k, const float* v, int64_t B, int64_t T, int64_t Hq, int64_t Hkv,
                       int64_t dh, float scale, float* o, float* lse) {
    if (B * T == 0) return;
    check_shape(B, T, Hq, Hkv);
    if (use_flash(dh, {q, k, v, o})) return attention_flash_forward(q, k, v, B, T, Hq, Hkv, dh, scale, o, lse);
    const size_t shared = size_t(dh + T) * sizeof(float);
    allow_shared(attention_forward_kernel, shared, "attention_forward_kernel");
    attention_forward_kernel<<<dim3(unsigned(T), unsigned(Hq), unsigned(B)), kThreads, shared>>>(q, k, v, T, Hq, Hkv,
                                                                                                 dh, scale, o, lse);
    cuda_check_launch("attention_forward_kernel");
}

void attention_backward(const float* q, const float* k, const float* v, const float* o, const float* lse,
                        const float* dout, int64_t B, int64_t T, int64_t Hq, int64_t Hkv, int64_t dh, float scale,
                        float* dq, float* dk, float* dv, float* workspace) {
    if (B * T == 0) return;
    check_shape(B, T, Hq, Hkv);
    if (use_flash(dh, {q, k, v, o, dout, dq, dk, dv}))
        return attention_flash_backward(q, k, v, o, lse, dout, B, T, Hq, Hkv, dh, scale, dq, dk, dv, workspace);
    const int64_t rows = B * T * Hq;
    attention_row_dot_kernel<<<blocks_for(rows, 128), 128>>>(o, dout, rows, dh, workspace);
    cuda_check_launch("attention_row_dot_kernel");
    const size_t dq_shared = size_t(2 * dh + T) * sizeof(float);
    allow_shared(attention_dq_kernel, dq_shared, "attention_dq_kernel");
    attention_dq_kernel<<<dim3(unsigned(T), unsigned(Hq), unsigned(B)), kThreads, dq_shared>>>(
        q, k, v, lse, dout, workspace, T, Hq, Hkv, dh, scale, dq);
    cuda_check_launch("attention_dq_kernel");
    const size_t dkv_shared = size_t(2 * dh + 2 * (Hq / Hkv) * T) * sizeof(float);
    allow_shared(attention_dkv_kernel, dkv_shared, "attention_dkv_kernel");
    attention_dkv_kernel<<<dim3(unsigned(T), unsigned(Hkv), unsigned(B)), kThreads, dkv_shared>>>(
        q, k, v, lse, dout, workspace, T, Hq, Hkv, dh, scale, dk, dv);
    cuda_check_launch("attention_dkv_kernel");
}

}  // namespace deltabit::train::cuda
