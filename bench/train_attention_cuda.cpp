// Micro-benchmark of the trainer's causal GQA attention (train/cuda/kernels.h) on the attention shapes of
// the two training configs: configs/bytelm-hybrid-small.toml (14M: 32 × 512 tokens, 6 / 2 heads of 64)
// and configs/qwen35-100m.toml (106M: 32 × 1024 tokens, 6 / 2 heads of 128).
//
//   bench_train_attention_cuda
//
// Each shape, forward and backward, twice: the CUDA-core kernels (what GemmMath::fp32 runs) and the
// flash tensor-core kernels (GemmMath::bf16, the training path). TFLOP/s counts the causal work once:
// forward 4·dh·Hq·B·T(T+1)/2 (Q Kᵀ and P V over the visible pairs), backward 2.5× that (the five
// products of FA2's backward, recomputation not counted), against the H200's dense bf16 tensor-core rate
// measured on this workplace's machines (790 TFLOP/s, .library/device/KINDS.md; mma.sync kernels reach a
// fraction of it).
// Time: the kernels run on the default stream (the trainer's), so no graph: a warm-up call, then 7 runs of
// `calls` back-to-back calls between events; the median run divided by the calls.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <string>
#include <vector>

#if defined(DELTABIT_HAVE_CUDA) && defined(DELTABIT_HAVE_TRAIN)
#include <cuda_runtime.h>

#include "backend/cuda_buffer.h"
#include "backend/cuda_probe.h"
#include "train/cuda/gemm.h"
#include "train/cuda/kernels.h"
#include "train_bench_timing.h"
#endif

#if !defined(DELTABIT_HAVE_CUDA) || !defined(DELTABIT_HAVE_TRAIN)
int main() {
    std::puts("bench_train_attention_cuda: built without CUDA or without the trainer");
    return 0;
}
#else

namespace {

using namespace deltabit;
using deltabit::cuda::cuda_check;
using deltabit::cuda::DeviceBuffer;
namespace tc = deltabit::train::cuda;

constexpr double kBf16PeakTflops = 790.0;

struct Shape {
    const char* name;
    int64_t B, T, Hq, Hkv, dh;
};

using deltabit::bench::random_buffer;

// µs per call: a warm-up call, then the median of 7 runs of `calls` calls (train_bench_timing.h).
template <typename F>
double time_us(int calls, F&& body) {
    return deltabit::bench::median_us_per_call(1, calls, body);
}

void bench_shape(const Shape& s) {
    const size_t nq = size_t(s.B * s.T * s.Hq * s.dh), nkv = size_t(s.B * s.T * s.Hkv * s.dh),
                 rows = size_t(s.B * s.T * s.Hq);
    DeviceBuffer q = random_buffer(nq, 1), k = random_buffer(nkv, 2), v = random_buffer(nkv, 3),
                 dout = random_buffer(nq, 4), o(nq * 4), lse(rows * 4), dq(nq * 4), dk(nkv * 4), dv(nkv * 4),
                 work(rows * 4);
    const float scale = 1.0f / std::sqrt(float(s.dh));
    const double forward_flops = 4.0 * double(s.dh) * double(s.Hq) * double(s.B) * double(s.T) * double(s.T + 1) / 2;
    double naive[2] = {0, 0};
    for (tc::GemmMath math : {tc::GemmMath::fp32, tc::GemmMath::bf16}) {
        const tc::ScopedGemmMath scoped(math);
        const bool flash = math == tc::GemmMath::bf16;
        auto forward = [&] {
            tc::attention_forward(q.get<float>(), k.get<float>(), v.get<float>(), s.B, s.T, s.Hq, s.Hkv, s.dh, scale,
                                  o.get<float>(), lse.get<float>());
        };
        auto backward = [&] {
            tc::attention_backward(q.get<float>(), k.get<float>(), v.get<float>(), o.get<float>(), lse.get<float>(),
                                   dout.get<float>(), s.B, s.T, s.Hq, s.Hkv, s.dh, scale, dq.get<float>(),
                                   dk.get<float>(), dv.get<float>(), work.get<float>());
        };
        const int calls = flash ? 20 : 3;
        const double f_us = time_us(calls, forward);
        forward();
        const double b_us = time_us(calls, backward);
        const double f_tflops = forward_flops / f_us / 1e6, b_tflops = 2.5 * forward_flops / b_us / 1e6;
        std::printf("  %-22s forward %9.1f µs %6.1f TFLOP/s (%4.1f%%)   backward %9.1f µs %6.1f TFLOP/s (%4.1f%%)",
                    flash ? "flash, bf16 mma" : "CUDA cores, fp32", f_us, f_tflops, 100 * f_tflops / kBf16PeakTflops,
                    b_us, b_tflops, 100 * b_tflops / kBf16PeakTflops);
        if (flash)
            std::printf("   %.1f× / %.1f×", naive[0] / f_us, naive[1] / b_us);
        else
            naive[0] = f_us, naive[1] = b_us;
        std::printf("\n");
    }
}

}  // namespace

int main() {
    if (deltabit::cuda::device_count() == 0) {
        std::puts("bench_train_attention_cuda: no CUDA device");
        return 0;
    }
    try {
        std::printf("device: %s\n", deltabit::cuda::device_summary().c_str());
        const Shape shapes[] = {{"14M (bytelm-hybrid-small): B 32, T 512, 6/2 heads x 64", 32, 512, 6, 2, 64},
                                {"106M (qwen35-100m): B 32, T 1024, 6/2 heads x 128", 32, 1024, 6, 2, 128}};
        for (const Shape& s : shapes) {
            std::printf("%s\n", s.name);
            bench_shape(s);
        }
    } catch (const std::exception& e) {
        std::fprintf(stderr, "bench_train_attention_cuda: %s\n", e.what());
        return 1;
    }
    return 0;
}
#endif
