// The gated delta rule for training, forward and backward, as a sequential scan over time per
// (sequence, value head, tile of W state columns). Columns of the state S[dk][dv] evolve independently
// (k, q, g, β are shared by the columns of a head), so a block owns W columns and one thread owns one
// element S[i][j] in a register: a head is spread over dv/W blocks, and the sums over i (Sᵀk, Sᵀq)
// are warp shuffles plus one shared-memory round. The sums over j (dq, dk, and dβ, dg) span the
// tiles: each block writes its partial sums, and a second kernel adds the tiles (and the value heads
// that share a key head) — plain stores and one pass, not atomics on shared addresses.
//
// Per step t (reference_ops.h): S ← e^g S; δ = β(v − Sᵀk); S ← S + kδᵀ; o = Sᵀq. The backward walks t
// downwards with dS = ∂L/∂S_t, P = S_{t−1}, u = v − e^g Pᵀk, du = β·dδ:
//   dS += q doᵀ;  dδ = dSᵀk;  dv = du;  dβ = Σ dδ·u;  dq = S_t do;  dk = dS δ − e^g P du;
//   d(e^g) = Σ P⊙dS − Σ (Pᵀk)⊙du;  dg = e^g·d(e^g);  dS ← e^g (dS − k duᵀ).
// P is needed at every step: the forward checkpoints S every kDeltaCheckpoint steps (a "chunk" below);
// the backward replays one chunk from its checkpoint, keeping each thread's S_{t−1} for the chunk's
// steps in shared memory (its own slots), then walks the chunk back. Each chunk's inputs are
// staged in shared memory first (ChunkInputs), so a step waits on no global load.
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

// The replay keeps kDeltaCheckpoint states of dk·W floats per block in shared memory, within this
// budget; blocks of at most kMaxThreads threads (dk·W) keep the barriers of the sequential steps cheap
// and let several blocks share an SM.
constexpr int64_t kReplayBytes = 64 * 1024;
constexpr int64_t kMaxThreads = 256;

struct Tiling {
    int W;        // state columns per block: a power of two ≤ 32 (row sums are shuffles over W lanes)
    int threads;  // dk·W rounded up to whole warps
    int tiles;    // blocks per (sequence, head)
};

Tiling tiling(int64_t dk, int64_t dv) {
    int W = 32;
    while (W > 1 && (W / 2 >= dv || int64_t(W) * dk > kMaxThreads || kDeltaCheckpoint * dk * W * 4 > kReplayBytes))
        W /= 2;
    return {W, int((dk * W + 31) / 32 * 32), int((dv + W - 1) / W)};
}

// Σ over the rows i of a column (lanes j = lane % W of every warp, then the warps): every thread gets
// its column's total. `shared` holds warps·W·2 floats. Two values at once to share the barriers.
__device__ inline float2 column_sum2(float a, float b, int W, float* shared) {
    for (int offset = W; offset < 32; offset <<= 1) {
        a += __shfl_xor_sync(0xffffffffu, a, offset);
        b += __shfl_xor_sync(0xffffffffu, b, offset);
    }
    const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, warps = blockDim.x / 32;
    if (lane < W) {
        shared[(warp * W + lane) * 2] = a;
        shared[(warp * W + lane) * 2 + 1] = b;
    }
    __syncthreads();
    const int jl = lane % W;
    float2 total = make_float2(0.0f, 0.0f);
    for (int w = 0; w < warps; ++w) {
        total.x += shared[(w * W + jl) * 2];
        total.y += shared[(w * W + jl) * 2 + 1];
    }
    __syncthreads();
    return total;
}

// Σ over the W columns of a row (adjacent lanes): every lane of the row gets the total.
__device__ inline float row_sum(float x, int W) {
    for (int offset = 1; offset < W; offset <<= 1) x += __shfl_xor_sync(0xffffffffu, x, offset);
    return x;
}

