// Split-K attention over a KV cache, its combine, and the decode step's attention prologue
// (ops/attention/attention_cuda.h).
//
// Why split-K with all query heads per block: at batch 1 the attention of one layer is a stream over
// the K and V rows, ~2·n·H_kv·d elements, with almost no arithmetic. The one-block-per-(query, head)
// kernel (attention_cuda.cu) runs only n_head blocks and reads every kv row group = n_head/n_kv_head
// times; here block (token, kv head, split) reads a slice of rows once and serves the group's query
// heads from registers, and there are enough splits to fill the card at any depth.
//
// Inside a block, three variants (ops/attention/attention_cuda.h, AttentionDecodeVariant): staged_tiles, the default
// for plain f16/f32 caches, in attention_split_staged_cuda.cu; dims_across_lanes and keys_across_lanes
// in ops/attention/attention_split_register.cuh (compiled per cache element in attention_split_{f32,f16,kivi4}_cuda.cu).
// All write one partial (m, l, acc[d]) per query head and split; the combine kernel here merges the
// splits in a fixed order (deterministic).
#include <cuda_fp16.h>

#include <algorithm>
#include <cmath>
#include <string>

#include "backend/cuda_buffer.h"
#include "core/env_switch.h"
#include "ops/attention/attention_split.cuh"
#include "ops/cuda/cuda_math.cuh"
#include "ops/elementwise/elementwise_cuda.h"
#include "ops/attention/attention_cuda.h"
#include "ops/attention/kv_cuda.h"
#include "ops/cuda/programmatic_launch.cuh"

