// Decode GEMV kernels for quantised weights. The contract and the numerics are in matmul_cuda.h; the
// weight layout in weight_repack.h. Measured numbers: bench/gemv_cuda.cpp's header.
//
// Shape of the work. A thread owns R rows and walks their codes 16 bytes at a time (one "unit": 128
// Q1_0 weights, 64 Q2_0, 32 Q4_0, 16 Q8_0), KT threads of a warp splitting one row's K between them;
// each thread loads the matching activation bytes once and reuses them for its R rows, which keeps
// the shared-memory traffic for x to 1/R byte per weight instead of a full byte. Weight codes are
// streamed past L1 (ld.global.nc.L1::no_allocate); each block copies the activations (K bytes) into
// shared memory once and then walks tiles of rows.
//
// Instruction budget (why dp4a and this bit layout). At ~4.3 TB/s an H200 streams ~3·10^13 Q1_0
// weights per second, ~120 weights per SM per clock, against an issue rate of 128 thread-instructions
// per SM per clock. Per 4 Q1_0 weights this kernel spends one AND (plus one shift per 32 weights) and
// one dp4a: a byte of the AND is 2^s·bit for mask 0x01010101 << s, so four accumulators (one per s)
// collect Σ 2^s·bit·x and are combined once per block as a0 + a1/2 + a2/4 + a3/8 (exact: each a_s is
// a multiple of 2^s). Per 128 weights: 4 SHF + 32 LOP + 32 IDP4A + ~12 to combine and scale,
// ~0.6 instructions per weight.
#include "ops/matmul/matmul_cuda.h"

#include <cuda_fp16.h>

#include "backend/cuda_probe.h"
#include "core/env_switch.h"
#include "ops/cuda/activation_quant.cuh"
#include "ops/cuda/cuda_math.cuh"
#include "ops/matmul/gemv_device.cuh"
#include "ops/matmul/gemv_shapes.h"
#include "ops/cuda/programmatic_launch.cuh"

#include <algorithm>
#include <cstdlib>
#include <map>
#include <mutex>
#include <string>
#include <tuple>

