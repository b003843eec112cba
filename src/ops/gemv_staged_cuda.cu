// The staged decode GEMV (GemvLaunchConfig::staged): weights brought into shared memory by the copy engine,
// requested before the kernel before has finished. Contract and numerics: ops/matmul_cuda.h; the arithmetic
// per row is gemv_kernel's in ops/matmul_cuda.cu (same unit dots, same order, same butterfly), so for one
// lanes_per_row and rows_per_thread the two kernels' outputs are equal bit for bit.
//
// Why. A Bonsai-27B decode step is ~250 GEMVs of 4–25 MB each, and one kernel alone streams 12 MiB at only
// half the copy bandwidth (deltabit bench's floors line): the DRAM ramp and drain of each kernel, and the
// chain wait → activation copy → stream → epilogue, are paid once per matrix. The classic kernel can hide
// only one batch of codes (its registers) behind the wait, and its grid fills every SM, so the next GEMV's
// blocks become resident only in its tail. Here a block takes under half an SM (8 warps, ≤ 112 KB of
// shared memory, ≤ 128 registers a thread) and the next GEMV's block lives beside it; before its
// wait_for_predecessor it has the copy engine fetch as many of its tiles as its ring holds — for the
// 27B FFN and output matrices nearly all of its share — so while one GEMV computes, the next one's weights
// stream from DRAM.
//
// Measured (H200, docs/bench.md "The staged GEMV"): faster than the classic kernel on chains of large GEMVs
// (ffn_down 6.92 vs 8.39 µs) but slower on small ones and on the LM head (61.8 vs 55.2 µs), and slower in the
// Bonsai-27B decode step (251.5 vs 288.9 tok/s) — so the planner takes it only with DELTABIT_GEMV_STAGED=1.
//
// Work. The row space of a launch (every matrix of a group, each starting a new tile; a SwiGLU pair counts
// its outputs) is cut into tiles of tile_rows rows; block b owns tiles [b·tiles/grid, (b+1)·tiles/grid).
// Tile k of a block lands in ring slot k % slots: its codes rows (and the up matrix's), then its fp16
// scales as whole 16-byte words (the run of scales begins `lead` bytes into its first word). A tile is cut
// into warp items of (32 / lanes) row groups × rows_per_thread rows (SwiGLU: × 1 output); the block's
// items go to its 8 warps in turn across tiles. Every warp waits for every tile (even one with no item of
// it), so no warp runs more than a ring ahead; the last warp done with a tile refills its slot with the tile
// `slots` later. Outputs are stored as each item finishes; the quantised-output epilogue runs once per block
// over its run of rows.
#include "ops/gemv_device.cuh"

#include <algorithm>
#include <cstdlib>
#include <string>

#include "backend/cuda_probe.h"
#include "core/env_switch.h"
#include "ops/bulk_copy.cuh"
#include "ops/gemv_stage.cuh"
#include "ops/gemv_shapes.h"
#include "ops/programmatic_launch.cuh"

