// The Q1_0 decode GEMV on binary tensor cores; the layout and the arithmetic are in gemv_b1_cuda.h.
#include "ops/matmul/gemv_b1_cuda.h"

#include <cuda_fp16.h>

#include <algorithm>
#include <string>

#include "backend/cuda_probe.h"
#include "core/error.h"
#include "ops/cuda/programmatic_launch.cuh"
#include "ops/matmul/gemv_b1_device.cuh"
#include "ops/matmul/gemv_device.cuh"
#include "ops/matmul/weight_repack.h"

namespace deltabit::cuda {

namespace {

using b1_detail::kUnitsPerGroup;
using b1_detail::padded_units;
using b1_detail::plane_bytes;
using b1_detail::plane_index;
using gemv_detail::kFullMask;
using gemv_detail::load_streaming;
constexpr int kMaxWarps = 8;

// One warp per (unit, word): lane L takes input 32j + 4·(L % 8) + L / 8, so bit L of a ballot is the bit
// that pairs with bit L of the repacked weight word (bit 8B + s ↔ input 32j + 4s + B).
__global__ void bit_planes_kernel(const int8_t* __restrict__ q, int64_t units, int64_t pairs, uint32_t* planes) {
    wait_for_predecessor();
    allow_dependents();
    const int64_t pair = int64_t(blockIdx.x) * (blockDim.x / 32) + threadIdx.x / 32;
    if (pair >= pairs) return;  // whole warps: the ballots below stay full
    const int lane = int(threadIdx.x) & 31;
    const int64_t unit = pair / 4;
    const int word = int(pair % 4);
    const int v = unit < units ? int(q[unit * kActivationGroup + 32 * word + 4 * (lane % 8) + lane / 8]) : 0;
    uint32_t mine = 0;
#pragma unroll
    for (int p = 0; p < 8; ++p) {
        const uint32_t bits = __ballot_sync(kFullMask, (v >> p) & 1);
        if (lane == p) mine = bits;
    }
    if (lane < 8) planes[plane_index(unit, word, lane & 1) * 4 + lane / 2] = mine;
}

struct B1Args {
    const uint4* codes;
    const uint16_t* scales;
    const uint4* planes;
    const ActivationGroupMeta* x_meta;
    float* y;
    int64_t rows;
    int units;        // per row
    int unit_groups;  // ceil(units / 4)
};

// The two rows' codes and scales of kBatch unit groups from group i0, up to (not including) group `end`
// (zeros and scale 0 past it or past the row).
template <int kBatch>
__device__ __forceinline__ void load_batch(const B1Args& a, const uint4* row0, const uint4* row1, const uint16_t* s0,
                                           const uint16_t* s1, int i0, int end, int t, uint4 (&c0)[kBatch],
                                           uint4 (&c1)[kBatch], uint16_t (&d0)[kBatch], uint16_t (&d1)[kBatch]) {
#pragma unroll
    for (int b = 0; b < kBatch; ++b) {
        const int u = (i0 + b) * kUnitsPerGroup + t;
        if (i0 + b < end && u < a.units) {
            c0[b] = load_streaming(row0 + u);
            c1[b] = load_streaming(row1 + u);
            d0[b] = __ldg(s0 + u);
            d1[b] = __ldg(s1 + u);
        } else {
            c0[b] = c1[b] = make_uint4(0, 0, 0, 0);
            d0[b] = d1[b] = 0;
        }
    }
}

// The 16-row tiles of a launch, `splits` warps each: warp w of a block takes local tile w / splits and the
// w % splits-th slice of the unit groups; the block walks tiles [blockIdx.x · tiles_per_block + ...) a grid
// apart. A tile's slices meet in shared memory and its first slice's warp adds them in slice order. The
// first batch of codes is requested before the wait for the kernel before (weights do not depend on it),
// each tile's successor's first batch before the tile's reduction.
template <int kBatch>
__global__ void __launch_bounds__(32 * kMaxWarps) gemv_b1_kernel(B1Args a, int splits) {
    __shared__ float s_part[kMaxWarps][16];
    const int lane = int(threadIdx.x) & 31, g = lane >> 2, t = lane & 3;
    const int warp = int(threadIdx.x) / 32;
    const int tiles_per_block = int(blockDim.x / 32) / splits;
    const int local_tile = warp / splits, slice = warp % splits;
    const int64_t tiles = (a.rows + 15) / 16;
    const int64_t step = int64_t(gridDim.x) * tiles_per_block;
    const int begin = int(int64_t(slice) * a.unit_groups / splits);
    const int end = int(int64_t(slice + 1) * a.unit_groups / splits);
    // B: this lane feeds column g with the k-bits of thread t; only the thread whose unit column g reads.
    const bool feeds_b = t == (g >> 1);
    const int parity = g & 1;
    auto row_of = [&](int64_t tl, int r) { return tl * 16 + r < a.rows ? tl * 16 + r : a.rows - 1; };  // clamped
    auto first_batch = [&](int64_t tl, uint4 (&c0)[kBatch], uint4 (&c1)[kBatch], uint16_t (&d0)[kBatch],
                           uint16_t (&d1)[kBatch]) {
        const int64_t r0 = row_of(tl, g), r1 = row_of(tl, g + 8);
        load_batch<kBatch>(a, a.codes + r0 * a.units, a.codes + r1 * a.units, a.scales + r0 * a.units,
                           a.scales + r1 * a.units, begin, end, t, c0, c1, d0, d1);
    };

    int64_t tile = int64_t(blockIdx.x) * tiles_per_block + local_tile;
    uint4 c0[kBatch], c1[kBatch];
    uint16_t d0[kBatch], d1[kBatch];
    if (tile < tiles) first_batch(tile, c0, c1, d0, d1);
    wait_for_predecessor();
    allow_dependents();

    // Every warp runs every iteration (the barriers below), computing only while its tile exists.
    for (int64_t base = int64_t(blockIdx.x) * tiles_per_block; base < tiles; base += step, tile += step) {
        float acc0 = 0.0f, acc1 = 0.0f;
        if (tile < tiles) {
            const int64_t r0 = row_of(tile, g), r1 = row_of(tile, g + 8);
            const uint4* row0 = a.codes + r0 * a.units;
            const uint4* row1 = a.codes + r1 * a.units;
            const uint16_t* s0 = a.scales + r0 * a.units;
            const uint16_t* s1 = a.scales + r1 * a.units;
            for (int i0 = begin; i0 < end; i0 += kBatch) {
                if (i0 != begin) load_batch<kBatch>(a, row0, row1, s0, s1, i0, end, t, c0, c1, d0, d1);
#pragma unroll
                for (int b = 0; b < kBatch; ++b) {
                    if (i0 + b >= end) break;  // the same for the whole warp
                    const int64_t unit = int64_t(i0 + b) * kUnitsPerGroup + t;
                    uint4 bq[4];
#pragma unroll
                    for (int j = 0; j < 4; ++j) bq[j] = __ldg(a.planes + (feeds_b ? plane_index(unit, j, parity) : 0));
                    const ActivationGroupMeta meta =
                        unit < a.units ? a.x_meta[unit] : ActivationGroupMeta{0.0f, 0};
                    b1_detail::accumulate_unit(bq, meta, c0[b], c1[b], d0[b], d1[b], acc0, acc1);
                }
            }
            if (tile + step < tiles) first_batch(tile + step, c0, c1, d0, d1);
        }
        acc0 += __shfl_xor_sync(kFullMask, acc0, 1);
        acc0 += __shfl_xor_sync(kFullMask, acc0, 2);
        acc1 += __shfl_xor_sync(kFullMask, acc1, 1);
        acc1 += __shfl_xor_sync(kFullMask, acc1, 2);
        if (splits == 1) {
            if (t == 0 && tile < tiles) {
                if (tile * 16 + g < a.rows) a.y[tile * 16 + g] = acc0;
                if (tile * 16 + g + 8 < a.rows) a.y[tile * 16 + g + 8] = acc1;
            }
            continue;
        }
        if (t == 0) {
            s_part[warp][g] = acc0;
            s_part[warp][g + 8] = acc1;
        }
        __syncthreads();
        if (slice == 0 && lane < 16 && tile < tiles && tile * 16 + lane < a.rows) {
            float sum = s_part[warp][lane];
            for (int sl = 1; sl < splits; ++sl) sum += s_part[warp + sl][lane];
            a.y[tile * 16 + lane] = sum;
        }
        __syncthreads();  // s_part is rewritten next iteration
    }
}

// Grid: no more blocks than stay resident, never more than the tiles need.
template <int kBatch>
void launch(const B1Args& args, int warps, int splits, cudaStream_t stream) {
    const auto kernel = gemv_b1_kernel<kBatch>;
    const int sms = device_attribute(cudaDevAttrMultiProcessorCount, "SM count");
    int per_sm = 0;
    cuda_check(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kernel, 32 * warps, 0), "occupancy");
    const int64_t tiles = (args.rows + 15) / 16, tiles_per_block = warps / splits;
    const int64_t blocks = std::min<int64_t>((tiles + tiles_per_block - 1) / tiles_per_block,
                                             int64_t(std::max(per_sm, 1)) * sms);
    launch_programmatic(kernel, dim3(unsigned(blocks)), dim3(unsigned(32 * warps)), 0, stream, "gemv_b1_kernel", args,
                        splits);
}

}  // namespace

