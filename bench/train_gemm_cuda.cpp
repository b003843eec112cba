// Micro-benchmark of the trainer's matrix products (train/cuda/gemm.h) on configs/qwen35-100m.toml's
// shapes, beside what the same products cost with other operand types, so one GPU session says both how
// fast the training path's products are and what storing their operands in bf16 would buy:
//   training   gemm.h as the trainer calls it: fp32 tensors, CUBLAS_COMPUTE_32F_FAST_16BF
//   tf32       the same fp32 tensors, CUBLAS_COMPUTE_32F_FAST_TF32
//   bf16 in    A and B stored in bf16, C in fp32, CUBLAS_COMPUTE_32F (bf16 activations and weights,
//              fp32 outputs and gradient accumulation as now)
//
//   bench_train_gemm_cuda
//
// Each shape (n × in → out, as gemm.h names them) and product (forward y = x·Wᵀ, backward data
// dx += dy·W, backward weight dW += dyᵀ·x): µs per call (median of 7 rounds of 10 calls after 3 warm-up
// calls, events on the default stream, which the trainer uses) and TFLOP/s (2·n·in·out) against the
// H200's 790 TFLOP/s (cli/bench_gpu.h). Then each column's sum over one training step: every shape's
// time × its calls a step (train_model.cpp on that config: each layer's forward twice, forward and
// recomputed, its backward once; the LM head in chunks of 8,097 rows and one of 380), to compare with
// `deltabit train --profile`'s GEMM rows. Operands are random in [-1, 1] (zeros would run cooler).
//
// Measured: not yet (no GPU where this was written).
#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#if defined(DELTABIT_HAVE_CUDA) && defined(DELTABIT_HAVE_TRAIN)
#include <cublas_v2.h>
#include <cuda_runtime.h>

#include "backend/cuda_buffer.h"
#include "backend/cuda_probe.h"
#include "core/error.h"
#include "train/cuda/gemm.h"
#include "train_bench_timing.h"
#endif

#if !defined(DELTABIT_HAVE_CUDA) || !defined(DELTABIT_HAVE_TRAIN)
int main() {
    std::puts("bench_train_gemm_cuda: built without CUDA or without the trainer");
    return 0;
}
#else

namespace {

using deltabit::cuda::cuda_check;
using deltabit::cuda::DeviceBuffer;
namespace tc = deltabit::train::cuda;

constexpr double kBf16PeakTflops = 790.0;

enum class Product { forward, backward_data, backward_weight };
constexpr const char* kProductNames[] = {"forward", "backward data", "backward weight"};

// A shape and its calls per step of configs/qwen35-100m.toml (B 32 × T 1024 = 32,768 rows; 9 DeltaNet
// layers: in_proj_qkv 768→3072, in_proj_z 768→1536, in_proj_a/b 768→12, out_proj 1536→768; 3
// attention layers: q (gated) 768→1536, k, v 768→256, o 768→768; 12 FFNs 768→2048 ×2, 2048→768; the
// head 768→259 in 4 chunks of 8,097 rows and one of 380). Forward calls count the recomputation.
struct Shape {
    int64_t n, in, out;
    int64_t forward_calls, backward_calls;  // backward: each of data and weight
};
constexpr Shape kShapes[] = {
    {32768, 768, 2048, 48, 24}, {32768, 2048, 768, 24, 12}, {32768, 768, 3072, 18, 9},
    {32768, 768, 1536, 24, 12}, {32768, 1536, 768, 18, 9},  {32768, 768, 768, 6, 3},
    {32768, 768, 256, 12, 6},   {32768, 768, 12, 36, 18},   {8097, 768, 259, 4, 4},
    {380, 768, 259, 1, 1},
};

std::vector<float> random_floats(size_t n, uint64_t seed) {
    std::vector<float> v(n);
    for (float& x : v) {  // xorshift64*, uniform in [-1, 1]
        seed ^= seed >> 12;
        seed ^= seed << 25;
        seed ^= seed >> 27;
        x = float((seed * 2685821657736338717ull) >> 40) / float(1 << 23) - 1.0f;
    }
    return v;
}

// bf16 by truncation (the timing does not depend on the rounding).
std::vector<uint16_t> to_bf16(const std::vector<float>& v) {
    std::vector<uint16_t> out(v.size());
    for (size_t i = 0; i < v.size(); ++i) {
        uint32_t bits = 0;
        std::memcpy(&bits, &v[i], 4);
        out[i] = uint16_t(bits >> 16);
    }
    return out;
}

void cublas_check(cublasStatus_t status, const char* what) {
    if (status != CUBLAS_STATUS_SUCCESS)
        deltabit::fail_message(std::string("cublas: ") + what + ": " + cublasGetStatusString(status));
}

// µs per call: 3 warm-up calls, then the median of 7 rounds of 10 (train_bench_timing.h).
template <typename F>
double median_us(F&& call) {
    return deltabit::bench::median_us_per_call(3, 10, call);
}

// The three operands of one product, in fp32 and in bf16: x [n][in], w [out][in], dy [n][out], and the
// outputs (fp32) y [n][out], dx [n][in], dw [out][in].
struct Operands {
    DeviceBuffer x, w, dy, x16, w16, dy16, y, dx, dw;
};

Operands make_operands(const Shape& s) {
    const auto upload = [](const auto& host) {
        DeviceBuffer b(host.size() * sizeof(host[0]));
        b.upload(host.data(), b.bytes());
        return b;
    };
    const std::vector<float> x = random_floats(size_t(s.n * s.in), 1), w = random_floats(size_t(s.out * s.in), 2),
                             dy = random_floats(size_t(s.n * s.out), 3);
    return {upload(x),           upload(w),           upload(dy),
            upload(to_bf16(x)),  upload(to_bf16(w)),  upload(to_bf16(dy)),
            DeviceBuffer(size_t(s.n * s.out) * 4), DeviceBuffer(size_t(s.n * s.in) * 4),
            DeviceBuffer(size_t(s.out * s.in) * 4)};
}

// One product through cublasGemmEx with gemm.cu's operand mapping, A and B of `type`.
void gemm_ex(cublasHandle_t handle, Product p, const Shape& s, Operands& o, cudaDataType type,
             cublasComputeType_t compute) {
    const bool half = type == CUDA_R_16BF;
    const void* x = half ? o.x16.get() : o.x.get();
    const void* w = half ? o.w16.get() : o.w.get();
    const void* dy = half ? o.dy16.get() : o.dy.get();
    const float one = 1.0f, zero = 0.0f;
    const int n = int(s.n), in = int(s.in), out = int(s.out);
    cublasStatus_t status = CUBLAS_STATUS_SUCCESS;
    switch (p) {
        case Product::forward:
            status = cublasGemmEx(handle, CUBLAS_OP_T, CUBLAS_OP_N, out, n, in, &one, w, type, in, x, type, in, &zero,
                                  o.y.get(), CUDA_R_32F, out, compute, CUBLAS_GEMM_DEFAULT);
            break;
        case Product::backward_data:
            status = cublasGemmEx(handle, CUBLAS_OP_N, CUBLAS_OP_N, in, n, out, &one, w, type, in, dy, type, out, &one,
                                  o.dx.get(), CUDA_R_32F, in, compute, CUBLAS_GEMM_DEFAULT);
            break;
        case Product::backward_weight:
            status = cublasGemmEx(handle, CUBLAS_OP_N, CUBLAS_OP_T, in, out, n, &one, x, type, in, dy, type, out, &one,
                                  o.dw.get(), CUDA_R_32F, in, compute, CUBLAS_GEMM_DEFAULT);
            break;
    }
    cublas_check(status, kProductNames[int(p)]);
}

// The training path itself: gemm.h's functions, bf16 math.
void training_product(Product p, const Shape& s, Operands& o) {
    switch (p) {
        case Product::forward:
            tc::linear_forward(o.x.get<float>(), o.w.get<float>(), s.n, s.in, s.out, o.y.get<float>());
            break;
        case Product::backward_data:
            tc::linear_backward_input(o.dy.get<float>(), o.w.get<float>(), s.n, s.in, s.out, o.dx.get<float>());
            break;
        case Product::backward_weight:
            tc::linear_backward_weight(o.dy.get<float>(), o.x.get<float>(), s.n, s.in, s.out, o.dw.get<float>());
            break;
    }
}

}  // namespace

