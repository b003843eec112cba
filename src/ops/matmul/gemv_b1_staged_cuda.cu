// The binary tensor-core GEMV fed from a shared-memory ring. The design is in gemv_b1_staged_cuda.h, the
// arithmetic and the planes' layout in gemv_b1_cuda.h. Inline PTX only through ops/cuda (cp.async, the mma,
// programmatic launch), so tools/cuda_emulation runs this file as it is.
#include "ops/matmul/gemv_b1_staged_cuda.h"

#include <algorithm>
#include <string>

#include "backend/cuda_buffer.h"
#include "core/error.h"
#include "ops/cuda/async_copy.cuh"
#include "ops/cuda/programmatic_launch.cuh"
#include "ops/matmul/gemv_b1_device.cuh"
#include "ops/matmul/weight_repack.h"

namespace deltabit::cuda {

namespace {

using b1_detail::kUnitsPerGroup;
using b1_detail::plane_index;
constexpr unsigned kFullMask = 0xffffffffu;
constexpr int kMaxWarps = 8;
constexpr int kTileRows = 16;
// A unit group's codes in a stage: [half h: row g or g + 8][lane 4g + t] 16 bytes, lane (g, t) holding unit 4i + t
// of its row — what that lane multiplies, so each quarter-warp reads 128 contiguous bytes (no bank conflict).
constexpr int kGroupCodeBytes = 2 * 32 * 16;
// A block's static shared memory: two rounds' K-slice sums (see the kernel).
using SlicePartials = float[2][kMaxWarps][kTileRows];
constexpr int kStaticSmem = int(sizeof(SlicePartials));

struct StagedArgs {
    const uint4* codes;
    const uint16_t* scales;
    const uint4* planes;
    const ActivationGroupMeta* x_meta;
    float* y;
    int64_t rows;
    int units;            // per row
    int unit_groups;      // ceil(units / 4)
    int splits;
    int stage_groups;     // unit groups a stage holds
    int row_units_shift;  // log2(4 · stage_groups): a stage's units of one row
    int scale_words;      // 4-byte scale words a stage keeps per row: 2 · stage_groups + 1 (a run may start mid-word)
    int stage_bytes;      // stage_groups · kGroupCodeBytes + 16 rows · scale_words · 4
    int plane_words;      // 16-byte words of x's planes, the zero word included
};

// What a lane copies of every stage: codes unit `unit` of the stage's rows first_row, first_row + row_step, ...
// (lanes along a row, so one copy instruction reads whole runs of 4 · stage_groups units of 32 / (4 ·
// stage_groups) rows), landing at byte `to` of the stage and every 64 · row_step bytes after (the compute layout
// above puts row r's unit u at (u / 4) · kGroupCodeBytes + 64 r + (u % 4) · 16); and scale word `scale_word` of
// rows scale_row, scale_row + scale_row_step, ... (scale_row past the tile: no scales for this lane).
struct LaneCopy {
    int unit, first_row, row_step, to;
    int scale_word, scale_row, scale_row_step;
};

__device__ __forceinline__ LaneCopy lane_copy(const StagedArgs& a, int lane) {
    LaneCopy c;
    c.unit = lane & ((1 << a.row_units_shift) - 1);
    c.first_row = lane >> a.row_units_shift;
    c.row_step = 32 >> a.row_units_shift;
    c.to = (c.unit >> 2) * kGroupCodeBytes + 64 * c.first_row + (c.unit & 3) * 16;
    c.scale_row_step = 32 / a.scale_words;
    c.scale_row = lane / a.scale_words < c.scale_row_step ? lane / a.scale_words : kTileRows;
    c.scale_word = lane % a.scale_words;
    return c;
}

// One lane's copies of a warp's stage: unit groups [g0, g1) of the tile's 16 rows. Units past the row (a partial
// last group) are zero-filled, as gemv_q1_0_b1 has zeros there; rows past the matrix are not copied (their sums
// are never stored, and rows do not mix in the mma or the quad's shuffles).
__device__ __forceinline__ void issue_stage(const StagedArgs& a, const LaneCopy& lc, uint8_t* stage, int64_t tile,
                                            int g0, int g1) {
    const int u0 = g0 * kUnitsPerGroup;
    if (lc.unit < (g1 - g0) * kUnitsPerGroup) {
        const bool past_row = u0 + lc.unit >= a.units;  // nothing read: the row's start stands in as the address
        int64_t row = tile * kTileRows + lc.first_row;
        const uint4* from = a.codes + row * a.units + (past_row ? 0 : u0 + lc.unit);
        const int64_t from_step = int64_t(lc.row_step) * a.units;
        uint8_t* to = stage + lc.to;
        for (int r = lc.first_row; r < kTileRows && row < a.rows; r += lc.row_step, row += lc.row_step) {
            cp_async16(to, from, past_row);
            to += 64 * lc.row_step;
            from += from_step;
        }
    }
    // The words holding each row's scales of the stage's units that exist.
    const int n_units = ((g1 * kUnitsPerGroup < a.units) ? g1 * kUnitsPerGroup : a.units) - u0;
    uint32_t* to = reinterpret_cast<uint32_t*>(stage + a.stage_groups * kGroupCodeBytes) + lc.scale_row * a.scale_words +
                   lc.scale_word;
    int64_t row = tile * kTileRows + lc.scale_row;
    uintptr_t first = reinterpret_cast<uintptr_t>(a.scales + row * a.units + u0);
    const uintptr_t first_step = 2 * uintptr_t(lc.scale_row_step) * uintptr_t(a.units);
    for (int r = lc.scale_row; r < kTileRows && row < a.rows; r += lc.scale_row_step, row += lc.scale_row_step) {
        const uintptr_t mine = (first & ~uintptr_t(3)) + 4 * uintptr_t(lc.scale_word);
        if (mine <= ((first + 2 * uintptr_t(n_units - 1)) & ~uintptr_t(3)))
            cp_async4(to, reinterpret_cast<const void*>(mine));
        to += lc.scale_row_step * a.scale_words;
        first += first_step;
    }
}

// A warp's dot of a landed stage: groups [g0, g1) of `tile`, lane (g, t) taking unit 4i + t of rows g and g + 8
// (its codes, its scale out of the row's words) and the planes and group sums from shared memory — the terms
// and the order of gemv_b1_kernel (ops/matmul/gemv_b1_cuda.cu). `meta` is padded with zeros to whole unit groups.
__device__ __forceinline__ void compute_stage(const StagedArgs& a, const uint8_t* stage, const uint4* planes,
                                              const ActivationGroupMeta* meta, int64_t tile, int g0, int g1, int lane,
                                              bool feeds_b, int parity, float& acc0, float& acc1) {
    const int t = lane & 3, g = lane >> 2;
    const int u0 = g0 * kUnitsPerGroup;
    const int64_t row0 = tile * kTileRows + g;
    // A row's words start at the word holding its first scale of the stage, `lead` bytes (0 or 2) into it; this
    // lane's scale of group i is then at byte lead + 2t + 8i: word (lead + 2t) / 4 + 2i, half (lead + 2t) & 2.
    const uintptr_t scales = reinterpret_cast<uintptr_t>(a.scales);
    const int byte0 = int((scales + 2 * uintptr_t(row0 * a.units + u0)) & 2) + 2 * t;
    const int byte1 = int((scales + 2 * uintptr_t((row0 + 8) * a.units + u0)) & 2) + 2 * t;
    const uint32_t* words = reinterpret_cast<const uint32_t*>(stage + a.stage_groups * kGroupCodeBytes);
    const uint32_t* words0 = words + g * a.scale_words + (byte0 >> 2);
    const uint32_t* words1 = words + (g + 8) * a.scale_words + (byte1 >> 2);
    const int shift0 = 8 * (byte0 & 2), shift1 = 8 * (byte1 & 2);
    const uint4* codes = reinterpret_cast<const uint4*>(stage) + lane;
    int64_t unit = int64_t(u0) + t;
    // B: the unit's planes where this lane feeds B, else the zero word for every j.
    const uint4* b = planes + (feeds_b ? plane_index(unit, 0, parity) : 0);
    const int b_step = feeds_b ? 4 * 8 : 0, b_word = feeds_b ? 2 : 0;
    const ActivationGroupMeta* m = meta + unit;
    for (int i = 0; i < g1 - g0; ++i) {
        const bool in_row = unit < a.units;
        const uint16_t d0 = in_row ? uint16_t(words0[2 * i] >> shift0) : uint16_t(0);
        const uint16_t d1 = in_row ? uint16_t(words1[2 * i] >> shift1) : uint16_t(0);
        uint4 bq[4];
#pragma unroll
        for (int j = 0; j < 4; ++j) bq[j] = b[j * b_word];
        b1_detail::accumulate_unit(bq, *m, codes[0], codes[32], d0, d1, acc0, acc1);
        codes += kGroupCodeBytes / 16;
        b += b_step;
        m += kUnitsPerGroup;
        unit += kUnitsPerGroup;
    }
}

// Two blocks of 8 warps an SM at least (≤ 128 registers a thread): this launch's and the next one's.
template <int kStages>
__global__ void __launch_bounds__(32 * kMaxWarps, 2) gemv_b1_staged_kernel(StagedArgs a) {
    extern __shared__ __align__(16) uint8_t staged_smem[];
    __shared__ SlicePartials s_part;  // two rounds' slices: one barrier a round
    const int lane = int(threadIdx.x) & 31, g = lane >> 2, t = lane & 3;
    const int warp = int(threadIdx.x) / 32, warps = int(blockDim.x) / 32;
    const int tiles_per_block = warps / a.splits;
    const int local_tile = warp / a.splits, slice = warp % a.splits;
    const int64_t tiles = (a.rows + kTileRows - 1) / kTileRows;
    const int64_t step = int64_t(gridDim.x) * tiles_per_block;
    const int begin = int(int64_t(slice) * a.unit_groups / a.splits);
    const int end = int(int64_t(slice + 1) * a.unit_groups / a.splits);
    // B: this lane feeds column g with the k-bits of thread t; only the thread whose unit column g reads.
    const bool feeds_b = t == (g >> 1);
    const int parity = g & 1;

    uint8_t* ring = staged_smem + size_t(warp) * kStages * a.stage_bytes;
    uint4* s_planes = reinterpret_cast<uint4*>(staged_smem + size_t(warps) * kStages * a.stage_bytes);
    ActivationGroupMeta* s_meta = reinterpret_cast<ActivationGroupMeta*>(s_planes + a.plane_words);
    const LaneCopy copy = lane_copy(a, lane);

    // The warp's stream: (its tile of each round, its slice) in stages of stage_groups groups; `issue_next`
    // walks it `kStages` stages ahead of the compute, one commit group a stage (empty past the end, so the
    // waits below count alike in every lane and every warp).
    int64_t issue_tile = int64_t(blockIdx.x) * tiles_per_block + local_tile;
    int issue_group = begin;
    auto issue_next = [&](int slot) {
        if (begin < end && issue_tile < tiles) {
            const int last = issue_group + a.stage_groups < end ? issue_group + a.stage_groups : end;
            issue_stage(a, copy, ring + slot * a.stage_bytes, issue_tile, issue_group, last);
            issue_group = last;
            if (issue_group == end) {
                issue_group = begin;
                issue_tile += step;
            }
        }
        cp_async_commit_group();
    };
    // Weights only (written by no kernel of the step): the whole ring before the wait.
    for (int s = 0; s < kStages; ++s) issue_next(s);

    wait_for_predecessor();
    allow_dependents();
    // x's planes and group sums, written by the kernels before: a few loads a thread in flight at once.
    const int threads = int(blockDim.x);
    for (int i0 = int(threadIdx.x); i0 < a.plane_words; i0 += 4 * threads) {
        uint4 v[4];
#pragma unroll
        for (int k = 0; k < 4; ++k)
            if (i0 + k * threads < a.plane_words) v[k] = a.planes[i0 + k * threads];
#pragma unroll
        for (int k = 0; k < 4; ++k)
            if (i0 + k * threads < a.plane_words) s_planes[i0 + k * threads] = v[k];
    }
    for (int i = int(threadIdx.x); i < a.unit_groups * kUnitsPerGroup; i += threads)
        s_meta[i] = i < a.units ? a.x_meta[i] : ActivationGroupMeta{0.0f, 0};
    __syncthreads();

    int slot = 0, buffer = 0;
    // Every warp runs every round (the barrier below), computing only while its tile exists.
    for (int64_t base = int64_t(blockIdx.x) * tiles_per_block; base < tiles; base += step) {
        const int64_t tile = base + local_tile;
        float acc0 = 0.0f, acc1 = 0.0f;
        if (tile < tiles) {
            for (int g0 = begin; g0 < end; g0 += a.stage_groups) {
                cp_async_wait_group<kStages - 1>();  // this lane's copies of the stage
                __syncwarp();                        // and the other lanes'
                const int g1 = g0 + a.stage_groups < end ? g0 + a.stage_groups : end;
                compute_stage(a, ring + slot * a.stage_bytes, s_planes, s_meta, tile, g0, g1, lane, feeds_b, parity,
                              acc0, acc1);
                __syncwarp();  // every lane has read the slot before any refills it
                issue_next(slot);
                slot = slot + 1 == kStages ? 0 : slot + 1;
            }
        }
        acc0 += __shfl_xor_sync(kFullMask, acc0, 1);
        acc0 += __shfl_xor_sync(kFullMask, acc0, 2);
        acc1 += __shfl_xor_sync(kFullMask, acc1, 1);
        acc1 += __shfl_xor_sync(kFullMask, acc1, 2);
        if (a.splits == 1) {
            if (t == 0 && tile < tiles) {
                if (tile * kTileRows + g < a.rows) a.y[tile * kTileRows + g] = acc0;
                if (tile * kTileRows + g + 8 < a.rows) a.y[tile * kTileRows + g + 8] = acc1;
            }
            continue;
        }
        if (t == 0) {
            s_part[buffer][warp][g] = acc0;
            s_part[buffer][warp][g + 8] = acc1;
        }
        // One barrier a round: the buffer written next round is the other one, and the one after that is
        // written only past the next round's barrier, which every reader of this one has reached.
        __syncthreads();
        if (slice == 0 && lane < kTileRows && tile < tiles && tile * kTileRows + lane < a.rows) {
            float sum = s_part[buffer][warp][lane];
            for (int sl = 1; sl < a.splits; ++sl) sum += s_part[buffer][warp + sl][lane];
            a.y[tile * kTileRows + lane] = sum;
        }
        buffer ^= 1;
    }
    cp_async_wait_group<0>();  // the empty groups past the stream's end
}

using StagedKernel = void (*)(StagedArgs);

StagedKernel pick_kernel(int stages) {
    switch (stages) {
        case 2: return gemv_b1_staged_kernel<2>;
        case 3: return gemv_b1_staged_kernel<3>;
        case 4: return gemv_b1_staged_kernel<4>;
        case 6: return gemv_b1_staged_kernel<6>;
        case 8: return gemv_b1_staged_kernel<8>;
        default: return nullptr;
    }
}

int shift_of(int stage_groups) {
    switch (stage_groups) {
        case 1: return 2;
        case 2: return 3;
        case 4: return 4;
        case 8: return 5;
        default: return -1;
    }
}

struct Plan {
    StagedArgs args{};
    StagedKernel kernel = nullptr;
    GemvB1StagedLaunch launch;
};

// Checks the config, sizes the ring and the grid; sets the kernel's shared-memory attributes.
Plan plan_launch(int64_t rows, int64_t cols, const GemvB1StagedConfig& c) {
    const std::string what = "gemv_q1_0_b1_staged: ";
    if (c.warps_per_block < 1 || c.warps_per_block > kMaxWarps || c.splits < 1 || c.warps_per_block % c.splits != 0)
        fail_message(what + "1 to 8 warps a block, a multiple of the K splits; not " + std::to_string(c.warps_per_block) +
                     " warps, " + std::to_string(c.splits) + " splits");
    Plan p;
    p.kernel = pick_kernel(c.stages);
    if (p.kernel == nullptr) fail_message(what + "2, 3, 4, 6 or 8 stages, not " + std::to_string(c.stages));
    const int shift = shift_of(c.stage_groups);
    if (shift < 0) fail_message(what + "stages of 1, 2, 4 or 8 unit groups, not " + std::to_string(c.stage_groups));
    if (c.blocks_per_sm < 1 || c.max_grid < 0)
        fail_message(what + "at least one block an SM and a grid cap of 0 (none) or more; not " +
                     std::to_string(c.blocks_per_sm) + " and " + std::to_string(c.max_grid));
    if (cols <= 0 || cols % kActivationGroup != 0)
        fail_message(what + std::to_string(cols) + " inputs; K must be a positive multiple of 128");
    StagedArgs& a = p.args;
    a.rows = rows;
    a.units = int(cols / kActivationGroup);
    a.unit_groups = (a.units + kUnitsPerGroup - 1) / kUnitsPerGroup;
    a.splits = c.splits;
    a.stage_groups = c.stage_groups;
    a.row_units_shift = shift;
    a.scale_words = 2 * c.stage_groups + 1;
    a.stage_bytes = c.stage_groups * kGroupCodeBytes + kTileRows * a.scale_words * 4;
    a.plane_words = int(b1_detail::plane_bytes(cols) / 16);
    const size_t ring = size_t(c.warps_per_block) * size_t(c.stages) * size_t(a.stage_bytes);
    const size_t smem =
        ring + size_t(a.plane_words) * 16 + size_t(a.unit_groups) * kUnitsPerGroup * sizeof(ActivationGroupMeta);
    // A block's dynamic and static shared memory together within the opt-in limit.
    const int limit = device_attribute(cudaDevAttrMaxSharedMemoryPerBlockOptin, "shared memory limit") - kStaticSmem;
    if (smem > size_t(limit))
        fail_message(what + std::to_string(smem) + " bytes of shared memory a block (ring " + std::to_string(ring) +
                     ", K = " + std::to_string(cols) + "'s planes) exceed the device's " + std::to_string(limit));
    // The device's limit, not this launch's need: a graph may hold launches of the same kernel with more.
    cuda_check(cudaFuncSetAttribute(p.kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, limit),
               "b1 staged gemv shared memory");
    // All shared memory: the SM's split between L1 and shared memory is fixed while blocks run, so the next
    // kernel's block fits beside this one only if this one's launch asked for the largest carve-out.
    cuda_check(cudaFuncSetAttribute(p.kernel, cudaFuncAttributePreferredSharedMemoryCarveout,
                                    int(cudaSharedmemCarveoutMaxShared)),
               "b1 staged gemv carve-out");
    int per_sm = 0;
    cuda_check(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, p.kernel, 32 * c.warps_per_block, smem),
               "b1 staged gemv occupancy");
    if (per_sm < 1) fail_message(what + "a block of this shape does not fit an SM");
    const int sms = device_attribute(cudaDevAttrMultiProcessorCount, "SM count");
    const int64_t tiles = (rows + kTileRows - 1) / kTileRows, tiles_per_block = c.warps_per_block / c.splits;
    const int64_t blocks = (tiles + tiles_per_block - 1) / tiles_per_block;  // one round of tiles each
    int64_t grid = std::min<int64_t>(blocks, int64_t(std::min(c.blocks_per_sm, per_sm)) * sms);
    if (c.max_grid > 0) grid = std::min<int64_t>(grid, c.max_grid);
    if (c.balanced_grid && grid > 0) {
        const int64_t rounds = (blocks + grid - 1) / grid;
        grid = (blocks + rounds - 1) / rounds;
    }
    p.launch = {grid, smem, per_sm, int64_t(ring)};
    return p;
}

}  // namespace

