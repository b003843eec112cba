// A chain of decode GEMVs in one persistent launch: contract in ops/gemv_chain_cuda.h.
//
// Work. Op by op, the rows of the op (every matrix of a group starting a new item; a SwiGLU pair counts its
// outputs) are cut into warp items of (32 / lanes) row groups × 2 rows (SwiGLU: × 1 output, its gate and up
// rows); block b owns the items [b·items/grid, (b+1)·items/grid) of every op, cut into tiles of up to
// tile_items items (never across two matrices) that each fill one ring slot. A block's tiles are numbered
// across the whole chain: tile j lands in slot j % slots; its items go to the consumer warps in turn (item g
// of the block's chain to warp g % warps), and the warp completing the tile's items hands the slot back (its
// `empty` barrier) for the producer to refill with tile j + slots. The producer warp
// walks the same numbering and waits only for empty slots; the consumers wait, per op, for the grid barrier
// (ops after the first), copy the op's activations into shared memory, compute their tiles, run the
// quantised-output epilogue over the block's rows, and arrive at the next barrier.
//
// The barriers: counters[0] counts the blocks done with each op (op i may start once it reaches i·grid);
// counters[1] the blocks done with the chain — the last zeroes both for the next launch.
#include "ops/gemv_chain_cuda.h"

#include <algorithm>
#include <cstdlib>
#include <string>

#include "backend/cuda_probe.h"
#include "ops/gemv_device.cuh"
#include "ops/gemv_stage.cuh"
#include "ops/programmatic_launch.cuh"

