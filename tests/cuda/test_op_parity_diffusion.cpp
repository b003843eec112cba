// Op parity, DiffusionGemma's element-wise ops on the GPU against their CPU references: gelu_glu and softcap
// (double arithmetic, ≤ 1 ulp), add_scale and scale_columns (exact), rope_proportional (≤ 1 ulp, the model's full-layer
// shape and the tiny fixture's) and soft_embedding (every weight dtype, within its derived bound). Hostile
// lengths, in-place calls, saturated tails. Skips cleanly without a GPU.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "core/dtype.h"
#include "core/half.h"
#include "core/tensor.h"
#include "ops/add_scale.h"
#include "ops/embedding.h"
#include "ops/gelu_glu.h"
#include "ops/op_parity.h"
#include "ops/rope_proportional.h"
#include "ops/scale_columns.h"
#include "ops/soft_embedding.h"
#include "ops/softcap.h"

#ifdef DELTABIT_HAVE_CUDA
#include "cuda/op_parity_cuda.h"
#include "cuda/quantized_test_data.h"
#include "ops/elementwise/elementwise_cuda.h"
#include "ops/matmul/dense_gemm_cuda.h"
#endif

namespace deltabit::test {
namespace {

#ifdef DELTABIT_HAVE_CUDA

TEST(OpParityDiffusion, GeluGlu) {
    DELTABIT_REQUIRE_GPU();
    uint32_t seed = 1;
    for (int64_t n : kHostileLengths) {
        std::mt19937 rng(seed++);
        std::vector<float> gate = uniform(size_t(n), rng, -12.0f, 12.0f);
        const std::vector<float> up = uniform(size_t(n), rng, -3.0f, 3.0f);
        gate[0] = -40.0f;  // the tail where tanh saturates and the result is −0
        if (n > 1) gate[1] = 40.0f;
        std::vector<float> want(static_cast<size_t>(n));
        cpu::gelu_glu(gate.data(), up.data(), n, want.data());
        GuardedDeviceArray<float> dgate(gate), dup(up), dout(static_cast<size_t>(n));
        cuda::gelu_glu(dgate.get(), dup.get(), n, dout.get(), nullptr);
        expect_ulps(dout.download("gelu_glu"), want, 1, "gelu_glu n=" + std::to_string(n));
        cuda::gelu_glu(dgate.get(), dup.get(), n, dgate.get(), nullptr);  // in place over the gate
        expect_ulps(dgate.download("gelu_glu in place"), want, 1, "gelu_glu in place n=" + std::to_string(n));
    }
}

TEST(OpParityDiffusion, Softcap) {
    DELTABIT_REQUIRE_GPU();
    uint32_t seed = 10;
    for (int64_t n : kHostileLengths) {
        std::mt19937 rng(seed++);
        std::vector<float> x = uniform(size_t(n), rng, -200.0f, 200.0f);
        x[0] = -1e6f;
        std::vector<float> want(static_cast<size_t>(n));
        cpu::softcap(x.data(), n, 30.0f, want.data());
        GuardedDeviceArray<float> dx(x);
        cuda::softcap(dx.get(), n, 30.0f, dx.get(), nullptr);
        expect_ulps(dx.download("softcap"), want, 1, "softcap cap=30 in place n=" + std::to_string(n));
    }
    EXPECT_THROW(cuda::softcap(nullptr, 4, 0.0f, nullptr, nullptr), Error);
}

TEST(OpParityDiffusion, AddScaleExact) {
    DELTABIT_REQUIRE_GPU();
    uint32_t seed = 20;
    for (int64_t n : kHostileLengths) {
        std::mt19937 rng(seed++);
        const std::vector<float> x = uniform(size_t(n), rng, -100.0f, 100.0f);
        const std::vector<float> r = uniform(size_t(n), rng, -100.0f, 100.0f);
        std::vector<float> want(static_cast<size_t>(n)), want_scaled(static_cast<size_t>(n));
        cpu::add_scale(x.data(), r.data(), n, 0.731f, want.data());
        cpu::add_scale(x.data(), nullptr, n, 53.0f, want_scaled.data());
        GuardedDeviceArray<float> dx(x), dr(r), dout(static_cast<size_t>(n));
        cuda::add_scale(dx.get(), dr.get(), n, 0.731f, dout.get(), nullptr);
        expect_ulps(dout.download("add_scale"), want, 0, "add_scale layer scalar n=" + std::to_string(n));
        cuda::add_scale(dx.get(), nullptr, n, 53.0f, dx.get(), nullptr);
        expect_ulps(dx.download("add_scale"), want_scaled, 0, "add_scale embedding scale in place n=" + std::to_string(n));
    }
}

TEST(OpParityDiffusion, ScaleColumnsExact) {
    DELTABIT_REQUIRE_GPU();
    uint32_t seed = 25;
    for (int64_t dim : kHostileLengths) {
        std::mt19937 rng(seed++);
        const int64_t rows = 3;
        std::vector<float> x = uniform(static_cast<size_t>(rows * dim), rng, -4.0f, 4.0f);
        const std::vector<float> w = uniform(static_cast<size_t>(dim), rng, 0.0f, 2.0f);
        const double c = 1.0 / std::sqrt(2816.0);  // the released model's router: 1/√H
        std::vector<float> want(x.size());
        cpu::scale_columns(x.data(), w.data(), rows, dim, c, want.data());
        GuardedDeviceArray<float> dx(x), dw(w);
        cuda::scale_columns(dx.get(), dw.get(), rows, dim, c, dx.get(), nullptr);
        expect_ulps(dx.download("scale_columns"), want, 0, "scale_columns in place dim=" + std::to_string(dim));
    }
}

TEST(OpParityDiffusion, RopeProportional) {
    DELTABIT_REQUIRE_GPU();
    struct Case {
        int64_t n_tokens, n_head, head_dim, n_pairs;
        float theta;
    };
    // The released model's full layers (head 512, 64 pairs, θ 1e6) and sliding layers (head 256, every pair,
    // θ 1e4), tiny full heads (16 with 2 pairs; the fixture's 32 with 4), an odd count of pairs, one pair.
    const std::vector<Case> cases = {{300, 16, 512, 64, 1e6f}, {65, 2, 512, 64, 1e6f}, {129, 16, 256, 128, 1e4f},
                                     {7, 2, 16, 2, 1e6f},      {8, 4, 32, 4, 1e6f},    {5, 3, 12, 6, 1e4f},
                                     {33, 4, 130, 17, 5e5f},
                                     {1, 1, 2, 1, 1e4f}};
    uint32_t seed = 30;
    for (const Case& c : cases) {
        std::mt19937 rng(seed++);
        std::vector<float> x = uniform(size_t(c.n_tokens * c.n_head * c.head_dim), rng, -2.0f, 2.0f);
        std::vector<int32_t> positions(size_t(c.n_tokens));
        for (int64_t t = 0; t < c.n_tokens; ++t) positions[size_t(t)] = int32_t(t * 977 + 13);  // deep: fp32 angles
        std::vector<float> want = x;
        cpu::rope_proportional(want.data(), positions.data(), c.n_tokens, c.n_head, c.head_dim, c.n_pairs, c.theta);
        GuardedDeviceArray<float> dx(x);
        GuardedDeviceArray<int32_t> dpos(positions);
        cuda::rope_proportional(dx.get(), dpos.get(), c.n_tokens, c.n_head, c.head_dim, c.n_pairs, c.theta, nullptr);
        expect_ulps(dx.download("rope_proportional"), want, 1,
                    "rope_proportional T=" + std::to_string(c.n_tokens) + " H=" + std::to_string(c.n_head) +
                        " d=" + std::to_string(c.head_dim) + " pairs=" + std::to_string(c.n_pairs));
    }
    EXPECT_THROW(cuda::rope_proportional(nullptr, nullptr, 1, 1, 16, 9, 1e4f, nullptr), Error);
}

// Bound (soft_embedding_cuda.cu): per chunk of 32 vocabulary rows an fp32 fmaf chain (≤ 32·u of the chunk's
// Σ p|w|), p's fp32 rounding possibly flipped by the double sums' order (≤ 2u·p), the final rounding u·|out|.
void check_soft_embedding(DType type, int64_t vocab, int64_t dim, int64_t n_tokens, float spread, uint32_t seed) {
    std::mt19937 rng(seed);
    const std::vector<uint8_t> table = random_table(type, vocab, dim, rng);
    const std::vector<float> logits = uniform(size_t(n_tokens * vocab), rng, -spread, spread);
    const WeightView host{table.data(), type, vocab, dim};
    std::vector<float> want(size_t(n_tokens * dim));
    cpu::soft_embedding(logits.data(), host, n_tokens, want.data());

    std::vector<double> magnitude(want.size(), 0.0);  // Σ_v p|table[v][i]|
    std::vector<float> row(static_cast<size_t>(dim));
    for (int64_t t = 0; t < n_tokens; ++t) {
        const float* lt = logits.data() + t * vocab;
        const double m = *std::max_element(lt, lt + vocab);
        double denom = 0.0;
        for (int64_t v = 0; v < vocab; ++v) denom += std::exp(double(lt[v]) - m);
        for (int32_t v = 0; v < int32_t(vocab); ++v) {
            const double p = std::exp(double(lt[v]) - m) / denom;
            cpu::embedding_lookup(host, &v, 1, row.data());
            for (int64_t i = 0; i < dim; ++i) magnitude[size_t(t * dim + i)] += p * std::fabs(row[size_t(i)]);
        }
    }

    GuardedDeviceArray<uint8_t> dtable(table);
    GuardedDeviceArray<float> dlogits(logits), dout(want.size());
    cuda::soft_embedding(dlogits.get(), WeightView{dtable.get(), type, vocab, dim}, n_tokens, dout.get(), nullptr);
    const std::string what = "soft_embedding " + std::string(dtype_name(type)) + " vocab=" + std::to_string(vocab) +
                             " D=" + std::to_string(dim) + " T=" + std::to_string(n_tokens);
    const std::vector<double> want_d = to_double(want);
    expect_within(dout.download(what), want_d,
                  [&](size_t i) { return 34.0 * kU * magnitude[i] + kU * std::fabs(want_d[i]); }, what);

    // The tensor-core path, where it applies (soft_embedding_gemm's bound, elementwise_cuda.h).
    if (!cuda::plain_gemm_applies(type, n_tokens)) return;
    GuardedDeviceArray<float> dgemm(want.size());
    cuda::DeviceBuffer scratch(cuda::soft_embedding_gemm_scratch_bytes(WeightView{dtable.get(), type, vocab, dim}, n_tokens));
    cuda::soft_embedding_gemm(dlogits.get(), WeightView{dtable.get(), type, vocab, dim}, n_tokens, dgemm.get(),
                              scratch.get(), nullptr);
    const auto gamma = [](int64_t n) { return double(n) * kU / (1.0 - double(n) * kU); };
    const double factor =
        type == DType::BF16 ? 0x1.0p-24 + (1.0 + 0x1.0p-6) * gamma(vocab + 2) + 2 * kU : gamma(vocab) + 2 * kU;
    expect_within(dgemm.download(what + " gemm"), want_d,
                  [&](size_t i) { return factor * magnitude[i] + kU * std::fabs(want_d[i]); },
                  what + " gemm");
}

TEST(OpParityDiffusion, SoftEmbeddingEveryDType) {
    DELTABIT_REQUIRE_GPU();
    uint32_t seed = 40;
    for (DType type : kWeightDTypes) {
        const int64_t block = dtype_info(type).block_elems;
        const int64_t dim = block == 1 ? 257 : 2 * block;  // off the 256-column tile where the dtype allows
        check_soft_embedding(type, 1000, dim, 20, 8.0f, seed++);
    }
    // transformers' tiny test vocabulary (99, off the 32-row chunk), the fixture's, a peaked distribution (most p
    // underflow), a vocabulary far past a block's rows, and tokens off the 16-token tile.
    check_soft_embedding(DType::F32, 99, 32, 17, 30.0f, 50);
    check_soft_embedding(DType::F32, 512, 64, 8, 10.0f, 53);  // tests/fixtures/diffusion_gemma: vocab 512, H 64, canvas 8
    check_soft_embedding(DType::BF16, 33, 16, 1, 200.0f, 51);
    if (!quick_mode()) check_soft_embedding(DType::BF16, 20000, 64, 33, 4.0f, 52);
    // The released model's vocabulary on the tensor-core path (a canvas of 16 rows, a narrow table).
    if (!quick_mode()) check_soft_embedding(DType::BF16, 262144, 32, 16, 8.0f, 54);
}

TEST(OpParityDiffusion, SoftEmbeddingRefusesANonTable) {
    DELTABIT_REQUIRE_GPU();
    EXPECT_THROW(cuda::soft_embedding(nullptr, WeightView{nullptr, DType::I32, 4, 4}, 1, nullptr, nullptr), Error);
    EXPECT_THROW(cuda::soft_embedding(nullptr, WeightView{nullptr, DType::Q8_0, 4, 31}, 1, nullptr, nullptr), Error);
    // The tensor-core path takes BF16 and F32 tables only, and enough tokens.
    EXPECT_THROW(cuda::soft_embedding_gemm(nullptr, WeightView{nullptr, DType::Q8_0, 4, 32}, 16, nullptr, nullptr, nullptr),
                 Error);
    EXPECT_THROW(cuda::soft_embedding_gemm(nullptr, WeightView{nullptr, DType::BF16, 4, 32}, 2, nullptr, nullptr, nullptr),
                 Error);
}

#else
TEST(OpParityDiffusion, SkippedWithoutCuda) { GTEST_SKIP() << "built without CUDA"; }
#endif

}  // namespace
}  // namespace deltabit::test