// A chunk's inputs in shared memory, loaded together at the chunk's start so that the sequential steps
// read shared memory instead of waiting on a global load each: k, q [chunk][dk], g, β [chunk], and the
// tile's columns of v (and dout) [chunk][W].
struct ChunkInputs {
    float *k, *q, *g, *beta, *v, *dout;
    static int64_t floats(int64_t dk, int W) { return kDeltaCheckpoint * (2 * dk + 2 + 2 * W); }
    __device__ ChunkInputs(float* base, int64_t dk, int W)
        : k(base), q(base + kDeltaCheckpoint * dk), g(q + kDeltaCheckpoint * dk), beta(g + kDeltaCheckpoint),
          v(beta + kDeltaCheckpoint), dout(v + kDeltaCheckpoint * W) {}
    // Steps t0..t1−1 of sequence b, head h (key head kh), columns tile·W..; the caller syncs after.
    __device__ void load(const float* k_in, const float* q_in, const float* g_in, const float* beta_in,
                         const float* v_in, const float* dout_in, int64_t b, int64_t T, int64_t t0, int64_t t1,
                         int64_t Hk, int64_t Hv, int64_t h, int64_t kh, int64_t dk, int64_t dv, int64_t tile,
                         int W) {
        const int64_t steps = t1 - t0;
        for (int64_t e = threadIdx.x; e < steps * dk; e += blockDim.x) {
            const int64_t row = b * T + t0 + e / dk;
            k[e] = k_in[(row * Hk + kh) * dk + e % dk];
            q[e] = q_in[(row * Hk + kh) * dk + e % dk];
        }
        for (int64_t e = threadIdx.x; e < steps; e += blockDim.x) {
            g[e] = g_in[(b * T + t0 + e) * Hv + h];
            beta[e] = beta_in[(b * T + t0 + e) * Hv + h];
        }
        for (int64_t e = threadIdx.x; e < steps * W; e += blockDim.x) {
            const int64_t row = b * T + t0 + e / W, j = tile * W + e % W;
            v[e] = j < dv ? v_in[(row * Hv + h) * dv + j] : 0.0f;
            if (dout_in != nullptr) dout[e] = j < dv ? dout_in[(row * Hv + h) * dv + j] : 0.0f;
        }
    }
};

// grid (tiles, Hv, B). Thread tid = i·W + jl holds S[i][tile·W + jl].
__global__ void delta_rule_forward_kernel(const float* q, const float* k, const float* v, const float* g,
                                          const float* beta, int64_t T, int64_t Hk, int64_t Hv, int64_t dk,
                                          int64_t dv, int W, float* o, float* chunk_states) {
    extern __shared__ float shared_mem[];
    float* reduce = shared_mem;  // [warps][W][2]
    ChunkInputs in(reduce + (blockDim.x / 32) * W * 2, dk, W);
    const int64_t tile = blockIdx.x, h = blockIdx.y, b = blockIdx.z, kh = h / (Hv / Hk);
    const int64_t i = threadIdx.x / W, jl = threadIdx.x % W, j = tile * W + jl;
    const bool active = i < dk && j < dv;
    const int64_t n_chunks = (T + kDeltaCheckpoint - 1) / kDeltaCheckpoint;
    float* states = chunk_states + (b * Hv + h) * n_chunks * dk * dv;
    float* kq = in.dout;  // the forward has no dout: that space holds k·q of each step
    float S = 0.0f;
    for (int64_t c = 0; c < n_chunks; ++c) {
        const int64_t t0 = c * kDeltaCheckpoint, t1 = min(T, t0 + kDeltaCheckpoint);
        if (active) states[c * dk * dv + i * dv + j] = S;
        __syncthreads();  // the previous chunk's steps are done with `in`
        in.load(k, q, g, beta, v, nullptr, b, T, t0, t1, Hk, Hv, h, kh, dk, dv, tile, W);
        __syncthreads();
        for (int64_t s = threadIdx.x; s < t1 - t0; s += blockDim.x) {
            float dot = 0.0f;
            for (int64_t e = 0; e < dk; ++e) dot += in.k[s * dk + e] * in.q[s * dk + e];
            kq[s] = dot;
        }
        __syncthreads();
        // o = S_tᵀq = e^g·S_{t−1}ᵀq + (k·q)·δ: one reduction over the rows per step, for Sᵀk and Sᵀq together.
        for (int64_t s = 0; s < t1 - t0; ++s) {
            const float ki = active ? in.k[s * dk + i] : 0.0f;
            const float qi = active ? in.q[s * dk + i] : 0.0f;
            const float eg = expf(in.g[s]), bt = in.beta[s];
            const float2 sums = column_sum2(S * ki, S * qi, W, reduce);
            const float delta = bt * (in.v[s * W + jl] - eg * sums.x);
            S = eg * S + ki * delta;
            if (active && i == 0) o[((b * T + t0 + s) * Hv + h) * dv + j] = eg * sums.y + kq[s] * delta;
        }
    }
}