namespace deltabit::cuda {

namespace {

using namespace gemv_detail;

constexpr int kMaxThreadsPerBlock = 256;

// The R rows one thread walks in one tile (rows past the end are clamped for loading, so every lane
// joins the shuffles, and never stored).
template <int R>
struct ThreadRows {
    const uint4* codes[R];
    const uint16_t* scales[R];
    float* y;
    int64_t row0;  // first row (SwiGLU: the output index)
    int64_t rows;
    int64_t tile_row0;  // the tile's first row of its matrix
};

template <DType T, int R, bool kSwiglu>
__device__ __forceinline__ ThreadRows<R> thread_rows(const KernelArgs& a, int64_t tile, int64_t rows_per_tile,
                                                     int64_t row_in_tile) {
    Segment seg = a.seg[0];
#pragma unroll
    for (int i = 1; i < kMaxGemvGroup; ++i)
        if (i < a.n_segments && tile >= a.seg[i].first_tile) seg = a.seg[i];
    ThreadRows<R> t;
    t.y = seg.y;
    t.rows = seg.rows;
    t.tile_row0 = (tile - seg.first_tile) * rows_per_tile;
    t.row0 = t.tile_row0 + row_in_tile;
    if constexpr (kSwiglu) {
        static_assert(R == 2, "a SwiGLU thread walks one gate row and one up row");
        const int64_t row = t.row0 < seg.rows ? t.row0 : seg.rows - 1;
        t.codes[0] = seg.codes + row * a.units_per_row;
        t.scales[0] = seg.scales + row * a.scales_per_row;
        t.codes[1] = a.up_codes + row * a.units_per_row;
        t.scales[1] = a.up_scales + row * a.scales_per_row;
    } else {
#pragma unroll
        for (int r = 0; r < R; ++r) {
            const int64_t row = t.row0 + r < seg.rows ? t.row0 + r : seg.rows - 1;
            t.codes[r] = seg.codes + row * a.units_per_row;
            t.scales[r] = seg.scales + row * a.scales_per_row;
        }
    }
    return t;
}

// Unit u of each of the thread's R rows into one slot of a batch.
template <DType T, int R>
__device__ __forceinline__ void load_slot(const ThreadRows<R>& rows, int u, uint4 (&codes)[R], uint16_t (&d)[R]) {
    using L = Layout<T>;
#pragma unroll
    for (int r = 0; r < R; ++r) {
        codes[r] = load_streaming(rows.codes[r] + u);
        d[r] = __ldg(rows.scales[r] + u * L::unit / L::group);
    }
}

// kUnroll units of each of the thread's R rows, starting at unit u0, KT apart; zeros past the row.
template <DType T, int KT, int R, int kUnroll>
__device__ __forceinline__ void load_units(const ThreadRows<R>& rows, int u0, int units_per_row, uint4 (&codes)[kUnroll][R],
                                           uint16_t (&d)[kUnroll][R]) {
#pragma unroll
    for (int j = 0; j < kUnroll; ++j) {
        const int u = u0 + j * KT;
        if (u < units_per_row) {
            load_slot<T, R>(rows, u, codes[j], d[j]);
        } else {
#pragma unroll
            for (int r = 0; r < R; ++r) {
                codes[j][r] = make_uint4(0, 0, 0, 0);
                d[j][r] = 0;
            }
        }
    }
}

// KT threads per row, R rows per thread (SwiGLU: the gate row and the up row of one output), kLoads code
// loads in flight a thread (GemvLaunchConfig::loads_in_flight: a batch is kLoads / R units of each row); tiles
// [first_tile + blockIdx.x, first_tile + blockIdx.x + gridDim.x, ...) < first_tile + tiles (a grid sized
// to what stays resident, so each block fills its activations once and then streams many tiles).
//
// Order of work, for the overlap with the kernel before (ops/cuda/programmatic_launch.cuh): the first batch of
// weight codes is requested before waiting for that kernel, then the activations it wrote are copied
// into shared memory while those loads are in flight.
// The body of both kernels below (they differ only in their register limit).
template <DType T, int KT, int R, bool kSwiglu, int kLoads>
__device__ __forceinline__ void gemv_tiles(const KernelArgs& a, int64_t first_tile, int64_t tiles) {
    using L = Layout<T>;
    constexpr int kRowGroupsPerWarp = 32 / KT;
    constexpr int kUnroll = kLoads / R;  // units of each row a batch requests
    static_assert(kUnroll >= 1, "a batch holds one unit of each row at least");
    constexpr int kRowsPerThreadGroup = kSwiglu ? 1 : R;  // outputs per group of KT lanes

    extern __shared__ __align__(16) uint8_t smem[];
    uint8_t* x_smem = smem;
    int2* meta_smem = reinterpret_cast<int2*>(smem + size_t(a.x_groups) * kSmemGroupStride);

    const int lane = int(threadIdx.x) & 31;
    const int k_lane = lane % KT;
    const int64_t rows_per_tile = int64_t(blockDim.x / 32) * kRowGroupsPerWarp * kRowsPerThreadGroup;
    const int64_t row_in_tile = (int64_t(threadIdx.x / 32) * kRowGroupsPerWarp + lane / KT) * kRowsPerThreadGroup;

    const int64_t first = blockIdx.x;  // the grid never exceeds the tiles: every block has this one
    ThreadRows<R> rows = thread_rows<T, R, kSwiglu>(a, first_tile + first, rows_per_tile, row_in_tile);
    uint4 codes[kUnroll][R];
    uint16_t d[kUnroll][R];
    load_units<T, KT, R, kUnroll>(rows, k_lane, a.units_per_row, codes, d);

    wait_for_predecessor();
    allow_dependents();
    // Q1_0, whose small GEMVs are the latency-bound ones, takes wide batches; the other types' SwiGLU kernels
    // would spill with them (ptxas -v, CUDA 13.0, sm_90) and load as before, one vector after another.
    constexpr bool kWideCopy = T == DType::Q1_0;
    copy_activations<kWideCopy ? 4 : 1, kWideCopy ? 2 : 1, kWideCopy ? 8 : 1>(a, x_smem, meta_smem);
    __syncthreads();

    // A quantised output's epilogue (barrier, arrival counts, quantising the completed groups) runs for up to
    // kMaxDeferredTiles of a block's tiles together, not after each: in a launch of several rounds of blocks its
    // round trips would otherwise sit between one tile's sums and the next tile's.
    int deferred = 0;
    for (int64_t tile = first; tile < tiles; tile += gridDim.x) {
        float acc[R];
#pragma unroll
        for (int r = 0; r < R; ++r) acc[r] = 0.0f;

        // A tile's first batch was requested before: the first tile's before the wait, the others' at the end of
        // the tile before them. With kRolling its later batches roll: each slot's unit of the next batch is
        // requested as soon as the slot's unit is multiplied, so a row longer than a batch waits for its next
        // units' loads while the rest of this batch is multiplied, not after it (the same units in the same
        // order: the same y). Only at 16 loads: ptxas hoists the rolled loads, which costs registers (Q1_0, CUDA
        // 13: 158 → 163–166 at 16 loads, still three blocks an SM; 80–96 → 118–120 at 4, six blocks → four).
        constexpr bool kRolling = kLoads == 16;
        for (int u0 = k_lane; u0 < a.units_per_row; u0 += KT * kUnroll) {
            if (!kRolling && u0 != k_lane) load_units<T, KT, R, kUnroll>(rows, u0, a.units_per_row, codes, d);
#pragma unroll
            for (int j = 0; j < kUnroll; ++j) {
                const int u = u0 + j * KT;
                if (u >= a.units_per_row) break;
                accumulate_unit<T, R>(
                    x_smem, meta_smem, u, [&](int r) { return codes[j][r]; }, [&](int r) { return d[j][r]; }, acc);
                if (const int later = u + KT * kUnroll; kRolling && later < a.units_per_row)
                    load_slot<T, R>(rows, later, codes[j], d[j]);
            }
        }

        // The next tile's first batch of codes, requested now (the registers are free once the last batch is
        // multiplied): its loads fly during this tile's reduction, stores and quantised-output epilogue.
        const int64_t next = tile + gridDim.x;
        ThreadRows<R> next_rows = rows;
        if (next < tiles) {
            next_rows = thread_rows<T, R, kSwiglu>(a, first_tile + next, rows_per_tile, row_in_tile);
            load_units<T, KT, R, kUnroll>(next_rows, k_lane, a.units_per_row, codes, d);
        }

        reduce_and_store<KT, R, kSwiglu>(a, acc, k_lane, rows.y, rows.row0, rows.rows);
        // A tile holds at most kMaxThreadsPerBlock / 8 · 4 outputs (8 lanes per row, 4 rows per thread at the
        // most; a SwiGLU tile a quarter of that), so it touches at most two groups of 128.
        static_assert(kMaxThreadsPerBlock / 8 * 4 <= kActivationGroup,
                      "a GEMV tile must span at most two activation groups");
        if (a.yq != nullptr && (++deferred == kMaxDeferredTiles || next >= tiles)) {
            quantize_completed_tiles(a, int(rows.tile_row0), int(gridDim.x * rows_per_tile), deferred,
                                     int(rows_per_tile), int(rows.rows));
            deferred = 0;
        }
        rows = next_rows;
    }
}

// 16 or 4 loads in flight: the registers they need (~165 with the rolling batches and ~80 a thread, ptxas CUDA 13).
template <DType T, int KT, int R, bool kSwiglu, int kLoads>
__global__ void __launch_bounds__(kMaxThreadsPerBlock) gemv_kernel(KernelArgs a, int64_t first_tile, int64_t tiles) {
    gemv_tiles<T, KT, R, kSwiglu, kLoads>(a, first_tile, tiles);
}
// 8 loads in flight, held to 96 registers a thread: what lets five 4-warp blocks share an SM's 64K. Q1_0
// takes 99–111 uncapped (the wide activation copy), four blocks an SM, and the Bonsai-4B SwiGLU's 608 tiles
// then do not fit one round of blocks; capped it spills 8–16 bytes. The other dtypes need 91–92 anyway.
template <DType T, int KT, int R, bool kSwiglu, int kLoads>
__global__ void __maxnreg__(96)
    gemv_kernel_96_registers(KernelArgs a, int64_t first_tile, int64_t tiles) {
    gemv_tiles<T, KT, R, kSwiglu, kLoads>(a, first_tile, tiles);
}

__global__ void quantize_activations_kernel(const float* __restrict__ x, int8_t* __restrict__ q,
                                            ActivationGroupMeta* __restrict__ meta, int64_t cols, int64_t groups) {
    // One warp per group of 128: each lane owns 4 consecutive inputs.
    wait_for_predecessor();
    allow_dependents();
    const int64_t g = int64_t(blockIdx.x) * (blockDim.x / 32) + threadIdx.x / 32;
    if (g >= groups) return;  // whole warps leave together, so the shuffles below stay full
    const int lane = int(threadIdx.x) & 31;
    float v[4];
#pragma unroll
    for (int i = 0; i < 4; ++i) {
        const int64_t k = g * kActivationGroup + lane * 4 + i;
        v[i] = k < cols ? x[k] : 0.0f;
    }
    const ActivationGroupMeta group_meta = quantize_group_by_warp(v, lane, q + g * kActivationGroup);
    if (lane == 0) meta[g] = group_meta;
}

using LaunchFn = void (*)(int64_t tiles, int threads, cudaStream_t stream, const KernelArgs& args,
                          int64_t first_tile, int64_t max_grid);
using ResidentFn = int (*)(int threads, size_t smem);
// One compiled kernel: its launch, and how many of its blocks an SM holds.
struct GemvKernel {
    LaunchFn launch = nullptr;
    ResidentFn blocks_per_sm = nullptr;
};

template <DType T, int KT, int R, bool kSwiglu, int kLoads>
constexpr auto gemv_kernel_of() {
    if constexpr (kLoads == 8) return gemv_kernel_96_registers<T, KT, R, kSwiglu, kLoads>;
    else return gemv_kernel<T, KT, R, kSwiglu, kLoads>;
}

// Blocks of `threads` threads and `smem` bytes of shared memory an SM of the current device holds at once (at
// least 1), asked of the driver once per device, threads and smem (the planner asks on every eager call).
template <DType T, int KT, int R, bool kSwiglu, int kLoads>
int blocks_per_sm(int threads, size_t smem) {
    const auto kernel = gemv_kernel_of<T, KT, R, kSwiglu, kLoads>();
    int device = 0;
    cuda_check(cudaGetDevice(&device), "current device");
    static std::mutex mutex;
    static std::map<std::tuple<int, int, size_t>, int> known;
    const std::lock_guard<std::mutex> lock(mutex);
    const auto key = std::make_tuple(device, threads, smem);
    if (const auto at = known.find(key); at != known.end()) return at->second;
    if (smem > 48 * 1024) {  // the query needs it allowed; each launch sets its own before launching
        cuda_check(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(smem)),
                   "gemv shared memory");
    }
    int per_sm = 0;
    cuda_check(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kernel, threads, smem), "occupancy");
    per_sm = std::max(per_sm, 1);
    known.emplace(key, per_sm);  // only once the driver answered: a failed query is asked again
    return per_sm;
}