namespace deltabit::cuda {

namespace gemv_detail {

namespace {

// 8 consumer warps: 12 measured the same (bench_gemv_cuda --chain, docs/bench.md "The GEMV chain").
constexpr int kConsumerWarps = 8;
constexpr int kConsumers = kConsumerWarps * 32;
constexpr int kChainThreads = kConsumers + 32;  // and the producer warp
constexpr int kMaxSlots = 32;
constexpr int kChainRows = 2;  // rows per thread (a SwiGLU pair: its gate row and its up row)
// Slots of at least this many bytes (an op's tile is as many items as fit). Measured (bench_gemv_cuda --chain,
// a Bonsai-27B layer): 8 KB slots 53.4 µs, 16 KB 45.8, 32 KB 43.2. DELTABIT_CHAIN_SLOT_BYTES=n overrides it
// (an experiment switch).
int64_t target_slot_bytes() {
    static const int64_t bytes = [] {
        const char* v = std::getenv("DELTABIT_CHAIN_SLOT_BYTES");
        return v != nullptr && std::atoll(v) > 0 ? std::max<int64_t>(1024, std::atoll(v)) : int64_t(32 * 1024);
    }();
    return bytes;
}

struct ChainOpArgs {
    KernelArgs a;     // seg[i].first_tile: the segment's first item
    int lanes;        // per row: the planned lanes_per_row of the op's call
    int swiglu;
    int item_rows;    // rows (SwiGLU: outputs) of a warp item
    int tile_items;   // items per tile at most
    int64_t items;    // over all segments
    StageLayout stage;
};

struct ChainArgs {
    ChainOpArgs ops[GemvChain::kMaxOps];
    int n_ops;
    int slots;
    int slot_bytes;
    unsigned* counters;
};

// The tile of an op that begins at `item`, within the block's items [.., item_end).
struct ChainTile {
    int seg;
    int64_t row0;    // first row (output) of the tile in its matrix
    int rows;
    int n_items;
    int64_t next;    // the item after the tile
};
__device__ __forceinline__ ChainTile chain_tile(const ChainOpArgs& op, int64_t item, int64_t item_end) {
    int s = 0;
#pragma unroll
    for (int i = 1; i < kMaxGemvGroup; ++i)
        if (i < op.a.n_segments && item >= op.a.seg[i].first_tile) s = i;
    const int64_t seg_end = s + 1 < op.a.n_segments ? op.a.seg[s + 1].first_tile : op.items;
    const int64_t end = min(item + op.tile_items, min(item_end, seg_end));
    const Segment& seg = op.a.seg[s];
    const int64_t row0 = (item - seg.first_tile) * op.item_rows;
    const int64_t rows = min((end - item) * op.item_rows, seg.rows - row0);
    return {s, row0, int(rows), int(end - item), end};
}

__device__ __forceinline__ int64_t block_item_begin(const ChainOpArgs& op) {
    return int64_t(blockIdx.x) * op.items / gridDim.x;
}
__device__ __forceinline__ int64_t block_item_end(const ChainOpArgs& op) {
    return int64_t(blockIdx.x + 1) * op.items / gridDim.x;
}

// The consumer warps' own barrier (the producer warp never joins it).
struct ConsumerSync {
    __device__ void operator()() const { asm volatile("bar.sync 1, %0;" ::"n"(kConsumers) : "memory"); }
};

#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900

__device__ __forceinline__ unsigned load_acquire(const unsigned* p) {
    unsigned v;
    asm volatile("ld.acquire.gpu.global.u32 %0, [%1];" : "=r"(v) : "l"(p) : "memory");
    return v;
}

// A warp's items of one tile (first_item, first_item + item_stride, ...), from the tile's slot.
template <int KT, bool kSwiglu>
__device__ __forceinline__ void compute_tile(const ChainOpArgs& op, const ChainTile& t, int first_item, int item_stride,
                                             const uint8_t* slot, const uint8_t* x_smem, const int2* meta_smem, int lane) {
    constexpr int R = kChainRows;
    constexpr int kRowsPerGroup = kSwiglu ? 1 : R;
    constexpr int kItemRows = (32 / KT) * kRowsPerGroup;
    const KernelArgs& a = op.a;
    const Segment& seg = a.seg[t.seg];
    const StagedScales scales = staged_scales<kSwiglu>(op.stage, slot, seg.scales + t.row0 * a.scales_per_row,
                                                       kSwiglu ? a.up_scales + t.row0 * a.scales_per_row : nullptr);
    const int k_lane = lane % KT;
    for (int item = first_item; item < t.n_items; item += item_stride)
        compute_staged_item<DType::Q1_0, KT, R, kSwiglu>(a, op.stage, slot, scales.gate, scales.up,
                                                        item * kItemRows + (lane / KT) * kRowsPerGroup, t.rows, k_lane,
                                                        x_smem, meta_smem, seg.y + t.row0);
}

__device__ __forceinline__ void compute_tile_of(const ChainOpArgs& op, const ChainTile& t, int first_item,
                                                int item_stride, const uint8_t* slot,
                                                const uint8_t* x_smem, const int2* meta_smem, int lane) {
    switch (op.lanes * 2 + op.swiglu) {
        case 16: compute_tile<8, false>(op, t, first_item, item_stride, slot, x_smem, meta_smem, lane); break;
        case 17: compute_tile<8, true>(op, t, first_item, item_stride, slot, x_smem, meta_smem, lane); break;
        case 32: compute_tile<16, false>(op, t, first_item, item_stride, slot, x_smem, meta_smem, lane); break;
        case 33: compute_tile<16, true>(op, t, first_item, item_stride, slot, x_smem, meta_smem, lane); break;
        case 64: compute_tile<32, false>(op, t, first_item, item_stride, slot, x_smem, meta_smem, lane); break;
        default: compute_tile<32, true>(op, t, first_item, item_stride, slot, x_smem, meta_smem, lane); break;
    }
}

// The producer: every tile of every op of this block, in order, each into its slot once the slot is free.
__device__ void produce(const ChainArgs& c, uint8_t* ring, uint64_t* full, uint64_t* empty) {
    const uint64_t l2_policy = l2_evict_first_policy();
    int64_t j = 0;
    for (int o = 0; o < c.n_ops; ++o) {
        const ChainOpArgs& op = c.ops[o];
        const int64_t item_end = block_item_end(op);
        for (int64_t item = block_item_begin(op); item < item_end; ++j) {
            const ChainTile t = chain_tile(op, item, item_end);
            const int slot = int(j % c.slots);
            if (j >= c.slots) {
                mbarrier_wait_parity(empty + slot, uint32_t(j / c.slots - 1) & 1u);
                fence_proxy_async_shared();  // the consumer's loads of the slot before the copy engine's writes
            }
            const Segment& seg = op.a.seg[t.seg];
            const int64_t code_offset = t.row0 * op.stage.code_row_bytes;
            const uint8_t* up_codes =
                op.swiglu ? reinterpret_cast<const uint8_t*>(op.a.up_codes) + code_offset : nullptr;
            stage_rows(op.stage, reinterpret_cast<const uint8_t*>(seg.codes) + code_offset,
                       seg.scales + t.row0 * op.a.scales_per_row, up_codes,
                       op.swiglu ? op.a.up_scales + t.row0 * op.a.scales_per_row : nullptr, t.rows,
                       ring + size_t(slot) * c.slot_bytes, full + slot, l2_policy);
            item = t.next;
        }
    }
}

#endif

__global__ void __launch_bounds__(kChainThreads, 1) gemv_chain_kernel(const __grid_constant__ ChainArgs c) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    extern __shared__ __align__(128) uint8_t smem[];
    uint8_t* ring = smem;
    int max_groups = 0;
    for (int o = 0; o < c.n_ops; ++o) max_groups = max(max_groups, c.ops[o].a.x_groups);
    uint8_t* x_smem = ring + size_t(c.slots) * c.slot_bytes;
    int2* meta_smem = reinterpret_cast<int2*>(x_smem + size_t(max_groups) * kSmemGroupStride);
    uint64_t* full = reinterpret_cast<uint64_t*>(meta_smem + max_groups);  // 8-byte aligned: see the host
    uint64_t* empty = full + c.slots;
    int* done = reinterpret_cast<int*>(empty + c.slots);  // per slot: the tile's items computed so far