int main() {
    if (deltabit::cuda::device_count() == 0) {
        std::puts("bench_train_gemm_cuda: no CUDA device");
        return 0;
    }
    try {
        std::printf("device: %s\n", deltabit::cuda::device_summary().c_str());
        std::printf("configs/qwen35-100m.toml's products: µs per call, TFLOP/s (%% of %.0f bf16)\n", kBf16PeakTflops);
        std::printf("%-34s %-16s %22s %22s %22s %7s\n", "n × in → out", "product", "training (fp32→bf16)",
                    "tf32", "bf16 operands", "calls");
        tc::ScopedGemmMath math(tc::GemmMath::bf16);
        cublasHandle_t handle = nullptr;
        cublas_check(cublasCreate(&handle), "cublasCreate");
        double step_ms[3] = {0, 0, 0};
        for (const Shape& s : kShapes) {
            Operands o = make_operands(s);
            const double flops = 2.0 * double(s.n) * double(s.in) * double(s.out);
            for (const Product p : {Product::forward, Product::backward_data, Product::backward_weight}) {
                const double us[3] = {
                    median_us([&] { training_product(p, s, o); }),
                    median_us([&] { gemm_ex(handle, p, s, o, CUDA_R_32F, CUBLAS_COMPUTE_32F_FAST_TF32); }),
                    median_us([&] { gemm_ex(handle, p, s, o, CUDA_R_16BF, CUBLAS_COMPUTE_32F); })};
                const int64_t calls = p == Product::forward ? s.forward_calls : s.backward_calls;
                char shape[64];
                std::snprintf(shape, sizeof shape, "%lld × %lld → %lld", (long long)s.n, (long long)s.in,
                              (long long)s.out);
                std::printf("%-34s %-16s", shape, kProductNames[int(p)]);
                for (int c = 0; c < 3; ++c) {
                    const double tflops = flops / us[c] * 1e-6;
                    std::printf(" %9.1f %6.1f (%3.0f%%)", us[c], tflops, 100.0 * tflops / kBf16PeakTflops);
                    step_ms[c] += us[c] * double(calls) * 1e-3;
                }
                std::printf(" %7lld\n", (long long)calls);
            }
        }
        cublasDestroy(handle);
        std::printf("one training step's products: training %.1f ms, tf32 %.1f ms, bf16 operands %.1f ms\n",
                    step_ms[0], step_ms[1], step_ms[2]);
    } catch (const std::exception& e) {
        std::fprintf(stderr, "bench_train_gemm_cuda: %s\n", e.what());
        return 1;
    }
    return 0;
}
#endif