namespace deltabit::cuda {

namespace {

// With several tokens (the prompt path) the tokens themselves fill the grid.
constexpr int64_t kTargetBlocks = 512;
constexpr int64_t kMaxGridZ = 65535;
constexpr float kLog2e = 1.4426950408889634f;

struct CombineArgs {
    const float* part_acc;
    const float* part_ml;
    const float* gate;
    const int32_t* n_past;
    float* out;
    int64_t n_tokens, n_head, head_dim, splits, gate_head_stride;
    const AttentionRow* rows;  // the rows form (attention_cached_rows): row blockIdx.z from this table
    int64_t row_scratch;       // the rows form: floats of scratch per row
};

// The arguments block (·, ·, r) of a rows launch combines with: row r's, as a single call over that row has
// them (its scratch region, split count and position; its gate and output rows). The table is written by no
// kernel, so it may be read before the wait.
__device__ __forceinline__ CombineArgs combine_row_args(const CombineArgs& a) {
    const int64_t r = blockIdx.z;
    const AttentionRow& row = a.rows[r];
    CombineArgs out = a;
    out.part_acc = a.part_acc + r * a.row_scratch;
    out.splits = row.splits;
    out.part_ml = out.part_acc + out.splits * a.n_head * a.head_dim;
    out.n_past = &row.position;
    out.gate = a.gate != nullptr ? a.gate + r * a.n_head * a.gate_head_stride : nullptr;
    out.out = a.out + r * a.n_head * a.head_dim;
    return out;
}

// Block (query head, 32 dims, token): lane = dim, warp w sums splits w, w + 8, ... (loads of several
// splits in flight per thread), then warp 0 adds the 8 warp sums in order — deterministic. One thread
// per dim walking all splits was latency-bound: 128 dependent-looking L2 round trips per thread.
constexpr int kCombineWarps = 8;
constexpr int kCombineThreads = 32 * kCombineWarps;

__device__ __forceinline__ void combine(const CombineArgs& a) {
    wait_for_predecessor();  // ops/cuda/programmatic_launch.cuh: nothing of the step is read before this
    allow_dependents();
    __shared__ float s_weight[kMaxSplits];
    __shared__ float s_part[kCombineWarps][32];
    __shared__ float s_inv_l;
    const int64_t chunks = (a.head_dim + 31) / 32;
    const int64_t h = blockIdx.x / chunks, d = a.head_dim;
    const int lane = int(threadIdx.x) & 31, warp = int(threadIdx.x) >> 5;
    const int64_t i = (blockIdx.x % chunks) * 32 + lane;
    const int64_t n_past = *a.n_past;
    const int64_t total = n_past + a.n_tokens;
    const int64_t per_split = keys_per_split(total, a.splits);
    const int64_t active = (total + per_split - 1) / per_split;
    for (int64_t t = blockIdx.y; t < a.n_tokens; t += gridDim.y) {
        const float* ml = a.part_ml + (t * a.n_head + h) * a.splits * 2;
        if (warp == 0) {
            // Split 0 always holds key 0, visible to every token, so the max is finite.
            float m_all = -INFINITY;
            for (int64_t s = lane; s < active; s += 32) m_all = fmaxf(m_all, ml[2 * s]);
#pragma unroll
            for (int offset = 16; offset > 0; offset >>= 1)
                m_all = fmaxf(m_all, __shfl_xor_sync(kFullWarpMask, m_all, offset));
            float l_part = 0.0f;
            for (int64_t s = lane; s < active; s += 32) {
                const float w = exp2f(ml[2 * s] - m_all);  // 0 for a split that saw no key (m = −inf)
                s_weight[s] = w;
                l_part = fmaf(ml[2 * s + 1], w, l_part);
            }
            const float l_all = warp_sum(l_part);
            if (lane == 0) s_inv_l = 1.0f / l_all;
        }
        __syncthreads();
        const float* acc = a.part_acc + (t * a.n_head + h) * a.splits * d;
        float o = 0.0f;
        if (i < d) {
#pragma unroll 4
            for (int64_t s = warp; s < active; s += kCombineWarps) o = fmaf(acc[s * d + i], s_weight[s], o);
        }
        s_part[warp][lane] = o;
        __syncthreads();
        if (warp == 0 && i < d) {
            o = 0.0f;
#pragma unroll
            for (int w = 0; w < kCombineWarps; ++w) o += s_part[w][lane];
            o *= s_inv_l;
            if (a.gate != nullptr) o *= sigmoid_f(a.gate[(t * a.n_head + h) * a.gate_head_stride + i]);
            a.out[(t * a.n_head + h) * d + i] = o;
        }
        __syncthreads();
    }
}

// kRows: the rows form, the body on the block's row's arguments (its table row read before the body's wait);
// a single call's launch hands the body its own arguments in place.
template <bool kRows>
__global__ void __launch_bounds__(kCombineThreads) attention_combine_kernel(CombineArgs a) {
    if constexpr (kRows) combine(combine_row_args(a));
    else combine(a);
}

// ---- prologue and cache stores ----

constexpr int kPrologueThreads = 256;  // >= kAttentionDecodeMaxHeadDim: one thread per dim

struct PrologueArgs {
    const float* q_full;
    const float* k_raw;
    const float* v_raw;
    const float* q_norm;
    const float* k_norm;
    const int32_t* position;
    KvCacheView k_cache;
    KvCacheView v_cache;
    float* q_out;
    int64_t n_head, n_kv_head, head_dim, q_head_stride, rope_dim;
    float rope_theta, rms_eps;
    const double* rope_table;  // rope_decode_table's for *position, or nullptr
    const AttentionRow* rows;  // the rows form (attention_decode_prologue_rows): row blockIdx.y from this table
};

// The arguments block (·, r) of a rows launch works with: row r's, as a single call over that row has them
// (its q_full, k_raw, v_raw and q_out rows, its caches and position). The table is written by no kernel, so
// it may be read before the wait.
__device__ __forceinline__ PrologueArgs prologue_row_args(const PrologueArgs& a) {
    const int64_t r = blockIdx.y;
    const AttentionRow& row = a.rows[r];
    PrologueArgs out = a;
    out.q_full = a.q_full + r * a.n_head * a.q_head_stride;
    out.k_raw = a.k_raw + r * a.n_kv_head * a.head_dim;
    out.v_raw = a.v_raw + r * a.n_kv_head * a.head_dim;
    out.q_out = a.q_out + r * a.n_head * a.head_dim;
    out.position = &row.position;
    out.k_cache = row.k;
    out.v_cache = row.v;
    return out;
}

// Element `index` of position p's row (kivi4: its exact row; quantisation comes later, kivi_compress).
__device__ __forceinline__ void store_kv(const KvCacheView& cache, int64_t p, int64_t row_elems, int64_t index,
                                         float value) {
    const int64_t at = kv_data_row(cache, p) * row_elems + index;
    if (cache.element == KvElement::f16) static_cast<__half*>(cache.data)[at] = __float2half_rn(value);
    else static_cast<float*>(cache.data)[at] = value;
}

// Block b: query head b (b < H), key head b − H, or value head b − H − H_kv. kTable: the angles' cos and sin
// come from a.rope_table (rope_decode_table), else each thread forms its own.
template <bool kTable>
__device__ __forceinline__ void prologue(const PrologueArgs& a) {
    const int64_t b = blockIdx.x, d = a.head_dim, i = threadIdx.x;
    const bool is_q = b < a.n_head, is_k = !is_q && b < a.n_head + a.n_kv_head;
    // The norm weight is the model's, written by no kernel of the step: requested before the wait, so the
    // norm does not wait for it after the block sum.
    const float norm_w = (is_q || is_k) && i < d ? (is_q ? a.q_norm : a.k_norm)[i] : 0.0f;
    double c = 0.0, s = 0.0;  // the cos and sin thread i rotates by (i < rope_dim)
    // So is the step's rope table: written two or more launches before (attention_decode_prologue's contract).
    if constexpr (kTable) {
        const int64_t half = a.rope_dim / 2, j = i < half ? i : i - half;
        if ((is_q || is_k) && i < a.rope_dim) {
            c = a.rope_table[2 * j];
            s = a.rope_table[2 * j + 1];
        }
    }
    wait_for_predecessor();  // ops/cuda/programmatic_launch.cuh: nothing else of the step is read before this
    allow_dependents();
    __shared__ float row[kAttentionDecodeMaxHeadDim];
    __shared__ float scratch[32];
    const int64_t position = *a.position;
    const float* src = is_q ? a.q_full + b * a.q_head_stride
                            : is_k ? a.k_raw + (b - a.n_head) * d : a.v_raw + (b - a.n_head - a.n_kv_head) * d;
    const float x = i < d ? src[i] : 0.0f;
    if (!is_q && !is_k) {
        if (i < d) store_kv(a.v_cache, position, a.n_kv_head * d, (b - a.n_head - a.n_kv_head) * d + i, x);
        return;
    }
    // rms_norm (as cuda::rms_norm: fp32 sum of squares, 1/sqrt(mean + eps), x·scale·w).
    const float scale = 1.0f / sqrtf(block_sum(x * x, scratch) / float(d) + a.rms_eps);
    const float y = i < d ? x * scale * norm_w : 0.0f;
    if (i < d) row[i] = y;
    __syncthreads();
    // rope_neox (as cuda::rope_neox: fp32 angle, cos/sin and the rotation in double, no contraction).
    float out = y;
    const int64_t half = a.rope_dim / 2;
    if (i < a.rope_dim) {
        const int64_t j = i < half ? i : i - half;
        if constexpr (!kTable) rope_cos_sin(j, a.rope_dim, a.rope_theta, int32_t(position), c, s);
        const double x0 = row[j], x1 = row[j + half];
        out = i < half ? float(__dsub_rn(__dmul_rn(x0, c), __dmul_rn(x1, s)))
                       : float(__dadd_rn(__dmul_rn(x1, c), __dmul_rn(x0, s)));
    }
    if (i >= d) return;
    if (is_q) a.q_out[b * d + i] = out;
    else store_kv(a.k_cache, position, a.n_kv_head * d, (b - a.n_head) * d + i, out);
}

// kRows: the rows form, the body on the block's row's arguments (its table row read before the body's wait);
// a single call's launch hands the body its own arguments in place.
template <bool kTable, bool kRows>
__global__ void __launch_bounds__(kPrologueThreads) attention_prologue_kernel(PrologueArgs a) {
    if constexpr (kRows) prologue<kTable>(prologue_row_args(a));
    else prologue<kTable>(a);
}

__global__ void kv_store_kernel(const float* rows, int64_t n, int64_t row_elems, const int32_t* n_past,
                                KvCacheView cache) {
    const int64_t first = *n_past;
    for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x)
        store_kv(cache, first + i / row_elems, row_elems, i % row_elems, rows[i]);
}

// Thread j: dim pair j's cos and sin at *position.
__global__ void rope_decode_table_kernel(const int32_t* position, int64_t rope_dim, float rope_theta, double* table) {
    wait_for_predecessor();  // ops/cuda/programmatic_launch.cuh: the position may be the kernel before's
    allow_dependents();
    const int64_t j = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
    if (j >= rope_dim / 2) return;
    double c, s;
    rope_cos_sin(j, rope_dim, rope_theta, *position, c, s);
    table[2 * j] = c;
    table[2 * j + 1] = s;
}

void check_dims(const CachedAttentionDims& d) {
    if (d.head_dim <= 0 || d.head_dim > kAttentionDecodeMaxHeadDim || d.n_kv_head <= 0 || d.n_head <= 0 ||
        d.n_head % d.n_kv_head != 0 || d.n_head / d.n_kv_head > kAttentionDecodeMaxGroup || d.n_tokens < 0 ||
        d.max_keys < d.n_tokens) {
        fail_message("attention_cached (cuda): head_dim " + std::to_string(d.head_dim) + " (at most " +
                     std::to_string(kAttentionDecodeMaxHeadDim) + "), heads " + std::to_string(d.n_head) + "/" +
                     std::to_string(d.n_kv_head) + " (at most " + std::to_string(kAttentionDecodeMaxGroup) +
                     " per kv head), " + std::to_string(d.n_tokens) + " tokens, max_keys " +
                     std::to_string(d.max_keys) + " is not a supported shape");
    }
}

void check_prologue_dims(const AttentionPrologueDims& dims) {
    if (dims.head_dim <= 0 || dims.head_dim > kAttentionDecodeMaxHeadDim || dims.rope_dim % 2 != 0 ||
        dims.rope_dim > dims.head_dim || dims.rope_dim < 0) {
        fail_message("attention_decode_prologue (cuda): head_dim " + std::to_string(dims.head_dim) + ", rope_dim " +
                     std::to_string(dims.rope_dim) + " is not a supported shape");
    }
}

SplitArgs split_args(const float* q, const KvCacheView& k_cache, const KvCacheView& v_cache, const int32_t* n_past,
                     const CachedAttentionDims& dims, int64_t splits, float* scratch) {
    SplitArgs args{};
    args.q = q;
    args.k = k_cache;
    args.v = v_cache;
    args.n_past = n_past;
    args.part_acc = scratch;
    args.part_ml = scratch + size_t(dims.n_tokens * dims.n_head * splits * dims.head_dim);
    args.n_tokens = dims.n_tokens;
    args.n_head = dims.n_head;
    args.n_kv_head = dims.n_kv_head;
    args.head_dim = dims.head_dim;
    args.splits = splits;
    args.score_scale = float(double(kLog2e) / std::sqrt(double(dims.head_dim)));
    return args;
}

}  // namespace

