// The gated delta rule for training in its chunked (WY) form, forward and backward, fp32 SIMT. The
// math, step for step, is train/reference_delta_chunked.{h,cpp} (chunks of L = 64 tokens, γ the
// cumulative log-decay inside a chunk, ℓ its last token):
//   A = β_i (k_i·k_j) e^{γ_i−γ_j} (j < i),  T = (I + A)^{-1},  M = (q_i·k_j) e^{γ_i−γ_j} (j ≤ i)
//   V' = T (β ⊙ (V − e^γ ⊙ K S)),  O = e^γ ⊙ Q S + M V',  S ← e^{γ_ℓ} S + Kᵀ (e^{γ_ℓ−γ} ⊙ V')
// The engine's prefill kernel (ops/delta_rule/delta_rule_chunked_cuda.cu) computes the same forward,
// but keeps no per-chunk state, scales q itself and has no batch of sequences; training needs the
// state entering every chunk for the backward, so these kernels are separate.
//
// Five launches. State-free work runs on (chunk, value head, sequence) blocks, all chunks at once:
//   chunk_factors_kernel       T, M, e^γ, e^{γ_ℓ−γ} of every chunk ("factors", kept for the backward)
//   backward_gradients_kernel  every gradient of a chunk, given the states S and dS at its two ends
// The sequential carries run on (tile of 32 value columns, value head, sequence) blocks (the columns of
// S evolve independently: k, q, g, β are shared by a head's columns):
//   forward_walk_kernel        S chunk to chunk; writes O, V' and the state entering every chunk
//   backward_carry_kernel      dS chunk to chunk, backwards; writes dS at every chunk's end and
//                              W = Tᵀ dV' (per token, like v), the two things the gradients need
// then delta_rule_reduce_kernel sums the value heads of a key head into dq and dk (plain stores per
// value head and one pass: no atomics, the result is the same run to run). Every output is written
// once, by the block that owns its token (its chunk) and value head, so each is overwritten (kernels.h's
// "(=)"): the caller zeroes nothing.
// Under bf16 products (gemm.h) at key dim 64 or 128 the forward's two kernels, the carry and the
// gradients kernel are delta_rule_chunked_mma_kernels.cu's tensor-core ones instead, writing the same
// buffers (the reduction stays); these stay the fp32 path and the oracle.
//
// Thread mapping of every [L][32] tile: 256 threads, 4 per token row i = tid / 4, each owning the
// columns c = tid % 4 + 4m (m < 8), so that the 4 lanes of a row read the row's shared operands as one
// broadcast. Shared rows are padded to odd lengths (k rows dk | 1, tiles 33, squares 65) so that the 8
// rows a warp reads at once fall in distinct banks. γ is summed and differenced in double (as the
// engine's prefill kernel): e^{γ_i−γ_j} from fp32 γ would carry |γ|·2⁻²⁴ of relative error, 2e-5 at
// γ = −300.
#include "train/cuda/delta_rule_chunked_common.cuh"
#include "train/cuda/delta_rule_chunked_mma.h"
#include "train/cuda/device_common.cuh"
#include "train/cuda/gemm.h"
#include "train/cuda/kernel_marks.h"
#include "train/cuda/kernels.h"

#include <string>