// Grid: no more blocks than stay resident at once (each fills its activations once), never more than
// there are tiles, nor than max_grid where that is set (GemvLaunchConfig::max_grid).
template <DType T, int KT, int R, bool kSwiglu, int kLoads>
void launch(int64_t tiles, int threads, cudaStream_t stream, const KernelArgs& args, int64_t first_tile,
            int64_t max_grid) {
    const auto kernel = gemv_kernel_of<T, KT, R, kSwiglu, kLoads>();
    const size_t smem = activation_smem_bytes(args.x_groups);
    const int sms = device_attribute(cudaDevAttrMultiProcessorCount, "SM count");
    const int smem_limit = device_attribute(cudaDevAttrMaxSharedMemoryPerBlockOptin, "smem limit");
    if (smem > size_t(smem_limit)) {
        fail_message("cuda gemv: " + std::to_string(args.x_groups * kActivationGroup) +
                     " inputs need " + std::to_string(smem) + " bytes of shared memory, the device has " +
                     std::to_string(smem_limit));
    }
    if (smem > 48 * 1024) {
        cuda_check(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(smem)),
                   "gemv shared memory");
    }
    const int per_sm = blocks_per_sm<T, KT, R, kSwiglu, kLoads>(threads, smem);
    int64_t grid = std::min<int64_t>(tiles, int64_t(per_sm) * sms);
    if (max_grid > 0) grid = std::min(grid, max_grid);
    launch_programmatic(kernel, dim3(unsigned(grid)), dim3(unsigned(threads)), smem, stream, "gemv_kernel", args,
                        first_tile, tiles);
}