bool gemv_b1_supported() {
    static const bool supported =
        device_count() > 0 && device_attribute(cudaDevAttrComputeCapabilityMajor, "compute capability") >= 8;
    return supported;
}

ActivationBitPlanes::ActivationBitPlanes(int64_t cols)
    : buffer(size_t(plane_bytes(cols))), max_cols(cols) {
    cuda_check(cudaMemset(buffer.get(), 0, buffer.bytes()), "zero the bit planes");
}

void build_activation_bit_planes(const QuantizedActivationsView& x, const ActivationBitPlanes& planes,
                                 cudaStream_t stream) {
    if (x.cols % kActivationGroup != 0 || x.cols > planes.max_cols)
        fail_message("activation bit planes: " + std::to_string(x.cols) + " inputs need a multiple of 128, at most " +
                     std::to_string(planes.max_cols));
    const int64_t pairs = padded_units(x.cols) * 4;
    if (pairs == 0) return;
    constexpr int kWarps = 8;
    launch_programmatic(bit_planes_kernel, dim3(unsigned((pairs + kWarps - 1) / kWarps)), dim3(32 * kWarps), 0,
                        stream, "bit_planes_kernel", static_cast<const int8_t*>(x.q), x.cols / kActivationGroup, pairs,
                        planes.buffer.get<uint32_t>());
}