namespace deltabit::train::cuda {
namespace {

using deltabit::cuda::cuda_check;
using deltabit::cuda::cuda_check_launch;
using namespace delta_chunked;

constexpr int kThreads = 256;
constexpr int kTile = 32;             // value columns per walk block and per pass of the gradients kernel
constexpr int kTileRow = kTile + 1;   // padded [·][32] rows
constexpr int kColumnsPerThread = kTile / 4;
constexpr int kPairsPerThread = L / 4;
static_assert(L == 64 && kThreads == 4 * L && kTile == 32, "the thread mappings assume 4 threads per token row");

// Rows t0 .. t0+L−1 of key head kh from q or k [B·T][Hk][dk] into dst[L][key_row], zeros past len.
__device__ void load_key_rows(const float* src, const Dims& d, int64_t b, int64_t kh, int64_t t0, int len,
                              float* dst) {
    const int kr = d.key_row();
    for (int64_t e = threadIdx.x; e < L * d.dk; e += blockDim.x) {
        const int i = int(e / d.dk), x = int(e % d.dk);
        dst[i * kr + x] = i < len ? src[(d.token(b, t0 + i) * d.Hk + kh) * d.dk + x] : 0.0f;
    }
}

// Columns v0 .. v0+31 of value head h of a [B·T][Hv][dv] tensor into dst[L][kTileRow], zeros outside.
__device__ void load_value_tile(const float* src, const Dims& d, int64_t b, int64_t h, int64_t t0, int len,
                                int64_t v0, float* dst) {
    for (int e = threadIdx.x; e < L * kTile; e += blockDim.x) {
        const int i = e / kTile, c = e % kTile;
        dst[i * kTileRow + c] =
            i < len && v0 + c < d.dv ? src[(d.token(b, t0 + i) * d.Hv + h) * d.dv + v0 + c] : 0.0f;
    }
}

// Columns v0 .. v0+31 of a state [dk][dv] into dst[dk][kTileRow], zeros past dv (and back).
__device__ void load_state_tile(const float* src, const Dims& d, int64_t v0, float* dst) {
    for (int64_t e = threadIdx.x; e < d.dk * kTile; e += blockDim.x) {
        const int64_t x = e / kTile, c = e % kTile;
        dst[x * kTileRow + c] = v0 + c < d.dv ? src[x * d.dv + v0 + c] : 0.0f;
    }
}
__device__ void store_state_tile(const float* src, const Dims& d, int64_t v0, float* dst) {
    for (int64_t e = threadIdx.x; e < d.dk * kTile; e += blockDim.x) {
        const int64_t x = e / kTile, c = e % kTile;
        if (v0 + c < d.dv) dst[x * d.dv + v0 + c] = src[x * kTileRow + c];
    }
}

// A chunk's factors into shared memory: T and M [L][kSquareRow], e and f [L], and β [L] (0 past len).
__device__ void load_factors(const float* factors, const float* beta, const Dims& d, int64_t b, int64_t h,
                             int64_t t0, int len, float* t_mat, float* m_mat, float* e, float* f, float* bt) {
    for (int x = threadIdx.x; x < L * L; x += blockDim.x) {
        t_mat[(x / L) * kSquareRow + x % L] = factors[x];
        m_mat[(x / L) * kSquareRow + x % L] = factors[L * L + x];
    }
    for (int i = threadIdx.x; i < L; i += blockDim.x) {
        e[i] = factors[2 * L * L + i];
        f[i] = factors[2 * L * L + L + i];
        bt[i] = i < len ? beta[d.token(b, t0 + i) * d.Hv + h] : 0.0f;
    }
}

// ---- state-free factors: grid (chunks, Hv, B) ----

__global__ void __launch_bounds__(kThreads)
    chunk_factors_kernel(const float* q, const float* k, const float* g, const float* beta, Dims d, float* factors) {
    extern __shared__ double shared_doubles[];
    double* gamma = shared_doubles;                    // [L]
    float* ks = reinterpret_cast<float*>(gamma + L);  // [L][kr]
    const int kr = d.key_row();
    float* qs = ks + L * kr;
    float* a = qs + L * kr;       // [L][kSquareRow]
    float* t_mat = a + L * kSquareRow;
    float* bt = t_mat + L * kSquareRow;
    const int64_t c = blockIdx.x, h = blockIdx.y, b = blockIdx.z, t0 = c * L, kh = d.key_head(h);
    const int len = chunk_length(d, c);
    load_key_rows(k, d, b, kh, t0, len, ks);
    load_key_rows(q, d, b, kh, t0, len, qs);
    cumulative_decay(g, d, b, h, t0, len, gamma);
    for (int i = threadIdx.x; i < L; i += blockDim.x) bt[i] = i < len ? beta[d.token(b, t0 + i) * d.Hv + h] : 0.0f;
    __syncthreads();
    float* out = factors + d.factor_offset(b, h, c);
    const int i = threadIdx.x / 4, lane4 = threadIdx.x % 4;
    for (int m = 0; m < kPairsPerThread; ++m) {
        const int j = lane4 + 4 * m;
        float kk = 0.0f, qk = 0.0f;
        for (int x = 0; x < d.dk; ++x) {
            kk += ks[i * kr + x] * ks[j * kr + x];
            qk += qs[i * kr + x] * ks[j * kr + x];
        }
        const float decay = j <= i ? float(exp(gamma[i] - gamma[j])) : 0.0f;
        a[i * kSquareRow + j] = j < i ? bt[i] * kk * decay : 0.0f;
        out[L * L + i * L + j] = qk * decay;  // M
    }
    if (threadIdx.x < L) {
        out[2 * L * L + threadIdx.x] = float(exp(gamma[threadIdx.x]));
        out[2 * L * L + L + threadIdx.x] = float(exp(gamma[L - 1] - gamma[threadIdx.x]));
    }
    __syncthreads();
    unit_lower_inverse(a, t_mat);
    __syncthreads();
    for (int x = threadIdx.x; x < L * L; x += blockDim.x) out[x] = t_mat[(x / L) * kSquareRow + x % L];
}

// Shared memory of the walks: k and q rows, T and M, the state tile, one or two value tiles, e, f, β.
size_t walk_shared_bytes(const Dims& d, int value_tiles) {
    return size_t(2 * L * d.key_row() + 2 * L * kSquareRow + d.dk * kTileRow + value_tiles * L * kTileRow + 3 * L) *
           sizeof(float);
}

struct WalkShared {
    float *ks, *qs, *t_mat, *m_mat, *state, *x, *y, *e, *f, *bt;
    __device__ WalkShared(float* base, const Dims& d, int value_tiles) {
        ks = base;
        qs = ks + L * d.key_row();
        t_mat = qs + L * d.key_row();
        m_mat = t_mat + L * kSquareRow;
        state = m_mat + L * kSquareRow;
        x = state + d.dk * kTileRow;
        y = value_tiles > 1 ? x + L * kTileRow : nullptr;
        e = x + value_tiles * L * kTileRow;
        f = e + L;
        bt = f + L;
    }
    __device__ void load_chunk(const float* q, const float* k, const float* beta, const float* factors, const Dims& d,
                               int64_t b, int64_t h, int64_t c, int len) {
        load_key_rows(k, d, b, d.key_head(h), c * L, len, ks);
        load_key_rows(q, d, b, d.key_head(h), c * L, len, qs);
        load_factors(factors + d.factor_offset(b, h, c), beta, d, b, h, c * L, len, t_mat, m_mat, e, f, bt);
    }
};

// The state-tile update of a walk: thread tid owns column tid % 32 of rows tid / 32 + 8r, starting
// from λ·S; the caller adds its chunk's sum over tokens j (one operand per j, reused over the rows).
constexpr int kStateRowsPerThread = int(kDeltaMaxKeyDim) / (kThreads / 32);
struct StateRows {
    float acc[kStateRowsPerThread];
    int col, row0;
    __device__ StateRows(const float* state, const Dims& d, float lambda)
        : col(threadIdx.x % 32), row0(threadIdx.x / 32) {
#pragma unroll
        for (int r = 0; r < kStateRowsPerThread; ++r)
            acc[r] = row(r) < d.dk ? lambda * state[row(r) * kTileRow + col] : 0.0f;
    }
    __device__ int row(int r) const { return row0 + r * (kThreads / 32); }
    __device__ void store(float* state, const Dims& d) const {
#pragma unroll
        for (int r = 0; r < kStateRowsPerThread; ++r)
            if (row(r) < d.dk) state[row(r) * kTileRow + col] = acc[r];
    }
};

// ---- forward walk: grid (value tiles, Hv, B) ----

__global__ void __launch_bounds__(kThreads)
    forward_walk_kernel(const float* q, const float* k, const float* v, const float* beta, const float* factors,
                        Dims d, float* o, float* states, float* v_new) {
    extern __shared__ float shared_mem[];
    WalkShared s(shared_mem, d, 1);
    const int64_t h = blockIdx.y, b = blockIdx.z, v0 = int64_t(blockIdx.x) * kTile;
    const int kr = d.key_row(), i = threadIdx.x / 4, lane4 = threadIdx.x % 4;
    for (int64_t e = threadIdx.x; e < d.dk * kTileRow; e += blockDim.x) s.state[e] = 0.0f;
    for (int64_t c = 0; c < d.chunks; ++c) {
        const int64_t t0 = c * L;
        const int len = chunk_length(d, c);
        __syncthreads();  // the previous chunk is done with all of shared memory
        store_state_tile(s.state, d, v0, states + d.state_offset(b, h, c));
        s.load_chunk(q, k, beta, factors, d, b, h, c, len);
        __syncthreads();
        // K S and Q S; x = β ⊙ (V − e^γ ⊙ K S).
        float ks_row[kColumnsPerThread] = {}, qs_row[kColumnsPerThread] = {};
        for (int x = 0; x < d.dk; ++x) {
            const float kx = s.ks[i * kr + x], qx = s.qs[i * kr + x];
#pragma unroll
            for (int m = 0; m < kColumnsPerThread; ++m) {
                const float sx = s.state[x * kTileRow + lane4 + 4 * m];
                ks_row[m] += kx * sx;
                qs_row[m] += qx * sx;
            }
        }
#pragma unroll
        for (int m = 0; m < kColumnsPerThread; ++m) {
            const int col = lane4 + 4 * m;
            const bool valid = i < len && v0 + col < d.dv;
            const float vi = valid ? v[(d.token(b, t0 + i) * d.Hv + h) * d.dv + v0 + col] : 0.0f;
            s.x[i * kTileRow + col] = s.bt[i] * (vi - s.e[i] * ks_row[m]);
        }
        __syncthreads();
        // V' = T x (T is unit lower triangular).
        float vn[kColumnsPerThread] = {};
        for (int j = 0; j <= i; ++j) {
            const float t_ij = s.t_mat[i * kSquareRow + j];
#pragma unroll
            for (int m = 0; m < kColumnsPerThread; ++m) vn[m] += t_ij * s.x[j * kTileRow + lane4 + 4 * m];
        }
        __syncthreads();
        for (int m = 0; m < kColumnsPerThread; ++m) {
            const int col = lane4 + 4 * m;
            s.x[i * kTileRow + col] = vn[m];
            if (i < len && v0 + col < d.dv) v_new[(d.token(b, t0 + i) * d.Hv + h) * d.dv + v0 + col] = vn[m];
        }
        __syncthreads();
        // O = e^γ ⊙ Q S + M V'.
        float out[kColumnsPerThread];
#pragma unroll
        for (int m = 0; m < kColumnsPerThread; ++m) out[m] = s.e[i] * qs_row[m];
        for (int j = 0; j <= i; ++j) {
            const float m_ij = s.m_mat[i * kSquareRow + j];
#pragma unroll
            for (int m = 0; m < kColumnsPerThread; ++m) out[m] += m_ij * s.x[j * kTileRow + lane4 + 4 * m];
        }
#pragma unroll
        for (int m = 0; m < kColumnsPerThread; ++m) {
            const int col = lane4 + 4 * m;
            if (i < len && v0 + col < d.dv) o[(d.token(b, t0 + i) * d.Hv + h) * d.dv + v0 + col] = out[m];
        }
        // S ← e^{γ_ℓ} S + Kᵀ (f ⊙ V').
        StateRows rows(s.state, d, s.e[L - 1]);
        for (int j = 0; j < len; ++j) {
            const float fx = s.f[j] * s.x[j * kTileRow + rows.col];
#pragma unroll
            for (int r = 0; r < kStateRowsPerThread; ++r)
                if (rows.row(r) < d.dk) rows.acc[r] += s.ks[j * kr + rows.row(r)] * fx;
        }
        rows.store(s.state, d);
    }
}

// ---- backward carry: grid (value tiles, Hv, B) ----
//   dV' = Mᵀ dO + f ⊙ K dS,  W = Tᵀ dV',  dS ← e^{γ_ℓ} dS + Qᵀ (e^γ ⊙ dO) − Kᵀ (e^γ ⊙ β ⊙ W)

__global__ void __launch_bounds__(kThreads)
    backward_carry_kernel(const float* q, const float* k, const float* beta, const float* dout, const float* factors,
                          Dims d, float* dstates, float* w_out) {
    extern __shared__ float shared_mem[];
    WalkShared s(shared_mem, d, 2);  // x: dV', then β ⊙ W; y: dO
    const int64_t h = blockIdx.y, b = blockIdx.z, v0 = int64_t(blockIdx.x) * kTile;
    const int kr = d.key_row(), i = threadIdx.x / 4, lane4 = threadIdx.x % 4;
    for (int64_t e = threadIdx.x; e < d.dk * kTileRow; e += blockDim.x) s.state[e] = 0.0f;
    for (int64_t c = d.chunks - 1; c >= 0; --c) {
        const int64_t t0 = c * L;
        const int len = chunk_length(d, c);
        __syncthreads();
        store_state_tile(s.state, d, v0, dstates + d.state_offset(b, h, c));  // ∂L/∂S at the chunk's end
        s.load_chunk(q, k, beta, factors, d, b, h, c, len);
        load_value_tile(dout, d, b, h, t0, len, v0, s.y);
        __syncthreads();
        float dvn[kColumnsPerThread] = {};
        for (int x = 0; x < d.dk; ++x) {
            const float kx = s.ks[i * kr + x];
#pragma unroll
            for (int m = 0; m < kColumnsPerThread; ++m) dvn[m] += kx * s.state[x * kTileRow + lane4 + 4 * m];
        }
#pragma unroll
        for (int m = 0; m < kColumnsPerThread; ++m) dvn[m] *= s.f[i];
        for (int j = i; j < L; ++j) {
            const float m_ji = s.m_mat[j * kSquareRow + i];
#pragma unroll
            for (int m = 0; m < kColumnsPerThread; ++m) dvn[m] += m_ji * s.y[j * kTileRow + lane4 + 4 * m];
        }
#pragma unroll
        for (int m = 0; m < kColumnsPerThread; ++m) s.x[i * kTileRow + lane4 + 4 * m] = dvn[m];
        __syncthreads();
        float w[kColumnsPerThread] = {};
        for (int j = i; j < L; ++j) {
            const float t_ji = s.t_mat[j * kSquareRow + i];
#pragma unroll
            for (int m = 0; m < kColumnsPerThread; ++m) w[m] += t_ji * s.x[j * kTileRow + lane4 + 4 * m];
        }
        __syncthreads();
        for (int m = 0; m < kColumnsPerThread; ++m) {
            const int col = lane4 + 4 * m;
            s.x[i * kTileRow + col] = s.bt[i] * w[m];
            if (i < len && v0 + col < d.dv) w_out[(d.token(b, t0 + i) * d.Hv + h) * d.dv + v0 + col] = w[m];
        }
        __syncthreads();
        StateRows rows(s.state, d, s.e[L - 1]);
        for (int j = 0; j < len; ++j) {
            const float ey = s.e[j] * s.y[j * kTileRow + rows.col], ex = s.e[j] * s.x[j * kTileRow + rows.col];
#pragma unroll
            for (int r = 0; r < kStateRowsPerThread; ++r)
                if (rows.row(r) < d.dk) rows.acc[r] += s.qs[j * kr + rows.row(r)] * ey - s.ks[j * kr + rows.row(r)] * ex;
        }
        rows.store(s.state, d);
    }
}

// ---- the gradients of every chunk: grid (chunks, Hv, B) ----
// Given S (entering), dS (at the end), V' and W of the chunk, the formulas of
// ref::delta_rule_chunked_backward. Sums over dv are taken 32 columns at a time; per thread the
// accumulators are its row's dq and dk entries (x = lane4 + 4m, kKeyPerLane of them) and its row's
// 16 entries of dM = dO V'ᵀ and dA = −W V'ᵀ (j = lane4 + 4m).

// The value tiles (S, dS [dk][kTileRow]; V', W, dO [L][kTileRow]) are dead once the loop over dv is
// done, and N and the span sums take their place: 92 KB at dk = 64, two blocks an SM.
__host__ __device__ inline int64_t gradients_tile_floats(int64_t dk) {
    const int64_t tiles = 2 * dk * kTileRow + 3 * L * kTileRow, squares = 2 * L * kSquareRow;
    return tiles > squares ? tiles : squares;
}

size_t gradients_shared_bytes(const Dims& d) {
    return size_t(L) * sizeof(double) +
           size_t(2 * L * d.key_row() + gradients_tile_floats(d.dk) + L * kSquareRow + 5 * L + 32) * sizeof(float);
}

// At dk ≤ 64 two blocks share an SM (shared memory allows it; registers capped at 128 for it).
template <int kKeyPerLane>
__global__ void __launch_bounds__(kThreads, kKeyPerLane <= 16 ? 2 : 1)
    backward_gradients_kernel(const float* q, const float* k, const float* v, const float* g, const float* beta,
                              const float* dout, const float* states, const float* v_new, const float* dstates,
                              const float* w_in, Dims d, float* dv_out, float* dq_part, float* dk_part, float* dg_out,
                              float* dbeta_out) {
    extern __shared__ double shared_doubles[];
    double* gamma = shared_doubles;
    const int kr = d.key_row();
    float* ks = reinterpret_cast<float*>(gamma + L);
    float* qs = ks + L * kr;
    float* st = qs + L * kr;            // S tile [dk][kTileRow]
    float* dst = st + d.dk * kTileRow;  // dS tile
    float* vn = dst + d.dk * kTileRow;  // V' tile [L][kTileRow]
    float* wt = vn + L * kTileRow;      // W tile
    float* dot = wt + L * kTileRow;     // dO tile
    float* n_mat = st;                      // after the dv loop: dM ⊙ decay [L][kSquareRow]
    float* span = n_mat + L * kSquareRow;   // dM ⊙ M + dA ⊙ A, then its row prefix sums
    float* p_mat = st + gradients_tile_floats(d.dk);  // dA ⊙ β_i decay
    float* e = p_mat + L * kSquareRow;
    float* f = e + L;
    float* bt = f + L;
    float* from_start = bt + L;
    float* to_end = from_start + L;
    float* reduce = to_end + L;
    const int64_t c = blockIdx.x, h = blockIdx.y, b = blockIdx.z, t0 = c * L, kh = d.key_head(h);
    const int len = chunk_length(d, c);
    const int i = threadIdx.x / 4, lane4 = threadIdx.x % 4;
    load_key_rows(k, d, b, kh, t0, len, ks);
    load_key_rows(q, d, b, kh, t0, len, qs);
    cumulative_decay(g, d, b, h, t0, len, gamma);
    for (int r = threadIdx.x; r < L; r += blockDim.x) bt[r] = r < len ? beta[d.token(b, t0 + r) * d.Hv + h] : 0.0f;
    __syncthreads();
    if (threadIdx.x < L) {
        e[threadIdx.x] = float(exp(gamma[threadIdx.x]));
        f[threadIdx.x] = float(exp(gamma[L - 1] - gamma[threadIdx.x]));
    }
    const float* S = states + d.state_offset(b, h, c);
    const float* dS = dstates + d.state_offset(b, h, c);

    float acc_q[kKeyPerLane], acc_k[kKeyPerLane], dm[kPairsPerThread], da[kPairsPerThread];
#pragma unroll
    for (int m = 0; m < kKeyPerLane; ++m) acc_q[m] = acc_k[m] = 0.0f;
#pragma unroll
    for (int m = 0; m < kPairsPerThread; ++m) dm[m] = da[m] = 0.0f;
    float de = 0.0f, df = 0.0f, dbeta_row = 0.0f, carried = 0.0f;
    for (int64_t v0 = 0; v0 < d.dv; v0 += kTile) {
        __syncthreads();
        load_state_tile(S, d, v0, st);
        load_state_tile(dS, d, v0, dst);
        load_value_tile(v_new, d, b, h, t0, len, v0, vn);
        load_value_tile(w_in, d, b, h, t0, len, v0, wt);
        load_value_tile(dout, d, b, h, t0, len, v0, dot);
        __syncthreads();
        const float ei = e[i], fi = f[i], bi = bt[i];
        float ks_row[kColumnsPerThread] = {}, qs_row[kColumnsPerThread] = {}, kd_row[kColumnsPerThread] = {};
        for (int x = 0; x < d.dk; ++x) {
            const float kx = ks[i * kr + x], qx = qs[i * kr + x];
#pragma unroll
            for (int m = 0; m < kColumnsPerThread; ++m) {
                const float sx = st[x * kTileRow + lane4 + 4 * m], dsx = dst[x * kTileRow + lane4 + 4 * m];
                ks_row[m] += kx * sx;
                qs_row[m] += qx * sx;
                kd_row[m] += kx * dsx;
            }
        }
#pragma unroll
        for (int m = 0; m < kColumnsPerThread; ++m) {
            const int col = lane4 + 4 * m;
            const float ks_sum = ks_row[m], qs_sum = qs_row[m], kd_sum = kd_row[m];
            const bool valid = i < len && v0 + col < d.dv;
            const int64_t at = (d.token(b, t0 + i) * d.Hv + h) * d.dv + v0 + col;
            const float r = (valid ? v[at] : 0.0f) - ei * ks_sum;
            const float w = wt[i * kTileRow + col], dr = bi * w;
            if (valid) dv_out[at] = dr;
            dbeta_row += w * r;
            de += qs_sum * dot[i * kTileRow + col] - ks_sum * dr;
            df += kd_sum * vn[i * kTileRow + col];
        }
        for (int64_t x = threadIdx.x; x < d.dk * kTile; x += blockDim.x)
            carried += st[(x / kTile) * kTileRow + x % kTile] * dst[(x / kTile) * kTileRow + x % kTile];
        for (int col = 0; col < kTile; ++col) {
            const float o_i = dot[i * kTileRow + col], w_i = wt[i * kTileRow + col];
#pragma unroll
            for (int m = 0; m < kPairsPerThread; ++m) {
                const float vj = vn[(lane4 + 4 * m) * kTileRow + col];
                dm[m] += o_i * vj;
                da[m] -= w_i * vj;
            }
        }
        // dq_i += e_i S dO_i;  dk_i += f_i dS V'_i − e_i β_i S W_i.
        for (int col = 0; col < kTile; ++col) {
            const float cq = ei * dot[i * kTileRow + col], cw = ei * bi * wt[i * kTileRow + col],
                        cd = fi * vn[i * kTileRow + col];
#pragma unroll
            for (int m = 0; m < kKeyPerLane; ++m) {
                const int x = lane4 + 4 * m;
                if (x < d.dk) {
                    const float sx = st[x * kTileRow + col];
                    acc_q[m] += cq * sx;
                    acc_k[m] += cd * dst[x * kTileRow + col] - cw * sx;
                }
            }
        }
    }
    de = quad_sum(de);
    df = quad_sum(df);
    dbeta_row = quad_sum(dbeta_row);
    // e^{γ_ℓ} ⟨S, dS⟩. block_sum's first barrier also ends every read of the tiles, which N and the
    // span sums overwrite next.
    carried = e[L - 1] * block_sum(carried, reduce);

    // Through M and A.
    float kk_row[kPairsPerThread] = {}, qk_row[kPairsPerThread] = {};
    for (int x = 0; x < d.dk; ++x) {
        const float kx = ks[i * kr + x], qx = qs[i * kr + x];
#pragma unroll
        for (int m = 0; m < kPairsPerThread; ++m) {
            const float kj = ks[(lane4 + 4 * m) * kr + x];
            kk_row[m] += kx * kj;
            qk_row[m] += qx * kj;
        }
    }
    float dbeta_pairs = 0.0f;
#pragma unroll
    for (int m = 0; m < kPairsPerThread; ++m) {
        const int j = lane4 + 4 * m;
        const float kk = kk_row[m], qk = qk_row[m];
        const float decay = j <= i ? float(exp(gamma[i] - gamma[j])) : 0.0f;
        const float dm_ij = j <= i ? dm[m] : 0.0f, da_ij = j < i ? da[m] : 0.0f;
        n_mat[i * kSquareRow + j] = dm_ij * decay;
        p_mat[i * kSquareRow + j] = da_ij * bt[i] * decay;
        span[i * kSquareRow + j] = dm_ij * qk * decay + da_ij * bt[i] * kk * decay;
        dbeta_pairs += da_ij * kk * decay;
    }
    dbeta_pairs = quad_sum(dbeta_pairs);
    if (lane4 == 0) {
        from_start[i] = e[i] * de;
        to_end[i] = f[i] * df;
    }
    __syncthreads();
    // dq_i += Σ_j N_ij k_j;  dk_i += Σ_j N_ji q_j + (P_ij + P_ji) k_j.
    for (int j = 0; j < L; ++j) {
        const float n_ij = n_mat[i * kSquareRow + j], n_ji = n_mat[j * kSquareRow + i],
                    p_sym = p_mat[i * kSquareRow + j] + p_mat[j * kSquareRow + i];
#pragma unroll
        for (int m = 0; m < kKeyPerLane; ++m) {
            const int x = lane4 + 4 * m;
            if (x < d.dk) {
                const float kx = ks[j * kr + x];
                acc_q[m] += n_ij * kx;
                acc_k[m] += n_ji * qs[j * kr + x] + p_sym * kx;
            }
        }
    }
#pragma unroll
    for (int m = 0; m < kKeyPerLane; ++m) {
        const int x = lane4 + 4 * m;
        if (x < d.dk && i < len) {
            const int64_t at = (d.token(b, t0 + i) * d.Hv + h) * d.dk + x;
            dq_part[at] = acc_q[m];
            dk_part[at] = acc_k[m];
        }
    }
    if (lane4 == 0 && i < len) dbeta_out[d.token(b, t0 + i) * d.Hv + h] = dbeta_row + dbeta_pairs;
    // dg_m = e^{γ_ℓ}⟨S, dS⟩ + Σ_{i≥m} e_i de_i + Σ_{i<m} f_i df_i + Σ_{i≥m>j} span_ij: each decay adds to
    // the g it spans, so no term cancels another (reference_delta_chunked.cpp says why that matters).
    if (threadIdx.x < L) {
        float run = 0.0f;
        for (int j = 0; j < L; ++j) {
            const float x = span[threadIdx.x * kSquareRow + j];
            span[threadIdx.x * kSquareRow + j] = run;  // Σ_{j' < j} span_ij'
            run += x;
        }
    }
    __syncthreads();
    if (threadIdx.x < len) {
        const int m = threadIdx.x;
        float sum = carried;
        for (int r = m; r < L; ++r) sum += from_start[r] + span[r * kSquareRow + m];
        for (int r = 0; r < m; ++r) sum += to_end[r];
        dg_out[d.token(b, t0 + m) * d.Hv + h] = sum;
    }
}

// dq[n][kh][x] = Σ over the value heads h of key head kh of dq_part[n][h][x]; the same for dk.
__global__ void delta_rule_reduce_kernel(const float* dq_part, const float* dk_part, Dims d, float* dq, float* dk_out) {
    const int64_t group = d.Hv / d.Hk, total = d.B * d.T * d.Hk * d.dk;
    for (int64_t e = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; e < total; e += int64_t(gridDim.x) * blockDim.x) {
        const int64_t x = e % d.dk, kh = (e / d.dk) % d.Hk, n = e / (d.dk * d.Hk);
        float sq = 0.0f, sk = 0.0f;
        for (int64_t h = kh * group; h < (kh + 1) * group; ++h) {
            sq += dq_part[(n * d.Hv + h) * d.dk + x];
            sk += dk_part[(n * d.Hv + h) * d.dk + x];
        }
        dq[e] = sq;
        dk_out[e] = sk;
    }
}

size_t factors_shared_bytes(const Dims& d) {
    return size_t(L) * sizeof(double) + size_t(2 * L * d.key_row() + 2 * L * kSquareRow + L) * sizeof(float);
}

// The backward's scratch.
struct BackwardScratch {
    float *dstates, *w, *dq_part, *dk_part;
    BackwardScratch(float* base, const Dims& d)
        : dstates(base), w(dstates + d.B * d.Hv * d.chunks * d.dk * d.dv), dq_part(w + d.B * d.T * d.Hv * d.dv),
          dk_part(dq_part + d.B * d.T * d.Hv * d.dk) {}
};

dim3 chunk_grid(const Dims& d) { return dim3(unsigned(d.chunks), unsigned(d.Hv), unsigned(d.B)); }
dim3 tile_grid(const Dims& d) { return dim3(unsigned((d.dv + kTile - 1) / kTile), unsigned(d.Hv), unsigned(d.B)); }

}  // namespace

int64_t delta_rule_saved_floats(int64_t B, int64_t T, int64_t Hv, int64_t dk, int64_t dv) {
    const int64_t chunks = (T + L - 1) / L;
    return B * Hv * chunks * (dk * dv + kFactorFloats) + B * T * Hv * dv;
}

int64_t delta_rule_scratch_floats(int64_t B, int64_t T, int64_t Hv, int64_t dk, int64_t dv) {
    const int64_t chunks = (T + L - 1) / L;
    return B * Hv * chunks * dk * dv + B * T * Hv * (dv + 2 * dk);
}

void delta_rule_forward(const float* q, const float* k, const float* v, const float* g, const float* beta, int64_t B,
                        int64_t T, int64_t Hk, int64_t Hv, int64_t dk, int64_t dv, float* o, float* saved) {
    if (B * T == 0) return;
    // bf16 products (training): the tensor-core forward, which rounds only the products' operands.
    if (gemm_math() == GemmMath::bf16 && delta_rule_mma_supported(dk))
        return delta_rule_mma_forward(q, k, v, g, beta, B, T, Hk, Hv, dk, dv, o, saved);
    const Dims d = dims_of(B, T, Hk, Hv, dk, dv);
    check_shape(d);
    const Saved s(saved, d);
    const size_t factor_bytes = factors_shared_bytes(d), walk_bytes = walk_shared_bytes(d, 1);
    allow_shared(chunk_factors_kernel, factor_bytes, d, "chunk_factors_kernel");
    chunk_factors_kernel<<<chunk_grid(d), kThreads, factor_bytes>>>(q, k, g, beta, d, s.factors);
    cuda_check_launch("chunk_factors_kernel");
    mark_kernel("delta: chunk_factors_kernel");
    allow_shared(forward_walk_kernel, walk_bytes, d, "forward_walk_kernel");
    forward_walk_kernel<<<tile_grid(d), kThreads, walk_bytes>>>(q, k, v, beta, s.factors, d, o, s.states, s.v_new);
    cuda_check_launch("forward_walk_kernel");
    mark_kernel("delta: forward_walk_kernel");
}

void delta_rule_backward(const float* q, const float* k, const float* v, const float* g, const float* beta,
                         const float* dout, const float* saved, int64_t B, int64_t T, int64_t Hk, int64_t Hv,
                         int64_t dk, int64_t dv, float* dq, float* dk_out, float* dv_out, float* dg, float* dbeta,
                         float* scratch) {
    if (B * T == 0) return;
    const Dims d = dims_of(B, T, Hk, Hv, dk, dv);
    check_shape(d);
    const Saved s(const_cast<float*>(saved), d);
    const BackwardScratch x(scratch, d);
    const size_t carry_bytes = walk_shared_bytes(d, 2), gradient_bytes = gradients_shared_bytes(d);
    if (gemm_math() == GemmMath::bf16 && delta_rule_mma_supported(dk)) {
        delta_rule_mma_backward_carry(q, k, beta, dout, s.factors, B, T, Hk, Hv, dk, dv, x.dstates, x.w);
        delta_rule_mma_backward_gradients(q, k, v, g, beta, dout, s.states, s.v_new, x.dstates, x.w, B, T, Hk, Hv, dk,
                                          dv, dv_out, x.dq_part, x.dk_part, dg, dbeta);
    } else {
        allow_shared(backward_carry_kernel, carry_bytes, d, "backward_carry_kernel");
        backward_carry_kernel<<<tile_grid(d), kThreads, carry_bytes>>>(q, k, beta, dout, s.factors, d, x.dstates, x.w);
        cuda_check_launch("backward_carry_kernel");
        mark_kernel("delta: backward_carry_kernel");
        // Accumulators per thread: ⌈dk/4⌉ keys of its row; two sizes keep the registers small at dk ≤ 64.
        auto gradients = dk <= 64 ? backward_gradients_kernel<16> : backward_gradients_kernel<32>;
        allow_shared(gradients, gradient_bytes, d, "backward_gradients_kernel");
        gradients<<<chunk_grid(d), kThreads, gradient_bytes>>>(q, k, v, g, beta, dout, s.states, s.v_new, x.dstates,
                                                               x.w, d, dv_out, x.dq_part, x.dk_part, dg, dbeta);
        cuda_check_launch("backward_gradients_kernel");
        mark_kernel("delta: backward_gradients_kernel");
    }
    delta_rule_reduce_kernel<<<blocks_for(B * T * Hk * dk), kBlock>>>(x.dq_part, x.dk_part, d, dq, dk_out);
    cuda_check_launch("delta_rule_reduce_kernel");
    mark_kernel("delta: delta_rule_reduce_kernel");
}

}  // namespace deltabit::train::cuda
