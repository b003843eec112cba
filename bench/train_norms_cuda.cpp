// Micro-benchmark of the trainer's norm backwards (train/cuda/kernels.h: rms_norm_backward,
// gated_rms_norm_backward) on the shapes one step of configs/qwen35-100m.toml runs (32 × 1024 tokens):
// the hidden norms (32,768 × 768, dx added into the residual stream's gradient; 25 a step), the q norm
// (196,608 rows of 128 read in place at stride 256 from q|gate, dx overwritten; 3), the k norm (65,536
// × 128; 3) and the DeltaNet gated norm (393,216 × 128, dx and dz overwritten; 9).
//
//   bench_train_norms_cuda
//
// GB/s counts each tensor once (profiled_ops.cpp's formula: x, dy, z read, dx and dz written, dx read
// too when added into), against the H200's 4.8 TB/s (an H100 SXM: 3.35). The weight gradient's
// partial rows and dw are left out: at these shapes they are under 1% of those bytes. The last line
// sums a step's 40 calls. Each shape also runs the backward twice from the same dw and checks the two
// results are equal to the bit (the sums over rows have a fixed order; a mismatch exits with status 1).
// Time: the kernels run on the default stream (the trainer's): a warm-up call, then 7 runs of 20
// back-to-back calls between events; the median run divided by the calls.
#include <algorithm>
#include <cstdio>
#include <cstring>
#include <vector>

#if defined(DELTABIT_HAVE_CUDA) && defined(DELTABIT_HAVE_TRAIN)
#include <cuda_runtime.h>

#include "backend/cuda_buffer.h"
#include "backend/cuda_probe.h"
#include "train/cuda/kernels.h"
#include "train_bench_timing.h"
#endif

#if !defined(DELTABIT_HAVE_CUDA) || !defined(DELTABIT_HAVE_TRAIN)
int main() {
    std::puts("bench_train_norms_cuda: built without CUDA or without the trainer");
    return 0;
}
#else

namespace {

using deltabit::cuda::cuda_check;
using deltabit::cuda::DeviceBuffer;
namespace tc = deltabit::train::cuda;

constexpr double kPeakGBs = 4800.0;

struct Shape {
    const char* name;
    int64_t rows, dim, x_stride;
    bool gated, accumulate;
    int calls_a_step;
};

using deltabit::bench::random_buffer;

std::vector<float> download(const DeviceBuffer& b, int64_t n) {
    std::vector<float> v(static_cast<size_t>(n));
    b.download(v.data(), size_t(n) * sizeof(float));
    return v;
}

// µs per call; sets `repeats` to whether two calls from the same dw gave the same bits.
double bench_shape(const Shape& s, bool& repeats) {
    const int64_t n = s.rows * s.dim;
    const float eps = 1e-6f;
    DeviceBuffer x = random_buffer(size_t(s.rows * s.x_stride), 1), dy = random_buffer(size_t(n), 2),
                 z = random_buffer(s.gated ? size_t(n) : 1, 3), w = random_buffer(size_t(s.dim), 4),
                 dx = random_buffer(size_t(s.rows * s.x_stride), 5), dz(size_t(s.gated ? n : 1) * sizeof(float)),
                 dw(size_t(s.dim) * sizeof(float));
    auto backward = [&] {
        if (s.gated)
            tc::gated_rms_norm_backward(x.get<float>(), z.get<float>(), w.get<float>(), dy.get<float>(), s.rows, s.dim,
                                        eps, dx.get<float>(), dz.get<float>(), dw.get<float>());
        else
            tc::rms_norm_backward(x.get<float>(), w.get<float>(), dy.get<float>(), s.rows, s.dim, eps, true,
                                  dx.get<float>(), dw.get<float>(), s.x_stride, s.accumulate);
    };
    std::vector<std::vector<float>> runs;
    for (int r = 0; r < 2; ++r) {
        cuda_check(cudaMemset(dw.get<float>(), 0, size_t(s.dim) * sizeof(float)), "memset");
        backward();
        runs.push_back(download(dw, s.dim));
    }
    repeats = std::memcmp(runs[0].data(), runs[1].data(), runs[0].size() * sizeof(float)) == 0;
    const double us = deltabit::bench::median_us_per_call(1, 20, backward);
    const double tensors = s.gated ? 5.0 : (s.accumulate ? 4.0 : 3.0);
    const double gbs = tensors * 4.0 * double(n) / us / 1e3;
    std::printf("  %-44s %8.1f µs %7.0f GB/s (%4.1f%%)  × %2d a step = %7.1f µs   dw repeats: %s\n", s.name, us, gbs,
                100 * gbs / kPeakGBs, s.calls_a_step, us * s.calls_a_step, repeats ? "yes" : "NO");
    return us * s.calls_a_step;
}

}  // namespace

int main() {
    if (deltabit::cuda::device_count() == 0) {
        std::puts("bench_train_norms_cuda: no CUDA device");
        return 0;
    }
    try {
        std::printf("device: %s\n", deltabit::cuda::device_summary().c_str());
        std::printf("qwen35-100m, 32 x 1024 tokens: the norms' backward (dx, dw; the gated norm's dz)\n");
        const Shape shapes[] = {
            {"hidden norm 32768 x 768 (dx +=)", 32768, 768, 768, false, true, 25},
            {"q norm 196608 x 128, stride 256 (dx =)", 196608, 128, 256, false, false, 3},
            {"k norm 65536 x 128 (dx =)", 65536, 128, 128, false, false, 3},
            {"gated norm 393216 x 128 (dx =, dz =)", 393216, 128, 128, true, false, 9},
        };
        double step_us = 0.0;
        bool all_repeat = true;
        for (const Shape& s : shapes) {
            bool repeats = false;
            step_us += bench_shape(s, repeats);
            all_repeat = all_repeat && repeats;
        }
        std::printf("  a step's 40 norm backwards: %.2f ms\n", step_us / 1000.0);
        if (!all_repeat) {
            std::fprintf(stderr, "bench_train_norms_cuda: a weight gradient differed between two runs\n");
            return 1;
        }
    } catch (const std::exception& e) {
        std::fprintf(stderr, "bench_train_norms_cuda: %s\n", e.what());
        return 1;
    }
    return 0;
}
#endif
