// RMS norm (1+w or plain), the DeltaNet gated norm and the delta rule's L2 norm, forward and backward:
// one warp per row, 8 rows a block (a row of 128, the q/k/gated norms' 65,536 to 393,216 rows at
// qwen35-100m, is 4 values a lane; its sums are warp shuffles, no block barriers, where a block a row
// gave 393,216 blocks of 6 barriers each).
//
// A weight's gradient is a sum over rows, and the backward row kernels produce it while they hold the
// row: for rows of up to 1,024 values each lane keeps its columns' x, dy (and silu(z)) and its
// columns' running Σ x̂·dy in registers, a block walks one slab of consecutive rows and writes one
// partial row per slab, and device_common.cuh's second stage adds the slabs in order. So x and dy (and
// z) are read once; a separate weight-gradient pass would read them again (11 GB a step at qwen35-100m,
// docs/notes/train-cuda.md). Wider rows (no config so far) take that two-pass form: the row kernel,
// then a grid of column tiles × row slabs. No atomics either way, so the gradient's bits do not depend
// on scheduling.
#include "train/cuda/device_common.cuh"
#include "train/cuda/kernel_marks.h"
#include "train/cuda/kernels.h"

#include <algorithm>
#include <string>
#include <type_traits>

namespace deltabit::train::cuda {
namespace {

constexpr int kRowWarps = 8;  // rows (warps) a block of the row kernels
static_assert(kBlock == 32 * kRowWarps, "the row kernels launch kBlock threads: a warp a row");
// A slab of the weight gradient's first stage: at least 64 rows, 8 a warp.
constexpr int64_t kSlabMinRows = 64;

// The fused backward keeps a row in registers, kLaneColumns values a lane (lane l holds columns l,
// l + 32, …), instantiated for 4, 8, 16, 24 and 32: rows of up to 1,024 (qwen35-100m: heads of 128,
// hidden 768). Wider rows take the two-pass form.
constexpr int64_t kFusedMaxDim = 1024;
// At most this many slabs (blocks) in the fused backward: 1,024 blocks of 8 warps are about one wave of
// an H100/H200 (132 SMs × 64 warps) where registers allow it (4 columns a lane: 5 blocks an SM), where
// slab_count's 256 would fill a quarter of it; the partials stay small beside the rows read (1,024 × 128
// floats, 0.5 MB, against 200–600 MB) and each lane of the second stage adds 32 of them.
constexpr int64_t kFusedMaxSlabs = 1024;
// Blocks an SM must hold of a fused kernel (its __launch_bounds__), which keeps `row_arrays` arrays of
// the row (x, dy; the gated norm's z too) plus w' and the column sums in registers, kLaneColumns floats
// each: two (≤ 128 registers a thread) while those take ≤ 100 registers, else one. From ptxas -v at
// sm_90a: the rms kernel at 24 columns (hidden 768) fits two in 125 registers without spilling, where
// unbounded it took 145 (one block, 8 warps, an SM); the gated one at 24 spilled 120 bytes under two.
template <int kLaneColumns, int row_arrays>
constexpr int kFusedMinBlocks = (row_arrays + 2) * kLaneColumns <= 100 ? 2 : 1;

Scratch g_inverse_rms;  // per-row 1/rms from the two-pass row kernel, read by the weight-gradient kernel
Scratch g_weight_partials;  // the weight gradient's partial rows, [slab][dim]

// The rows of warp `warp` of this block: r = (block·8 + warp) + k·(grid·8); every lane of a warp takes
// the same rows, so the warp's shuffles see all 32 lanes.
#define WARP_ROWS(r, rows)                                                                                   \
    for (int64_t r = int64_t(blockIdx.x) * kRowWarps + threadIdx.x / 32; r < (rows);                          \
         r += int64_t(gridDim.x) * kRowWarps)

__device__ inline float warp_inverse_rms(const float* xr, int64_t dim, float eps) {
    float sum = 0.0f;
    for (int64_t i = threadIdx.x % 32; i < dim; i += 32) sum += xr[i] * xr[i];
    return rsqrtf(warp_sum(sum) / float(dim) + eps);
}

__global__ void rms_norm_forward_kernel(const float* x, int64_t x_stride, const float* w, int64_t rows, int64_t dim,
                                        float eps, float one, float* y) {
    const int lane = threadIdx.x % 32;
    WARP_ROWS(r, rows) {
        const float* xr = x + r * x_stride;
        const float inv = warp_inverse_rms(xr, dim, eps);
        for (int64_t i = lane; i < dim; i += 32) y[r * dim + i] = xr[i] * inv * (one + w[i]);
    }
}

__global__ void gated_rms_norm_forward_kernel(const float* x, const float* z, const float* w, int64_t rows,
                                              int64_t dim, float eps, float* y) {
    const int lane = threadIdx.x % 32;
    WARP_ROWS(r, rows) {
        const float inv = warp_inverse_rms(x + r * dim, dim, eps);
        for (int64_t i = lane; i < dim; i += 32) {
            const int64_t k = r * dim + i;
            y[k] = w[i] * x[k] * inv * siluf_(z[k]);
        }
    }
}

// ---- the fused backward: dx (and dz) and the weight gradient's partial rows in one pass ----

// Block b walks slab b, rows [b·slab_rows, min(rows, (b + 1)·slab_rows)), warp v taking rows begin + v,
// begin + v + 8, … in order, each lane adding its columns' x̂·dy into registers; then the 8 warps' sums
// are added in warp order into partials[b][·]. With the second stage's fixed order (slabs in order)
// every addition is the same on every run.
// dx_j = inv·w'_j·dy_j − x_j·inv³·(Σ dy_i w'_i x_i)/dim (reference_ops.cpp's derivation), laid out as x.
// Contracts (kernels.h): dx += when accumulate (the residual stream's), else dx (=) (the q/k norms');
// partials (=): every block writes its whole row, zeros included, so no partial of an earlier call
// reaches the second stage, whose dw += is the parameter gradient's contract.
template <int kLaneColumns>
__global__ void __launch_bounds__(kBlock, kFusedMinBlocks<kLaneColumns, 2>)
    rms_norm_backward_fused_kernel(const float* x, int64_t x_stride, const float* w, const float* dy, int64_t rows,
                                   int64_t dim, int64_t slab_rows, float eps, float one, bool accumulate, float* dx,
                                   float* partials) {
    __shared__ float warp_columns[kRowWarps][32 * kLaneColumns];
    const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
    float weight[kLaneColumns], column_sum[kLaneColumns];
#pragma unroll
    for (int k = 0; k < kLaneColumns; ++k) {
        const int64_t i = lane + 32 * k;
        weight[k] = i < dim ? one + w[i] : 0.0f;  // past dim: zeros, which change no sum
        column_sum[k] = 0.0f;
    }
    const int64_t begin = int64_t(blockIdx.x) * slab_rows, end = min(rows, begin + slab_rows);
    for (int64_t r = begin + warp; r < end; r += kRowWarps) {
        const float* xr = x + r * x_stride;
        const float* dyr = dy + r * dim;
        float xv[kLaneColumns], dyv[kLaneColumns];
        float sum = 0.0f, dot = 0.0f;
#pragma unroll
        for (int k = 0; k < kLaneColumns; ++k) {
            const int64_t i = lane + 32 * k;
            xv[k] = i < dim ? xr[i] : 0.0f;
            dyv[k] = i < dim ? dyr[i] : 0.0f;
            sum += xv[k] * xv[k];
            dot += dyv[k] * weight[k] * xv[k];
        }
        const float inv = rsqrtf(warp_sum(sum) / float(dim) + eps);
        dot = warp_sum(dot);
#pragma unroll
        for (int k = 0; k < kLaneColumns; ++k) column_sum[k] += dyv[k] * xv[k] * inv;
        if (dx == nullptr) continue;
        const float inv3 = inv * inv * inv / float(dim);
        float* dxr = dx + r * x_stride;
#pragma unroll
        for (int k = 0; k < kLaneColumns; ++k) {
            const int64_t j = lane + 32 * k;
            if (j >= dim) break;
            const float g = inv * weight[k] * dyv[k] - xv[k] * inv3 * dot;
            dxr[j] = accumulate ? dxr[j] + g : g;
        }
    }
    if (partials == nullptr) return;  // the same for the whole block: no thread waits at the barrier alone
#pragma unroll
    for (int k = 0; k < kLaneColumns; ++k) warp_columns[warp][lane + 32 * k] = column_sum[k];
    __syncthreads();
    for (int64_t i = threadIdx.x; i < dim; i += kBlock) {
        float total = 0.0f;
        for (int v = 0; v < kRowWarps; ++v) total += warp_columns[v][i];
        partials[int64_t(blockIdx.x) * dim + i] = total;
    }
}

// The gated norm's fused backward (y = w ⊙ x̂ ⊙ silu(z)), walked as rms_norm_backward_fused_kernel:
// dx (=) and dz (=), both packed [rows][dim]; partials (=) as above, of x̂·dy·silu(z), for dw +=.
template <int kLaneColumns>
__global__ void __launch_bounds__(kBlock, kFusedMinBlocks<kLaneColumns, 3>)
    gated_rms_norm_backward_fused_kernel(const float* x, const float* z, const float* w, const float* dy,
                                         int64_t rows, int64_t dim, int64_t slab_rows, float eps, float* dx, float* dz,
                                         float* partials) {
    __shared__ float warp_columns[kRowWarps][32 * kLaneColumns];
    const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
    float weight[kLaneColumns], column_sum[kLaneColumns];
#pragma unroll
    for (int k = 0; k < kLaneColumns; ++k) {
        const int64_t i = lane + 32 * k;
        weight[k] = i < dim ? w[i] : 0.0f;
        column_sum[k] = 0.0f;
    }
    const int64_t begin = int64_t(blockIdx.x) * slab_rows, end = min(rows, begin + slab_rows);
    for (int64_t r = begin + warp; r < end; r += kRowWarps) {
        const int64_t row = r * dim;
        float xv[kLaneColumns], dyv[kLaneColumns], zv[kLaneColumns];
        float sum = 0.0f;
#pragma unroll
        for (int k = 0; k < kLaneColumns; ++k) {
            const int64_t i = lane + 32 * k;
            xv[k] = i < dim ? x[row + i] : 0.0f;
            dyv[k] = i < dim ? dy[row + i] : 0.0f;
            zv[k] = i < dim ? z[row + i] : 0.0f;
            sum += xv[k] * xv[k];
        }
        const float inv = rsqrtf(warp_sum(sum) / float(dim) + eps);
        float dot = 0.0f;
#pragma unroll
        for (int k = 0; k < kLaneColumns; ++k) {
            const int64_t i = lane + 32 * k;
            if (i < dim) dz[row + i] = dyv[k] * weight[k] * xv[k] * inv * silu_derivativef_(zv[k]);
            zv[k] = siluf_(zv[k]);  // from here on the gate, silu(z)
            dot += dyv[k] * weight[k] * zv[k] * xv[k];
            column_sum[k] += dyv[k] * xv[k] * inv * zv[k];
        }
        dot = warp_sum(dot);
        const float inv3 = inv * inv * inv / float(dim);
#pragma unroll
        for (int k = 0; k < kLaneColumns; ++k) {
            const int64_t j = lane + 32 * k;
            if (j >= dim) break;
            dx[row + j] = inv * dyv[k] * weight[k] * zv[k] - xv[k] * inv3 * dot;
        }
    }
#pragma unroll
    for (int k = 0; k < kLaneColumns; ++k) warp_columns[warp][lane + 32 * k] = column_sum[k];
    __syncthreads();
    for (int64_t i = threadIdx.x; i < dim; i += kBlock) {
        float total = 0.0f;
        for (int v = 0; v < kRowWarps; ++v) total += warp_columns[v][i];
        partials[int64_t(blockIdx.x) * dim + i] = total;
    }
}

// The fused backward's slabs: consecutive rows, at least kSlabMinRows a slab, at most kFusedMaxSlabs
// slabs; the count is the rows over the slab's size rounded up, so the last slab may be short but none
// is empty (ragged row counts: 37, 1500).
struct FusedSlabs {
    int64_t rows_per_slab, count;
};
FusedSlabs fused_slabs(int64_t rows) {
    const int64_t per_slab = std::max(kSlabMinRows, (rows + kFusedMaxSlabs - 1) / kFusedMaxSlabs);
    return {per_slab, (rows + per_slab - 1) / per_slab};
}

// Calls launch(std::integral_constant<int, N>{}) with the fused kernels' columns a lane for rows of dim
// (≤ kFusedMaxDim).
template <typename Launch>
void with_lane_columns(int64_t dim, Launch launch) {
    const int64_t per_lane = (dim + 31) / 32;
    if (per_lane <= 4) launch(std::integral_constant<int, 4>{});
    else if (per_lane <= 8) launch(std::integral_constant<int, 8>{});
    else if (per_lane <= 16) launch(std::integral_constant<int, 16>{});
    else if (per_lane <= 24) launch(std::integral_constant<int, 24>{});
    else launch(std::integral_constant<int, 32>{});
}

// ---- the two-pass backward (rows wider than kFusedMaxDim): the row kernel keeps each row's 1/rms,
// a second pass re-reads x and dy (and z) for the weight gradient ----

// dx_j (+)= inv·w'_j·dy_j − x_j·inv³·(Σ dy_i w'_i x_i)/dim (reference_ops.cpp's derivation).
__global__ void rms_norm_backward_kernel(const float* x, int64_t x_stride, const float* w, const float* dy,
                                         int64_t rows, int64_t dim, float eps, float one, bool accumulate, float* dx,
                                         float* inverse_rms) {
    const int lane = threadIdx.x % 32;
    WARP_ROWS(r, rows) {
        const float* xr = x + r * x_stride;
        const float* dyr = dy + r * dim;
        const float inv = warp_inverse_rms(xr, dim, eps);
        float dot = 0.0f;
        for (int64_t i = lane; i < dim; i += 32) dot += dyr[i] * (one + w[i]) * xr[i];
        dot = warp_sum(dot);
        if (lane == 0) inverse_rms[r] = inv;
        if (dx == nullptr) continue;
        const float inv3 = inv * inv * inv / float(dim);
        float* dxr = dx + r * x_stride;
        for (int64_t j = lane; j < dim; j += 32) {
            const float g = inv * (one + w[j]) * dyr[j] - xr[j] * inv3 * dot;
            dxr[j] = accumulate ? dxr[j] + g : g;
        }
    }
}

// dx (=), dz (=), packed [rows][dim].
__global__ void gated_rms_norm_backward_kernel(const float* x, const float* z, const float* w, const float* dy,
                                               int64_t rows, int64_t dim, float eps, float* dx, float* dz,
                                               float* inverse_rms) {
    const int lane = threadIdx.x % 32;
    WARP_ROWS(r, rows) {
        const float* xr = x + r * dim;
        const float inv = warp_inverse_rms(xr, dim, eps);
        float dot = 0.0f;
        for (int64_t i = lane; i < dim; i += 32) {
            const int64_t k = r * dim + i;
            dz[k] = dy[k] * w[i] * xr[i] * inv * silu_derivativef_(z[k]);
            dot += dy[k] * w[i] * siluf_(z[k]) * xr[i];
        }
        dot = warp_sum(dot);
        if (lane == 0) inverse_rms[r] = inv;
        const float inv3 = inv * inv * inv / float(dim);
        for (int64_t j = lane; j < dim; j += 32) {
            const int64_t k = r * dim + j;
            dx[k] = inv * dy[k] * w[j] * siluf_(z[k]) - xr[j] * inv3 * dot;
        }
    }
}

// partials[slab][i] = Σ_r dy[r][i]·x[r][i]·inv[r]·(z ? silu(z[r][i]) : 1) over the slab's rows (x's row r
// at x + r·x_stride, dy and z packed). Block
// (32 columns, 8 warps): warp y sums rows y, y + 8, … of the slab (one coalesced 128-byte row segment
// a load), then warp 0 adds the 8 warp sums in order.
__global__ void norm_weight_partials_kernel(const float* x, int64_t x_stride, const float* z, const float* dy,
                                            const float* inverse_rms, int64_t rows, int64_t dim, float* partials) {
    __shared__ float warp_sums[8][33];
    const int64_t column = int64_t(blockIdx.x) * 32 + threadIdx.x;
    const int64_t slab_rows = (rows + gridDim.y - 1) / gridDim.y;
    const int64_t begin = int64_t(blockIdx.y) * slab_rows, end = min(rows, begin + slab_rows);
    float sum = 0.0f;
    if (column < dim) {
#pragma unroll 4
        for (int64_t r = begin + threadIdx.y; r < end; r += 8) {
            const int64_t i = r * dim + column;
            float term = dy[i] * x[r * x_stride + column] * inverse_rms[r];
            if (z != nullptr) term *= siluf_(z[i]);
            sum += term;
        }
    }
    warp_sums[threadIdx.y][threadIdx.x] = sum;
    __syncthreads();
    if (threadIdx.y == 0 && column < dim) {
        float total = 0.0f;
        for (int k = 0; k < 8; ++k) total += warp_sums[k][threadIdx.x];
        partials[int64_t(blockIdx.y) * dim + column] = total;
    }
}

// dw[i] += Σ_r dy[r][i]·x[r][i]·inv[r]·(z ? silu(z[r][i]) : 1), in a fixed order.
void norm_weight_gradient(const float* x, int64_t x_stride, const float* z, const float* dy, const float* inverse_rms,
                          int64_t rows, int64_t dim, float* dw) {
    const int64_t slabs = slab_count(rows, kSlabMinRows);
    float* partials = g_weight_partials.floats(slabs * dim);
    const dim3 grid(unsigned((dim + 31) / 32), unsigned(slabs));
    norm_weight_partials_kernel<<<grid, dim3(32, 8)>>>(x, x_stride, z, dy, inverse_rms, rows, dim, partials);
    deltabit::cuda::cuda_check_launch("norm_weight_partials_kernel");
    mark_kernel("norm: norm_weight_partials_kernel");
    add_slab_sums(partials, slabs, dim, dw);
    mark_kernel("norm: add_slab_sums_kernel");
}

// ---- the delta rule's L2 norm ----

// Row r is head r % heads of token r / heads, at x + (r / heads)·x_stride + (r % heads)·dim.
__device__ inline int64_t strided_row(int64_t r, int64_t heads, int64_t x_stride, int64_t dim) {
    return (r / heads) * x_stride + (r % heads) * dim;
}

__global__ void l2_norm_forward_kernel(const float* x, int64_t x_stride, int64_t rows, int64_t heads, int64_t dim,
                                       float eps, float scale, float* y) {
    const int lane = threadIdx.x % 32;
    WARP_ROWS(r, rows) {
        const float* xr = x + strided_row(r, heads, x_stride, dim);
        float sum = 0.0f;
        for (int64_t i = lane; i < dim; i += 32) sum += xr[i] * xr[i];
        const float inv = rsqrtf(warp_sum(sum) + eps);
        for (int64_t i = lane; i < dim; i += 32) y[r * dim + i] = xr[i] * inv * scale;
    }
}

__global__ void l2_norm_backward_kernel(const float* x, int64_t x_stride, const float* dy, int64_t rows, int64_t heads,
                                        int64_t dim, float eps, float scale, float* dx) {
    const int lane = threadIdx.x % 32;
    WARP_ROWS(r, rows) {
        const int64_t at = strided_row(r, heads, x_stride, dim);
        const float* xr = x + at;
        const float* dyr = dy + r * dim;
        float sum = 0.0f, dot = 0.0f;
        for (int64_t i = lane; i < dim; i += 32) {
            sum += xr[i] * xr[i];
            dot += dyr[i] * xr[i];
        }
        sum = warp_sum(sum);
        dot = warp_sum(dot);
        const float inv = rsqrtf(sum + eps);
        for (int64_t j = lane; j < dim; j += 32) dx[at + j] = scale * (dyr[j] * inv - xr[j] * dot * inv * inv * inv);
    }
}

// Blocks of kRowWarps rows (the kernels stride over any rows past the grid).
unsigned row_blocks(int64_t rows) {
    const int64_t blocks = (rows + kRowWarps - 1) / kRowWarps;
    return unsigned(std::min<int64_t>(blocks, int64_t(1) << 24));
}

}  // namespace

void rms_norm_forward(const float* x, const float* w, int64_t rows, int64_t dim, float eps, bool one_plus, float* y,
                      int64_t x_stride) {
    if (rows == 0) return;
    rms_norm_forward_kernel<<<row_blocks(rows), kBlock>>>(x, x_stride == 0 ? dim : x_stride, w, rows, dim, eps,
                                                          one_plus ? 1.0f : 0.0f, y);
    deltabit::cuda::cuda_check_launch("rms_norm_forward_kernel");
}

void rms_norm_backward(const float* x, const float* w, const float* dy, int64_t rows, int64_t dim, float eps,
                       bool one_plus, float* dx, float* dw, int64_t x_stride, bool accumulate) {
    if (rows == 0) return;
    if (x_stride == 0) x_stride = dim;
    if (dim <= kFusedMaxDim) {
        const FusedSlabs slabs = fused_slabs(rows);
        float* partials = dw != nullptr ? g_weight_partials.floats(slabs.count * dim) : nullptr;
        with_lane_columns(dim, [&](auto lane_columns) {
            rms_norm_backward_fused_kernel<decltype(lane_columns)::value><<<unsigned(slabs.count), kBlock>>>(
                x, x_stride, w, dy, rows, dim, slabs.rows_per_slab, eps, one_plus ? 1.0f : 0.0f, accumulate, dx,
                partials);
        });
        deltabit::cuda::cuda_check_launch("rms_norm_backward_fused_kernel");
        mark_kernel("norm: rms_norm_backward_fused_kernel");
        if (dw == nullptr) return;
        add_slab_sums(partials, slabs.count, dim, dw);
        mark_kernel("norm: add_slab_sums_kernel");
        return;
    }
    float* inverse_rms = g_inverse_rms.floats(rows);
    rms_norm_backward_kernel<<<row_blocks(rows), kBlock>>>(x, x_stride, w, dy, rows, dim, eps, one_plus ? 1.0f : 0.0f,
                                                           accumulate, dx, inverse_rms);
    deltabit::cuda::cuda_check_launch("rms_norm_backward_kernel");
    mark_kernel("norm: rms_norm_backward_kernel");
    if (dw != nullptr) norm_weight_gradient(x, x_stride, nullptr, dy, inverse_rms, rows, dim, dw);
}

void gated_rms_norm_forward(const float* x, const float* z, const float* w, int64_t rows, int64_t dim, float eps,
                            float* y) {
    if (rows == 0) return;
    gated_rms_norm_forward_kernel<<<row_blocks(rows), kBlock>>>(x, z, w, rows, dim, eps, y);
    deltabit::cuda::cuda_check_launch("gated_rms_norm_forward_kernel");
}

void gated_rms_norm_backward(const float* x, const float* z, const float* w, const float* dy, int64_t rows,
                             int64_t dim, float eps, float* dx, float* dz, float* dw) {
    if (rows == 0) return;
    if (dim <= kFusedMaxDim) {
        const FusedSlabs slabs = fused_slabs(rows);
        float* partials = g_weight_partials.floats(slabs.count * dim);
        with_lane_columns(dim, [&](auto lane_columns) {
            gated_rms_norm_backward_fused_kernel<decltype(lane_columns)::value><<<unsigned(slabs.count), kBlock>>>(
                x, z, w, dy, rows, dim, slabs.rows_per_slab, eps, dx, dz, partials);
        });
        deltabit::cuda::cuda_check_launch("gated_rms_norm_backward_fused_kernel");
        mark_kernel("norm: gated_rms_norm_backward_fused_kernel");
        add_slab_sums(partials, slabs.count, dim, dw);
        mark_kernel("norm: add_slab_sums_kernel");
        return;
    }
    float* inverse_rms = g_inverse_rms.floats(rows);
    gated_rms_norm_backward_kernel<<<row_blocks(rows), kBlock>>>(x, z, w, dy, rows, dim, eps, dx, dz, inverse_rms);
    deltabit::cuda::cuda_check_launch("gated_rms_norm_backward_kernel");
    mark_kernel("norm: gated_rms_norm_backward_kernel");
    norm_weight_gradient(x, dim, z, dy, inverse_rms, rows, dim, dw);
}

void l2_norm_forward(const float* x, int64_t x_stride, int64_t N, int64_t heads, int64_t dim, float eps, float scale,
                     float* y) {
    const int64_t rows = N * heads;
    if (rows == 0) return;
    l2_norm_forward_kernel<<<row_blocks(rows), kBlock>>>(x, x_stride, rows, heads, dim, eps, scale, y);
    deltabit::cuda::cuda_check_launch("l2_norm_forward_kernel");
}

void l2_norm_backward(const float* x, int64_t x_stride, const float* dy, int64_t N, int64_t heads, int64_t dim,
                      float eps, float scale, float* dx) {
    const int64_t rows = N * heads;
    if (rows == 0) return;
    l2_norm_backward_kernel<<<row_blocks(rows), kBlock>>>(x, x_stride, dy, rows, heads, dim, eps, scale, dx);
    deltabit::cuda::cuda_check_launch("l2_norm_backward_kernel");
}

}  // namespace deltabit::train::cuda
