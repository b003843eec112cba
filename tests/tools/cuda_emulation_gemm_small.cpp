// Driver for the CUDA emulation test (test_cuda_emulation.py): gemm_q1_0_small (src/ops/matmul/
// gemm_small_cuda.cu, mma.m16n8k32 u8·s8 fragments fed by a cp.async ring) run on the host emulation against
// a naive double reference built from ±1 weights, with NaN-poisoned outputs and a guard band after y — each
// of its kernels (split, wide64, wide128, wide256), and the wide ones bit for bit against split.
// Exit status 0 when every case agrees; otherwise the first disagreements are printed.
#include <cmath>
#include <cstdio>
#include <cstring>
#include <random>
#include <vector>

#include "backend/cuda_buffer.h"
#include "core/half.h"
#include "ops/matmul/gemm_cuda.h"

namespace deltabit {
// The kernel file's host wrapper asks for the row size; the library's definition (weight_repack.cpp) is
// not linked into the emulation, and Q1_0 is the only dtype here: one bit a weight.
size_t gemv_code_row_bytes(DType, int64_t k) { return size_t(k / 8); }
}  // namespace deltabit

using namespace deltabit;

namespace {

constexpr int kGuardFloats = 64;
constexpr float kGuard = 12345.0f;

// One shape: N weight rows, K = groups · 128, T tokens, through `kernel`; y (with its guard band) in `y`.
// Returns the number of bad outputs.
int run_case(int64_t n, int64_t groups, int64_t tokens, uint32_t seed, cuda::SmallGemmKernel kernel,
             std::vector<float>& y) {
    const int64_t k = groups * cuda::kActivationGroup;
    std::mt19937 rng(seed);
    // Weights ±1 (bit 1: +1), scales per row and group of 128.
    std::vector<uint8_t> bit(size_t(n * k));
    for (auto& b : bit) b = uint8_t(rng() & 1);
    std::vector<uint16_t> scale(size_t(n * groups));
    std::uniform_real_distribution<float> scale_dist(0.01f, 0.1f);
    for (auto& s : scale) s = float_to_half(scale_dist(rng));
    // The GEMV layout (ops/matmul/weight_repack.h): in each 32-weight word, bit 8·c + j holds weight 4·j + c.
    std::vector<uint8_t> codes(size_t(n * k / 8), 0);
    for (int64_t r = 0; r < n; ++r)
        for (int64_t w = 0; w < k / 32; ++w)
            for (int j = 0; j < 8; ++j)
                for (int c = 0; c < 4; ++c)
                    if (bit[size_t(r * k + 32 * w + 4 * j + c)])
                        codes[size_t(r * k / 8 + 4 * w + c)] |= uint8_t(1u << j);
    // Activations: int8 codes, per token and group a scale and the codes' sum.
    std::vector<int8_t> q(size_t(tokens * k));
    std::uniform_int_distribution<int> code_dist(-127, 127);
    for (auto& x : q) x = int8_t(code_dist(rng));
    std::vector<cuda::ActivationGroupMeta> meta(size_t(tokens * groups));
    std::uniform_real_distribution<float> act_scale(0.001f, 0.02f);
    for (int64_t t = 0; t < tokens; ++t)
        for (int64_t g = 0; g < groups; ++g) {
            int32_t sum = 0;
            for (int64_t i = 0; i < cuda::kActivationGroup; ++i) sum += q[size_t(t * k + g * 128 + i)];
            meta[size_t(t * groups + g)] = {act_scale(rng), sum};
        }

    cuda::DeviceBuffer d_codes(codes.size()), d_scales(scale.size() * 2 + 16), d_q(q.size()),
        d_meta(meta.size() * sizeof(meta[0])), d_y(size_t(tokens * n + kGuardFloats) * sizeof(float));
    d_codes.upload(codes.data(), codes.size());
    d_scales.upload(scale.data(), scale.size() * 2);
    d_q.upload(q.data(), q.size());
    d_meta.upload(meta.data(), d_meta.bytes());
    const std::vector<float> guard(kGuardFloats, kGuard);
    d_y.upload(guard.data(), guard.size() * sizeof(float), size_t(tokens * n) * sizeof(float));  // y itself: NaN

    const cuda::QuantizedActivationRows x{d_q.get<int8_t>(), d_meta.get<cuda::ActivationGroupMeta>(), tokens, k};
    const cuda::GemvWeightView w{d_codes.get<uint8_t>(), d_scales.get<uint16_t>(), DType::Q1_0, n, k};
    cuda::gemm_q1_0_small(x, w, d_y.get<float>(), nullptr, kernel);
    y.assign(size_t(tokens * n + kGuardFloats), 0.0f);
    d_y.download(y.data(), y.size() * sizeof(float));

    // The kernel's terms float(2·dot − Σq) · (d · s) are added by fmaf, ⌈groups / 8⌉ a warp, and the 8
    // warps' sums added in order: each term is rounded at most twice (the product d · s, the fmaf) and the
    // sum sees at most groups/8 + 8 roundings, so |y − exact| ≤ (groups/8 + 10) · 2^−24 · Σ|term|.
    int bad = 0;
    const double u = std::ldexp(1.0, -24);
    for (int64_t t = 0; t < tokens; ++t)
        for (int64_t r = 0; r < n; ++r) {
            double exact = 0, magnitude = 0;
            for (int64_t g = 0; g < groups; ++g) {
                double dot = 0;
                for (int64_t i = 0; i < 128; ++i)
                    dot += (bit[size_t(r * k + g * 128 + i)] ? 1.0 : -1.0) * q[size_t(t * k + g * 128 + i)];
                const double term =
                    dot * half_to_float(scale[size_t(r * groups + g)]) * meta[size_t(t * groups + g)].scale;
                exact += term;
                magnitude += std::fabs(term);
            }
            const double got = y[size_t(t * n + r)], bound = (double(groups) / 8 + 10) * u * magnitude;
            if (!(std::fabs(got - exact) <= bound) && bad++ < 5)
                std::printf("  N=%lld K=%lld T=%lld: y[%lld][%lld] = %.9g, reference %.9g (bound %.3g)\n", (long long)n,
                            (long long)k, (long long)tokens, (long long)t, (long long)r, got, exact, bound);
        }
    for (int i = 0; i < kGuardFloats; ++i)
        if (y[size_t(tokens * n + i)] != kGuard && bad++ < 5)
            std::printf("  N=%lld K=%lld T=%lld: guard float %d after y overwritten\n", (long long)n, (long long)k,
                        (long long)tokens, i);
    return bad;
}

}  // namespace

