// The gated delta rule for training, forward and backward, as a sequential scan per (sequence, value
// head): the state S[dk][dv] lives in shared memory (rows padded to dv + 1 floats so that both a
// column walk by thread j and a row walk by thread i are free of bank conflicts), thread j owns
// column j in the column phases and thread i row i in the row phases.
//
// Per step t (reference_ops.h): S ← e^g S; δ = β(v − Sᵀk); S ← S + kδᵀ; o = Sᵀq. The backward walks t
// downwards with dS = ∂L/∂S_t, P = S_{t−1}, u = v − e^g Pᵀk, du = β·dδ:
//   dS += q doᵀ;  dδ = dSᵀk;  dv = du;  dβ = Σ dδ·u;  dq = S_t do;  dk = dS δ − e^g P du;
//   d(e^g) = Σ P⊙dS − Σ (Pᵀk)⊙du;  dg = e^g·d(e^g);  dS ← e^g (dS − k duᵀ).
// P is needed at every step: the forward checkpoints S at the start of each chunk of kDeltaChunk steps,
// and the backward replays one chunk from its checkpoint into a scratch of kDeltaChunk states.
//
// This is the recurrent form on the GPU with chunk-sized checkpoints, not yet the chunked (WY,
// tensor-core) form of DESIGN.md §9: it is exact in fp32 and memory-bounded, and it is what the
// chunked kernels will be checked against on the device.
#include "train/cuda/device_common.cuh"
#include "train/cuda/kernels.h"

#include <string>

