// Micro-benchmark of the grouped MoE experts (ops/moe/moe_experts_cuda.h) at DiffusionGemma-26B-A4B's shapes:
// E 128 experts, top-8, D 2816, F 704, GELU, a per-expert scale; T 256 (a canvas step) and 1024 (the encoder),
// each weight type on both paths (tensor cores, and the CUDA-core kernels: MoeExpertsArgs::tensor_cores).
//
//   bench_moe_experts_cuda [--type q4_0|q8_0|bf16] [--tokens N]
//
// Weights are random codes (quantised: random bytes, every fp16 scale 0.01; bf16: values in ±0.05), the
// routing random distinct top-8 per token, so each expert sees ~T·8/128 pairs. Time: the median of 20
// launches of the whole call (sort, products, combine) timed with events after 3 warm-ups; "a step" is that
// × 30 layers. Bytes: the three stacked matrices once (what a call must read at least), so GB/s is against
// the card's ~4.2 TB/s copy bandwidth (bench_gemv_cuda).
#include <algorithm>
#include <cstdio>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#ifdef DELTABIT_HAVE_CUDA
#include <cuda_runtime.h>

#include "backend/cuda_buffer.h"
#include "backend/cuda_probe.h"
#include "core/half.h"
#include "ops/matmul/weight_repack.h"
#include "ops/moe/moe_experts_cuda.h"
#endif

#ifndef DELTABIT_HAVE_CUDA
int main() {
    std::puts("bench_moe_experts_cuda: built without CUDA");
    return 0;
}
#else

namespace {

using namespace deltabit;

constexpr int64_t kExperts = 128, kTopK = 8, kDim = 2816, kFf = 704, kLayers = 30;

// One stacked matrix of random weights on the device, and the bytes it holds.
struct Matrix {
    cuda::DeviceBuffer codes, scales;
    cuda::ExpertMatrixView view;
    size_t bytes = 0;
};

Matrix make_matrix(DType t, int64_t rows, int64_t cols, std::mt19937_64& rng) {
    Matrix m;
    if (t == DType::BF16) {
        std::uniform_real_distribution<float> u(-0.05f, 0.05f);
        std::vector<uint16_t> w(size_t(rows * cols));
        for (uint16_t& v : w) v = float_to_bf16(u(rng));
        m.bytes = w.size() * 2;
        m.codes = cuda::DeviceBuffer(m.bytes);
        m.codes.upload(w.data(), m.bytes);
        m.view.plain = {m.codes.get<uint8_t>(), t, rows, cols};
        return m;
    }
    std::vector<uint64_t> codes((size_t(rows) * gemv_code_row_bytes(t, cols) + 7) / 8);
    for (uint64_t& v : codes) v = rng();
    const size_t scale_count = size_t(rows * (cols / int64_t(dtype_info(t).block_elems)));
    const std::vector<uint16_t> scales(scale_count, float_to_half(0.01f));
    m.codes = cuda::DeviceBuffer(codes.size() * 8);
    m.codes.upload(codes.data(), codes.size() * 8);
    m.scales = cuda::DeviceBuffer((scale_count * 2 + 15) / 16 * 16);
    m.scales.upload(scales.data(), scale_count * 2);
    m.view.quantized = true;
    m.view.q = {m.codes.get<uint8_t>(), m.scales.get<uint16_t>(), t, rows, cols};
    m.bytes = size_t(rows) * gemv_code_row_bytes(t, cols) + scale_count * 2;
    return m;
}

float median_ms(const cuda::MoeExpertsArgs& a, void* scratch) {
    cudaEvent_t start{}, stop{};
    cuda::cuda_check(cudaEventCreate(&start), "event");
    cuda::cuda_check(cudaEventCreate(&stop), "event");
    for (int i = 0; i < 3; ++i) cuda::moe_experts(a, scratch, nullptr);
    std::vector<float> times;
    for (int i = 0; i < 20; ++i) {
        cuda::cuda_check(cudaEventRecord(start, nullptr), "record");
        cuda::moe_experts(a, scratch, nullptr);
        cuda::cuda_check(cudaEventRecord(stop, nullptr), "record");
        cuda::cuda_check(cudaEventSynchronize(stop), "sync");
        float t = 0;
        cuda::cuda_check(cudaEventElapsedTime(&t, start, stop), "elapsed");
        times.push_back(t);
    }
    cudaEventDestroy(start);
    cudaEventDestroy(stop);
    std::sort(times.begin(), times.end());
    return times[times.size() / 2];
}

}  // namespace