AttentionDecodeVariant attention_decode_variant_run(const CachedAttentionDims& dims, KvElement element) {
    if (dims.variant != AttentionDecodeVariant::staged_tiles) return dims.variant;
    const int64_t group = dims.n_kv_head > 0 ? dims.n_head / dims.n_kv_head : 0;
    return staged_attention_supports(element, dims.head_dim, group) ? AttentionDecodeVariant::staged_tiles
                                                                    : AttentionDecodeVariant::keys_across_lanes;
}

int64_t attention_decode_splits(const CachedAttentionDims& dims) {
    const int64_t by_length = (std::max<int64_t>(dims.max_keys, 1) + kMinKeysPerSplit - 1) / kMinKeysPerSplit;
    int64_t splits = std::min(kMaxSplits, by_length);
    if (dims.n_tokens > 1) {
        const int64_t per_token = dims.n_tokens * dims.n_kv_head;
        splits = std::min(splits, std::max<int64_t>(1, (kTargetBlocks + per_token - 1) / per_token));
    }
    return splits;
}

int64_t attention_decode_splits_run(const CachedAttentionDims& dims, KvElement element) {
    const int64_t splits = attention_decode_splits(dims);
    // An experiment switch for measuring what the cap gains (docs/bench-notes.md): DELTABIT_ATTENTION_ONE_WAVE=0.
    static const bool one_wave = env_switch("DELTABIT_ATTENTION_ONE_WAVE", true);
    if (dims.n_tokens != 1 || !one_wave ||
        attention_decode_variant_run(dims, element) != AttentionDecodeVariant::staged_tiles)
        return splits;
    // One wave of the staged kernel's own resident blocks: each block then streams its keys as one pipeline.
    const int64_t resident = staged_attention_resident_blocks(element, dims.head_dim, dims.n_head / dims.n_kv_head);
    return std::min(splits, std::max<int64_t>(1, resident / dims.n_kv_head));
}

