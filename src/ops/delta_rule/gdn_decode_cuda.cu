// The gated DeltaNet decode step in two launches (ops/delta_rule/delta_rule_cuda.h); the prompt path runs conv1d_split_l2
// (conv, split and the q/k norms in one launch, then the state roll), gdn_gates, the chunked delta rule's two
// kernels and gated_rms_norm.
//
// gdn_decode_prepare: one block per channel segment — a q head, a k head or a v head of the conv's
// [q | k | v] channels. Each thread owns its channels: the causal conv over the K−1 stored inputs and the
// new one (fp32 fmaf in tap order, as the reference's double sum), SiLU, and the state roll (no other
// thread touches those channels). q and k segments are then l2-normed over the block; v segments also
// compute their head's gates.
//
// gdn_decode_recurrent: one thread-block cluster per value head; its C blocks split the head's value
// columns (a state column and its output are independent of the others), so C times more SMs stream the
// head's state, which is read once and written once. Within a block a column is split over L lanes of 32
// rows each, as in delta_rule_cuda.cu, every column computed as when one block held the whole head. What
// crosses blocks goes through distributed shared memory: the gated RMS norm's Σo² (each block's sum,
// added by every block in rank order 0..C−1, so the sum is deterministic and the same with or without the
// quantised output), and with out_quantized each int8 group of 128 outputs, which the block holding the
// group's first column gathers into one warp and quantises.
// The split: C is the smallest power of two with C·32 >= value_dim, at most 8 (the portable cluster size;
// powers of two because other cluster sizes have not been tried here); a block takes ceil(value_dim / C)
// columns rounded up to 8 (a 32-byte sector), so the last blocks of a head may hold fewer columns, or
// none; a block has L × its columns threads, rounded up to a warp and at most 512 (then it makes several
// passes). Bonsai-27B (48 heads of value_dim 128, key_dim 128): 4 blocks of 32 columns and 128 threads per
// head, 192 blocks.
//
// The rows forms (a batched step's B sequences) launch the same two kernels once for all rows: the row is
// the grid's y index (the recurrent kernel's clusters stay along x), and the first line of each kernel
// (prepare_row, recurrent_row) moves its arguments to that row — its slice of each [B][...] activation
// array, its window and state from the device table — so a row of the rows form is the single call bit for
// bit. The single calls read no table, so nothing more comes before their first load. The prepare kernel
// is one instance for both (row 0, no table: ptxas gave it 40 registers against 48 before the rows). The
// recurrent kernel takes the move only in its kRowsForm instances: done at run time, it took the 2- and
// 4-lane kernels from 123 and 122 registers to 128, the most 512 threads allow, so the single step keeps
// its own code; the two instances' PTX has the same float operations in the same order.
#include <cooperative_groups.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <string>

#include "backend/cuda_buffer.h"
#include "ops/cuda/cuda_launch.h"
#include "ops/cuda/activation_quant.cuh"
#include "ops/cuda/cuda_math.cuh"
#include "ops/elementwise/elementwise_cuda.h"
#include "ops/delta_rule/delta_rule_cuda.h"
#include "ops/cuda/programmatic_launch.cuh"