// grid (tiles, Hv, B). Partial sums per (value head, tile): dq_part, dk_part [Hv·tiles][B·T][dk];
// dbeta_part, dg_part [Hv·tiles][B·T].
__global__ void delta_rule_backward_kernel(const float* q, const float* k, const float* v, const float* g,
                                           const float* beta, const float* dout, const float* chunk_states, int64_t T,
                                           int64_t Hk, int64_t Hv, int64_t dk, int64_t dv, int W, float* dv_out,
                                           float* dq_part, float* dk_part, float* dbeta_part, float* dg_part) {
    extern __shared__ float shared_mem[];
    const int warps = blockDim.x / 32;
    float* reduce = shared_mem;                                  // [warps][W][2]
    float* saved = reduce + warps * W * 2;                       // [chunk][threads]: each thread's S_{t−1}
    float* saved_delta = saved + kDeltaCheckpoint * blockDim.x;       // [chunk][W]
    float* saved_pk = saved_delta + kDeltaCheckpoint * W;             // [chunk][W]: Pᵀk
    ChunkInputs in(saved_pk + kDeltaCheckpoint * W, dk, W);
    const int64_t tile = blockIdx.x, h = blockIdx.y, b = blockIdx.z, kh = h / (Hv / Hk);
    const int64_t tiles = gridDim.x;
    const int64_t i = threadIdx.x / W, jl = threadIdx.x % W, j = tile * W + jl;
    const bool active = i < dk && j < dv;
    const int64_t n_chunks = (T + kDeltaCheckpoint - 1) / kDeltaCheckpoint;
    const float* states = chunk_states + (b * Hv + h) * n_chunks * dk * dv;
    const int64_t part = h * tiles + tile, N = int64_t(gridDim.z) * T;
    float dS = 0.0f;
    for (int64_t c = n_chunks - 1; c >= 0; --c) {
        const int64_t t0 = c * kDeltaCheckpoint, t1 = min(T, t0 + kDeltaCheckpoint);
        __syncthreads();  // the previous chunk's walk is done with `in` and `saved`
        in.load(k, q, g, beta, v, dout, b, T, t0, t1, Hk, Hv, h, kh, dk, dv, tile, W);
        __syncthreads();
        // Replay the chunk from its checkpoint, keeping S_{t−1}, δ and Pᵀk of every step.
        float S = active ? states[c * dk * dv + i * dv + j] : 0.0f;
        for (int64_t s = 0; s < t1 - t0; ++s) {
            saved[s * blockDim.x + threadIdx.x] = S;
            const float ki = active ? in.k[s * dk + i] : 0.0f;
            const float eg = expf(in.g[s]), bt = in.beta[s];
            const float kv = column_sum2(S * ki, 0.0f, W, reduce).x;
            const float delta = bt * (in.v[s * W + jl] - eg * kv);
            if (i == 0) {
                saved_delta[s * W + jl] = delta;
                saved_pk[s * W + jl] = kv;
            }
            S = eg * S + ki * delta;
        }
        __syncthreads();
        // Walk it back.
        for (int64_t s = t1 - t0 - 1; s >= 0; --s) {
            const int64_t row = b * T + t0 + s;
            const float P = saved[s * blockDim.x + threadIdx.x];
            const float delta = saved_delta[s * W + jl], pk = saved_pk[s * W + jl];
            const float ki = active ? in.k[s * dk + i] : 0.0f;
            const float qi = active ? in.q[s * dk + i] : 0.0f;
            const float doj = active ? in.dout[s * W + jl] : 0.0f;
            const float eg = expf(in.g[s]), bt = in.beta[s];
            const float d = dS + qi * doj;
            const float2 sums = column_sum2(d * ki, P * d, W, reduce);
            const float ddelta = sums.x, p_ds = sums.y;
            const float u = in.v[s * W + jl] - eg * pk, du = bt * ddelta;
            if (active && i == 0) dv_out[(row * Hv + h) * dv + j] += du;
            // Per-column terms of dβ and d(e^g), summed over the tile's columns by row 0's lanes (warp 0).
            if (threadIdx.x < 32) {
                const bool column = i == 0 && j < dv;
                const float sum_beta = row_sum(column ? ddelta * u : 0.0f, W);
                const float sum_eg = row_sum(column ? p_ds - pk * du : 0.0f, W);
                if (threadIdx.x == 0) {
                    dbeta_part[part * N + row] = sum_beta;
                    dg_part[part * N + row] = eg * sum_eg;
                }
            }
            const float dq_i = row_sum(active ? (eg * P + ki * delta) * doj : 0.0f, W);
            const float dk_i = row_sum(active ? d * delta - eg * P * du : 0.0f, W);
            if (jl == 0 && i < dk) {
                dq_part[(part * N + row) * dk + i] = dq_i;
                dk_part[(part * N + row) * dk + i] = dk_i;
            }
            dS = eg * (d - ki * du);
        }
    }
}