size_t attention_decode_scratch_floats(const CachedAttentionDims& dims) {
    return size_t(dims.n_tokens * dims.n_head * attention_decode_splits(dims) * (dims.head_dim + 2));
}


void attention_cached(const float* q, const KvCacheView& k_cache, const KvCacheView& v_cache, const float* gate,
                      const int32_t* n_past, const CachedAttentionDims& dims, float* scratch, float* out,
                      cudaStream_t stream) {
    check_dims(dims);
    if (k_cache.element != v_cache.element)
        fail_message("attention_cached (cuda): keys and values are stored in different formats");
    if (k_cache.element == KvElement::kivi4 && (dims.head_dim % 8 != 0 || k_cache.kivi.ring_rows <= 0))
        fail_message("attention_cached (cuda): a kivi4 cache needs head_dim a multiple of 8 and a ring of exact rows");
    if (dims.n_tokens == 0) return;
    const int64_t splits = attention_decode_splits_run(dims, k_cache.element);
    const SplitArgs args = split_args(q, k_cache, v_cache, n_past, dims, splits, scratch);
    const dim3 grid(unsigned(splits), unsigned(dims.n_kv_head), unsigned(std::min(dims.n_tokens, kMaxGridZ)));
    const int64_t group = dims.n_head / dims.n_kv_head;
    // staged_tiles where it supports the format and head_dim, else keys_across_lanes (ops/attention/attention_cuda.h).
    const bool staged = dims.variant == AttentionDecodeVariant::staged_tiles &&
                        launch_attention_split_staged(grid, args, k_cache.element, stream);
    const bool keys = dims.variant != AttentionDecodeVariant::dims_across_lanes;
    if (!staged) switch (k_cache.element) {
        case KvElement::f32: launch_register_split_f32(grid, args, group, keys, stream); break;
        case KvElement::f16: launch_register_split_f16(grid, args, group, keys, stream); break;
        case KvElement::kivi4: launch_register_split_kivi4(grid, args, group, keys, stream); break;
    }
    cuda_check_launch("attention_split");

    const CombineArgs combine{args.part_acc, args.part_ml, gate,   n_past, out, dims.n_tokens, dims.n_head,
                              dims.head_dim, splits,        dims.gate_head_stride, nullptr, 0};
    const dim3 combine_grid(unsigned(dims.n_head * ((dims.head_dim + 31) / 32)),
                            unsigned(std::min(dims.n_tokens, kMaxGridZ)));
    launch_programmatic(attention_combine_kernel<false>, combine_grid, dim3(kCombineThreads), 0, stream,
                        "attention_combine", combine);
}