int main() {
    struct Case {
        int64_t n, groups, tokens;
    };
    // 56 groups: every split warp walks 7, past the 6-stage ring, and the wide kernels walk 7 chunks through
    // their 3-chunk ring; N off multiples of 32 (and of 128, 256) and T < 8 mask rows and tokens; 3 groups
    // leave five split warps without work and the wide kernels one partial chunk; odd group counts put
    // alternate rows' scales at odd halves of their words.
    const Case cases[] = {{45, 56, 8}, {32, 8, 3}, {70, 3, 1}, {17, 13, 5}, {300, 9, 6}};
    const struct {
        cuda::SmallGemmKernel kernel;
        const char* name;
    } kernels[] = {{cuda::SmallGemmKernel::split, "split"},
                   {cuda::SmallGemmKernel::wide64, "wide64"},
                   {cuda::SmallGemmKernel::wide128, "wide128"},
                   {cuda::SmallGemmKernel::wide256, "wide256"}};
    int bad = 0;
    for (const Case& c : cases) {
        std::vector<float> split_y, y;
        for (const auto& k : kernels) {
            int case_bad = run_case(c.n, c.groups, c.tokens, uint32_t(c.n * 131 + c.groups), k.kernel, y);
            if (k.kernel == cuda::SmallGemmKernel::split) {
                split_y = y;
            } else if (std::memcmp(y.data(), split_y.data(), y.size() * sizeof(float)) != 0) {
                std::printf("  N=%lld groups=%lld T=%lld: %s differs from split in its bits\n", (long long)c.n,
                            (long long)c.groups, (long long)c.tokens, k.name);
                ++case_bad;
            }
            std::printf("N=%lld groups=%lld T=%lld %s: %s\n", (long long)c.n, (long long)c.groups,
                        (long long)c.tokens, k.name, case_bad == 0 ? "agrees" : "DISAGREES");
            bad += case_bad;
        }
    }
    return bad == 0 ? 0 : 1;
}