namespace deltabit::train::cuda {
namespace {

using deltabit::cuda::cuda_check;
using deltabit::cuda::cuda_check_launch;

int threads_for(int64_t dk, int64_t dv) {
    const int64_t widest = dk > dv ? dk : dv;
    return int((widest + 31) / 32 * 32);
}

__global__ void delta_rule_forward_kernel(const float* q, const float* k, const float* v, const float* g,
                                          const float* beta, int64_t T, int64_t Hk, int64_t Hv, int64_t dk,
                                          int64_t dv, float* o, float* chunk_states) {
    extern __shared__ float shared_mem[];
    const int64_t stride = dv + 1;
    float* S = shared_mem;               // [dk][dv + 1]
    float* ks = S + dk * stride;         // [dk]
    float* qs = ks + dk;                 // [dk]
    const int64_t h = blockIdx.x, b = blockIdx.y, kh = h / (Hv / Hk);
    const int64_t j = threadIdx.x;
    const int64_t n_chunks = (T + kDeltaChunk - 1) / kDeltaChunk;
    float* states = chunk_states + (b * Hv + h) * n_chunks * dk * dv;
    for (int64_t e = threadIdx.x; e < dk * stride; e += blockDim.x) S[e] = 0.0f;
    __syncthreads();
    for (int64_t t = 0; t < T; ++t) {
        if (t % kDeltaChunk == 0) {
            float* saved = states + (t / kDeltaChunk) * dk * dv;
            for (int64_t e = threadIdx.x; e < dk * dv; e += blockDim.x) saved[e] = S[(e / dv) * stride + e % dv];
        }
        const int64_t row = b * T + t;
        for (int64_t i = threadIdx.x; i < dk; i += blockDim.x) {
            ks[i] = k[(row * Hk + kh) * dk + i];
            qs[i] = q[(row * Hk + kh) * dk + i];
        }
        __syncthreads();
        if (j < dv) {
            const float eg = expf(g[row * Hv + h]), bt = beta[row * Hv + h];
            float kv = 0.0f;
            for (int64_t i = 0; i < dk; ++i) kv += S[i * stride + j] * ks[i];
            const float delta = bt * (v[(row * Hv + h) * dv + j] - eg * kv);
            float acc = 0.0f;
            for (int64_t i = 0; i < dk; ++i) {
                const float s = eg * S[i * stride + j] + ks[i] * delta;
                S[i * stride + j] = s;
                acc += s * qs[i];
            }
            o[(row * Hv + h) * dv + j] = acc;
        }
        __syncthreads();
    }
}

__global__ void delta_rule_backward_kernel(const float* q, const float* k, const float* v, const float* g,
                                           const float* beta, const float* dout, const float* chunk_states, int64_t T,
                                           int64_t Hk, int64_t Hv, int64_t dk, int64_t dv, float* dq, float* dk_out,
                                           float* dv_out, float* dg, float* dbeta, float* scratch) {
    extern __shared__ float shared_mem[];
    __shared__ float reduce[32];
    const int64_t stride = dv + 1;
    float* P = shared_mem;               // [dk][dv + 1]: S_{t−1}, or the running state while replaying
    float* dS = P + dk * stride;         // [dk][dv + 1]
    float* ks = dS + dk * stride;        // [dk]
    float* qs = ks + dk;                 // [dk]
    float* dos = qs + dk;                // [dv]
    float* deltas = dos + dv;            // [dv]
    float* dus = deltas + dv;            // [dv]
    const int64_t h = blockIdx.x, b = blockIdx.y, kh = h / (Hv / Hk);
    const int64_t j = threadIdx.x, i_row = threadIdx.x;
    const int64_t n_chunks = (T + kDeltaChunk - 1) / kDeltaChunk;
    const float* states = chunk_states + (b * Hv + h) * n_chunks * dk * dv;
    float* saved_states = scratch + (b * Hv + h) * kDeltaChunk * (dk * dv + dv);  // [chunk][dk][dv]
    float* saved_deltas = saved_states + kDeltaChunk * dk * dv;                   // [chunk][dv]
    for (int64_t e = threadIdx.x; e < dk * stride; e += blockDim.x) dS[e] = 0.0f;
    for (int64_t c = n_chunks - 1; c >= 0; --c) {
        const int64_t t0 = c * kDeltaChunk, t1 = min(T, t0 + kDeltaChunk);
        __syncthreads();
        for (int64_t e = threadIdx.x; e < dk * dv; e += blockDim.x)
            P[(e / dv) * stride + e % dv] = states[c * dk * dv + e];
        __syncthreads();
        // Replay the chunk, keeping the state before each step and each step's δ.
        for (int64_t t = t0; t < t1; ++t) {
            const int64_t row = b * T + t;
            float* before = saved_states + (t - t0) * dk * dv;
            for (int64_t e = threadIdx.x; e < dk * dv; e += blockDim.x) before[e] = P[(e / dv) * stride + e % dv];
            for (int64_t i = threadIdx.x; i < dk; i += blockDim.x) ks[i] = k[(row * Hk + kh) * dk + i];
            __syncthreads();
            if (j < dv) {
                const float eg = expf(g[row * Hv + h]), bt = beta[row * Hv + h];
                float kv = 0.0f;
                for (int64_t i = 0; i < dk; ++i) kv += P[i * stride + j] * ks[i];
                const float delta = bt * (v[(row * Hv + h) * dv + j] - eg * kv);
                saved_deltas[(t - t0) * dv + j] = delta;
                for (int64_t i = 0; i < dk; ++i) P[i * stride + j] = eg * P[i * stride + j] + ks[i] * delta;
            }
            __syncthreads();
        }
        // Walk the chunk backwards.
        for (int64_t t = t1 - 1; t >= t0; --t) {
            const int64_t row = b * T + t;
            const float* before = saved_states + (t - t0) * dk * dv;
            for (int64_t e = threadIdx.x; e < dk * dv; e += blockDim.x) P[(e / dv) * stride + e % dv] = before[e];
            for (int64_t i = threadIdx.x; i < dk; i += blockDim.x) {
                ks[i] = k[(row * Hk + kh) * dk + i];
                qs[i] = q[(row * Hk + kh) * dk + i];
            }
            for (int64_t jj = threadIdx.x; jj < dv; jj += blockDim.x) {
                dos[jj] = dout[(row * Hv + h) * dv + jj];
                deltas[jj] = saved_deltas[(t - t0) * dv + jj];
            }
            __syncthreads();
            const float eg = expf(g[row * Hv + h]), bt = beta[row * Hv + h];
            float part_beta = 0.0f, part_eg = 0.0f;
            if (j < dv) {
                float ddelta = 0.0f, pk = 0.0f, p_ds = 0.0f;
                for (int64_t i = 0; i < dk; ++i) {
                    const float d = dS[i * stride + j] + qs[i] * dos[j];
                    dS[i * stride + j] = d;
                    ddelta += d * ks[i];
                    pk += P[i * stride + j] * ks[i];
                    p_ds += P[i * stride + j] * d;
                }
                const float u = v[(row * Hv + h) * dv + j] - eg * pk;
                const float du = bt * ddelta;
                dv_out[(row * Hv + h) * dv + j] += du;
                dus[j] = du;
                part_beta = ddelta * u;
                part_eg = p_ds - pk * du;
            }
            const float sum_beta = block_sum(part_beta, reduce);  // barriers inside: dus and dS are complete
            const float sum_eg = block_sum(part_eg, reduce);
            if (i_row < dk) {
                float dq_i = 0.0f, dk_i = 0.0f, p_du = 0.0f;
                for (int64_t jj = 0; jj < dv; ++jj) {
                    const float p = P[i_row * stride + jj];
                    dq_i += (eg * p + ks[i_row] * deltas[jj]) * dos[jj];
                    dk_i += dS[i_row * stride + jj] * deltas[jj];
                    p_du += p * dus[jj];
                }
                atomicAdd(dq + (row * Hk + kh) * dk + i_row, dq_i);
                atomicAdd(dk_out + (row * Hk + kh) * dk + i_row, dk_i - eg * p_du);
            }
            if (threadIdx.x == 0) {
                dbeta[row * Hv + h] += sum_beta;
                dg[row * Hv + h] += eg * sum_eg;
            }
            __syncthreads();
            if (j < dv)
                for (int64_t i = 0; i < dk; ++i) dS[i * stride + j] = eg * (dS[i * stride + j] - ks[i] * dus[j]);
            __syncthreads();
        }
    }
}

template <typename Kernel>
void allow_shared(Kernel kernel, size_t bytes, const char* what) {
    const int limit = deltabit::cuda::device_attribute(cudaDevAttrMaxSharedMemoryPerBlockOptin, "shared memory limit");
    if (bytes > size_t(limit))
        fail_message(std::string("train cuda: ") + what + " needs " + std::to_string(bytes) +
                     " bytes of shared memory for its state, the device allows " + std::to_string(limit));
    if (bytes > 48 * 1024)
        cuda_check(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(bytes)), what);
}

void check_shape(int64_t B, int64_t Hk, int64_t Hv, int64_t dk, int64_t dv) {
    if (B > 65535 || Hv > 65535 || Hk <= 0 || Hv % Hk != 0 || threads_for(dk, dv) > 1024)
        fail_message("train cuda: delta rule: unsupported shape B=" + std::to_string(B) + " heads " +
                     std::to_string(Hk) + "/" + std::to_string(Hv) + " dims " + std::to_string(dk) + "/" +
                     std::to_string(dv));
}

}  // namespace