// The kernels compiled: every shape with 16 loads in flight; the planned rows_per_thread 2 also with 8 and 4.
bool loads_compiled(int loads_in_flight, int rows_per_thread) {
    return loads_in_flight == 16 || (rows_per_thread == 2 && (loads_in_flight == 8 || loads_in_flight == 4));
}

template <DType T, int KT, int R, bool kSwiglu, int kLoads>
GemvKernel kernel_entry() {
    return {launch<T, KT, R, kSwiglu, kLoads>, blocks_per_sm<T, KT, R, kSwiglu, kLoads>};
}

template <bool kSwiglu>
GemvKernel pick_kernel(DType t, const GemvLaunchConfig& c) {
    if (!loads_compiled(c.loads_in_flight, c.rows_per_thread)) return {};
    return pick_gemv_shape<kSwiglu>(
        t, c.lanes_per_row, c.rows_per_thread,
        [&c](auto shape) -> GemvKernel {
            using S = decltype(shape);
            if constexpr (S::rows == 2) {
                if (c.loads_in_flight == 8) return kernel_entry<S::type, S::lanes, S::rows, kSwiglu, 8>();
                if (c.loads_in_flight == 4) return kernel_entry<S::type, S::lanes, S::rows, kSwiglu, 4>();
            }
            return kernel_entry<S::type, S::lanes, S::rows, kSwiglu, 16>();
        },
        GemvKernel{});
}

// DELTABIT_GEMV_LOADS_IN_FLIGHT=n (16, 8 or 4; unset: planned per shape), an experiment switch; 0 when unset.
// Any other value stops the run with an error (every GEMV plans through here), never a silent default.
int loads_in_flight_override() {
    static const int loads =
        env_number("DELTABIT_GEMV_LOADS_IN_FLIGHT", {16, 8, 4}, 0, "the loads are planned per launch");
    return loads;
}