    const int tid = int(threadIdx.x), lane = tid & 31, warp = tid / 32;
    if (tid == 0) {
        for (int i = 0; i < c.slots; ++i) {
            mbarrier_init(full + i, 1);
            mbarrier_init(empty + i, 1);
            done[i] = 0;
        }
        fence_mbarrier_init();
    }
    __syncthreads();
    if (warp == kConsumerWarps) {  // weights only, written by no kernel: requested before any wait
        if (lane == 0) produce(c, ring, full, empty);
        return;
    }

    const ConsumerSync consumers;
    int64_t j = 0, g = 0;  // the block's tiles and items so far
    for (int o = 0; o < c.n_ops; ++o) {
        const ChainOpArgs& op = c.ops[o];
        if (o == 0) {
            wait_for_predecessor();
            if (c.n_ops == 1) allow_dependents();
        } else {
            if (tid == 0)
                while (load_acquire(c.counters) < unsigned(o) * gridDim.x) {
                }
            consumers();
            // Every block has now been resident: the next kernel may take free slots without starving this one.
            if (o == c.n_ops - 1) allow_dependents();
        }
        copy_activations_by<4, 2, 8, true>(op.a, x_smem, meta_smem, tid, kConsumers);
        consumers();

        // Items go to the warps in turn (item g of the block's chain to warp g % warps), so every warp works on
        // an op however few tiles a block has of it; the warp completing a tile's items hands its slot back.
        const int64_t item_begin = block_item_begin(op), item_end = block_item_end(op);
        for (int64_t item = item_begin; item < item_end; ++j) {
            const ChainTile t = chain_tile(op, item, item_end);
            const int first = int((warp - g % kConsumerWarps + kConsumerWarps) % kConsumerWarps);
            if (first < t.n_items) {
                const int slot = int(j % c.slots);
                mbarrier_wait_parity(full + slot, uint32_t(j / c.slots) & 1u);
                compute_tile_of(op, t, first, kConsumerWarps, ring + size_t(slot) * c.slot_bytes, x_smem, meta_smem,
                                lane);
                __syncwarp();
                if (lane == 0) {
                    const int mine = (t.n_items - first + kConsumerWarps - 1) / kConsumerWarps;
                    __threadfence_block();
                    if (atomicAdd(done + slot, mine) + mine == t.n_items) {
                        done[slot] = 0;
                        mbarrier_arrive(empty + slot);
                    }
                }
            }
            g += t.n_items;
            item = t.next;
        }

        // One matrix when the output is quantised (the host allows it only so): the block's rows are one run.
        if (op.a.yq != nullptr && item_end > item_begin)
            quantize_completed_groups_by(op.a, item_begin * op.item_rows, (item_end - item_begin) * op.item_rows,
                                         op.a.seg[0].rows, tid, kConsumers, consumers);
        else
            consumers();
        if (o + 1 < c.n_ops && tid == 0) {
            __threadfence();  // cumulative over the block's stores, which the barrier above ordered before it
            atomicAdd(c.counters, 1u);
        }
    }
    if (tid == 0 && atomicAdd(c.counters + 1, 1u) == gridDim.x - 1) {  // the last block: every barrier passed
        c.counters[0] = 0;
        c.counters[1] = 0;
    }
#else
    __trap();  // the host launches this kernel only on sm_90 and above
#endif
}

int64_t round_up(int64_t v, int64_t m) { return (v + m - 1) / m * m; }

}  // namespace

}  // namespace gemv_detail

using namespace gemv_detail;

bool gemv_chain_supported() {
    static const bool supported =
        device_count() > 0 && device_attribute(cudaDevAttrComputeCapabilityMajor, "compute capability") >= 9;
    return supported;
}