void attention_cached(const float* q, const void* k_cache, const void* v_cache, KvElement kv, const float* gate,
                      const int32_t* n_past, const CachedAttentionDims& dims, float* scratch, float* out,
                      cudaStream_t stream) {
    if (kv == KvElement::kivi4) fail_message("attention_cached (cuda): a kivi4 cache needs a KvCacheView");
    attention_cached(q, plain_kv_view(kv, const_cast<void*>(k_cache)), plain_kv_view(kv, const_cast<void*>(v_cache)),
                     gate, n_past, dims, scratch, out, stream);
}

AttentionRow attention_row(const KvCacheView& k_cache, const KvCacheView& v_cache, int64_t position,
                           const CachedAttentionDims& dims) {
    AttentionRow row;
    row.k = k_cache;
    row.v = v_cache;
    row.position = int32_t(position);
    row.splits = int32_t(attention_decode_splits_run(dims, k_cache.element));
    return row;
}

void AttentionRowsPlan::add(const AttentionRow& row) {
    ++n_rows;
    max_splits = std::max<int64_t>(max_splits, row.splits);
    formats[size_t(row.k.element)] = true;
}

size_t attention_decode_rows_scratch_floats(const CachedAttentionDims& dims, const AttentionRowsPlan& plan) {
    return size_t(plan.n_rows * dims.n_head * plan.max_splits * (dims.head_dim + 2));
}

