// CUDA grouped MoE experts (contract and numerics: ops/moe/moe_experts_cuda.h).
//
// Pairs. Pair i = t·top_k + j is token t's slot j. The sort gives each expert e the positions
// offsets[e] .. offsets[e] + counts[e] − 1 of `order`, holding its pairs in increasing i (token, then slot);
// row_of[i] is pair i's position. Every per-pair intermediate (act, the down output) is a row at that position.
//
// Sort: one warp per expert, two passes over the ids 32 at a time: the first counts the pairs of lower experts
// (the offset: no prefix sum across warps needed) and its own, the second places its own with a ballot, each
// lane's rank among the warp's matches from a popcount. O(E · T·top_k / 32) ballots, spread over E warps.
//
// Expert GEMMs: a 1-D grid over items (slot, tile), slot-major: slot s is the s-th expert with pairs (found by
// a ballot scan of the counts), tile a run of kTileRows output rows. Blocks past the last non-empty expert stop
// at once, so the grid is sized min(E, T·top_k) · tiles from what the host knows. Warp w of a block owns
// kRowsPerWarp rows; for each of the expert's pairs, a group of lanes splits the row's 16-byte code units
// (the GEMV's units, ops/matmul/gemv_device.cuh), every unit's activations loaded once for the warp's rows, then
// a butterfly inside the group; a warp has 32 / (lanes a row needs) groups taking its pairs in turn. The
// expert's weight rows are re-read for each pair, from L1/L2 after the first: decode (one pair an expert)
// reads each chosen row once, as the GEMV does.
#include <cuda_fp16.h>

#include <algorithm>
#include <climits>
#include <string>
#include <type_traits>

#include "backend/cuda_buffer.h"
#include "core/env_switch.h"
#include "ops/cuda/activation_quant.cuh"
#include "ops/cuda/cuda_launch.h"
#include "ops/cuda/cuda_math.cuh"
#include "ops/matmul/gemv_device.cuh"
#include "ops/moe/moe_experts_cuda.h"
#include "ops/moe/moe_experts_mma.h"
#include "ops/moe/moe_group.cuh"