namespace deltabit::cuda {

namespace gemv_detail {

namespace {

constexpr int kStagedWarps = 8;
constexpr int kStagedThreads = kStagedWarps * 32;
// Two blocks per SM: the H200's 228 KB of shared memory per SM less 1 KB reserved per block, halved, less
// the epilogue's static shared memory.
constexpr size_t kStagedSmemBudget = 112 * 1024;
constexpr int kMaxSlots = 16;
// Tiles of at least this many bytes (whole warp items). Measured on the H200 (bench_gemv_cuda, chains of
// GEMVs with the copies cycled past L2): 6 KB tiles streamed the LM head at 1.97 TB/s and ffn_down in
// 8.29 µs, 24 KB tiles at 2.82 TB/s and in 7.02 µs (the classic kernel: 3.26 TB/s, 8.40 µs) — each tile
// costs a barrier round and a refill, so fewer, larger tiles; a block still owns ~4 of a Bonsai-27B FFN
// matrix. DELTABIT_STAGED_TILE_BYTES=n overrides it (an experiment switch).
int64_t target_tile_bytes() {
    static const int64_t bytes = [] {
        const char* v = std::getenv("DELTABIT_STAGED_TILE_BYTES");
        return v != nullptr && std::atoll(v) > 0 ? std::max<int64_t>(1024, std::atoll(v)) : int64_t(24 * 1024);
    }();
    return bytes;
}
// A staged block's run of rows with a quantised output touches at most kMaxCompletedGroups groups.
constexpr int64_t kMaxEpilogueRows = (kMaxCompletedGroups - 2) * kActivationGroup;

struct StagedArgs {
    int tile_rows;         // rows (SwiGLU: outputs) per tile, a whole number of warp items
    int64_t tiles;         // over all segments
    int slots;             // ring slots
    int slot_bytes;        // bytes of one slot (a multiple of 128)
    int code_row_bytes;    // bytes of one row of codes
    int scale_row_bytes;   // bytes of one row of fp16 scales
    int codes_area_bytes;  // tile_rows · code_row_bytes: one matrix's codes in a slot
    int scale_area_bytes;  // one matrix's scales in a slot: tile_rows rows as whole 16-byte words
};

// Tile `tile` of the launch: its segment, its first row there and how many rows it holds.
struct StagedTile {
    int seg;
    int64_t row0;
    int rows;
};
__device__ __forceinline__ StagedTile staged_tile(const KernelArgs& a, const StagedArgs& s, int64_t tile) {
    int seg = 0;
#pragma unroll
    for (int i = 1; i < kMaxGemvGroup; ++i)
        if (i < a.n_segments && tile >= a.seg[i].first_tile) seg = i;
    const int64_t row0 = (tile - a.seg[seg].first_tile) * s.tile_rows;
    const int64_t left = a.seg[seg].rows - row0;
    return {seg, row0, int(left < s.tile_rows ? left : s.tile_rows)};
}

#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900

// One thread: the bulk copies of a tile into its slot, announced on the slot's barrier.
template <bool kSwiglu>
__device__ void issue_tile(const KernelArgs& a, const StagedArgs& s, int64_t tile, uint8_t* slot, uint64_t* full,
                           uint64_t l2_policy) {
    const StagedTile t = staged_tile(a, s, tile);
    const Segment& seg = a.seg[t.seg];
    const StageLayout layout{s.code_row_bytes, s.scale_row_bytes, s.codes_area_bytes, s.scale_area_bytes};
    const uint8_t* codes = reinterpret_cast<const uint8_t*>(seg.codes) + t.row0 * s.code_row_bytes;
    const uint8_t* up_codes =
        kSwiglu ? reinterpret_cast<const uint8_t*>(a.up_codes) + t.row0 * s.code_row_bytes : nullptr;
    stage_rows(layout, codes, seg.scales + t.row0 * a.scales_per_row, up_codes,
               kSwiglu ? a.up_scales + t.row0 * a.scales_per_row : nullptr, t.rows, slot, full, l2_policy);
}

#endif

// KT threads per row, R rows per thread (SwiGLU: the gate row and the up row of one output).
template <DType T, int KT, int R, bool kSwiglu>
__global__ void __launch_bounds__(kStagedThreads, 2) gemv_staged_kernel(KernelArgs a, StagedArgs s) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    constexpr int kRowGroupsPerWarp = 32 / KT;
    constexpr int kRowsPerGroup = kSwiglu ? 1 : R;  // outputs per group of KT lanes
    constexpr int kItemRows = kRowGroupsPerWarp * kRowsPerGroup;

    extern __shared__ __align__(128) uint8_t smem[];
    uint8_t* ring = smem;
    uint8_t* x_smem = ring + size_t(s.slots) * s.slot_bytes;
    int2* meta_smem = reinterpret_cast<int2*>(x_smem + size_t(a.x_groups) * kSmemGroupStride);
    uint64_t* full = reinterpret_cast<uint64_t*>(meta_smem + a.x_groups);  // 8-byte aligned: see the host
    int* done = reinterpret_cast<int*>(full + s.slots);

    const int tid = int(threadIdx.x), lane = tid & 31, warp = tid / 32;
    const int64_t tile_begin = int64_t(blockIdx.x) * s.tiles / gridDim.x;
    const int64_t tile_end = int64_t(blockIdx.x + 1) * s.tiles / gridDim.x;
    const int n_tiles = int(tile_end - tile_begin);
    const int slots = n_tiles < s.slots ? n_tiles : s.slots;

    uint64_t l2_policy = 0;
    if (tid == 0) {
        for (int i = 0; i < slots; ++i) {
            mbarrier_init(full + i, 1);
            done[i] = 0;
        }
        fence_mbarrier_init();
    }
    __syncthreads();
    // Weights only (written by no kernel of the step): requested before the wait.
    if (tid == 0) {
        l2_policy = l2_evict_first_policy();
        for (int k = 0; k < slots; ++k)
            issue_tile<kSwiglu>(a, s, tile_begin + k, ring + size_t(k) * s.slot_bytes, full + k, l2_policy);
    }

    wait_for_predecessor();
    allow_dependents();
    copy_activations<4, 2, 8>(a, x_smem, meta_smem);
    __syncthreads();