int64_t delta_rule_chunk_states_floats(int64_t B, int64_t T, int64_t Hv, int64_t dk, int64_t dv) {
    return B * Hv * ((T + kDeltaChunk - 1) / kDeltaChunk) * dk * dv;
}

int64_t delta_rule_scratch_floats(int64_t B, int64_t Hv, int64_t dk, int64_t dv) {
    return B * Hv * kDeltaChunk * (dk * dv + dv);
}

void delta_rule_forward(const float* q, const float* k, const float* v, const float* g, const float* beta, int64_t B,
                        int64_t T, int64_t Hk, int64_t Hv, int64_t dk, int64_t dv, float* o, float* chunk_states) {
    if (B * T == 0) return;
    check_shape(B, Hk, Hv, dk, dv);
    const size_t shared = size_t(dk * (dv + 1) + 2 * dk) * sizeof(float);
    allow_shared(delta_rule_forward_kernel, shared, "delta_rule_forward_kernel");
    delta_rule_forward_kernel<<<dim3(unsigned(Hv), unsigned(B)), threads_for(dk, dv), shared>>>(
        q, k, v, g, beta, T, Hk, Hv, dk, dv, o, chunk_states);
    cuda_check_launch("delta_rule_forward_kernel");
}

void delta_rule_backward(const float* q, const float* k, const float* v, const float* g, const float* beta,
                         const float* dout, const float* chunk_states, int64_t B, int64_t T, int64_t Hk, int64_t Hv,
                         int64_t dk, int64_t dv, float* dq, float* dk_out, float* dv_out, float* dg, float* dbeta,
                         float* scratch) {
    if (B * T == 0) return;
    check_shape(B, Hk, Hv, dk, dv);
    const size_t shared = size_t(2 * dk * (dv + 1) + 2 * dk + 3 * dv) * sizeof(float);
    allow_shared(delta_rule_backward_kernel, shared, "delta_rule_backward_kernel");
    delta_rule_backward_kernel<<<dim3(unsigned(Hv), unsigned(B)), threads_for(dk, dv), shared>>>(
        q, k, v, g, beta, dout, chunk_states, T, Hk, Hv, dk, dv, dq, dk_out, dv_out, dg, dbeta, scratch);
    cuda_check_launch("delta_rule_backward_kernel");
}

}  // namespace deltabit::train::cuda