int64_t device_max_grid_x() {
    return device_attribute(cudaDevAttrMaxGridDimX, "max grid dim x");
}

std::string shape_text(const GemvWeightView& w) {
    return std::string(dtype_name(w.dtype)) + " " + std::to_string(w.rows) + "×" + std::to_string(w.cols);
}

}  // namespace

GemvLaunchConfig plan_gemv(DType t, int64_t rows, int64_t cols, GemvKind kind) {
    // Chosen from the sweep of bench_gemv_cuda on an H200 (Bonsai-27B shapes, all five dtypes' kernels
    // parity-tested): small N wants more threads per row to put enough loads in flight, large N wants
    // fewer (less shuffle and idle-lane waste); 2 rows per thread was best or within 1% everywhere
    // once the activations moved to shared memory (Q1_0: lanes 8 at N ≥ 16384, 16 below; e.g.
    // attn_qkv 5.3 µs vs 7.0 µs for lanes8/rows4).
    GemvLaunchConfig c;
    c.lanes_per_row = rows >= 16384 ? 8 : rows >= 4096 ? 16 : 32;
    c.rows_per_thread = 2;
    c.warps_per_block = 4;
    // Fewer loads in flight where the smaller kernel's extra resident blocks take the launch's row tiles
    // through fewer rounds (planned_gemv_loads). Measured (H200, docs/bench-notes.md "Loads in flight"): the
    // Bonsai-4B SwiGLU pair (608 tiles; 3 blocks an SM at 16 loads, 5 at 8) 798 → 839 tok/s; fewer loads
    // without fewer rounds (every 4B GEMV, the 27B's lanes-16 shapes) were slower (27B 291 → 286).
    if (const int forced = loads_in_flight_override(); forced != 0) {
        if (loads_compiled(forced, c.rows_per_thread)) c.loads_in_flight = forced;
    } else {
        c.loads_in_flight = planned_gemv_loads(t, c, rows, cols, kind);
    }
    return c;
}

int planned_loads_in_flight(DType t, int64_t cols, int lanes_per_row, int rows_per_thread) {
    if (lanes_per_row <= 0 || !gemv_layout_supports(t)) return 16;
    const int64_t units = int64_t(gemv_code_row_bytes(t, cols) / 16);
    const int64_t lane_loads = (units + lanes_per_row - 1) / lanes_per_row * rows_per_thread;
    for (const int loads : {4, 8})
        if (lane_loads <= loads && loads_compiled(loads, rows_per_thread)) return loads;
    return 16;
}

int planned_gemv_loads(DType t, const GemvLaunchConfig& config, int64_t rows, int64_t cols, GemvKind kind) {
    GemvLaunchConfig candidate = config;
    candidate.loads_in_flight = 16;
    const int64_t rounds16 = gemv_tile_rounds(t, candidate, rows, cols, kind);
    if (rounds16 <= 1) return 16;
    // One round of blocks, even where a lane's row then takes two or more batches: the most loads that do it.
    for (const int loads : {8, 4}) {
        if (!loads_compiled(loads, config.rows_per_thread)) continue;
        candidate.loads_in_flight = loads;
        if (gemv_tile_rounds(t, candidate, rows, cols, kind) == 1) return loads;
    }
    // Else one batch, where it still saves rounds.
    candidate.loads_in_flight = planned_loads_in_flight(t, cols, config.lanes_per_row, config.rows_per_thread);
    if (candidate.loads_in_flight < 16 && gemv_tile_rounds(t, candidate, rows, cols, kind) < rounds16)
        return candidate.loads_in_flight;
    return 16;
}

int64_t gemv_tile_rounds(DType t, const GemvLaunchConfig& config, int64_t rows, int64_t cols, GemvKind kind) {
    const GemvKernel kernel = kind == GemvKind::swiglu ? pick_kernel<true>(t, config) : pick_kernel<false>(t, config);
    if (kernel.launch == nullptr || rows <= 0 || cols <= 0 || device_count() == 0) return 0;
    const int64_t rows_per_tile = int64_t(config.warps_per_block) * (32 / config.lanes_per_row) * config.rows_per_thread;
    const int64_t tiles = (rows + rows_per_tile - 1) / rows_per_tile;
    const int sms = device_attribute(cudaDevAttrMultiProcessorCount, "SM count");
    const int64_t resident = int64_t(kernel.blocks_per_sm(config.warps_per_block * 32,
                                                          activation_smem_bytes(int(activation_groups(cols))))) * sms;
    return (tiles + resident - 1) / resident;
}

