// The gated DeltaNet decode step in two launches (ops/decode_cuda.h); the prompt path keeps the chain of
// single ops (conv1d, three splits, two l2_norms, gdn_gates, delta rule, gated_rms_norm: ten launches).
//
// gdn_decode_prepare: one block per channel segment — a q head, a k head or a v head of the conv's
// [q | k | v] channels. Each thread owns its channels: the causal conv over the K−1 stored inputs and the
// new one (fp32 fmaf in tap order, as the reference's double sum), SiLU, and the state roll (no other
// thread touches those channels). q and k segments are then l2-normed over the block; v segments also
// compute their head's gates.
//
// gdn_decode_recurrent: one block per value head holds all its columns at once (512 threads; a column is
// split over L lanes of 32 rows each, as in delta_rule_cuda.cu), so the head's output is complete in the
// block and the gated RMS norm needs no second launch. The state is read once and written once.
#include <cmath>
#include <string>

#include "backend/cuda_buffer.h"
#include "ops/cuda_math.cuh"
#include "ops/decode_cuda.h"
#include "ops/programmatic_launch.cuh"

namespace deltabit::cuda {

namespace {

constexpr int kPrepareThreads = 256;  // >= kGdnDecodeMaxKeyDim: one q/k channel per thread
constexpr int kRecurrentThreads = 512;
constexpr int kRowsPerThread = 32;

struct PrepareArgs {
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

__global__ void __launch_bounds__(kPrepareThreads) gdn_prepare_kernel(PrepareArgs a) {
    __shared__ float scratch[32];
    const int64_t seg = blockIdx.x, hk = a.n_key_heads, dk = a.key_dim, dv = a.value_dim, K = a.kernel;
    const int64_t channels = 2 * hk * dk + a.n_value_heads * dv;
    const bool is_v = seg >= 2 * hk;
    const int64_t base = is_v ? 2 * hk * dk + (seg - 2 * hk) * dv : seg * dk;
    const int64_t width = is_v ? dv : dk;
    // The conv weights and the stored window (written by the previous decode step, launches ago:
    // ops/programmatic_launch.cuh) into L2 while the GEMV before finishes.
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
    bool tiled;
    float q_scale, norm_eps;
};

template <int L>
__global__ void __launch_bounds__(kRecurrentThreads) gdn_recurrent_kernel(RecurrentArgs a) {
    constexpr int kRows = kRowsPerThread * L;  // >= key_dim
    constexpr int kCols = kRecurrentThreads / L;
    __shared__ float q_s[kRows], k_s[kRows];
    __shared__ float o_s[kGdnDecodeMaxValueDim];
    __shared__ float scratch[32];
    const int tid = int(threadIdx.x), in_group = tid % L, col_in_pass = tid / L;
    const int64_t h = blockIdx.x, dk = a.key_dim, dv = a.value_dim, hv = a.n_value_heads;
    const int64_t kh = a.tiled ? h % a.n_key_heads : h / (hv / a.n_key_heads);
    const float* state_in = a.state_in + h * dk * dv;
    float* state_out = a.state_out + h * dk * dv;  // may be state_in: each element has one owner thread
    const auto load_state = [&](int64_t col0, float (&s)[kRowsPerThread]) {
        const int64_t j = col0 + col_in_pass;
#pragma unroll
        for (int r = 0; r < kRowsPerThread; ++r) {
            const int64_t i = in_group + int64_t(L) * r;
            s[r] = j < dv && i < dk ? state_in[i * dv + j] : 0.0f;
        }
    };
    // The first pass's state is requested before waiting for gdn_prepare: the previous decode step wrote
    // it, launches ago (ops/programmatic_launch.cuh), so its fetch overlaps the kernel before.
    float s[kRowsPerThread];
    load_state(0, s);
    wait_for_predecessor();
    allow_dependents();
    for (int i = tid; i < kRows; i += kRecurrentThreads) {
        q_s[i] = i < dk ? a.q[kh * dk + i] : 0.0f;  // rows past key_dim stay zero: they touch nothing
        k_s[i] = i < dk ? a.k[kh * dk + i] : 0.0f;
    }
    __syncthreads();
    const float decay = expf(a.g[h]), beta = a.beta[h];

    float sum_sq = 0.0f;
    for (int64_t col0 = 0; col0 < dv; col0 += kCols) {
        const int64_t j = col0 + col_in_pass;
        const bool valid = j < dv;
        if (col0 != 0) load_state(col0, s);
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
        const float delta = beta * ((valid ? a.v[h * dv + j] : 0.0f) - read);
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
#pragma unroll
        for (int r = 0; r < kRowsPerThread; ++r) {
            const int64_t i = in_group + int64_t(L) * r;
            if (valid && i < dk) state_out[i * dv + j] = s[r];
        }
        if (valid && in_group == 0) {
            o_s[j] = o;
            sum_sq = fmaf(o, o, sum_sq);
        }
    }
    // gated_rms_norm as cuda::gated_rms_norm: w · o · 1/sqrt(mean(o²) + eps) · silu(z).
    const float scale = 1.0f / sqrtf(block_sum(sum_sq, scratch) / float(dv) + a.norm_eps);
    if (a.out_q == nullptr) {
        for (int64_t j = tid; j < dv; j += kRecurrentThreads)
            a.out[h * dv + j] = a.norm_w[j] * o_s[j] * scale * silu_f(a.z[h * dv + j]);
        return;
    }
    // And the output matmul's int8 activations (matmul_cuda.h), here where the head's outputs are: a group
    // of 128 is four consecutive warps of a pass, one value per thread. The max and the integer sum do not
    // depend on how the group is split, so the codes equal quantize_activations' bit for bit.
    constexpr int kWarpsPerGroup = kActivationGroup / 32;
    __shared__ float s_amax[kRecurrentThreads / 32];
    __shared__ int s_sum[kRecurrentThreads / 32];
    const int lane = tid & 31, warp = tid >> 5, first_warp = warp / kWarpsPerGroup * kWarpsPerGroup;
    for (int64_t j0 = 0; j0 < dv; j0 += kRecurrentThreads) {
        const int64_t j = j0 + tid;
        const bool valid = j < dv;  // dv is a multiple of 128: whole groups are valid or not
        const float y = valid ? a.norm_w[j] * o_s[j] * scale * silu_f(a.z[h * dv + j]) : 0.0f;
        if (valid) a.out[h * dv + j] = y;
        float amax = fabsf(y);
#pragma unroll
        for (int offset = 16; offset > 0; offset /= 2) amax = fmaxf(amax, __shfl_xor_sync(kFullWarpMask, amax, offset));
        if (lane == 0) s_amax[warp] = amax;
        __syncthreads();
        amax = s_amax[first_warp];
#pragma unroll
        for (int w = 1; w < kWarpsPerGroup; ++w) amax = fmaxf(amax, s_amax[first_warp + w]);
        const float inv = amax > 0.0f ? 127.0f / amax : 0.0f;
        const int q = min(127, max(-127, __float2int_rn(y * inv)));
        int sum = q;
#pragma unroll
        for (int offset = 16; offset > 0; offset /= 2) sum += __shfl_xor_sync(kFullWarpMask, sum, offset);
        if (lane == 0) s_sum[warp] = sum;
        __syncthreads();
        if (valid) {
            a.out_q[h * dv + j] = int8_t(q);
            if (tid % kActivationGroup == 0) {
                int group_sum = 0;
#pragma unroll
                for (int w = 0; w < kWarpsPerGroup; ++w) group_sum += s_sum[first_warp + w];
                a.out_meta[(h * dv + j) / kActivationGroup] = ActivationGroupMeta{amax / 127.0f, group_sum};
            }
        }
        __syncthreads();  // s_amax and s_sum are rewritten by the next pass
    }
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

}  // namespace

void gdn_decode_prepare(const float* mixed, const float* b, const float* a, const float* conv_w, const float* conv_in,
                        float* conv_out, const float* ssm_a, const float* dt_bias, const GdnDecodeDims& dims,
                        float l2_eps, float* q, float* k, float* v, float* beta, float* g, cudaStream_t stream) {
    check_dims(dims, "gdn_decode_prepare");
    const PrepareArgs args{mixed,   b, a, conv_w, conv_in, conv_out, ssm_a, dt_bias, q, k, v, beta, g,
                           dims.n_key_heads, dims.n_value_heads, dims.key_dim, dims.value_dim, dims.conv_kernel, l2_eps};
    const int64_t segments = 2 * dims.n_key_heads + dims.n_value_heads;
    launch_programmatic(gdn_prepare_kernel, dim3(unsigned(segments)), dim3(kPrepareThreads), 0, stream,
                        "gdn_decode_prepare", args);
    cuda_check_launch("gdn_decode_prepare");
}

void gdn_decode_recurrent(const float* q, const float* k, const float* v, const float* beta, const float* g,
                          const float* z, const float* norm_w, float norm_eps, const GdnDecodeDims& dims,
                          const float* state_in, float* state_out, float* out, cudaStream_t stream,
                          const QuantizedActivationsView* out_quantized) {
    check_dims(dims, "gdn_decode_recurrent");
    if (out_quantized != nullptr &&
        (dims.value_dim % kActivationGroup != 0 || out_quantized->cols != dims.n_value_heads * dims.value_dim))
        fail_message("gdn_decode_recurrent (cuda): a quantised output needs value_dim a multiple of " +
                     std::to_string(kActivationGroup) + " and a view of " +
                     std::to_string(dims.n_value_heads * dims.value_dim) + " inputs; " + dims_text(dims));
    const RecurrentArgs args{q,
                             k,
                             v,
                             beta,
                             g,
                             z,
                             norm_w,
                             state_in,
                             state_out,
                             out,
                             out_quantized != nullptr ? out_quantized->q : nullptr,
                             out_quantized != nullptr ? out_quantized->meta : nullptr,
                             dims.n_key_heads,
                             dims.n_value_heads,
                             dims.key_dim,
                             dims.value_dim,
                             dims.key_head_map == cpu::KeyHeadMap::tiled,
                             float(1.0 / std::sqrt(double(dims.key_dim))),
                             norm_eps};
    const unsigned blocks = unsigned(dims.n_value_heads);
    const int64_t lanes = (dims.key_dim + kRowsPerThread - 1) / kRowsPerThread;
    const auto kernel = lanes <= 1   ? gdn_recurrent_kernel<1>
                        : lanes <= 2 ? gdn_recurrent_kernel<2>
                        : lanes <= 4 ? gdn_recurrent_kernel<4>
                                     : gdn_recurrent_kernel<8>;
    launch_programmatic(kernel, dim3(blocks), dim3(kRecurrentThreads), 0, stream, "gdn_decode_recurrent", args);
    cuda_check_launch("gdn_decode_recurrent");
}

}  // namespace deltabit::cuda