// dq[n][kh][i] += Σ over the value heads of key head kh and their tiles; dbeta, dg [n][h] += Σ tiles.
__global__ void delta_rule_reduce_kernel(const float* dq_part, const float* dk_part, const float* dbeta_part,
                                         const float* dg_part, int64_t N, int64_t Hk, int64_t Hv, int64_t dk,
                                         int64_t tiles, float* dq, float* dk_out, float* dbeta, float* dg) {
    const int64_t group = Hv / Hk;
    for (int64_t e = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; e < N * Hk * dk;
         e += int64_t(gridDim.x) * blockDim.x) {
        const int64_t i = e % dk, kh = (e / dk) % Hk, n = e / (dk * Hk);
        float sq = 0.0f, sk = 0.0f;
        for (int64_t h = kh * group; h < (kh + 1) * group; ++h)
            for (int64_t tile = 0; tile < tiles; ++tile) {
                const int64_t at = ((h * tiles + tile) * N + n) * dk + i;
                sq += dq_part[at];
                sk += dk_part[at];
            }
        dq[e] += sq;
        dk_out[e] += sk;
    }
    for (int64_t e = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; e < N * Hv; e += int64_t(gridDim.x) * blockDim.x) {
        const int64_t h = e % Hv, n = e / Hv;
        float sb = 0.0f, sg = 0.0f;
        for (int64_t tile = 0; tile < tiles; ++tile) {
            sb += dbeta_part[(h * tiles + tile) * N + n];
            sg += dg_part[(h * tiles + tile) * N + n];
        }
        dbeta[e] += sb;
        dg[e] += sg;
    }
}

void check_shape(int64_t B, int64_t Hk, int64_t Hv, int64_t dk, int64_t dv) {
    if (B > 65535 || Hv > 65535 || Hk <= 0 || Hv % Hk != 0 || dk > 1024 || dk <= 0 || dv <= 0)
        fail_message("train cuda: delta rule: unsupported shape B=" + std::to_string(B) + " heads " +
                     std::to_string(Hk) + "/" + std::to_string(Hv) + " dims " + std::to_string(dk) + "/" +
                     std::to_string(dv));
}