    const int k_lane = lane % KT;
    const int row_in_item = (lane / KT) * kRowsPerGroup;
    const int items_per_tile = s.tile_rows / kItemRows;
    for (int k = 0; k < n_tiles; ++k) {
        const int slot_index = k % slots;
        uint8_t* slot = ring + size_t(slot_index) * s.slot_bytes;
        mbarrier_wait_parity(full + slot_index, uint32_t(k / slots) & 1u);
        const StagedTile t = staged_tile(a, s, tile_begin + k);
        const Segment& seg = a.seg[t.seg];
        const StageLayout layout{s.code_row_bytes, s.scale_row_bytes, s.codes_area_bytes, s.scale_area_bytes};
        const StagedScales scales = staged_scales<kSwiglu>(layout, slot, seg.scales + t.row0 * a.scales_per_row,
                                                           kSwiglu ? a.up_scales + t.row0 * a.scales_per_row : nullptr);

        // The block's items in turn: item g of the block (g = k·items_per_tile + i) is warp g % 8's.
        const int first_item = (warp - (k * items_per_tile) % kStagedWarps + kStagedWarps) % kStagedWarps;
        for (int item = first_item; item < items_per_tile && item * kItemRows < t.rows; item += kStagedWarps) {
            compute_staged_item<T, KT, R, kSwiglu>(a, layout, slot, scales.gate, scales.up,
                                                   item * kItemRows + row_in_item, t.rows, k_lane, x_smem, meta_smem,
                                                   seg.y + t.row0);
        }

        // The last warp done with this tile hands its slot to the tile `slots` later.
        __syncwarp();
        if (lane == 0) {
            __threadfence_block();
            if (atomicAdd(done + slot_index, 1) == kStagedWarps - 1) {
                done[slot_index] = 0;
                if (k + slots < n_tiles) {
                    fence_proxy_async_shared();
                    issue_tile<kSwiglu>(a, s, tile_begin + k + slots, slot, full + slot_index, l2_evict_first_policy());
                }
            }
        }
    }