void gemv_q1_0_b1(const QuantizedActivationsView& x, const ActivationBitPlanes& planes, const GemvWeightView& w,
                  float* y, cudaStream_t stream, const GemvB1Config& config) {
    if (w.dtype != DType::Q1_0) fail_message("gemv_q1_0_b1: Q1_0 weights only");
    if (w.cols != x.cols || w.cols % kActivationGroup != 0 || w.cols > planes.max_cols)
        fail_message("gemv_q1_0_b1: a matrix of " + std::to_string(w.cols) + " inputs against " +
                     std::to_string(x.cols) + " activations (bit planes for " + std::to_string(planes.max_cols) +
                     "); K must be a multiple of 128");
    if (x.norm_sum_sq != nullptr) fail_message("gemv_q1_0_b1: a deferred-norm view is not supported");
    if (config.warps_per_block < 1 || config.warps_per_block > kMaxWarps || config.splits < 1 ||
        config.warps_per_block % config.splits != 0)
        fail_message("gemv_q1_0_b1: 1 to 8 warps a block, a multiple of the K splits; not " +
                     std::to_string(config.warps_per_block) + " warps, " + std::to_string(config.splits) + " splits");
    if (w.rows == 0) return;
    const int units = int(w.cols / kActivationGroup);
    if (int64_t(gemv_code_row_bytes(w.dtype, w.cols)) != int64_t(units) * 16)
        fail_message("gemv_q1_0_b1: unexpected row layout");
    const B1Args args{reinterpret_cast<const uint4*>(w.codes), w.scales, planes.buffer.get<uint4>(), x.meta, y, w.rows,
                      units, (units + kUnitsPerGroup - 1) / kUnitsPerGroup};
    switch (config.batch) {
        case 2: launch<2>(args, config.warps_per_block, config.splits, stream); break;
        case 4: launch<4>(args, config.warps_per_block, config.splits, stream); break;
        case 8: launch<8>(args, config.warps_per_block, config.splits, stream); break;
        default: fail_message("gemv_q1_0_b1: a batch of 2, 4 or 8 unit groups, not " + std::to_string(config.batch));
    }
}

}  // namespace deltabit::cuda
