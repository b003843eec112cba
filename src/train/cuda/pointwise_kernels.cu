// Elementwise and across-time training ops: SwiGLU, the attention output gate, residual adds, rope, the
// DeltaNet causal conv and its gates. Per-channel and per-head weight gradients are device_common.cuh's
// two-stage column sums (no atomics).
#include "train/cuda/device_common.cuh"
#include "train/cuda/kernel_marks.h"
#include "train/cuda/kernels.h"

#include <algorithm>

namespace deltabit::train::cuda {
namespace {

using deltabit::cuda::cuda_check_launch;

Scratch g_conv_dpre;      // the conv's gradient before SiLU, [N][C]
Scratch g_conv_partials;  // the conv weight gradient's partial rows, [slab][C·K]
Scratch g_gate_partials;  // the gates' per-head partial sums, [2][slab][Hv]

#define GRID_STRIDE(i, n) for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < (n); i += int64_t(gridDim.x) * blockDim.x)

__global__ void swiglu_forward_kernel(const float* gate, const float* up, int64_t n, float* out) {
    GRID_STRIDE(i, n) out[i] = siluf_(gate[i]) * up[i];
}
__global__ void swiglu_backward_kernel(const float* gate, const float* up, const float* dout, int64_t n, float* dgate,
                                       float* dup) {
    GRID_STRIDE(i, n) {
        dgate[i] = dout[i] * up[i] * silu_derivativef_(gate[i]);
        dup[i] = dout[i] * siluf_(gate[i]);
    }
}
__global__ void add_into_kernel(const float* x, int64_t n, float* y) { GRID_STRIDE(i, n) y[i] += x[i]; }
__global__ void residual_add_kernel(const float* x, const float* delta, int64_t n, float* out) {
    GRID_STRIDE(i, n) out[i] = x[i] + delta[i];
}

// One thread per (row, head, j < rope_dim/2): rotates the pair (j, j + half).
__global__ void rope_kernel(float* x, int64_t N, int64_t T, int64_t heads, int64_t head_dim, int64_t rope_dim,
                            float theta, float direction) {
    const int64_t half = rope_dim / 2;
    GRID_STRIDE(i, N * heads * half) {
        const int64_t j = i % half, row_head = i / half, n = row_head / heads;
        const float exponent = float(2 * j) / float(rope_dim);
        const float inv_freq = 1.0f / float(pow(double(theta), double(exponent)));
        const float angle = float(n % T) * inv_freq;
        const float c = float(cos(double(angle))), s = direction * float(sin(double(angle)));
        float* head = x + row_head * head_dim;
        const float x0 = head[j], x1 = head[j + half];
        head[j] = x0 * c - x1 * s;
        head[j + half] = x1 * c + x0 * s;
    }
}

__global__ void sigmoid_gate_forward_kernel(const float* att, const float* gate, int64_t gate_stride, int64_t rows,
                                            int64_t width, float* gated) {
    GRID_STRIDE(i, rows * width) gated[i] = att[i] * sigmoidf_(gate[(i / width) * gate_stride + i % width]);
}
__global__ void sigmoid_gate_backward_kernel(const float* att, const float* gate, int64_t gate_stride,
                                             const float* dgated, int64_t rows, int64_t width, float* datt,
                                             float* dgate) {
    GRID_STRIDE(i, rows * width) {
        const int64_t g = (i / width) * gate_stride + i % width;
        const float s = sigmoidf_(gate[g]);
        datt[i] = dgated[i] * s;
        dgate[g] = dgated[i] * att[i] * s * (1.0f - s);
    }
}

__device__ float conv_pre_activation(const float* x, const float* w, int64_t t, int64_t row0, int64_t c, int64_t C,
                                     int64_t K) {
    float sum = 0.0f;
    for (int64_t j = 0; j < K; ++j) {
        const int64_t src = t - (K - 1) + j;
        if (src >= 0) sum += w[c * K + j] * x[(row0 + src) * C + c];
    }
    return sum;
}

// Channel c of row n in a tensor whose channels [0, split) are lo[N][split], the rest hi[N][C − split].
__device__ inline int64_t split_index(int64_t n, int64_t c, int64_t C, int64_t split) {
    return c < split ? n * split + c : n * (C - split) + (c - split);
}

__global__ void conv_silu_forward_kernel(const float* x, const float* w, int64_t N, int64_t T, int64_t C, int64_t K,
                                         int64_t split, float* y_lo, float* y_hi) {
    GRID_STRIDE(i, N * C) {
        const int64_t n = i / C, c = i % C, t = n % T;
        (c < split ? y_lo : y_hi)[split_index(n, c, C, split)] = siluf_(conv_pre_activation(x, w, t, n - t, c, C, K));
    }
}
__global__ void conv_silu_dpre_kernel(const float* x, const float* w, const float* dy_lo, const float* dy_hi,
                                      int64_t N, int64_t T, int64_t C, int64_t K, int64_t split, float* dpre) {
    GRID_STRIDE(i, N * C) {
        const int64_t n = i / C, c = i % C, t = n % T;
        const float dy = (c < split ? dy_lo : dy_hi)[split_index(n, c, C, split)];
        dpre[i] = dy * silu_derivativef_(conv_pre_activation(x, w, t, n - t, c, C, K));
    }
}
// dx[s][c] = Σ_j dpre[s + K−1−j][c]·w[c][j] over the taps that stay inside the sequence.
__global__ void conv_silu_dx_kernel(const float* dpre, const float* w, int64_t N, int64_t T, int64_t C, int64_t K,
                                    float* dx) {
    GRID_STRIDE(i, N * C) {
        const int64_t n = i / C, c = i % C, s = n % T;
        float sum = 0.0f;
        for (int64_t j = 0; j < K; ++j) {
            const int64_t t = s + (K - 1) - j;
            if (t < T) sum += dpre[(n + (t - s)) * C + c] * w[c * K + j];
        }
        dx[i] = sum;
    }
}
// partials[slab][c·K + j] = Σ_{slab's rows} dpre[n][c]·x[n−(K−1)+j][c] (same sequence): columns × row
// slabs, each thread one channel walking its slab's rows in order; add_slab_sums adds the slabs.
__global__ void conv_weight_partials_kernel(const float* dpre, const float* x, int64_t N, int64_t T, int64_t C,
                                            int64_t K, float* partials) {
    const int64_t c = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
    if (c >= C) return;
    const int64_t slab_rows = (N + gridDim.y - 1) / gridDim.y;
    const int64_t begin = int64_t(blockIdx.y) * slab_rows, end = min(N, begin + slab_rows);
    for (int64_t j = 0; j < K; ++j) {
        float sum = 0.0f;
        for (int64_t n = begin; n < end; ++n) {
            const int64_t src = n % T - (K - 1) + j;
            if (src >= 0) sum += dpre[n * C + c] * x[(n - (K - 1) + j) * C + c];
        }
        partials[int64_t(blockIdx.y) * C * K + c * K + j] = sum;
    }
}

__global__ void gdn_gates_forward_kernel(const float* b, const float* a, const float* a_log, const float* dt_bias,
                                         int64_t N, int64_t Hv, float* beta, float* g) {
    GRID_STRIDE(i, N * Hv) {
        const int64_t h = i % Hv;
        beta[i] = sigmoidf_(b[i]);
        g[i] = -expf(a_log[h]) * softplusf_(a[i] + dt_bias[h]);
    }
}
// One block per (head, row slab): per-row gradients written; the slab's per-head sums into
// partials[slab][h] (A_log) and partials[slabs + slab][h] (dt_bias), added in order by add_slab_sums.
__global__ void gdn_gates_backward_kernel(const float* b, const float* a, const float* a_log, const float* dt_bias,
                                          const float* dbeta, const float* dg, int64_t N, int64_t Hv, float* db,
                                          float* da, float* partials) {
    __shared__ float shared[32];
    const int64_t h = blockIdx.x;
    const int64_t slice = (N + gridDim.y - 1) / gridDim.y;
    const int64_t begin = int64_t(blockIdx.y) * slice, end = min(N, begin + slice);
    const float e = expf(a_log[h]);
    float sum_alog = 0.0f, sum_dt = 0.0f;
    for (int64_t n = begin + threadIdx.x; n < end; n += blockDim.x) {
        const int64_t i = n * Hv + h;
        const float s = sigmoidf_(b[i]);
        db[i] = dbeta[i] * s * (1.0f - s);
        const float x = a[i] + dt_bias[h];
        const float g = -e * softplusf_(x);
        sum_alog += dg[i] * g;  // ∂g/∂A_log = g
        const float dx = dg[i] * -e * softplus_derivativef_(x);
        da[i] = dx;
        sum_dt += dx;
    }
    sum_alog = block_sum(sum_alog, shared);
    sum_dt = block_sum(sum_dt, shared);
    if (threadIdx.x == 0) {
        partials[int64_t(blockIdx.y) * Hv + h] = sum_alog;
        partials[int64_t(gridDim.y + blockIdx.y) * Hv + h] = sum_dt;
    }
}


}  // namespace

void swiglu_forward(const float* gate, const float* up, int64_t n, float* out) {
    swiglu_forward_kernel<<<blocks_for(n), kBlock>>>(gate, up, n, out);
    cuda_check_launch("swiglu_forward_kernel");
}
void swiglu_backward(const float* gate, const float* up, const float* dout, int64_t n, float* dgate, float* dup) {
    swiglu_backward_kernel<<<blocks_for(n), kBlock>>>(gate, up, dout, n, dgate, dup);
    cuda_check_launch("swiglu_backward_kernel");
}
void add_into(const float* x, int64_t n, float* y) {
    add_into_kernel<<<blocks_for(n), kBlock>>>(x, n, y);
    cuda_check_launch("add_into_kernel");
}
void residual_add(const float* x, const float* delta, int64_t n, float* out) {
    residual_add_kernel<<<blocks_for(n), kBlock>>>(x, delta, n, out);
    cuda_check_launch("residual_add_kernel");
}
void rope_apply(float* x, int64_t B, int64_t T, int64_t heads, int64_t head_dim, int64_t rope_dim, float theta,
                float direction) {
    const int64_t work = B * T * heads * (rope_dim / 2);
    if (work == 0) return;
    rope_kernel<<<blocks_for(work), kBlock>>>(x, B * T, T, heads, head_dim, rope_dim, theta, direction);
    cuda_check_launch("rope_kernel");
}
void sigmoid_gate_forward(const float* att, const float* gate, int64_t gate_stride, int64_t rows, int64_t width,
                          float* gated) {
    sigmoid_gate_forward_kernel<<<blocks_for(rows * width), kBlock>>>(att, gate, gate_stride, rows, width, gated);
    cuda_check_launch("sigmoid_gate_forward_kernel");
}
void sigmoid_gate_backward(const float* att, const float* gate, int64_t gate_stride, const float* dgated, int64_t rows,
                           int64_t width, float* datt, float* dgate) {
    sigmoid_gate_backward_kernel<<<blocks_for(rows * width), kBlock>>>(att, gate, gate_stride, dgated, rows, width,
                                                                       datt, dgate);
    cuda_check_launch("sigmoid_gate_backward_kernel");
}
void conv_silu_forward(const float* x, const float* w, int64_t B, int64_t T, int64_t C, int64_t K, int64_t split,
                       float* y_lo, float* y_hi) {
    conv_silu_forward_kernel<<<blocks_for(B * T * C), kBlock>>>(x, w, B * T, T, C, K, split, y_lo, y_hi);
    cuda_check_launch("conv_silu_forward_kernel");
}
void conv_silu_backward(const float* x, const float* w, const float* dy_lo, const float* dy_hi, int64_t B, int64_t T,
                        int64_t C, int64_t K, int64_t split, float* dx, float* dw) {
    const int64_t N = B * T;
    float* dpre = g_conv_dpre.floats(N * C);
    conv_silu_dpre_kernel<<<blocks_for(N * C), kBlock>>>(x, w, dy_lo, dy_hi, N, T, C, K, split, dpre);
    cuda_check_launch("conv_silu_dpre_kernel");
    mark_kernel("conv: conv_silu_dpre_kernel");
    if (dx != nullptr) {
        conv_silu_dx_kernel<<<blocks_for(N * C), kBlock>>>(dpre, w, N, T, C, K, dx);
        cuda_check_launch("conv_silu_dx_kernel");
        mark_kernel("conv: conv_silu_dx_kernel");
    }
    if (dw != nullptr) {
        // Slabs of ≥ 256 rows: 128 at N = 32,768, so the partials (128 × C·K) stay 1/64 of dpre.
        const int64_t slabs = slab_count(N, 256);
        float* partials = g_conv_partials.floats(slabs * C * K);
        const dim3 grid(unsigned((C + 127) / 128), unsigned(slabs));
        conv_weight_partials_kernel<<<grid, 128>>>(dpre, x, N, T, C, K, partials);
        cuda_check_launch("conv_weight_partials_kernel");
        mark_kernel("conv: conv_weight_partials_kernel");
        add_slab_sums(partials, slabs, C * K, dw);
        mark_kernel("conv: add_slab_sums_kernel");
    }
}
void gdn_gates_forward(const float* b, const float* a, const float* a_log, const float* dt_bias, int64_t N, int64_t Hv,
                       float* beta, float* g) {
    gdn_gates_forward_kernel<<<blocks_for(N * Hv), kBlock>>>(b, a, a_log, dt_bias, N, Hv, beta, g);
    cuda_check_launch("gdn_gates_forward_kernel");
}
void gdn_gates_backward(const float* b, const float* a, const float* a_log, const float* dt_bias, const float* dbeta,
                        const float* dg, int64_t N, int64_t Hv, float* db, float* da, float* da_log,
                        float* ddt_bias) {
    const int64_t slabs = slab_count(N, 1024);
    float* partials = g_gate_partials.floats(2 * slabs * Hv);
    gdn_gates_backward_kernel<<<dim3(unsigned(Hv), unsigned(slabs)), kBlock>>>(b, a, a_log, dt_bias, dbeta, dg, N, Hv,
                                                                               db, da, partials);
    cuda_check_launch("gdn_gates_backward_kernel");
    add_slab_sums(partials, slabs, Hv, da_log);
    add_slab_sums(partials + slabs * Hv, slabs, Hv, ddt_bias);
}

}  // namespace deltabit::train::cuda
