// Micro-benchmark of the trainer's chunked gated delta rule (train/cuda/kernels.h: delta_rule_forward
// and delta_rule_backward), on the bytelm-hybrid-small step (32 × 512 tokens, 3 heads of 64 × 128)
// on configs/qwen35-100m.toml's (32 × 1024 tokens, 6 key / 12 value heads of 128 × 128: the shape
// `deltabit train --profile` times inside that config's step) and on a Qwen3.5-27B layer's heads (16 key /
// 48 value heads of 128 × 128) at 4 × 512 tokens.
//
//   bench_train_delta_rule_cuda
//
// Each shape twice: the fp32 CUDA-core kernels (GemmMath::fp32), then the bf16 path (GemmMath::bf16: at
// key dims 64 and 128 all four tensor-core kernels, delta_rule_chunked_mma_kernels.cu: the forward's
// factors and walk, the backward's carry and gradients; only the backward's reduction over value heads
// is fp32 either way). Each figure: µs per call (median of 7 timed rounds of 10 calls after a warm-up,
// events on the default stream, which the training kernels use) and TFLOP/s of the products the kernels
// compute, per value head and chunk of L = 64 tokens with dk keys and dv values:
//   forward  4L²dk (K Kᵀ, Q Kᵀ) + 6L·dk·dv (K S, Q S, Kᵀ V') + 2L²dv (T x, M V'; triangles)
//   backward 6L·dk·dv + 2L²dv (the carry) + 12L·dk·dv + 4L²dv + 12L²dk (the gradients)
// against the fp32 FMA peak (67 TFLOP/s, H100/H200 SXM datasheet) for the CUDA-core kernels and the dense
// bf16 tensor-core rate measured on this workplace's machines (790 TFLOP/s, as bench_train_attention_cuda)
// for the tensor-core forward and backward. The tensor-core kernels compute the triangles' full 16-row
// blocks, a little more than counted. Numbers count only from a build whose CudaTrainOps.DeltaRule*
// tests pass.
//
// Measured: not yet (no GPU where this was written; docs/notes/train-cuda.md).
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <vector>

#if defined(DELTABIT_HAVE_CUDA) && defined(DELTABIT_HAVE_TRAIN)
#include <cuda_runtime.h>

#include "backend/cuda_buffer.h"
#include "backend/cuda_probe.h"
#include "train/cuda/delta_rule_chunked_mma.h"
#include "train/cuda/gemm.h"
#include "train/cuda/kernels.h"
#include "train_bench_timing.h"
#endif

#if !defined(DELTABIT_HAVE_CUDA) || !defined(DELTABIT_HAVE_TRAIN)
int main() {
    std::puts("bench_train_delta_rule_cuda: built without CUDA or without the trainer");
    return 0;
}
#else