size_t forward_shared_bytes(const Tiling& tl, int64_t dk) {
    return size_t((tl.threads / 32) * tl.W * 2 + ChunkInputs::floats(dk, tl.W)) * sizeof(float);
}

size_t backward_shared_bytes(const Tiling& tl, int64_t dk) {
    return size_t((tl.threads / 32) * tl.W * 2 + kDeltaCheckpoint * tl.threads + 2 * kDeltaCheckpoint * tl.W +
                  ChunkInputs::floats(dk, tl.W)) *
           sizeof(float);
}

template <typename Kernel>
void allow_shared(Kernel kernel, size_t bytes, const char* what) {
    if (bytes > 48 * 1024)
        cuda_check(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(bytes)), what);
}

}  // namespace

int64_t delta_rule_chunk_states_floats(int64_t B, int64_t T, int64_t Hv, int64_t dk, int64_t dv) {
    return B * Hv * ((T + kDeltaCheckpoint - 1) / kDeltaCheckpoint) * dk * dv;
}

int64_t delta_rule_scratch_floats(int64_t B, int64_t T, int64_t Hv, int64_t dk, int64_t dv) {
    const int64_t parts = Hv * tiling(dk, dv).tiles, N = B * T;
    return 2 * parts * N * dk + 2 * parts * N;
}

void delta_rule_forward(const float* q, const float* k, const float* v, const float* g, const float* beta, int64_t B,
                        int64_t T, int64_t Hk, int64_t Hv, int64_t dk, int64_t dv, float* o, float* chunk_states) {
    if (B * T == 0) return;
    check_shape(B, Hk, Hv, dk, dv);
    const Tiling tl = tiling(dk, dv);
    const size_t shared = forward_shared_bytes(tl, dk);
    allow_shared(delta_rule_forward_kernel, shared, "delta_rule_forward_kernel shared memory");
    delta_rule_forward_kernel<<<dim3(unsigned(tl.tiles), unsigned(Hv), unsigned(B)), tl.threads, shared>>>(
        q, k, v, g, beta, T, Hk, Hv, dk, dv, tl.W, o, chunk_states);
    cuda_check_launch("delta_rule_forward_kernel");
}

void delta_rule_backward(const float* q, const float* k, const float* v, const float* g, const float* beta,
                         const float* dout, const float* chunk_states, int64_t B, int64_t T, int64_t Hk, int64_t Hv,
                         int64_t dk, int64_t dv, float* dq, float* dk_out, float* dv_out, float* dg, float* dbeta,
                         float* scratch) {
    if (B * T == 0) return;
    check_shape(B, Hk, Hv, dk, dv);
    const Tiling tl = tiling(dk, dv);
    const int64_t N = B * T, parts = Hv * tl.tiles;
    float* dq_part = scratch;
    float* dk_part = dq_part + parts * N * dk;
    float* dbeta_part = dk_part + parts * N * dk;
    float* dg_part = dbeta_part + parts * N;
    const size_t shared = backward_shared_bytes(tl, dk);
    allow_shared(delta_rule_backward_kernel, shared, "delta_rule_backward_kernel shared memory");
    delta_rule_backward_kernel<<<dim3(unsigned(tl.tiles), unsigned(Hv), unsigned(B)), tl.threads, shared>>>(
        q, k, v, g, beta, dout, chunk_states, T, Hk, Hv, dk, dv, tl.W, dv_out, dq_part, dk_part, dbeta_part, dg_part);
    cuda_check_launch("delta_rule_backward_kernel");
    delta_rule_reduce_kernel<<<blocks_for(N * std::max(Hk * dk, Hv)), kBlock>>>(
        dq_part, dk_part, dbeta_part, dg_part, N, Hk, Hv, dk, tl.tiles, dq, dk_out, dbeta, dg);
    cuda_check_launch("delta_rule_reduce_kernel");
}

}  // namespace deltabit::train::cuda