namespace deltabit::cuda {

namespace {

namespace cg = cooperative_groups;

constexpr int kPrepareThreads = 256;  // >= kGdnDecodeMaxKeyDim: one q/k channel per thread
constexpr int kRecurrentThreads = 512;  // the most threads of a recurrent block
constexpr int kRowsPerThread = 32;
// The recurrent step's split of a head's value columns over a cluster (the top of this file).
constexpr int64_t kMaxClusterBlocks = 8;     // the portable cluster size
// Bonsai-27B (value_dim 128): 4 blocks of 32 columns per head, 192 blocks for 132 SMs instead of 48.
// Chosen by that count, not yet by a measurement of other widths.
constexpr int64_t kTargetBlockColumns = 32;
constexpr int64_t kColumnAlign = 8;          // 32 bytes: a block's columns start on a sector of a state row
// A block gets at most 32 columns (value_dim <= 256) or ceil(value_dim / 8) rounded up to kColumnAlign,
// so at most 128 for every value_dim check_dims accepts: the size of a block's output arrays.
constexpr int64_t kMaxBlockColumns = 128;
static_assert(kMaxBlockColumns * kMaxClusterBlocks >= kGdnDecodeMaxValueDim && kMaxBlockColumns % kColumnAlign == 0);

struct PrepareArgs {
    // nullptr: one row, conv_in and conv_out below; else a device table of the rows' windows.
    const GdnDecodeRow* rows;
    int64_t first_row;  // the row of grid row 0 (a launch covers at most kMaxGridRows rows)
    const float* mixed;
    const float* b;
    const float* a;
    const float* conv_w;
    const float* conv_in;
    float* conv_out;
    const float* ssm_a;
    const float* dt_bias;
    float* q;
    float* k;
    float* v;
    float* beta;
    float* g;
    int64_t n_key_heads, n_value_heads, key_dim, value_dim, kernel;
    float l2_eps;
};

// The arguments of row `row`: its slice of every [B][...] activation array and, from the table, its conv
// window. The rest of the kernel is the one-row kernel on these (so a row is bit for bit a single call).
__device__ __forceinline__ PrepareArgs prepare_row(PrepareArgs a, int64_t row) {
    if (a.rows != nullptr) {
        a.conv_in = a.rows[row].conv_in;
        a.conv_out = a.rows[row].conv_out;
    }
    const int64_t qk = a.n_key_heads * a.key_dim, v = a.n_value_heads * a.value_dim, hv = a.n_value_heads;
    a.mixed += row * (2 * qk + v);
    a.b += row * hv;
    a.a += row * hv;
    a.q += row * qk;
    a.k += row * qk;
    a.v += row * v;
    a.beta += row * hv;
    a.g += row * hv;
    return a;
}

__global__ void __launch_bounds__(kPrepareThreads) gdn_prepare_kernel(PrepareArgs args) {
    const PrepareArgs a = prepare_row(args, args.first_row + blockIdx.y);
    __shared__ float scratch[32];
    const int64_t seg = blockIdx.x, hk = a.n_key_heads, dk = a.key_dim, dv = a.value_dim, K = a.kernel;
    const int64_t channels = 2 * hk * dk + a.n_value_heads * dv;
    const bool is_v = seg >= 2 * hk;
    const int64_t base = is_v ? 2 * hk * dk + (seg - 2 * hk) * dv : seg * dk;
    const int64_t width = is_v ? dv : dk;
    // The conv weights and the stored window (written by the previous decode step, launches ago:
    // ops/cuda/programmatic_launch.cuh) into L2 while the GEMV before finishes.
    for (int64_t i = threadIdx.x; i < width; i += kPrepareThreads) {
        asm volatile("prefetch.global.L2 [%0];" ::"l"(a.conv_w + (base + i) * K));
        for (int64_t j = 0; j + 1 < K; ++j) asm volatile("prefetch.global.L2 [%0];" ::"l"(a.conv_in + j * channels + base + i));
    }
    wait_for_predecessor();
    allow_dependents();
    float* dst = seg < hk ? a.q + seg * dk : !is_v ? a.k + (seg - hk) * dk : a.v + (seg - 2 * hk) * dv;

    float kept = 0.0f, sum_sq = 0.0f;
    for (int64_t i = threadIdx.x; i < width; i += kPrepareThreads) {
        const int64_t c = base + i;
        const float* w = a.conv_w + c * K;
        const float* window = a.conv_in + c;
        float* rolled = a.conv_out + c;
        const float x = a.mixed[c];
        float acc = 0.0f;
        for (int64_t j = 0; j + 1 < K; ++j) acc = fmaf(w[j], window[j * channels], acc);
        acc = fmaf(w[K - 1], x, acc);
        // In place (window == rolled) too: slot j is written after its old value and before slot j+1's read.
        for (int64_t j = 0; j + 2 < K; ++j) rolled[j * channels] = window[(j + 1) * channels];
        if (K >= 2) rolled[(K - 2) * channels] = x;
        const float y = silu_f(acc);
        if (is_v) {
            dst[i] = y;
        } else {
            kept = y;  // width <= kPrepareThreads: one channel per thread
            sum_sq = fmaf(y, y, sum_sq);
        }
    }
    if (!is_v) {
        // l2_norm as cuda::l2_norm: y / sqrt(Σ y² + eps).
        const float scale = 1.0f / sqrtf(block_sum(sum_sq, scratch) + a.l2_eps);
        if (threadIdx.x < width) dst[threadIdx.x] = kept * scale;
    } else if (threadIdx.x == 0) {
        // gdn_gates as cuda::gdn_gates.
        const int64_t h = seg - 2 * hk;
        a.beta[h] = sigmoid_f(a.b[h]);
        a.g[h] = a.ssm_a[h] * softplus_f(a.a[h] + a.dt_bias[h]);
    }
}

struct RecurrentArgs {
    // The rows form's (kRowsForm): the device table of the rows' states, and the row of grid row 0 (a
    // launch covers at most kMaxGridRows rows). The single call's state is state_in and state_out below.
    const GdnDecodeRow* rows;
    int64_t first_row;
    const float* q;
    const float* k;
    const float* v;
    const float* beta;
    const float* g;
    const float* z;
    const float* norm_w;
    const float* state_in;
    float* state_out;
    float* out;
    int8_t* out_q;                  // nullptr, or out quantised per group of 128 (value_dim a multiple of 128)
    ActivationGroupMeta* out_meta;
    int64_t n_key_heads, n_value_heads, key_dim, value_dim;
    int64_t block_columns;  // value columns per block of a head's cluster (RecurrentSplit)
    bool tiled;
    float q_scale, norm_eps;
};

// As prepare_row: row `row`'s activations and, from the table, its state; out_q stays (the rows forms
// have none).
__device__ __forceinline__ RecurrentArgs recurrent_row(RecurrentArgs a, int64_t row) {
    if (a.rows != nullptr) {
        a.state_in = a.rows[row].state_in;
        a.state_out = a.rows[row].state_out;
    }
    const int64_t qk = a.n_key_heads * a.key_dim, v = a.n_value_heads * a.value_dim, hv = a.n_value_heads;
    a.q += row * qk;
    a.k += row * qk;
    a.v += row * v;
    a.beta += row * hv;
    a.g += row * hv;
    a.z += row * v;
    a.out += row * v;
    return a;
}

template <int L, bool kRowsForm>
__global__ void __launch_bounds__(kRecurrentThreads) gdn_recurrent_kernel(RecurrentArgs args) {
    const RecurrentArgs a = kRowsForm ? recurrent_row(args, args.first_row + blockIdx.y) : args;
    constexpr int kRows = kRowsPerThread * L;  // >= key_dim
    __shared__ float q_s[kRows], k_s[kRows];
    __shared__ float o_s[kMaxBlockColumns];  // this block's outputs before the norm
    __shared__ float y_s[kMaxBlockColumns];  // and after it, read by the cluster's quantising warps
    __shared__ float scratch[32];
    __shared__ float block_sum_sq;  // this block's Σo², read by every block of the cluster
    const cg::cluster_group cluster = cg::this_cluster();
    const int n_ranks = int(cluster.num_blocks()), rank = int(cluster.block_rank());
    const int threads = int(blockDim.x), cols_per_pass = threads / L;
    const int tid = int(threadIdx.x), in_group = tid % L, col_in_pass = tid / L;
    // Clusters along x: the cluster is the head, its blocks consecutive; the row is blockIdx.y.
    const int64_t h = blockIdx.x / unsigned(n_ranks), dk = a.key_dim, dv = a.value_dim, hv = a.n_value_heads;
    const int64_t j_begin = min(dv, rank * a.block_columns), n_cols = min(dv, j_begin + a.block_columns) - j_begin;
    const int64_t kh = a.tiled ? h % a.n_key_heads : h / (hv / a.n_key_heads);
    const float* state_in = a.state_in + h * dk * dv;
    float* state_out = a.state_out + h * dk * dv;  // may be state_in: each element has one owner thread
    // A thread's rows of a column are in_group + L·r: addressed as one pointer plus r strides, because 32
    // offsets (in_group + L·r)·value_dim + j kept live spilled past the 128 registers 512 threads allow.
    const int64_t row_stride = int64_t(L) * dv;
    const auto load_state = [&](int64_t col0, float (&s)[kRowsPerThread]) {
        const int64_t jl = col0 + col_in_pass;
        const float* column = state_in + in_group * dv + j_begin + jl;
#pragma unroll
        for (int r = 0; r < kRowsPerThread; ++r)
            s[r] = jl < n_cols && in_group + L * r < dk ? column[r * row_stride] : 0.0f;
    };
    // The first pass's state is requested before waiting for gdn_prepare: the previous decode step wrote
    // it, launches ago (ops/cuda/programmatic_launch.cuh), so its fetch overlaps the kernel before.
    float s[kRowsPerThread];
    load_state(0, s);
    wait_for_predecessor();
    allow_dependents();
    // What gdn_prepare wrote, requested together before the first use: the gates and the first pass's v
    // with q and k, so the wait costs one L2 round trip, not three (later passes load their v as before:
    // carrying the next pass's v spilled past the 128 registers 512 threads allow).
    const float g_h = a.g[h], beta = a.beta[h];
    const float v_first = col_in_pass < n_cols ? a.v[h * dv + j_begin + col_in_pass] : 0.0f;
    for (int i = tid; i < kRows; i += threads) {
        q_s[i] = i < dk ? a.q[kh * dk + i] : 0.0f;  // rows past key_dim stay zero: they touch nothing
        k_s[i] = i < dk ? a.k[kh * dk + i] : 0.0f;
    }
    __syncthreads();
    const float decay = expf(g_h);

    float sum_sq = 0.0f;
    for (int64_t col0 = 0; col0 < n_cols; col0 += cols_per_pass) {
        const int64_t jl = col0 + col_in_pass, j = j_begin + jl;
        const bool valid = jl < n_cols;
        if (col0 != 0) load_state(col0, s);
        const float v_j = col0 == 0 ? v_first : valid ? a.v[h * dv + j] : 0.0f;
        // The step of delta_rule_cuda.cu for one token: decay, read Sᵀk, write k δᵀ, read Sᵀq.
        float read4[4] = {0.0f, 0.0f, 0.0f, 0.0f};
#pragma unroll
        for (int r = 0; r < kRowsPerThread; ++r) {
            s[r] *= decay;
            read4[r % 4] = fmaf(s[r], k_s[in_group + L * r], read4[r % 4]);
        }
        float read = (read4[0] + read4[1]) + (read4[2] + read4[3]);
#pragma unroll
        for (int offset = L / 2; offset > 0; offset >>= 1) read += __shfl_xor_sync(kFullWarpMask, read, offset);
        const float delta = beta * (v_j - read);
        float o4[4] = {0.0f, 0.0f, 0.0f, 0.0f};
#pragma unroll
        for (int r = 0; r < kRowsPerThread; ++r) {
            s[r] = fmaf(k_s[in_group + L * r], delta, s[r]);
            o4[r % 4] = fmaf(s[r], q_s[in_group + L * r], o4[r % 4]);
        }
        float o = (o4[0] + o4[1]) + (o4[2] + o4[3]);
#pragma unroll
        for (int offset = L / 2; offset > 0; offset >>= 1) o += __shfl_xor_sync(kFullWarpMask, o, offset);
        o *= a.q_scale;
        float* column = state_out + in_group * dv + j;
#pragma unroll
        for (int r = 0; r < kRowsPerThread; ++r)
            if (valid && in_group + L * r < dk) column[r * row_stride] = s[r];
        if (valid && in_group == 0) {
            o_s[jl] = o;
            sum_sq = fmaf(o, o, sum_sq);
        }
    }
    // gated_rms_norm as cuda::gated_rms_norm: w · o · 1/sqrt(mean(o²) + eps) · silu(z). The head's Σo² is
    // the blocks' sums added in rank order by every block, so all blocks use the same float, with or
    // without out_q.
    const float partial = block_sum(sum_sq, scratch);  // its __syncthreads also publish o_s to the block
    if (tid == 0) block_sum_sq = partial;
    cluster.sync();
    float head_sum_sq = 0.0f;
    for (int r = 0; r < n_ranks; ++r) head_sum_sq += *cluster.map_shared_rank(&block_sum_sq, r);
    const float scale = 1.0f / sqrtf(head_sum_sq / float(dv) + a.norm_eps);
    // A block's shared memory must outlive the other blocks' reads of it: every block arrives once it has
    // read what it needs and waits before it leaves. Without out_q that is the partial sums, so the arrival
    // overlaps the outputs; with out_q the arrival comes after y_s is written and publishes it.
    const bool quantized = a.out_q != nullptr;  // the same in every thread: the barrier below is uniform
    if (!quantized) cluster.barrier_arrive();
    for (int64_t jl = tid; jl < n_cols; jl += threads) {
        const int64_t j = j_begin + jl;
        const float y = a.norm_w[j] * o_s[jl] * scale * silu_f(a.z[h * dv + j]);
        a.out[h * dv + j] = y;
        y_s[jl] = y;
    }
    if (quantized) cluster.barrier_arrive();
    cluster.barrier_wait();
    if (!quantized) return;

    // And the output matmul's int8 activations (matmul_cuda.h), here where the head's outputs are: the
    // block holding a group's first column quantises the group with one warp, gathering its 128 outputs
    // from the blocks that hold them (ops/cuda/activation_quant.cuh: the quantiser every kernel shares, so the
    // codes are quantize_activations' bit for bit).
    const int lane = tid & 31, warp = tid >> 5, n_warps = threads >> 5;
    const int64_t group_end = (j_begin + n_cols + kActivationGroup - 1) / kActivationGroup;
    for (int64_t g = (j_begin + kActivationGroup - 1) / kActivationGroup + warp; g < group_end; g += n_warps) {
        float v[4];
#pragma unroll
        for (int i = 0; i < 4; ++i) {
            const int64_t j = g * kActivationGroup + 4 * lane + i;  // < dv: value_dim is a multiple of 128
            const int owner = int(j / a.block_columns);
            v[i] = *cluster.map_shared_rank(&y_s[j - owner * a.block_columns], owner);
        }
        const int64_t first = h * dv + g * kActivationGroup;
        const ActivationGroupMeta meta = quantize_group_by_warp(v, lane, a.out_q + first);
        if (lane == 0) a.out_meta[first / kActivationGroup] = meta;
    }
    cluster.sync();  // the other blocks' y_s are read: they may leave
}

// How gdn_decode_recurrent splits a head's value columns over the blocks of a cluster (see the top).
struct RecurrentSplit {
    int64_t cluster_blocks;  // per head
    int64_t block_columns;   // per block; the last blocks of a head may hold fewer, or none
    int threads;             // per block
};

RecurrentSplit recurrent_split(int64_t value_dim, int lanes) {
    int64_t blocks = 1;
    while (blocks < kMaxClusterBlocks && blocks * kTargetBlockColumns < value_dim) blocks *= 2;
    const int64_t per_block = (value_dim + blocks - 1) / blocks;
    const int64_t columns = (per_block + kColumnAlign - 1) / kColumnAlign * kColumnAlign;
    const int64_t threads = std::min<int64_t>(kRecurrentThreads, (columns * lanes + 31) / 32 * 32);
    return {blocks, columns, int(threads)};
}

std::string dims_text(const GdnDecodeDims& d) {
    return "heads " + std::to_string(d.n_key_heads) + "/" + std::to_string(d.n_value_heads) + ", key_dim " +
           std::to_string(d.key_dim) + " (at most " + std::to_string(kGdnDecodeMaxKeyDim) + "), value_dim " +
           std::to_string(d.value_dim) + " (at most " + std::to_string(kGdnDecodeMaxValueDim) + "), conv kernel " +
           std::to_string(d.conv_kernel) + " (at most " + std::to_string(kGdnDecodeMaxConvKernel) + ")";
}

void check_dims(const GdnDecodeDims& d, const char* op) {
    if (d.n_key_heads <= 0 || d.n_value_heads <= 0 || d.n_value_heads % d.n_key_heads != 0 || d.key_dim <= 0 ||
        d.key_dim > kGdnDecodeMaxKeyDim || d.value_dim <= 0 || d.value_dim > kGdnDecodeMaxValueDim ||
        d.conv_kernel < 1 || d.conv_kernel > kGdnDecodeMaxConvKernel) {
        fail_message(std::string(op) + " (cuda): " + dims_text(d) + " is not a supported shape");
    }
}

// The grid's row dimension (y) holds at most this many rows; more take further launches.
constexpr int64_t kMaxGridRows = kMaxGridBlocks;

void check_rows(int64_t n_rows, const GdnDecodeRow* rows, const char* op) {
    if (n_rows < 0 || (n_rows > 0 && rows == nullptr))
        fail_message(std::string(op) + " (cuda): " + std::to_string(n_rows) + " rows with " +
                     (rows == nullptr ? "no" : "a") + " row table");
}

// Rows [0, n_rows) of `args`, kMaxGridRows a launch. The single call is one row with no table.
void launch_prepare(PrepareArgs args, int64_t n_rows, cudaStream_t stream) {
    const int64_t segments = 2 * args.n_key_heads + args.n_value_heads;
    for (int64_t first = 0; first < n_rows; first += kMaxGridRows) {
        args.first_row = first;
        const int64_t rows = std::min(kMaxGridRows, n_rows - first);
        launch_programmatic(gdn_prepare_kernel, dim3(unsigned(segments), unsigned(rows)), dim3(kPrepareThreads), 0,
                            stream, "gdn_decode_prepare", args);
        cuda_check_launch("gdn_decode_prepare");
    }
}

PrepareArgs prepare_args(const float* mixed, const float* b, const float* a, const float* conv_w, const float* ssm_a,
                         const float* dt_bias, const GdnDecodeDims& dims, float l2_eps, float* q, float* k, float* v,
                         float* beta, float* g) {
    return PrepareArgs{nullptr, 0,       mixed, b, a, conv_w, nullptr, nullptr, ssm_a, dt_bias, q, k, v, beta, g,
                       dims.n_key_heads, dims.n_value_heads, dims.key_dim, dims.value_dim, dims.conv_kernel, l2_eps};
}

// The arguments of gdn_decode_recurrent (its caller has checked dims) without its state and quantised
// output, and the launch's kernel and split.
struct RecurrentLaunch {
    RecurrentArgs args;
    void (*kernel)(RecurrentArgs);
    RecurrentSplit split;
};

template <bool kRowsForm>
RecurrentLaunch recurrent_launch(const float* q, const float* k, const float* v, const float* beta, const float* g,
                                 const float* z, const float* norm_w, float norm_eps, const GdnDecodeDims& dims,
                                 float* out) {
    const int64_t lanes = (dims.key_dim + kRowsPerThread - 1) / kRowsPerThread;
    const int L = lanes <= 1 ? 1 : lanes <= 2 ? 2 : lanes <= 4 ? 4 : 8;
    const auto kernel = L == 1   ? gdn_recurrent_kernel<1, kRowsForm>
                        : L == 2 ? gdn_recurrent_kernel<2, kRowsForm>
                        : L == 4 ? gdn_recurrent_kernel<4, kRowsForm>
                                 : gdn_recurrent_kernel<8, kRowsForm>;
    const RecurrentSplit split = recurrent_split(dims.value_dim, L);
    const int64_t blocks = dims.n_value_heads * split.cluster_blocks;
    if (split.block_columns > kMaxBlockColumns || blocks > int64_t(INT32_MAX))
        fail_message("gdn_decode_recurrent (cuda): " + std::to_string(dims.n_value_heads) + " value heads of " +
                     std::to_string(split.cluster_blocks) + " blocks with " + std::to_string(split.block_columns) +
                     " columns each exceed the grid or the shared memory; " + dims_text(dims));
    const RecurrentArgs args{nullptr,
                             0,
                             q,
                             k,
                             v,
                             beta,
                             g,
                             z,
                             norm_w,
                             nullptr,
                             nullptr,
                             out,
                             nullptr,
                             nullptr,
                             dims.n_key_heads,
                             dims.n_value_heads,
                             dims.key_dim,
                             dims.value_dim,
                             split.block_columns,
                             dims.key_head_map == cpu::KeyHeadMap::tiled,
                             float(1.0 / std::sqrt(double(dims.key_dim))),
                             norm_eps};
    return {args, kernel, split};
}

// Rows [0, n_rows), kMaxGridRows a launch: the heads' clusters along x, the rows along y.
void launch_recurrent(RecurrentLaunch launch, int64_t n_rows, cudaStream_t stream) {
    const RecurrentSplit& split = launch.split;
    const int64_t blocks = launch.args.n_value_heads * split.cluster_blocks;
    for (int64_t first = 0; first < n_rows; first += kMaxGridRows) {
        launch.args.first_row = first;
        const int64_t rows = std::min(kMaxGridRows, n_rows - first);
        launch_programmatic_cluster(launch.kernel, dim3(unsigned(blocks), unsigned(rows)),
                                    dim3(unsigned(split.threads)), dim3(unsigned(split.cluster_blocks)), 0, stream,
                                    "gdn_decode_recurrent", launch.args);
        cuda_check_launch("gdn_decode_recurrent");
    }
}

}  // namespace

void gdn_decode_prepare(const float* mixed, const float* b, const float* a, const float* conv_w, const float* conv_in,
                        float* conv_out, const float* ssm_a, const float* dt_bias, const GdnDecodeDims& dims,
                        float l2_eps, float* q, float* k, float* v, float* beta, float* g, cudaStream_t stream) {
    check_dims(dims, "gdn_decode_prepare");
    PrepareArgs args = prepare_args(mixed, b, a, conv_w, ssm_a, dt_bias, dims, l2_eps, q, k, v, beta, g);
    args.conv_in = conv_in;
    args.conv_out = conv_out;
    launch_prepare(args, 1, stream);
}

void gdn_decode_prepare_rows(const float* mixed, const float* b, const float* a, const float* conv_w,
                             const GdnDecodeRow* rows, int64_t n_rows, const float* ssm_a, const float* dt_bias,
                             const GdnDecodeDims& dims, float l2_eps, float* q, float* k, float* v, float* beta,
                             float* g, cudaStream_t stream) {
    check_dims(dims, "gdn_decode_prepare_rows");
    check_rows(n_rows, rows, "gdn_decode_prepare_rows");
    PrepareArgs args = prepare_args(mixed, b, a, conv_w, ssm_a, dt_bias, dims, l2_eps, q, k, v, beta, g);
    args.rows = rows;
    launch_prepare(args, n_rows, stream);
}

void gdn_decode_recurrent(const float* q, const float* k, const float* v, const float* beta, const float* g,
                          const float* z, const float* norm_w, float norm_eps, const GdnDecodeDims& dims,
                          const float* state_in, float* state_out, float* out, cudaStream_t stream,
                          const QuantizedActivationsView* out_quantized) {
    check_dims(dims, "gdn_decode_recurrent");
    if (out_quantized != nullptr) require_plain_view(*out_quantized, "gdn_decode_recurrent (cuda)");
    if (out_quantized != nullptr &&
        (dims.value_dim % kActivationGroup != 0 || out_quantized->cols != dims.n_value_heads * dims.value_dim))
        fail_message("gdn_decode_recurrent (cuda): a quantised output needs value_dim a multiple of " +
                     std::to_string(kActivationGroup) + " and a view of " +
                     std::to_string(dims.n_value_heads * dims.value_dim) + " inputs; " + dims_text(dims));
    RecurrentLaunch launch = recurrent_launch<false>(q, k, v, beta, g, z, norm_w, norm_eps, dims, out);
    launch.args.state_in = state_in;
    launch.args.state_out = state_out;
    if (out_quantized != nullptr) {
        launch.args.out_q = out_quantized->q;
        launch.args.out_meta = out_quantized->meta;
    }
    launch_recurrent(launch, 1, stream);
}

void gdn_decode_recurrent_rows(const float* q, const float* k, const float* v, const float* beta, const float* g,
                               const float* z, const float* norm_w, float norm_eps, const GdnDecodeDims& dims,
                               const GdnDecodeRow* rows, int64_t n_rows, float* out, cudaStream_t stream) {
    check_dims(dims, "gdn_decode_recurrent_rows");
    check_rows(n_rows, rows, "gdn_decode_recurrent_rows");
    RecurrentLaunch launch = recurrent_launch<true>(q, k, v, beta, g, z, norm_w, norm_eps, dims, out);
    launch.args.rows = rows;
    launch_recurrent(launch, n_rows, stream);
}

}  // namespace deltabit::cuda