int main(int argc, char** argv) {
    std::vector<DType> types = {DType::Q4_0, DType::Q8_0, DType::BF16};
    std::vector<int64_t> tokens = {256, 1024};
    for (int i = 1; i + 1 < argc; i += 2) {
        const std::string flag = argv[i], value = argv[i + 1];
        if (flag == "--type") {
            if (value == "q4_0") types = {DType::Q4_0};
            else if (value == "q8_0") types = {DType::Q8_0};
            else if (value == "bf16") types = {DType::BF16};
            else {
                std::fprintf(stderr, "bench_moe_experts_cuda: --type takes q4_0, q8_0 or bf16, not %s\n", value.c_str());
                return 2;
            }
        } else if (flag == "--tokens") {
            tokens = {std::stoll(value)};
        } else {
            std::fprintf(stderr, "usage: bench_moe_experts_cuda [--type q4_0|q8_0|bf16] [--tokens N]\n");
            return 2;
        }
    }
    if (cuda::device_count() == 0) {
        std::puts("bench_moe_experts_cuda: no CUDA device");
        return 0;
    }
    std::mt19937_64 rng(7);
    std::printf("%-5s %6s %-13s %10s %12s %8s\n", "type", "T", "path", "ms a call", "ms a step", "GB/s");
    for (const DType t : types) {
        const Matrix gate = make_matrix(t, kExperts * kFf, kDim, rng), up = make_matrix(t, kExperts * kFf, kDim, rng),
                     down = make_matrix(t, kExperts * kDim, kFf, rng);
        const size_t weight_bytes = gate.bytes + up.bytes + down.bytes;
        for (const int64_t T : tokens) {
            std::uniform_real_distribution<float> u(-1.0f, 1.0f);
            std::vector<float> x(size_t(T * kDim)), p(size_t(T * kTopK)), scale(static_cast<size_t>(kExperts));
            for (float& v : x) v = u(rng);
            for (float& v : p) v = 0.5f + 0.5f * u(rng);
            for (float& v : scale) v = 1.0f + 0.5f * u(rng);
            std::vector<int32_t> ids(size_t(T * kTopK)), pool(static_cast<size_t>(kExperts));
            for (int32_t e = 0; e < kExperts; ++e) pool[size_t(e)] = e;
            for (int64_t tok = 0; tok < T; ++tok) {
                std::shuffle(pool.begin(), pool.end(), rng);
                std::copy(pool.begin(), pool.begin() + kTopK, ids.begin() + tok * kTopK);
            }
            cuda::DeviceBuffer d_x(x.size() * 4), d_p(p.size() * 4), d_scale(scale.size() * 4), d_ids(ids.size() * 4),
                d_out(size_t(T * kDim) * 4);
            d_x.upload(x.data(), x.size() * 4);
            d_p.upload(p.data(), p.size() * 4);
            d_scale.upload(scale.data(), scale.size() * 4);
            d_ids.upload(ids.data(), ids.size() * 4);
            cuda::MoeExpertsArgs a;
            a.x = d_x.get<float>();
            a.n_tokens = T;
            a.dim = kDim;
            a.n_expert = kExperts;
            a.expert_ff = kFf;
            a.top_k = kTopK;
            a.ids = d_ids.get<int32_t>();
            a.weights = d_p.get<float>();
            a.expert_scale = d_scale.get<float>();
            a.gate = gate.view;
            a.up = up.view;
            a.down = down.view;
            a.activation = cuda::GluActivation::gelu_tanh;
            a.out = d_out.get<float>();
            cuda::DeviceBuffer scratch(cuda::moe_experts_scratch_bytes(a));
            for (const bool tensor_cores : {true, false}) {
                a.tensor_cores = tensor_cores;
                const float ms = median_ms(a, scratch.get());
                std::printf("%-5s %6lld %-13s %10.3f %12.2f %8.0f\n", std::string(dtype_name(t)).c_str(), (long long)T,
                            tensor_cores ? "tensor cores" : "CUDA cores", ms, ms * kLayers,
                            double(weight_bytes) / (double(ms) * 1e6));
            }
        }
    }
    return 0;
}

#endif  // DELTABIT_HAVE_CUDA