GemvChainScratch::GemvChainScratch() : counters(2 * sizeof(unsigned)) {
    cuda_check(cudaMemset(counters.get(), 0, counters.bytes()), "zero chain counters");
    cuda_check(cudaStreamSynchronize(nullptr), "zero chain counters");
}

GemvChain::GemvChain(const GemvChainScratch& scratch) : scratch_(&scratch) {}

namespace {

const char* op_name(GemvChain::Kind k) {
    switch (k) {
        case GemvChain::Kind::swiglu: return "cuda gemv chain (swiglu)";
        case GemvChain::Kind::add_norm: return "cuda gemv chain (add norm)";
        default: return "cuda gemv chain";
    }
}

KernelArgs op_kernel_args(const GemvChain::Op& op) {
    const OutputEpilogue epilogue{op.quantised_output ? &op.y_quantized : nullptr, op.norm_w};
    return make_gemv_args(op.x, std::span<const GemvOutput>(op.outputs, size_t(op.n_outputs)),
                          op.kind == GemvChain::Kind::swiglu ? &op.up : nullptr, epilogue, op_name(op.kind));
}

// The planned lanes per row of the op's call (ops/matmul_cuda.cu): what makes its bits the call's.
int planned_lanes(const GemvChain::Op& op) {
    int64_t rows = 0;
    for (int i = 0; i < op.n_outputs; ++i) rows += op.outputs[i].w.rows;
    if (op.kind == GemvChain::Kind::swiglu) rows *= 2;
    return plan_gemv(op.outputs[0].w.dtype, rows, op.outputs[0].w.cols).lanes_per_row;
}

}  // namespace

void GemvChain::add(const Op& op) {
    const char* what = op_name(op.kind);
    if (!gemv_chain_supported()) fail_message(std::string(what) + ": needs a GPU of compute capability 9.0 or above");
    if (size() >= kMaxOps) fail_message(std::string(what) + ": a chain holds at most " + std::to_string(kMaxOps) + " ops");
    if (op.n_outputs < 1 || op.outputs[0].w.dtype != DType::Q1_0)
        fail_message(std::string(what) + ": Q1_0 weights only, got " +
                     (op.n_outputs < 1 ? std::string("no matrix") : std::string(dtype_name(op.outputs[0].w.dtype))));
    op_kernel_args(op);  // every check of the call it stands for
    ops_.push_back(op);
}

void GemvChain::group(const QuantizedActivationsView& x, std::span<const GemvOutput> outputs) {
    if (outputs.empty() || outputs.size() > size_t(kMaxGemvGroup))
        fail_message("cuda gemv chain: a group takes 1 to " + std::to_string(kMaxGemvGroup) + " matrices, got " +
                     std::to_string(outputs.size()));
    Op op;
    op.kind = Kind::group;
    op.x = x;
    for (const GemvOutput& o : outputs) op.outputs[op.n_outputs++] = o;
    add(op);
}

void GemvChain::gemv(const QuantizedActivationsView& x, const GemvWeightView& w, float* y) {
    const GemvOutput one[1] = {{w, y}};
    group(x, one);
}

void GemvChain::swiglu(const QuantizedActivationsView& x, const GemvWeightView& gate, const GemvWeightView& up, float* y,
                       const QuantizedActivationsView* y_quantized) {
    if (gate.dtype != up.dtype || gate.rows != up.rows || gate.cols != up.cols)
        fail_message("cuda gemv chain (swiglu): gate and up must have one shape and dtype");
    Op op;
    op.kind = Kind::swiglu;
    op.x = x;
    op.outputs[op.n_outputs++] = {gate, y};
    op.up = up;
    if (y_quantized != nullptr) {
        op.quantised_output = true;
        op.y_quantized = *y_quantized;
    }
    add(op);
}

void GemvChain::add_norm(const QuantizedActivationsView& x, const GemvWeightView& w, float* residual,
                         const float* norm_w, const QuantizedActivationsView& out) {
    if (norm_w == nullptr) fail_message("cuda gemv chain (add norm): no norm weights");
    Op op;
    op.kind = Kind::add_norm;
    op.x = x;
    op.outputs[op.n_outputs++] = {w, residual};
    op.quantised_output = true;
    op.y_quantized = out;
    op.norm_w = norm_w;
    add(op);
}