    if (a.yq != nullptr && n_tiles > 0) {
        // One matrix (the host allows a quantised output only so): the block's rows are one run.
        const StagedTile first = staged_tile(a, s, tile_begin);
        const StagedTile last = staged_tile(a, s, tile_end - 1);
        quantize_completed_groups(a, first.row0, last.row0 + last.rows - first.row0, a.seg[0].rows);
    }
#else
    __trap();  // the host launches this kernel only on sm_90 and above
#endif
}

using StagedKernel = void (*)(KernelArgs, StagedArgs);

template <bool kSwiglu>
StagedKernel pick_staged(DType t, const GemvLaunchConfig& c) {
    return pick_gemv_shape<kSwiglu>(
        t, c.lanes_per_row, c.rows_per_thread,
        [](auto shape) -> StagedKernel {
            using S = decltype(shape);
            return gemv_staged_kernel<S::type, S::lanes, S::rows, kSwiglu>;
        },
        StagedKernel(nullptr));
}

int64_t round_up(int64_t v, int64_t m) { return (v + m - 1) / m * m; }

// How the tiles and the ring are sized for a launch of matrices of K = cols with `max_rows` rows at most.
struct StagedShape {
    StagedArgs args{};
    size_t smem = 0;   // dynamic shared memory of a block
    bool fits = false;
};
StagedShape staged_shape(DType t, int64_t cols, int64_t max_rows, const GemvLaunchConfig& c, bool swiglu) {
    StagedShape shape;
    StagedArgs& s = shape.args;
    const int matrices = swiglu ? 2 : 1;
    s.code_row_bytes = int(gemv_code_row_bytes(t, cols));
    s.scale_row_bytes = int(cols / dtype_info(t).block_elems * 2);
    const int64_t item_rows = int64_t(32 / c.lanes_per_row) * (swiglu ? 1 : c.rows_per_thread);
    const int64_t item_bytes = item_rows * (s.code_row_bytes + s.scale_row_bytes) * matrices;
    int64_t items = std::max<int64_t>(1, (target_tile_bytes() + item_bytes - 1) / item_bytes);
    items = std::min(items, std::max<int64_t>(1, (max_rows + item_rows - 1) / item_rows));  // not past the largest matrix
    items = std::min(items, std::max<int64_t>(1, kMaxEpilogueRows / item_rows));  // a tile within the epilogue's reach
    s.tile_rows = int(items * item_rows);
    s.codes_area_bytes = s.tile_rows * s.code_row_bytes;
    // A run of scales starts anywhere in its first 16-byte word: one word of slack.
    s.scale_area_bytes = int(round_up(int64_t(s.tile_rows) * s.scale_row_bytes, 16) + 16);
    s.slot_bytes = int(round_up(int64_t(s.codes_area_bytes + s.scale_area_bytes) * matrices, 128));
    const int x_groups = int(activation_groups(cols));
    // x and meta (meta is 8 bytes an entry, so the barriers after it are 8-byte aligned), barriers, counters.
    const size_t fixed = activation_smem_bytes(x_groups) + size_t(kMaxSlots) * (sizeof(uint64_t) + sizeof(int));
    const size_t ring = c.staged_ring_bytes > 0 ? size_t(c.staged_ring_bytes)
                                                : (kStagedSmemBudget > fixed ? kStagedSmemBudget - fixed : 0);
    s.slots = int(std::min<size_t>(kMaxSlots, ring / size_t(s.slot_bytes)));
    shape.fits = s.slots >= 2;
    shape.smem = size_t(s.slots) * size_t(s.slot_bytes) + fixed;
    return shape;
}


int smem_limit() { return device_attribute(cudaDevAttrMaxSharedMemoryPerBlockOptin, "smem limit"); }
bool fits_device(const StagedShape& shape) { return shape.fits && shape.smem <= size_t(smem_limit()); }

}  // namespace

StagedLaunch launch_staged_gemv(KernelArgs args, DType t, const GemvLaunchConfig& config, bool swiglu,
                                cudaStream_t stream) {
    const std::string what = std::string("cuda gemv (staged") + (swiglu ? ", swiglu)" : ")");
    if (!staged_gemv_supported()) fail_message(what + ": needs a GPU of compute capability 9.0 or above");
    const StagedKernel kernel = swiglu ? pick_staged<true>(t, config) : pick_staged<false>(t, config);
    if (kernel == nullptr)
        fail_message(what + ": no kernel for lanes_per_row " + std::to_string(config.lanes_per_row) +
                     ", rows_per_thread " + std::to_string(config.rows_per_thread));
    int64_t max_rows = 0;
    for (int i = 0; i < args.n_segments; ++i) max_rows = std::max(max_rows, args.seg[i].rows);
    const StagedShape shape = staged_shape(t, args.x_cols, max_rows, config, swiglu);
    if (!fits_device(shape))
        fail_message(what + ": K = " + std::to_string(args.x_cols) + " does not fit two ring slots in shared memory (" +
                     std::to_string(shape.smem) + " bytes, the device has " + std::to_string(smem_limit()) + ")");
    StagedArgs s = shape.args;
    s.tiles = 0;
    for (int i = 0; i < args.n_segments; ++i) {
        args.seg[i].first_tile = s.tiles;
        s.tiles += (args.seg[i].rows + s.tile_rows - 1) / s.tile_rows;
    }
    const int sms = device_attribute(cudaDevAttrMultiProcessorCount, "SM count");
    int64_t grid = std::min<int64_t>(s.tiles, sms);
    // A quantised output is counted per block over its run of rows: keep each run within the epilogue's reach.
    if (args.yq != nullptr) {
        const int64_t tiles_per_block = std::max<int64_t>(1, kMaxEpilogueRows / s.tile_rows);
        grid = std::max(grid, (s.tiles + tiles_per_block - 1) / tiles_per_block);
    }
    cuda_check(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(shape.smem)),
               "staged gemv shared memory");
    // All shared memory: two blocks' 2 × 112 KB need the largest carve-out (leaving it to the driver measured
    // the same, 227.3 vs 227.2 tok/s, but then nothing guarantees it).
    cuda_check(cudaFuncSetAttribute(kernel, cudaFuncAttributePreferredSharedMemoryCarveout,
                                    int(cudaSharedmemCarveoutMaxShared)),
               "staged gemv carve-out");
    launch_programmatic(kernel, dim3(unsigned(grid)), dim3(kStagedThreads), shape.smem, stream, "gemv_staged_kernel",
                        args, s);
    return {grid, s.tiles};
}

}  // namespace gemv_detail

bool staged_gemv_fits(DType t, int64_t cols, int64_t max_rows, const GemvLaunchConfig& config, bool swiglu) {
    using namespace gemv_detail;
    if (!gemv_layout_supports(t) || cols <= 0 || !row_fits_blocks(t, uint64_t(cols))) return false;
    return fits_device(staged_shape(t, cols, max_rows, config, swiglu));
}

bool staged_gemv_planned() {
    static const bool planned = env_switch("DELTABIT_GEMV_STAGED", false) && staged_gemv_supported();
    return planned;
}

bool staged_gemv_supported() {
    static const bool supported =
        device_count() > 0 && device_attribute(cudaDevAttrComputeCapabilityMajor, "compute capability") >= 9;
    return supported;
}

}  // namespace deltabit::cuda
