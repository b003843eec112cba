// CUDA gated delta rule, recurrent form (ops/delta_rule.h). It also serves prefill for now: there is no
// chunked (WY) kernel yet.
//
// Why columns: S ∈ R^{d_k × d_v} and every step (decay, read Sᵀk, write k δᵀ, output Sᵀq) acts on each
// column S[:, j] separately — column j needs only k, q, beta, g and v_j. So a block owns one value
// head's group of columns, a column is split over L lanes (L = d_k/32 rounded up to a power of two,
// ≤ 8) holding 32 rows each in registers (row i = lane_in_group + L·r), and the two dot products of a
// step are one per-thread sum plus log2(L) shuffles. The state is read from memory once per call and
// written once at the end; per token the block stages k, q (d_k each), its v slice and the two gates
// in shared memory, kChunk tokens per stage, double-buffered so the next stage's loads are in flight
// during this stage's math.
//
// Numerics: fp32 state and arithmetic (the reference computes each token in double and rounds the
// state to fp32).
#include <cmath>
#include <string>

#include "backend/cuda_buffer.h"
#include "ops/cuda/cuda_launch.h"
#include "ops/delta_rule/delta_rule_cuda.h"

namespace deltabit::cuda {

namespace {

constexpr int kThreads = 128;
constexpr int kRowsPerThread = 32;

struct DeltaRuleArgs {
    const float* q;
    const float* k;
    const float* v;
    const float* g;
    const float* beta;
    float* state;
    float* out;
    int64_t n_tokens, n_key_heads, n_value_heads, key_dim, value_dim;
    bool tiled;
    float q_scale;
};

// Tokens staged per shared-memory stage: the loads of a whole stage are in flight together while the
// previous stage is computed. Measured on an H200, T = 4096 on Bonsai-27B's heads (16/48, 128 × 128):
// one token per stage 4.46 ms, eight per stage (with four partial sums per dot) 3.36 ms — about
// 0.8 µs per token, bound by the per-token dependent arithmetic and barrier, not by loads. Prefill
// needs the chunked (WY) form to go faster; this kernel is the decode path.
constexpr int kChunk = 8;

template <int L>
__global__ void __launch_bounds__(kThreads) delta_rule_recurrent_kernel(DeltaRuleArgs a) {
    constexpr int kCols = kThreads / L;               // columns per block
    constexpr int kRowsCap = kRowsPerThread * L;      // rows a column can hold (>= key_dim)
    constexpr int kLoadCap = 2 * kRowsCap + kCols + 2;
    constexpr int kStage = (kLoadCap + kThreads - 1) / kThreads;
    __shared__ float k_s[2][kChunk][kRowsCap], q_s[2][kChunk][kRowsCap], v_s[2][kChunk][kCols];
    __shared__ float gates_s[2][kChunk][2];

    const int tid = int(threadIdx.x);
    const int in_group = tid % L;  // which rows of the column
    const int col_in_block = tid / L;
    const int64_t dk = a.key_dim, dv = a.value_dim, hv = a.n_value_heads;
    const int64_t col_blocks = (dv + kCols - 1) / kCols;
    const int n_load = int(2 * dk) + kCols + 2;  // per token

    // Rows past key_dim stay zero in every buffer (loads only write rows < key_dim), so they neither
    // read nor write the state.
    for (int i = tid; i < 2 * kChunk * kRowsCap; i += kThreads) {
        (&k_s[0][0][0])[i] = 0.0f;
        (&q_s[0][0][0])[i] = 0.0f;
    }
    __syncthreads();

    for (int64_t item = blockIdx.x; item < hv * col_blocks; item += gridDim.x) {
        const int64_t h = item / col_blocks;
        const int64_t col0 = (item % col_blocks) * kCols;
        const int64_t kh = a.tiled ? h % a.n_key_heads : h / (hv / a.n_key_heads);
        const int64_t j = col0 + col_in_block;
        const bool col_valid = j < dv;

        // Element e of token t's staging list: k[0..dk) | q[0..dk) | v[col0 .. col0+kCols) | g | beta.
        auto fetch = [&](int64_t t, int e) -> float {
            if (e < dk) return a.k[(t * a.n_key_heads + kh) * dk + e];
            if (e < 2 * dk) return a.q[(t * a.n_key_heads + kh) * dk + (e - dk)];
            const int c = e - int(2 * dk);
            if (c < kCols) return col0 + c < dv ? a.v[(t * hv + h) * dv + col0 + c] : 0.0f;
            return c == kCols ? a.g[t * hv + h] : a.beta[t * hv + h];
        };
        auto store = [&](int buf, int tt, int e, float value) {
            if (e < dk) k_s[buf][tt][e] = value;
            else if (e < 2 * dk) q_s[buf][tt][e - dk] = value;
            else if (e - 2 * dk < kCols) v_s[buf][tt][e - 2 * dk] = value;
            else gates_s[buf][tt][e - 2 * dk - kCols] = value;
        };

        float s[kRowsPerThread];
        float* state_col = a.state + h * dk * dv + j;
#pragma unroll
        for (int r = 0; r < kRowsPerThread; ++r) {
            const int64_t i = in_group + int64_t(L) * r;
            s[r] = col_valid && i < dk ? state_col[i * dv] : 0.0f;
        }

        for (int tt = 0; tt < kChunk && tt < a.n_tokens; ++tt) {
            for (int e = tid; e < n_load; e += kThreads) store(0, tt, e, fetch(tt, e));
        }
        __syncthreads();

        for (int64_t t0 = 0; t0 < a.n_tokens; t0 += kChunk) {
            const int buf = int((t0 / kChunk) & 1);
            const int64_t next0 = t0 + kChunk;
            float staged[kChunk][kStage];
#pragma unroll
            for (int tt = 0; tt < kChunk; ++tt) {
#pragma unroll
                for (int x = 0; x < kStage; ++x) {
                    const int e = tid + x * kThreads;
                    staged[tt][x] = next0 + tt < a.n_tokens && e < n_load ? fetch(next0 + tt, e) : 0.0f;
                }
            }

            for (int tt = 0; tt < kChunk && t0 + tt < a.n_tokens; ++tt) {
                const float* k_t = k_s[buf][tt];
                const float* q_t = q_s[buf][tt];
                const float decay = expf(gates_s[buf][tt][0]);
                const float beta = gates_s[buf][tt][1];
                // Four partial sums shorten the dependent fmaf chains from 32 to 8.
                float read4[4] = {0.0f, 0.0f, 0.0f, 0.0f};  // (Sᵀ k)_j, this thread's rows
#pragma unroll
                for (int r = 0; r < kRowsPerThread; ++r) {
                    s[r] *= decay;
                    read4[r % 4] = fmaf(s[r], k_t[in_group + L * r], read4[r % 4]);
                }
                float read = (read4[0] + read4[1]) + (read4[2] + read4[3]);
#pragma unroll
                for (int offset = L / 2; offset > 0; offset >>= 1) read += __shfl_xor_sync(0xffffffffu, read, offset);
                const float delta = beta * (v_s[buf][tt][col_in_block] - read);
                float o4[4] = {0.0f, 0.0f, 0.0f, 0.0f};
#pragma unroll
                for (int r = 0; r < kRowsPerThread; ++r) {
                    s[r] = fmaf(k_t[in_group + L * r], delta, s[r]);
                    o4[r % 4] = fmaf(s[r], q_t[in_group + L * r], o4[r % 4]);
                }
                float o = (o4[0] + o4[1]) + (o4[2] + o4[3]);
#pragma unroll
                for (int offset = L / 2; offset > 0; offset >>= 1) o += __shfl_xor_sync(0xffffffffu, o, offset);
                if (in_group == 0 && col_valid) a.out[((t0 + tt) * hv + h) * dv + j] = o * a.q_scale;
            }

            if (next0 < a.n_tokens) {
#pragma unroll
                for (int tt = 0; tt < kChunk; ++tt) {
#pragma unroll
                    for (int x = 0; x < kStage; ++x) {
                        const int e = tid + x * kThreads;
                        if (next0 + tt < a.n_tokens && e < n_load) store(buf ^ 1, tt, e, staged[tt][x]);
                    }
                }
            }
            __syncthreads();
        }

#pragma unroll
        for (int r = 0; r < kRowsPerThread; ++r) {
            const int64_t i = in_group + int64_t(L) * r;
            if (col_valid && i < dk) state_col[i * dv] = s[r];
        }
        __syncthreads();  // buffer 0 is refilled by the next item
    }
}

}  // namespace

void gated_delta_rule_recurrent(const float* q, const float* k, const float* v, const float* g, const float* beta,
                                const DeltaRuleDims& dims, float* state, float* out, cudaStream_t stream) {
    if (dims.key_dim <= 0 || dims.key_dim > kDeltaRuleMaxKeyDim || dims.value_dim <= 0 || dims.n_key_heads <= 0 ||
        dims.n_value_heads % dims.n_key_heads != 0) {
        fail_message("gated_delta_rule_recurrent (cuda): key_dim " + std::to_string(dims.key_dim) + " (at most " +
                     std::to_string(kDeltaRuleMaxKeyDim) + "), value_dim " + std::to_string(dims.value_dim) +
                     ", heads " + std::to_string(dims.n_key_heads) + "/" + std::to_string(dims.n_value_heads) +
                     " is not a supported shape");
    }
    if (dims.n_tokens <= 0 || dims.n_value_heads <= 0) return;
    const DeltaRuleArgs args{q,
                             k,
                             v,
                             g,
                             beta,
                             state,
                             out,
                             dims.n_tokens,
                             dims.n_key_heads,
                             dims.n_value_heads,
                             dims.key_dim,
                             dims.value_dim,
                             dims.key_head_map == KeyHeadMap::tiled,
                             float(1.0 / std::sqrt(double(dims.key_dim)))};
    auto launch = [&](auto kernel, int lanes) {
        const int64_t cols = kThreads / lanes;
        const int64_t items = dims.n_value_heads * ((dims.value_dim + cols - 1) / cols);
        kernel<<<grid_blocks(items), kThreads, 0, stream>>>(args);
    };
    const int64_t lanes_needed = (dims.key_dim + kRowsPerThread - 1) / kRowsPerThread;
    if (lanes_needed <= 1) launch(delta_rule_recurrent_kernel<1>, 1);
    else if (lanes_needed <= 2) launch(delta_rule_recurrent_kernel<2>, 2);
    else if (lanes_needed <= 4) launch(delta_rule_recurrent_kernel<4>, 4);
    else launch(delta_rule_recurrent_kernel<8>, 8);
    cuda_check_launch("gated_delta_rule_recurrent");
}

}  // namespace deltabit::cuda