GemvB1StagedLaunch gemv_b1_staged_shape(int64_t rows, int64_t cols, const GemvB1StagedConfig& config) {
    return plan_launch(rows, cols, config).launch;
}

GemvB1StagedLaunch gemv_q1_0_b1_staged(const QuantizedActivationsView& x, const ActivationBitPlanes& planes,
                                       const GemvWeightView& w, float* y, cudaStream_t stream,
                                       const GemvB1StagedConfig& config) {
    if (w.dtype != DType::Q1_0) fail_message("gemv_q1_0_b1_staged: Q1_0 weights only");
    if (w.cols != x.cols || w.cols % kActivationGroup != 0 || w.cols > planes.max_cols)
        fail_message("gemv_q1_0_b1_staged: a matrix of " + std::to_string(w.cols) + " inputs against " +
                     std::to_string(x.cols) + " activations (bit planes for " + std::to_string(planes.max_cols) +
                     "); K must be a multiple of 128");
    if (x.norm_sum_sq != nullptr) fail_message("gemv_q1_0_b1_staged: a deferred-norm view is not supported");
    if (reinterpret_cast<uintptr_t>(w.codes) % 16 != 0 || reinterpret_cast<uintptr_t>(w.scales) % 2 != 0)
        fail_message("gemv_q1_0_b1_staged: codes must be 16-byte aligned and scales 2-byte aligned");
    if (int64_t(gemv_code_row_bytes(w.dtype, w.cols)) != w.cols / kActivationGroup * 16)
        fail_message("gemv_q1_0_b1_staged: unexpected row layout");
    const Plan p = plan_launch(w.rows, w.cols, config);
    if (w.rows == 0) return p.launch;
    StagedArgs args = p.args;
    args.codes = reinterpret_cast<const uint4*>(w.codes);
    args.scales = w.scales;
    args.planes = planes.buffer.get<uint4>();
    args.x_meta = x.meta;
    args.y = y;
    launch_programmatic(p.kernel, dim3(unsigned(p.launch.grid)), dim3(unsigned(32 * config.warps_per_block)),
                        p.launch.smem_bytes, stream, "gemv_b1_staged_kernel", args);
    return p.launch;
}

}  // namespace deltabit::cuda