// Layout: q [groups·128] | meta [groups] | arrivals [groups] | norm_sum_sq [groups].
ActivationScratch::ActivationScratch(int64_t max_cols_)
    : buffer(size_t(activation_groups(max_cols_)) *
             (kActivationGroup + sizeof(ActivationGroupMeta) + sizeof(int32_t) + sizeof(float))),
      max_cols(max_cols_) {
    const size_t groups = size_t(activation_groups(max_cols));
    const size_t counters = groups * (kActivationGroup + sizeof(ActivationGroupMeta));
    if (groups != 0) {
        cuda_check(cudaMemset(buffer.get<uint8_t>() + counters, 0, groups * sizeof(int32_t)), "zero arrivals");
        // A device memset need not have finished when cudaMemset returns; a kernel on a non-blocking stream
        // would not wait for it.
        cuda_check(cudaStreamSynchronize(nullptr), "zero arrivals");
    }
}

QuantizedActivationsView ActivationScratch::view(int64_t cols) const {
    if (cols > max_cols) {
        fail_message("cuda matmul: activation scratch holds " + std::to_string(max_cols) + " inputs, asked for " +
                     std::to_string(cols));
    }
    auto* base = buffer.get<uint8_t>();
    const size_t groups = size_t(activation_groups(max_cols));
    const size_t q_bytes = groups * kActivationGroup;
    QuantizedActivationsView v;
    v.q = reinterpret_cast<int8_t*>(base);
    v.meta = reinterpret_cast<ActivationGroupMeta*>(base + q_bytes);
    v.cols = cols;
    v.arrivals = reinterpret_cast<int32_t*>(base + q_bytes + groups * sizeof(ActivationGroupMeta));
    return v;
}

QuantizedActivationsView ActivationScratch::deferred_norm_view(int64_t cols, float norm_eps) const {
    QuantizedActivationsView v = view(cols);
    const size_t groups = size_t(activation_groups(max_cols));
    v.norm_sum_sq = reinterpret_cast<float*>(reinterpret_cast<uint8_t*>(v.arrivals) + groups * sizeof(int32_t));
    v.norm_eps = norm_eps;
    return v;
}

void require_plain_view(const QuantizedActivationsView& view, const char* who) {
    if (view.norm_sum_sq != nullptr)
        fail_message(std::string(who) + ": writes plain activations, not into a deferred-norm view "
                     "(only gemv_quantized_add_norm writes those)");
}

void quantize_activations(const float* x, const QuantizedActivationsView& out, cudaStream_t stream) {
    require_plain_view(out, "cuda quantize_activations");
    const int64_t groups = activation_groups(out.cols);
    if (groups == 0) return;
    constexpr int kWarps = 8;
    const int64_t blocks = (groups + kWarps - 1) / kWarps;
    if (blocks > device_max_grid_x()) fail_message("cuda quantize_activations: " + std::to_string(out.cols) + " inputs is too many");
    launch_programmatic(quantize_activations_kernel, dim3(unsigned(blocks)), dim3(kWarps * 32), 0, stream,
                        "quantize_activations_kernel", x, out.q, out.meta, out.cols, groups);
}

namespace {

void check_weights(const QuantizedActivationsView& x, const GemvWeightView& w) {
    if (!gemv_layout_supports(w.dtype) || !row_fits_blocks(w.dtype, uint64_t(w.cols)) || w.cols <= 0 ||
        w.rows < 0) {
        fail_message("cuda gemv: unsupported weights " + shape_text(w));
    }
    if (x.cols != w.cols) {
        fail_message("cuda gemv: " + std::to_string(x.cols) + " activations for weights " + shape_text(w));
    }
}

std::string config_text(const GemvLaunchConfig& c) {
    return "lanes_per_row " + std::to_string(c.lanes_per_row) + ", rows_per_thread " +
           std::to_string(c.rows_per_thread) + ", warps_per_block " + std::to_string(c.warps_per_block) +
           ", loads_in_flight " + std::to_string(c.loads_in_flight);
}

}  // namespace

