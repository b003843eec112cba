// The GPU against the CPU reference on the trained default model (models/bytelm-hybrid-14m.q1_0.gguf, the
// same file on both), rung 5's distribution gates (models/distribution_gates.h: mean KL < 0.005, p99 KL <
// 0.05, top-1 ≥ 96.5% per depth bin). On a random model these numbers mean little; on weights that
// learned English they are what a user's text sees. The reference is the CPU model as it loads (exact
// f32 products of the Q1_0 weights); the GPU rounds activations to int8 in its GEMVs and to f16 in its
// prompt GEMMs, and this measures what that does to the next-token distribution. Four windows of the
// model's 512-byte context over English it never saw (2,048 positions), each a fresh sequence, read two
// ways: one token per call (the decode step) and the whole window in one call (the prompt path).
// Skips cleanly without a GPU.
#include "models/distribution_gates.h"
#include "models/english_text.h"

#if DELTABIT_HAVE_CUDA
#include "models/model.h"
#include "models/model_cuda.h"
#include "op_parity_cuda.h"
#endif

#include <gtest/gtest.h>

#include <filesystem>
#include <span>
#include <vector>

namespace deltabit {
namespace {

#if DELTABIT_HAVE_CUDA

constexpr int64_t kWindow = 512;
constexpr int64_t kWindows = 4;

TEST(DefaultModelGatesCuda, GpuDecodeAndPromptAgreeWithTheCpuReference) {
    DELTABIT_REQUIRE_GPU();
    const Model cpu = Model::load(std::filesystem::path(DELTABIT_SOURCE_DIR) / "models" / "bytelm-hybrid-14m.q1_0.gguf");
    CudaModel gpu(cpu);
    const int64_t vocab = cpu.config().n_vocab;
    const std::vector<int32_t> text = test::english_text_ids(size_t(kWindows * kWindow));

    std::vector<float> reference, steps, prompt;
    for (int64_t w = 0; w < kWindows; ++w) {
        const std::span<const int32_t> window(text.data() + w * kWindow, size_t(kWindow));
        SequenceState cpu_state = cpu.new_sequence();
        const std::vector<float> want = cpu.forward(cpu_state, window);
        reference.insert(reference.end(), want.begin(), want.end());

        CudaSequenceState one_call = gpu.new_sequence(kWindow);
        const std::vector<float> all = gpu.forward(one_call, window);
        prompt.insert(prompt.end(), all.begin(), all.end());

        CudaSequenceState stepped = gpu.new_sequence(kWindow);
        for (const int32_t id : window) {
            const std::vector<float> row = gpu.forward(stepped, std::span(&id, 1));
            steps.insert(steps.end(), row.begin(), row.end());
        }
    }
    ASSERT_EQ(steps.size(), reference.size());
    ASSERT_EQ(prompt.size(), reference.size());
    const std::vector<test::BinResult> step_bins = test::compare_by_depth(reference, steps, vocab, kWindow);
    const std::vector<test::BinResult> prompt_bins = test::compare_by_depth(reference, prompt, vocab, kWindow);
    test::print_table("bytelm-hybrid-14m gpu steps", step_bins);
    test::expect_gates("bytelm-hybrid-14m gpu steps", step_bins);
    test::print_table("bytelm-hybrid-14m gpu prompt", prompt_bins);
    test::expect_gates("bytelm-hybrid-14m gpu prompt", prompt_bins);
    // The comparison is of two different computations, not of a path with itself.
    EXPECT_GT(step_bins.back().mean_kl, 0.0);
}

#else
TEST(DefaultModelGatesCuda, SkippedWithoutCuda) { GTEST_SKIP() << "built without CUDA"; }
#endif

}  // namespace
}  // namespace deltabit