namespace {

using deltabit::cuda::cuda_check;
using deltabit::cuda::DeviceBuffer;
namespace tc = deltabit::train::cuda;

constexpr double kFp32PeakTflops = 67.0;
constexpr double kBf16PeakTflops = 790.0;

DeviceBuffer filled(size_t n, float value) {
    std::vector<float> v(n, value);
    DeviceBuffer b(std::max<size_t>(n, 1) * sizeof(float));
    b.upload(v.data(), n * sizeof(float));
    return b;
}

// µs per call: 3 warm-up calls, then the median of 7 rounds of 10 (train_bench_timing.h).
template <typename F>
double median_us(F&& call) {
    return deltabit::bench::median_us_per_call(3, 10, call);
}

void run(const char* name, int64_t B, int64_t T, int64_t Hk, int64_t Hv, int64_t dk, int64_t dv) {
    const int64_t N = B * T;
    // Unit-norm keys (every entry 1/√dk), β = 0.5, g = −0.1: the kernels' cost does not depend on values.
    const float unit = float(1.0 / std::sqrt(double(dk)));
    DeviceBuffer q = filled(size_t(N * Hk * dk), unit * unit), k = filled(size_t(N * Hk * dk), unit),
                 v = filled(size_t(N * Hv * dv), 0.5f), g = filled(size_t(N * Hv), -0.1f),
                 beta = filled(size_t(N * Hv), 0.5f), dout = filled(size_t(N * Hv * dv), 0.25f),
                 o = filled(size_t(N * Hv * dv), 0.0f), dq = filled(size_t(N * Hk * dk), 0.0f),
                 dk_ = filled(size_t(N * Hk * dk), 0.0f), dv_ = filled(size_t(N * Hv * dv), 0.0f),
                 dg = filled(size_t(N * Hv), 0.0f), dbeta = filled(size_t(N * Hv), 0.0f),
                 saved = filled(size_t(tc::delta_rule_saved_floats(B, T, Hv, dk, dv)), 0.0f),
                 scratch = filled(size_t(tc::delta_rule_scratch_floats(B, T, Hv, dk, dv)), 0.0f);
    auto forward = [&] {
        tc::delta_rule_forward(q.get<float>(), k.get<float>(), v.get<float>(), g.get<float>(), beta.get<float>(), B, T,
                               Hk, Hv, dk, dv, o.get<float>(), saved.get<float>());
    };
    auto backward = [&] {
        tc::delta_rule_backward(q.get<float>(), k.get<float>(), v.get<float>(), g.get<float>(), beta.get<float>(),
                                dout.get<float>(), saved.get<float>(), B, T, Hk, Hv, dk, dv, dq.get<float>(),
                                dk_.get<float>(), dv_.get<float>(), dg.get<float>(), dbeta.get<float>(),
                                scratch.get<float>());
    };
    const double L = double(tc::kDeltaChunk), chunks = double((T + tc::kDeltaChunk - 1) / tc::kDeltaChunk);
    const double units = double(B * Hv) * chunks, Dk = double(dk), Dv = double(dv);
    const double f_flop = units * (4 * L * L * Dk + 6 * L * Dk * Dv + 2 * L * L * Dv);
    const double b_flop = units * (18 * L * Dk * Dv + 6 * L * L * Dv + 12 * L * L * Dk);
    std::printf("%s\n", name);
    double fp32_forward_us = 0.0, fp32_backward_us = 0.0;
    for (tc::GemmMath math : {tc::GemmMath::fp32, tc::GemmMath::bf16}) {
        const tc::ScopedGemmMath scoped(math);
        const bool bf16 = math == tc::GemmMath::bf16;
        const double f_us = median_us(forward);
        forward();
        const double b_us = median_us(backward);
        const double f_tflops = f_flop / f_us * 1e-6, b_tflops = b_flop / b_us * 1e-6;
        if (!bf16) {
            fp32_forward_us = f_us;
            std::printf("  %-24s forward %9.1f µs %6.2f TFLOP/s (%4.1f%% of fp32)", "CUDA cores, fp32", f_us,
                        f_tflops, 100 * f_tflops / kFp32PeakTflops);
        } else if (tc::delta_rule_mma_supported(dk)) {
            std::printf("  %-24s forward %9.1f µs %6.2f TFLOP/s (%4.1f%% of bf16, %.1f× fp32)", "bf16 mma, all four", f_us,
                        f_tflops, 100 * f_tflops / kBf16PeakTflops, fp32_forward_us / f_us);
        } else {
            std::printf("  %-24s forward %9.1f µs (no tensor-core forward at key dim %lld)", "bf16 path", f_us,
                        static_cast<long long>(dk));
        }
        const bool mma = bf16 && tc::delta_rule_mma_supported(dk);
        std::printf("   backward %9.1f µs %6.2f TFLOP/s (%4.1f%% of %s)", b_us, b_tflops,
                    100 * b_tflops / (mma ? kBf16PeakTflops : kFp32PeakTflops), mma ? "bf16" : "fp32");
        if (bf16) std::printf(" %.1f× fp32", fp32_backward_us / b_us);
        std::printf("\n");
        if (!bf16) fp32_backward_us = b_us;
    }
}

}  // namespace

int main() {
    if (deltabit::cuda::device_count() == 0) {
        std::puts("bench_train_delta_rule_cuda: no CUDA device");
        return 0;
    }
    std::printf("device: %s\n", deltabit::cuda::device_summary().c_str());
    run("bytelm-hybrid-small 32x512 3/3", 32, 512, 3, 3, 64, 128);
    run("qwen35-100m 32x1024 6/12", 32, 1024, 6, 12, 128, 128);
    run("qwen35-27b heads 4x512 16/48", 4, 512, 16, 48, 128, 128);
    return 0;
}

#endif