namespace gemv_detail {

KernelArgs make_gemv_args(const QuantizedActivationsView& x, std::span<const GemvOutput> outputs,
                          const GemvWeightView* up, const OutputEpilogue& epilogue, const char* what) {
    if (outputs.empty() || outputs.size() > size_t(kMaxGemvGroup))
        fail_message("cuda gemv: a launch takes 1 to " + std::to_string(kMaxGemvGroup) + " matrices, got " +
                     std::to_string(outputs.size()));
    const GemvWeightView& first = outputs[0].w;
    for (const GemvOutput& o : outputs) {
        check_weights(x, o.w);
        if (o.w.dtype != first.dtype || o.w.cols != first.cols)
            fail_message("cuda gemv: matrices of one launch must share dtype and K: " + shape_text(first) + " and " +
                         shape_text(o.w));
    }
    KernelArgs args{};
    args.xq = x.q;
    args.x_meta = x.meta;
    args.units_per_row = int(gemv_code_row_bytes(first.dtype, first.cols) / 16);
    args.scales_per_row = int(first.cols / dtype_info(first.dtype).block_elems);
    args.x_groups = int(activation_groups(first.cols));
    args.x_sum_sq = x.norm_sum_sq;
    args.x_cols = int(x.cols);
    args.x_norm_eps = x.norm_eps;
    for (const GemvOutput& o : outputs) {
        if (o.w.rows == 0) continue;  // no rows: nothing to compute for it
        args.seg[args.n_segments++] = {reinterpret_cast<const uint4*>(o.w.codes), o.w.scales, o.y, o.w.rows, 0};
    }
    if (up != nullptr) {
        args.up_codes = reinterpret_cast<const uint4*>(up->codes);
        args.up_scales = up->scales;
    }
    if (const QuantizedActivationsView* yq = epilogue.y_quantized; yq != nullptr) {
        if (yq->cols != first.rows)
            fail_message(std::string(what) + ": the quantised output needs a view of " + std::to_string(first.rows) +
                         " inputs, got " + std::to_string(yq->cols));
        if (yq->arrivals == nullptr)
            fail_message(std::string(what) + ": the quantised output's view has no arrival counters (take it from an "
                         "ActivationScratch)");
        if (yq->q == x.q)
            fail_message(std::string(what) + ": the quantised output must not share the input's scratch");
        if (epilogue.norm_w == nullptr) require_plain_view(*yq, what);
        if (epilogue.norm_w != nullptr && yq->norm_sum_sq == nullptr)
            fail_message(std::string(what) + ": the output must be a deferred-norm view "
                         "(ActivationScratch::deferred_norm_view)");
        args.yq = yq->q;
        args.yq_meta = yq->meta;
        args.arrivals = yq->arrivals;
        args.add_to_y = epilogue.norm_w != nullptr;
        args.norm_w = epilogue.norm_w;
        args.yq_sum_sq = epilogue.norm_w != nullptr ? yq->norm_sum_sq : nullptr;
    }
    return args;
}

}  // namespace gemv_detail

namespace {

// The launch of matrices sharing x (gemv_quantized_group; a SwiGLU pair counts as one matrix whose
// outputs are pairs of rows), split along the tiles so that no launch exceeds the grid limit.
template <bool kSwiglu>
GemvLaunchReport launch_group(const QuantizedActivationsView& x, std::span<const GemvOutput> outputs,
                              const GemvWeightView* up, cudaStream_t stream, const GemvLaunchConfig& config,
                              const OutputEpilogue& epilogue = {}) {
    const char* what = kSwiglu ? "cuda gemv (swiglu)" : epilogue.norm_w != nullptr ? "cuda gemv (add norm)" : "cuda gemv";
    KernelArgs args = make_gemv_args(x, outputs, up, epilogue, what);
    const LaunchFn fn = pick_kernel<kSwiglu>(outputs[0].w.dtype, config).launch;
    if (fn == nullptr || config.warps_per_block < 1 || config.warps_per_block * 32 > kMaxThreadsPerBlock) {
        fail_message(std::string(what) + ": no kernel for " + config_text(config));
    }
    GemvLaunchReport report;
    report.config = config;
    const int64_t rows_per_tile =
        int64_t(config.warps_per_block) * (32 / config.lanes_per_row) * (kSwiglu ? 1 : config.rows_per_thread);
    for (int i = 0; i < args.n_segments; ++i) {
        args.seg[i].first_tile = report.blocks;
        report.blocks += (args.seg[i].rows + rows_per_tile - 1) / rows_per_tile;
    }
    if (report.blocks == 0) return report;
    const int64_t max_blocks = config.max_blocks > 0 ? config.max_blocks : device_max_grid_x();
    for (int64_t first_tile = 0; first_tile < report.blocks; first_tile += max_blocks) {
        fn(std::min(max_blocks, report.blocks - first_tile), config.warps_per_block * 32, stream, args, first_tile,
           config.max_grid);
        ++report.launches;
    }
    return report;
}

int64_t total_rows(std::span<const GemvOutput> outputs) {
    int64_t rows = 0;
    for (const GemvOutput& o : outputs) rows += o.w.rows;
    return rows;
}

}  // namespace

GemvLaunchReport gemv_quantized(const QuantizedActivationsView& x, const GemvWeightView& w, float* y,
                                cudaStream_t stream, const GemvLaunchConfig& config) {
    const GemvOutput one[1] = {{w, y}};
    return launch_group<false>(x, one, nullptr, stream, config);
}

GemvLaunchReport gemv_quantized(const QuantizedActivationsView& x, const GemvWeightView& w, float* y,
                                cudaStream_t stream) {
    return gemv_quantized(x, w, y, stream, plan_gemv(w.dtype, w.rows, w.cols));
}