GemvChainReport GemvChain::launch(cudaStream_t stream) const {
    GemvChainReport report;
    if (ops_.empty()) return report;
    const int sms = device_attribute(cudaDevAttrMultiProcessorCount, "SM count");
    ChainArgs c{};
    c.n_ops = int(ops_.size());
    c.counters = scratch_->counters.get<unsigned>();
    int max_groups = 0;
    int64_t slot_bytes = target_slot_bytes();
    auto slot_need = [](const ChainOpArgs& o, int64_t items) {
        const int64_t rows = items * o.item_rows;
        return int64_t(o.swiglu ? 2 : 1) *
               (rows * o.stage.code_row_bytes + round_up(rows * o.stage.scale_row_bytes, 16) + 16);
    };
    for (int i = 0; i < c.n_ops; ++i) {
        ChainOpArgs& o = c.ops[i];
        o.a = op_kernel_args(ops_[size_t(i)]);
        o.lanes = planned_lanes(ops_[size_t(i)]);
        o.swiglu = ops_[size_t(i)].kind == Kind::swiglu ? 1 : 0;
        o.item_rows = (32 / o.lanes) * (o.swiglu ? 1 : kChainRows);
        o.items = 0;
        for (int s = 0; s < o.a.n_segments; ++s) {
            o.a.seg[s].first_tile = o.items;
            o.items += (o.a.seg[s].rows + o.item_rows - 1) / o.item_rows;
        }
        o.stage.code_row_bytes = o.a.units_per_row * 16;
        o.stage.scale_row_bytes = o.a.scales_per_row * 2;
        max_groups = std::max(max_groups, o.a.x_groups);
        slot_bytes = std::max(slot_bytes, slot_need(o, 1));
        if (o.a.yq != nullptr) {
            // The block's run of rows is quantised by one call of the epilogue: within its reach.
            const int64_t run = (o.items + sms - 1) / sms * o.item_rows;
            if (run + 2 * kActivationGroup > int64_t(kMaxCompletedGroups) * kActivationGroup)
                fail_message(std::string(op_name(ops_[size_t(i)].kind)) + ": " + std::to_string(o.a.seg[0].rows) +
                             " rows with a quantised output are more than a chain's blocks can quantise (" +
                             std::to_string(run) + " rows a block)");
        }
    }
    slot_bytes = round_up(slot_bytes, 128);
    for (int i = 0; i < c.n_ops; ++i) {
        ChainOpArgs& o = c.ops[i];
        int64_t items = 1;
        int64_t max_rows = 0;
        for (int s = 0; s < o.a.n_segments; ++s) max_rows = std::max(max_rows, o.a.seg[s].rows);
        while (slot_need(o, items + 1) <= slot_bytes && (items + 1) * o.item_rows <= max_rows) ++items;
        o.tile_items = int(items);
        o.stage.codes_area_bytes = int(items * o.item_rows * o.stage.code_row_bytes);
        o.stage.scale_area_bytes = int(round_up(items * o.item_rows * o.stage.scale_row_bytes, 16) + 16);
    }
    // x and meta (meta is 8 bytes an entry, so the barriers after it are 8-byte aligned), two barriers a slot.
    const size_t fixed = activation_smem_bytes(max_groups) + size_t(kMaxSlots) * (2 * sizeof(uint64_t) + sizeof(int));
    const auto kernel = gemv_chain_kernel;
    constexpr int threads = kChainThreads;
    cudaFuncAttributes attributes{};
    cuda_check(cudaFuncGetAttributes(&attributes, kernel), "gemv chain attributes");
    const int64_t limit = int64_t(device_attribute(cudaDevAttrMaxSharedMemoryPerBlockOptin, "smem limit")) -
                          int64_t(attributes.sharedSizeBytes);
    const int64_t slots = std::min<int64_t>(kMaxSlots, (limit - int64_t(fixed)) / slot_bytes);
    if (slots < 2)
        fail_message("cuda gemv chain: slots of " + std::to_string(slot_bytes) + " bytes and " +
                     std::to_string(max_groups * kActivationGroup) + " activations do not fit two slots in " +
                     std::to_string(limit) + " bytes of shared memory");
    c.slots = int(slots);
    c.slot_bytes = int(slot_bytes);
    const size_t smem = size_t(slots * slot_bytes) + fixed;
    cuda_check(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(smem)),
               "gemv chain shared memory");
    int per_sm = 0;
    cuda_check(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kernel, threads, smem),
               "gemv chain occupancy");
    if (per_sm < 1) fail_message("cuda gemv chain: a block of " + std::to_string(smem) + " bytes does not fit an SM");
    launch_programmatic(kernel, dim3(unsigned(sms)), dim3(threads), smem, stream, "gemv_chain_kernel",
                        c);
    report.ops = c.n_ops;
    report.blocks = sms;
    report.slots = c.slots;
    report.slot_bytes = c.slot_bytes;
    return report;
}

}  // namespace deltabit::cuda