void attention_cached_rows(const float* q, const AttentionRow* rows, const AttentionRowsPlan& plan, const float* gate,
                           const CachedAttentionDims& dims, float* scratch, float* out, cudaStream_t stream) {
    check_dims(dims);
    if (dims.n_tokens != 1)
        fail_message("attention_cached_rows (cuda): one token a row, not " + std::to_string(dims.n_tokens));
    if (dims.variant == AttentionDecodeVariant::dims_across_lanes)
        fail_message("attention_cached_rows (cuda): dims_across_lanes has no rows form (staged_tiles or keys_across_lanes)");
    if (plan.n_rows == 0) return;
    if (plan.n_rows * dims.n_kv_head > kMaxGridZ || plan.max_splits <= 0 || plan.max_splits > kMaxSplits)
        fail_message("attention_cached_rows (cuda): " + std::to_string(plan.n_rows) + " rows of " +
                     std::to_string(dims.n_kv_head) + " kv heads and at most " + std::to_string(plan.max_splits) +
                     " splits is not a supported plan");
    if (plan.formats[size_t(KvElement::kivi4)] && dims.head_dim % 8 != 0)
        fail_message("attention_cached_rows (cuda): a kivi4 cache needs head_dim a multiple of 8");
    const int64_t row_scratch = dims.n_head * plan.max_splits * (dims.head_dim + 2);
    const int64_t group = dims.n_head / dims.n_kv_head;
    const dim3 grid(unsigned(plan.max_splits), unsigned(plan.n_rows * dims.n_kv_head), 1);
    // One split launch per cache format among the rows (its blocks of other rows exit), each the kernel a
    // single call over such a row runs (attention_cached).
    for (const KvElement element : {KvElement::f32, KvElement::f16, KvElement::kivi4}) {
        if (!plan.formats[size_t(element)]) continue;
        const KvCacheView launch_view = plain_kv_view(element, nullptr);
        SplitArgs args = split_args(q, launch_view, launch_view, nullptr, dims, plan.max_splits, scratch);
        args.rows = rows;
        args.row_scratch = row_scratch;
        const bool staged = dims.variant == AttentionDecodeVariant::staged_tiles &&
                            launch_attention_split_staged(grid, args, element, stream);
        if (!staged) switch (element) {
            case KvElement::f32: launch_register_split_f32(grid, args, group, true, stream); break;
            case KvElement::f16: launch_register_split_f16(grid, args, group, true, stream); break;
            case KvElement::kivi4: launch_register_split_kivi4(grid, args, group, true, stream); break;
        }
        cuda_check_launch("attention_split_rows");
    }
    const CombineArgs combine{scratch,       nullptr,          gate,  nullptr, out, 1, dims.n_head,
                              dims.head_dim, plan.max_splits, dims.gate_head_stride, rows, row_scratch};
    const dim3 combine_grid(unsigned(dims.n_head * ((dims.head_dim + 31) / 32)), 1, unsigned(plan.n_rows));
    launch_programmatic(attention_combine_kernel<true>, combine_grid, dim3(kCombineThreads), 0, stream,
                        "attention_combine_rows", combine);
}

void attention_decode_prologue(const float* q_full, const float* k_raw, const float* v_raw, const float* q_norm,
                               const float* k_norm, const int32_t* position, const AttentionPrologueDims& dims,
                               KvElement kv, void* k_cache, void* v_cache, float* q_out, cudaStream_t stream,
                               const double* rope_table) {
    if (kv == KvElement::kivi4) fail_message("attention_decode_prologue (cuda): a kivi4 cache needs a KvCacheView");
    attention_decode_prologue(q_full, k_raw, v_raw, q_norm, k_norm, position, dims, plain_kv_view(kv, k_cache),
                              plain_kv_view(kv, v_cache), q_out, stream, rope_table);
}