namespace deltabit::cuda {

namespace {

using gemv_detail::Layout;
using gemv_detail::unit_dot;
using moe_detail::find_expert;
using moe_detail::glu;
using moe_detail::GroupArgs;

constexpr int kWarps = 4;
constexpr int kRowsPerWarp = 4;
constexpr int kTileRows = kWarps * kRowsPerWarp;
constexpr int kSortWarps = 4;
constexpr int kRowWarps = 8;        // quantize_rows_kernel
constexpr int kCombineThreads = 256;

size_t align256(size_t n) { return (n + 255) / 256 * 256; }

// The caller's scratch, carved (base nullptr: only the size).
struct Scratch {
    int32_t* counts = nullptr;   // [E]
    int32_t* offsets = nullptr;  // [E]
    int32_t* order = nullptr;    // [N] pair indices grouped by expert
    int32_t* row_of = nullptr;   // [N] position of each pair in `order`
    float* act = nullptr;        // [N][F]
    float* down = nullptr;       // [N][D]
    int8_t* xq = nullptr;        // quantised: [T][Gd·128]
    ActivationGroupMeta* x_meta = nullptr;  // [T][Gd]
    int8_t* aq = nullptr;        // [N][Gf·128]
    ActivationGroupMeta* a_meta = nullptr;  // [N][Gf]
    size_t bytes = 0;
};

Scratch carve(const MoeExpertsArgs& a, void* base) {
    Scratch s;
    const size_t T = size_t(a.n_tokens), N = T * size_t(a.top_k), E = size_t(a.n_expert);
    const size_t Gd = size_t(activation_groups(a.dim)), Gf = size_t(activation_groups(a.expert_ff));
    auto take = [&](auto*& p, size_t bytes) {
        using P = std::remove_reference_t<decltype(p)>;
        p = base == nullptr ? nullptr : reinterpret_cast<P>(static_cast<uint8_t*>(base) + s.bytes);
        s.bytes += align256(std::max<size_t>(bytes, 1));
    };
    take(s.counts, E * 4);
    take(s.offsets, E * 4);
    take(s.order, N * 4);
    take(s.row_of, N * 4);
    take(s.act, N * size_t(a.expert_ff) * 4);
    take(s.down, N * size_t(a.dim) * 4);
    if (a.gate.quantized) {
        take(s.xq, T * Gd * kActivationGroup);
        take(s.x_meta, T * Gd * sizeof(ActivationGroupMeta));
    }
    if (a.down.quantized) {
        take(s.aq, N * Gf * kActivationGroup);
        take(s.a_meta, N * Gf * sizeof(ActivationGroupMeta));
    }
    return s;
}

__global__ void moe_sort_kernel(const int32_t* ids, int64_t n_pairs, int64_t n_expert, int32_t* counts,
                                int32_t* offsets, int32_t* order, int32_t* row_of) {
    const int lane = int(threadIdx.x) & 31;
    const int64_t warps = int64_t(gridDim.x) * kSortWarps;
    for (int64_t e = int64_t(blockIdx.x) * kSortWarps + threadIdx.x / 32; e < n_expert; e += warps) {
        int64_t below = 0, count = 0;
        for (int64_t base = 0; base < n_pairs; base += 32) {
            const int64_t i = base + lane;
            const int64_t id = i < n_pairs ? ids[i] : INT64_MAX;
            below += __popc(__ballot_sync(kFullWarpMask, id < e));
            count += __popc(__ballot_sync(kFullWarpMask, id == e));
        }
        if (lane == 0) {
            counts[e] = int32_t(count);
            offsets[e] = int32_t(below);
        }
        const int64_t end = below + count;
        int64_t placed = below;  // the same in every lane
        for (int64_t base = 0; base < n_pairs && placed < end; base += 32) {
            const int64_t i = base + lane;
            const bool mine = i < n_pairs && ids[i] == e;
            const unsigned matches = __ballot_sync(kFullWarpMask, mine);
            if (mine) {
                const int64_t p = placed + __popc(matches & ((1u << lane) - 1u));
                order[p] = int32_t(i);
                row_of[i] = int32_t(p);
            }
            placed += __popc(matches);
        }
    }
}

// Rows of x [rows][cols] to int8 groups of 128 (one warp per (row, group)): q [rows][groups·128] (zeros past
// cols), meta [rows][groups]. quantize_group_by_warp: the codes of cuda::quantize_activations on each row.
__global__ void quantize_rows_kernel(const float* x, int64_t rows, int64_t cols, int64_t groups, int8_t* q,
                                     ActivationGroupMeta* meta) {
    const int lane = int(threadIdx.x) & 31;
    const int64_t warps = int64_t(gridDim.x) * kRowWarps;
    for (int64_t item = int64_t(blockIdx.x) * kRowWarps + threadIdx.x / 32; item < rows * groups; item += warps) {
        const int64_t r = item / groups, g = item % groups;
        float v[4];
#pragma unroll
        for (int i = 0; i < 4; ++i) {
            const int64_t k = g * kActivationGroup + lane * 4 + i;
            v[i] = k < cols ? x[r * cols + k] : 0.0f;
        }
        const ActivationGroupMeta m = quantize_group_by_warp(v, lane, q + (r * groups + g) * kActivationGroup);
        if (lane == 0) meta[r * groups + g] = m;
    }
}

struct QuantMatrices {
    const uint8_t* codes[2];  // [0] gate or down, [1] up
    const uint16_t* scales[2];
    int64_t code_row_bytes, scales_per_row;
    int units_per_row;
    int lanes_per_pair;  // lanes splitting one pair's row: the power of two >= units_per_row, at most 32
    const int8_t* xq;  // input row r: xq + r·x_groups·128, meta + r·x_groups
    const ActivationGroupMeta* x_meta;
    int64_t x_groups;
};

// kGlu: the gate and up rows of the tile for each pair, stored as act(gate, up); input row = the pair's token.
// Otherwise one matrix (down); input row = the pair's position.
template <DType T, bool kGlu>
__global__ void __launch_bounds__(32 * kWarps) expert_gemm_quantized_kernel(GroupArgs g, QuantMatrices m) {
    using L = Layout<T>;
    constexpr int kXWords = L::unit / 4;
    constexpr int kMats = kGlu ? 2 : 1;
    const int lane = int(threadIdx.x) & 31, warp = int(threadIdx.x) >> 5;
    const int64_t items = g.slots * g.tiles;
    for (int64_t item = blockIdx.x; item < items; item += gridDim.x) {
        const int e = find_expert(g.counts, g.n_expert, item / g.tiles);
        if (e < 0) break;  // slot-major items: every later item's slot is empty too
        const int64_t row0 = (item % g.tiles) * kTileRows + warp * kRowsPerWarp;
        if (row0 >= g.rows) continue;  // no barrier below
        const uint8_t* codes[kMats][kRowsPerWarp];
        const uint16_t* scales[kMats][kRowsPerWarp];
#pragma unroll
        for (int r = 0; r < kRowsPerWarp; ++r) {
            const int64_t row = int64_t(e) * g.rows + min(row0 + r, g.rows - 1);  // past the end: computed, not stored
#pragma unroll
            for (int k = 0; k < kMats; ++k) {
                codes[k][r] = m.codes[k] + row * m.code_row_bytes;
                scales[k][r] = m.scales[k] + row * m.scales_per_row;
            }
        }
        // Rows shorter than 32 units (K = 2048 Q1_0: 16; an expert's down at F = 512: 4) leave lanes idle, so the
        // warp splits into groups of m.lanes_per_pair lanes (a power of two), each group taking every
        // (32 / lanes)-th pair; the butterfly below stays inside a group.
        const int lanes = m.lanes_per_pair, k_lane = lane & (lanes - 1);
        const int64_t first = g.offsets[e], end = first + g.counts[e];
        for (int64_t base = first; base < end; base += 32 / lanes) {
            const int64_t p = base + lane / lanes;
            const bool active = p < end;
            float acc[kMats][kRowsPerWarp] = {};
            if (active) {
                const int64_t in = kGlu ? g.order[p] / g.top_k : p;
                const int8_t* xrow = m.xq + in * m.x_groups * kActivationGroup;
                const ActivationGroupMeta* mrow = m.x_meta + in * m.x_groups;
                for (int u = k_lane; u < m.units_per_row; u += lanes) {
                    int x[kXWords];
                    const int4* xs = reinterpret_cast<const int4*>(xrow + int64_t(u) * L::unit);
#pragma unroll
                    for (int v = 0; v < kXWords / 4; ++v) {
                        const int4 w = xs[v];
                        x[4 * v + 0] = w.x;
                        x[4 * v + 1] = w.y;
                        x[4 * v + 2] = w.z;
                        x[4 * v + 3] = w.w;
                    }
                    const ActivationGroupMeta meta = mrow[int64_t(u) * L::unit / kActivationGroup];
                    const int scale_index = int(int64_t(u) * L::unit / L::group);
#pragma unroll
                    for (int k = 0; k < kMats; ++k)
#pragma unroll
                        for (int r = 0; r < kRowsPerWarp; ++r) {
                            const uint4 c = *reinterpret_cast<const uint4*>(codes[k][r] + int64_t(u) * 16);
                            const int dot = unit_dot<T>(c, x, meta.sum);
                            const float d = __half2float(__ushort_as_half(scales[k][r][scale_index]));
                            acc[k][r] = fmaf(float(dot), d * meta.scale, acc[k][r]);
                        }
                }
            }
#pragma unroll
            for (int k = 0; k < kMats; ++k)
#pragma unroll
                for (int r = 0; r < kRowsPerWarp; ++r)
                    for (int offset = lanes / 2; offset > 0; offset /= 2)
                        acc[k][r] += __shfl_xor_sync(kFullWarpMask, acc[k][r], offset);
#pragma unroll
            for (int r = 0; r < kRowsPerWarp; ++r)
                if (active && k_lane == r % lanes && row0 + r < g.rows)
                    g.y[p * g.rows + row0 + r] = kGlu ? glu(acc[0][r], acc[kMats - 1][r], g.act) : acc[0][r];
        }
    }
}

struct PlainMatrices {
    const uint8_t* w[2];  // [0] gate or down, [1] up
    DType dtype;
    size_t row_bytes;
    int64_t cols;
    const float* x;  // input row r: x + r·cols
};

__device__ __forceinline__ float plain_weight(const uint8_t* row, DType type, int64_t k) {
    switch (type) {
        case DType::F16: return __half2float(__ushort_as_half(reinterpret_cast<const uint16_t*>(row)[k]));
        case DType::BF16: return __uint_as_float(uint32_t(reinterpret_cast<const uint16_t*>(row)[k]) << 16);
        default: return reinterpret_cast<const float*>(row)[k];
    }
}

// The same walk over plain F32/F16/BF16 weights: fp32 products, each lane's k in order, then the butterfly.
template <bool kGlu>
__global__ void __launch_bounds__(32 * kWarps) expert_gemm_plain_kernel(GroupArgs g, PlainMatrices m) {
    constexpr int kMats = kGlu ? 2 : 1;
    const int lane = int(threadIdx.x) & 31, warp = int(threadIdx.x) >> 5;
    const int64_t items = g.slots * g.tiles;
    for (int64_t item = blockIdx.x; item < items; item += gridDim.x) {
        const int e = find_expert(g.counts, g.n_expert, item / g.tiles);
        if (e < 0) break;
        const int64_t row0 = (item % g.tiles) * kTileRows + warp * kRowsPerWarp;
        if (row0 >= g.rows) continue;
        const uint8_t* rows[kMats][kRowsPerWarp];
#pragma unroll
        for (int r = 0; r < kRowsPerWarp; ++r)
#pragma unroll
            for (int k = 0; k < kMats; ++k)
                rows[k][r] = m.w[k] + size_t(int64_t(e) * g.rows + min(row0 + r, g.rows - 1)) * m.row_bytes;
        const int64_t first = g.offsets[e], end = first + g.counts[e];
        for (int64_t p = first; p < end; ++p) {
            const float* xrow = m.x + (kGlu ? g.order[p] / g.top_k : p) * m.cols;
            float acc[kMats][kRowsPerWarp] = {};
            for (int64_t c = lane; c < m.cols; c += 32) {
                const float xv = xrow[c];
#pragma unroll
                for (int k = 0; k < kMats; ++k)
#pragma unroll
                    for (int r = 0; r < kRowsPerWarp; ++r) acc[k][r] = fmaf(xv, plain_weight(rows[k][r], m.dtype, c), acc[k][r]);
            }
#pragma unroll
            for (int k = 0; k < kMats; ++k)
#pragma unroll
                for (int r = 0; r < kRowsPerWarp; ++r) acc[k][r] = warp_sum(acc[k][r]);
#pragma unroll
            for (int r = 0; r < kRowsPerWarp; ++r)
                if (lane == r && row0 + r < g.rows)
                    g.y[p * g.rows + row0 + r] = kGlu ? glu(acc[0][r], acc[kMats - 1][r], g.act) : acc[0][r];
        }
    }
}

// out[t][i] = Σ_j p·s[e] · down[row_of[t·top_k + j]][i] in slot order (+ sigmoid(shared_gate[t]) · shared[t][i]).
__global__ void moe_combine_kernel(const float* down, const int32_t* row_of, const int32_t* ids, const float* weights,
                                   const float* expert_scale, const float* shared, const float* shared_gate,
                                   int64_t n_tokens, int64_t dim, int64_t top_k, float* out) {
    const int64_t stride = int64_t(gridDim.x) * blockDim.x;
    for (int64_t item = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; item < n_tokens * dim; item += stride) {
        const int64_t t = item / dim, i = item % dim;
        float acc = 0.0f;
        for (int64_t j = 0; j < top_k; ++j) {
            const int64_t pair = t * top_k + j;
            float p = weights[pair];
            if (expert_scale != nullptr) p *= expert_scale[ids[pair]];
            acc = fmaf(p, down[int64_t(row_of[pair]) * dim + i], acc);
        }
        if (shared != nullptr) acc = fmaf(sigmoid_f(shared_gate[t]), shared[item], acc);
        out[item] = acc;
    }
}

void check_shape(bool ok, const std::string& what) {
    if (!ok) fail_message("cuda moe_experts: " + what);
}

void validate(const MoeExpertsArgs& a) {
    const int64_t E = a.n_expert, F = a.expert_ff, D = a.dim;
    check_shape(a.n_tokens >= 0 && E > 0 && F > 0 && D > 0, "empty expert shape");
    check_shape(a.top_k >= 1 && a.top_k <= E,
                "top_k " + std::to_string(a.top_k) + " of " + std::to_string(E) + " experts");
    check_shape(a.gate.quantized == a.up.quantized && a.gate.dtype() == a.up.dtype(), "gate and up must share a dtype");
    auto expect = [&](const ExpertMatrixView& m, int64_t rows, int64_t cols, const char* name) {
        check_shape(m.rows() == rows && m.cols() == cols,
                    std::string(name) + " is " + std::to_string(m.rows()) + "x" + std::to_string(m.cols()) +
                        ", expected " + std::to_string(rows) + "x" + std::to_string(cols));
        if (!m.quantized)
            check_shape(m.plain.dtype == DType::F32 || m.plain.dtype == DType::F16 || m.plain.dtype == DType::BF16,
                        std::string(name) + ": plain weights must be F32, F16 or BF16");
    };
    expect(a.gate, E * F, D, "gate");
    expect(a.up, E * F, D, "up");
    expect(a.down, E * D, F, "down");
    check_shape((a.shared == nullptr) == (a.shared_gate == nullptr), "shared and shared_gate go together");
    check_shape(a.n_tokens * a.top_k <= INT32_MAX, "too many (token, slot) pairs for 32-bit positions");
}

template <bool kGlu>
void launch_quantized(const GroupArgs& g, const QuantMatrices& m, DType t, unsigned blocks, cudaStream_t stream) {
    switch (t) {
        case DType::Q1_0: expert_gemm_quantized_kernel<DType::Q1_0, kGlu><<<blocks, 32 * kWarps, 0, stream>>>(g, m); break;
        case DType::Q2_0: expert_gemm_quantized_kernel<DType::Q2_0, kGlu><<<blocks, 32 * kWarps, 0, stream>>>(g, m); break;
        case DType::Q2_0_G64:
            expert_gemm_quantized_kernel<DType::Q2_0_G64, kGlu><<<blocks, 32 * kWarps, 0, stream>>>(g, m);
            break;
        case DType::Q4_0: expert_gemm_quantized_kernel<DType::Q4_0, kGlu><<<blocks, 32 * kWarps, 0, stream>>>(g, m); break;
        case DType::Q8_0: expert_gemm_quantized_kernel<DType::Q8_0, kGlu><<<blocks, 32 * kWarps, 0, stream>>>(g, m); break;
        default: fail_message(std::string("cuda moe_experts: no grouped kernel for ") + std::string(dtype_name(t)));
    }
    cuda_check_launch("expert_gemm_quantized_kernel");
}

QuantMatrices quant_matrices(const GemvWeightView& w0, const GemvWeightView& w1, const int8_t* xq,
                             const ActivationGroupMeta* meta) {
    const int64_t row_bytes = int64_t(gemv_code_row_bytes(w0.dtype, w0.cols));
    const int units = int(row_bytes / 16);
    int lanes = 1;
    while (lanes < 32 && lanes < units) lanes *= 2;
    return {{w0.codes, w1.codes},
            {w0.scales, w1.scales},
            row_bytes,
            w0.cols / dtype_info(w0.dtype).block_elems,
            units,
            lanes,
            xq,
            meta,
            activation_groups(w0.cols)};
}

moe_detail::QuantMma quant_mma(const GemvWeightView& w0, const GemvWeightView& w1, const int8_t* xq,
                              const ActivationGroupMeta* meta) {
    return {{w0.codes, w1.codes},
            {w0.scales, w1.scales},
            int64_t(gemv_code_row_bytes(w0.dtype, w0.cols)),
            w0.cols / dtype_info(w0.dtype).block_elems,
            (w0.cols + 31) / 32,
            xq,
            meta,
            activation_groups(w0.cols)};
}

// DELTABIT_MOE_MMA=0 keeps every expert product on the CUDA-core kernels (to measure the tensor-core ones).
bool tensor_core_experts_enabled() {
    static const bool enabled = env_switch("DELTABIT_MOE_MMA", true);
    return enabled;
}

void quantize_rows(const float* x, int64_t rows, int64_t cols, int8_t* q, ActivationGroupMeta* meta, cudaStream_t stream) {
    const int64_t groups = activation_groups(cols);
    const unsigned blocks = grid_blocks(rows * groups, kRowWarps);
    if (blocks == 0) return;
    quantize_rows_kernel<<<blocks, 32 * kRowWarps, 0, stream>>>(x, rows, cols, groups, q, meta);
    cuda_check_launch("quantize_rows_kernel");
}

}  // namespace

size_t moe_experts_scratch_bytes(const MoeExpertsArgs& a) { return carve(a, nullptr).bytes; }

MoeLaunchReport moe_experts(const MoeExpertsArgs& a, void* scratch, cudaStream_t stream) {
    validate(a);
    MoeLaunchReport report;
    if (a.n_tokens == 0) return report;
    const Scratch s = carve(a, scratch);
    const int64_t T = a.n_tokens, D = a.dim, F = a.expert_ff, E = a.n_expert, N = T * a.top_k;

    const unsigned sort_blocks = grid_blocks(E, kSortWarps);
    moe_sort_kernel<<<sort_blocks, 32 * kSortWarps, 0, stream>>>(a.ids, N, E, s.counts, s.offsets, s.order, s.row_of);
    cuda_check_launch("moe_sort_kernel");
    ++report.launches;

    const int64_t slots = std::min(E, N);
    const bool mma_up = a.tensor_cores && tensor_core_experts_enabled() &&
                        (a.gate.quantized ? moe_detail::quantized_mma_supports(a.gate.q.dtype)
                                          : a.gate.plain.dtype == DType::BF16);
    const bool mma_down = a.tensor_cores && tensor_core_experts_enabled() &&
                          (a.down.quantized ? moe_detail::quantized_mma_supports(a.down.q.dtype)
                                            : a.down.plain.dtype == DType::BF16);
    const int64_t up_tile = mma_up ? moe_detail::kMmaTileRows : kTileRows;
    const int64_t down_tile = mma_down ? moe_detail::kMmaTileRows : kTileRows;
    GroupArgs up_args{s.counts, s.offsets, s.order, E, a.top_k, slots, (F + up_tile - 1) / up_tile, F, s.act,
                      a.activation};
    GroupArgs down_args = up_args;
    down_args.tiles = (D + down_tile - 1) / down_tile;
    down_args.rows = D;
    down_args.y = s.down;
    const unsigned up_blocks = grid_blocks(slots * up_args.tiles), down_blocks = grid_blocks(slots * down_args.tiles);
    report.expert_tiles = slots * up_args.tiles;
    report.mma_products = int(mma_up) + int(mma_down);

    if (a.gate.quantized) {
        quantize_rows(a.x, T, D, s.xq, s.x_meta, stream);
        if (mma_up)
            moe_detail::launch_quantized_mma(up_args, quant_mma(a.gate.q, a.up.q, s.xq, s.x_meta), a.gate.q.dtype,
                                             true, up_blocks, stream);
        else
            launch_quantized<true>(up_args, quant_matrices(a.gate.q, a.up.q, s.xq, s.x_meta), a.gate.q.dtype,
                                   up_blocks, stream);
        report.launches += 2;
    } else if (mma_up) {
        const moe_detail::Bf16Mma gate_up{{static_cast<const uint16_t*>(a.gate.plain.data),
                                           static_cast<const uint16_t*>(a.up.plain.data)},
                                          D, a.x};
        moe_detail::launch_bf16_mma(up_args, gate_up, true, up_blocks, stream);
        report.launches += 1;
    } else {
        const PlainMatrices gate_up{{static_cast<const uint8_t*>(a.gate.plain.data), static_cast<const uint8_t*>(a.up.plain.data)},
                                    a.gate.plain.dtype, a.gate.plain.row_bytes(), D, a.x};
        expert_gemm_plain_kernel<true><<<up_blocks, 32 * kWarps, 0, stream>>>(up_args, gate_up);
        cuda_check_launch("expert_gemm_plain_kernel");
        report.launches += 1;
    }
    if (a.down.quantized) {
        quantize_rows(s.act, N, F, s.aq, s.a_meta, stream);
        if (mma_down)
            moe_detail::launch_quantized_mma(down_args, quant_mma(a.down.q, a.down.q, s.aq, s.a_meta), a.down.q.dtype,
                                             false, down_blocks, stream);
        else
            launch_quantized<false>(down_args, quant_matrices(a.down.q, a.down.q, s.aq, s.a_meta), a.down.q.dtype,
                                    down_blocks, stream);
        report.launches += 2;
    } else if (mma_down) {
        const auto* down_w = static_cast<const uint16_t*>(a.down.plain.data);
        moe_detail::launch_bf16_mma(down_args, moe_detail::Bf16Mma{{down_w, down_w}, F, s.act}, false, down_blocks,
                                    stream);
        report.launches += 1;
    } else {
        const auto* down_w = static_cast<const uint8_t*>(a.down.plain.data);
        const PlainMatrices down{{down_w, down_w}, a.down.plain.dtype, a.down.plain.row_bytes(), F, s.act};
        expert_gemm_plain_kernel<false><<<down_blocks, 32 * kWarps, 0, stream>>>(down_args, down);
        cuda_check_launch("expert_gemm_plain_kernel");
        report.launches += 1;
    }

    const unsigned combine_blocks = grid_blocks(T * D, kCombineThreads);
    moe_combine_kernel<<<combine_blocks, kCombineThreads, 0, stream>>>(
        s.down, s.row_of, a.ids, a.weights, a.expert_scale, a.shared, a.shared_gate, T, D, a.top_k, a.out);
    cuda_check_launch("moe_combine_kernel");
    ++report.launches;
    return report;
}

}  // namespace deltabit::cuda