GemvLaunchReport gemv_quantized_group(const QuantizedActivationsView& x, std::span<const GemvOutput> outputs,
                                      cudaStream_t stream, const GemvLaunchConfig& config) {
    return launch_group<false>(x, outputs, nullptr, stream, config);
}

GemvLaunchReport gemv_quantized_group(const QuantizedActivationsView& x, std::span<const GemvOutput> outputs,
                                      cudaStream_t stream) {
    if (outputs.empty()) fail_message("cuda gemv: a launch takes at least one matrix");
    return launch_group<false>(x, outputs, nullptr, stream, plan_gemv(outputs[0].w.dtype, total_rows(outputs), outputs[0].w.cols));
}

GemvLaunchReport gemv_quantized_swiglu(const QuantizedActivationsView& x, const GemvWeightView& gate,
                                       const GemvWeightView& up, float* y, cudaStream_t stream,
                                       const GemvLaunchConfig& config, const QuantizedActivationsView* y_quantized) {
    if (gate.dtype != up.dtype || gate.rows != up.rows || gate.cols != up.cols)
        fail_message("cuda gemv (swiglu): gate " + shape_text(gate) + " and up " + shape_text(up) +
                     " must have one shape and dtype");
    check_weights(x, up);
    const GemvOutput pair[1] = {{gate, y}};
    return launch_group<true>(x, pair, &up, stream, config, OutputEpilogue{y_quantized, nullptr});
}

GemvLaunchReport gemv_quantized_swiglu(const QuantizedActivationsView& x, const GemvWeightView& gate,
                                       const GemvWeightView& up, float* y, cudaStream_t stream,
                                       const QuantizedActivationsView* y_quantized) {
    // Planned as the two matrices' rows in one grid; the pair takes two rows per thread.
    GemvLaunchConfig config = plan_gemv(gate.dtype, 2 * gate.rows, gate.cols, GemvKind::swiglu);
    config.rows_per_thread = 2;
    return gemv_quantized_swiglu(x, gate, up, y, stream, config, y_quantized);
}

GemvLaunchReport gemv_quantized_add_norm(const QuantizedActivationsView& x, const GemvWeightView& w, float* residual,
                                         const float* norm_w, const QuantizedActivationsView& out, cudaStream_t stream,
                                         const GemvLaunchConfig& config) {
    if (norm_w == nullptr) fail_message("cuda gemv (add norm): no norm weights for " + shape_text(w));
    const GemvOutput one[1] = {{w, residual}};
    return launch_group<false>(x, one, nullptr, stream, config, OutputEpilogue{&out, norm_w});
}

GemvLaunchReport gemv_quantized_add_norm(const QuantizedActivationsView& x, const GemvWeightView& w, float* residual,
                                         const float* norm_w, const QuantizedActivationsView& out,
                                         cudaStream_t stream) {
    return gemv_quantized_add_norm(x, w, residual, norm_w, out, stream, plan_gemv(w.dtype, w.rows, w.cols));
}

void matmul(const float* x, const GemvWeightView& w, int64_t n_tokens, float* y, const ActivationScratch& scratch,
            cudaStream_t stream) {
    if (n_tokens != 1) {
        fail_message("cuda matmul: only decode (n_tokens = 1) is implemented, got " + std::to_string(n_tokens) +
                     " tokens for " + shape_text(w));
    }
    const QuantizedActivationsView xq = scratch.view(w.cols);
    quantize_activations(x, xq, stream);
    gemv_quantized(xq, w, y, stream);
}

GemvWeights upload_gemv_weights(const GemvRepacked& packed) {
    GemvWeights out;
    out.dtype = packed.dtype;
    out.rows = packed.rows;
    out.cols = packed.cols;
    out.codes = DeviceBuffer(packed.codes.size());
    out.codes.upload(packed.codes.data(), packed.codes.size());
    // Padded to whole 16-byte words with zeros (GemvWeightView::scales: the warp-specialised GEMM copies whole words).
    const size_t scale_bytes = packed.scales.size() * sizeof(uint16_t);
    const size_t padded = (scale_bytes + 15) / 16 * 16;
    out.scales = DeviceBuffer(padded);
    if (padded != scale_bytes) {
        const uint8_t zeros[16] = {};
        out.scales.upload(zeros, padded - scale_bytes, scale_bytes);
    }
    out.scales.upload(packed.scales.data(), scale_bytes);
    return out;
}

GemvWeights upload_gemv_weights(const WeightView& host_weights, const char* name) {
    const GemvRepacked packed = repack_for_gemv(host_weights, name);
    verify_gemv_repack(host_weights, packed, name);
    return upload_gemv_weights(packed);
}

}  // namespace deltabit::cuda