void attention_decode_prologue(const float* q_full, const float* k_raw, const float* v_raw, const float* q_norm,
                               const float* k_norm, const int32_t* position, const AttentionPrologueDims& dims,
                               const KvCacheView& k_cache, const KvCacheView& v_cache, float* q_out,
                               cudaStream_t stream, const double* rope_table) {
    check_prologue_dims(dims);
    const PrologueArgs args{q_full,       k_raw,          v_raw,          q_norm,         k_norm,
                            position,     k_cache,        v_cache,        q_out,          dims.n_head,
                            dims.n_kv_head, dims.head_dim, dims.q_head_stride, dims.rope_dim, dims.rope_theta,
                            dims.rms_eps,   rope_table,     nullptr};
    const int64_t blocks = dims.n_head + 2 * dims.n_kv_head;
    if (blocks <= 0) return;
    launch_programmatic(rope_table != nullptr ? attention_prologue_kernel<true, false>
                                              : attention_prologue_kernel<false, false>,
                        dim3(unsigned(blocks)), dim3(kPrologueThreads), 0, stream, "attention_prologue", args);
    cuda_check_launch("attention_decode_prologue");
}

void attention_decode_prologue_rows(const float* q_full, const float* k_raw, const float* v_raw, const float* q_norm,
                                    const float* k_norm, const AttentionRow* rows, int64_t n_rows,
                                    const AttentionPrologueDims& dims, float* q_out, cudaStream_t stream) {
    check_prologue_dims(dims);
    if (n_rows > kMaxGridZ)
        fail_message("attention_decode_prologue_rows (cuda): " + std::to_string(n_rows) + " rows, at most " +
                     std::to_string(kMaxGridZ));
    const PrologueArgs args{q_full,       k_raw,          v_raw,          q_norm,         k_norm,
                            nullptr,      KvCacheView{},  KvCacheView{},  q_out,          dims.n_head,
                            dims.n_kv_head, dims.head_dim, dims.q_head_stride, dims.rope_dim, dims.rope_theta,
                            dims.rms_eps,   nullptr,        rows};
    const int64_t blocks = dims.n_head + 2 * dims.n_kv_head;
    if (blocks <= 0 || n_rows <= 0) return;
    launch_programmatic(attention_prologue_kernel<false, true>, dim3(unsigned(blocks), unsigned(n_rows)),
                        dim3(kPrologueThreads), 0, stream, "attention_prologue_rows", args);
    cuda_check_launch("attention_decode_prologue_rows");
}

void rope_decode_table(const int32_t* position, int64_t rope_dim, float rope_theta, double* table, cudaStream_t stream) {
    if (rope_dim <= 0 || rope_dim % 2 != 0 || rope_dim > kAttentionDecodeMaxHeadDim)
        fail_message("rope_decode_table (cuda): rope_dim " + std::to_string(rope_dim) +
                     " is not a supported shape (even, 2 to " + std::to_string(kAttentionDecodeMaxHeadDim) + ")");
    launch_programmatic(rope_decode_table_kernel, dim3(1), dim3(unsigned(rope_dim / 2)), 0, stream, "rope_decode_table",
                        position, rope_dim, rope_theta, table);
    cuda_check_launch("rope_decode_table");
}

void kv_store(const float* rows, int64_t n_tokens, int64_t row_elems, const int32_t* n_past, KvElement kv, void* cache,
              cudaStream_t stream) {
    if (kv == KvElement::kivi4) fail_message("kv_store (cuda): a kivi4 cache needs a KvCacheView");
    kv_store(rows, n_tokens, row_elems, n_past, plain_kv_view(kv, cache), stream);
}

void kv_store(const float* rows, int64_t n_tokens, int64_t row_elems, const int32_t* n_past, const KvCacheView& cache,
              cudaStream_t stream) {
    const int64_t n = n_tokens * row_elems;
    if (n <= 0) return;
    constexpr int kThreads256 = 256;
    const int64_t blocks = std::min<int64_t>((n + kThreads256 - 1) / kThreads256, 65535);
    kv_store_kernel<<<unsigned(blocks), kThreads256, 0, stream>>>(rows, n, row_elems, n_past, cache);
    cuda_check_launch("kv_store");
}

}  // namespace deltabit::cuda
