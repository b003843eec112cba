// The batched decode step (CudaModel::forward_batch, the server's continuous batching) against each
// sequence stepped alone:
//  - float fixtures (plain fp32 matmuls) in every KV format, 9 rows of different lengths: every row's logits
//    within rung 3's 1e-4 · max|logit| (tests/cuda/test_model_parity_cuda.cpp) of the same sequence's own
//    decode steps — the two differ only in the seams' kernels and summation order — and, with an f32 cache,
//    of the CPU reference; the batched states then continue alone (and batched again) within the same bound.
//  - Q1_0 matrices, 5 rows (the per-token int8 GEMV) and 9 (the tensor-core GEMM): a batch's rows bit for bit
//    those of the same sequences' twins batched in another order — nothing a row computes may depend on its
//    neighbours or its place.
//  - a repeated batch replayed from a CUDA graph, bit for bit the eager steps, also after another batch ran;
//  - a batch with one bad row (past its capacity, a state twice) refused whole, every state unchanged.
#include "models/fixture.h"

#if DELTABIT_HAVE_CUDA

#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>
#include <span>
#include <string>
#include <vector>

#include "core/error.h"
#include "cuda/decode_test_models.h"
#include "cuda/op_parity_cuda.h"
#include "models/model.h"
#include "models/model_cuda.h"
#include "models/sequence_state.h"

namespace deltabit {
namespace {

constexpr double kFloatTolerance = 1e-4;  // × max|logit|, rung 3

std::vector<float> download(const float* device, int64_t n) {
    std::vector<float> host(static_cast<size_t>(n));
    cuda::cuda_check(cudaMemcpy(host.data(), device, size_t(n) * sizeof(float), cudaMemcpyDeviceToHost), "download");
    return host;
}

double max_abs_diff(std::span<const float> a, std::span<const float> b) {
    double d = 0.0;
    for (size_t i = 0; i < a.size(); ++i) d = std::max(d, std::abs(double(a[i]) - double(b[i])));
    return d;
}

std::vector<int32_t> random_ids(int64_t n, int64_t vocab, std::mt19937& rng) {
    std::vector<int32_t> ids(static_cast<size_t>(n));
    for (int32_t& id : ids) id = int32_t(rng() % uint32_t(vocab));
    return ids;
}

// Prompt lengths of the rows: prompt-path chunks (≥ 5 tokens) and short prompts taken as decode steps (≤ 4).
const std::vector<int64_t> kPromptLengths = {3, 11, 6, 17, 1, 24, 9, 2, 13};

// Prompts of kPromptLengths' first B lengths.
std::vector<std::vector<int32_t>> row_prompts(int64_t B, int64_t vocab, std::mt19937& rng) {
    std::vector<std::vector<int32_t>> prompts;
    for (int64_t i = 0; i < B; ++i) prompts.push_back(random_ids(kPromptLengths[size_t(i)], vocab, rng));
    return prompts;
}

// A sequence (f16 KV, room for 64 tokens) of `gpu` after each prompt.
std::vector<CudaSequenceState> prefilled(CudaModel& gpu, const std::vector<std::vector<int32_t>>& prompts) {
    std::vector<CudaSequenceState> states;
    states.reserve(prompts.size());
    for (const std::vector<int32_t>& p : prompts) {
        states.push_back(gpu.new_sequence(64, KvFormat::f16));
        gpu.forward_last(states.back(), p);
    }
    return states;
}

std::vector<CudaSequenceState*> pointers(std::vector<CudaSequenceState>& states) {
    std::vector<CudaSequenceState*> rows;
    for (CudaSequenceState& s : states) rows.push_back(&s);
    return rows;
}

struct BatchCase {
    std::string fixture;
    KvFormat kv;
};

class BatchStepFloat : public ::testing::TestWithParam<BatchCase> {};

TEST_P(BatchStepFloat, RowsMatchEachSequenceSteppedAloneAndTheCpu) {
    DELTABIT_REQUIRE_GPU();
    const test::Fixture f = test::load_fixture(GetParam().fixture);
    const KvFormat kv = GetParam().kv;
    const Model cpu = Model::load(f.dir);
    CudaModel gpu(cpu);
    const int64_t V = cpu.config().n_vocab, B = int64_t(kPromptLengths.size());
    const double tol = kFloatTolerance * f.max_abs_logit;
    constexpr int64_t kCapacity = 64;
    std::mt19937 rng(7);

    std::vector<CudaSequenceState> batched, alone;
    std::vector<SequenceState> reference;
    std::vector<CudaSequenceState*> rows;
    batched.reserve(size_t(B));
    alone.reserve(size_t(B));
    for (int64_t i = 0; i < B; ++i) {
        const std::vector<int32_t> prompt = random_ids(kPromptLengths[size_t(i)], V, rng);
        batched.push_back(gpu.new_sequence(kCapacity, kv));
        alone.push_back(gpu.new_sequence(kCapacity, kv));
        reference.push_back(cpu.new_sequence(KvFormat::f32));
        gpu.forward_last(batched.back(), prompt);
        gpu.forward_last(alone.back(), prompt);
        cpu.forward(reference.back(), prompt);
    }
    for (CudaSequenceState& s : batched) rows.push_back(&s);

    double worst_alone = 0.0, worst_cpu = 0.0;
    // Steps 0–3 batched, 4 and 5 each row alone, 6 and 7 batched again: a batched state continues as any.
    for (int step = 0; step < 8; ++step) {
        const std::vector<int32_t> ids = random_ids(B, V, rng);
        const bool batch = step < 4 || step >= 6;
        std::vector<float> got;
        if (batch) {
            got = download(gpu.forward_batch(rows, ids), B * V);
        } else {
            for (int64_t i = 0; i < B; ++i) {
                const std::vector<float> row = download(gpu.forward_last(batched[size_t(i)], std::span(&ids[size_t(i)], 1)), V);
                got.insert(got.end(), row.begin(), row.end());
            }
        }
        for (int64_t i = 0; i < B; ++i) {
            SCOPED_TRACE(testing::Message() << "step " << step << ", row " << i);
            const std::span<const float> row(got.data() + i * V, size_t(V));
            const std::vector<float> own = download(gpu.forward_last(alone[size_t(i)], std::span(&ids[size_t(i)], 1)), V);
            worst_alone = std::max(worst_alone, max_abs_diff(row, own));
            EXPECT_LE(max_abs_diff(row, own), tol);
            EXPECT_EQ(batched[size_t(i)].position(), alone[size_t(i)].position());
            const std::vector<float> want = cpu.forward(reference[size_t(i)], std::span(&ids[size_t(i)], 1));
            if (kv == KvFormat::f32) {
                worst_cpu = std::max(worst_cpu, max_abs_diff(row, want));
                EXPECT_LE(max_abs_diff(row, want), tol);
            }
        }
    }
    std::printf("[batch %s %s] worst |row - alone| %.3g, |row - cpu| %.3g (bound %.3g)\n", f.name.c_str(),
                std::string(kv_format_name(kv)).c_str(), worst_alone, worst_cpu, tol);
    EXPECT_EQ(gpu.decode_stats().batch_steps, 6);
    EXPECT_EQ(gpu.decode_stats().batch_rows, 6 * B);
}

INSTANTIATE_TEST_SUITE_P(Fixtures, BatchStepFloat,
                         ::testing::Values(BatchCase{"qwen3_5_float", KvFormat::f32},
                                           BatchCase{"qwen3_5_float", KvFormat::f16},
                                           BatchCase{"qwen3_5_float", KvFormat::kivi4},
                                           BatchCase{"qwen3_float", KvFormat::f32},
                                           BatchCase{"qwen3_next_float", KvFormat::f16},
                                           BatchCase{"qwen3_5_moe_float", KvFormat::f32}),
                         [](const auto& info) {
                             return info.param.fixture + "_" + std::string(kv_format_name(info.param.kv));
                         });

// Q1_0 matrices: the rows' int8 GEMVs (5 rows) or GEMM (9 rows). The same sequences twice — one set
// batched in order, the twins in reverse order — step after step, bit for bit.
class BatchStepQ1 : public ::testing::TestWithParam<std::string> {};

TEST_P(BatchStepQ1, RowsDoNotDependOnTheirNeighboursOrPlace) {
    DELTABIT_REQUIRE_GPU();
    const Model cpu = test::load_fixture_model(GetParam(), /*q1_matrices=*/true);
    CudaModel gpu(cpu);
    const int64_t V = cpu.config().n_vocab;
    for (const int64_t B : {int64_t{5}, int64_t{9}}) {
        SCOPED_TRACE(testing::Message() << B << " rows");
        std::mt19937 rng(11);
        const std::vector<std::vector<int32_t>> prompts = row_prompts(B, V, rng);
        std::vector<CudaSequenceState> in_order = prefilled(gpu, prompts), twins = prefilled(gpu, prompts);
        const std::vector<CudaSequenceState*> rows = pointers(in_order);
        std::vector<CudaSequenceState*> reversed = pointers(twins);
        std::reverse(reversed.begin(), reversed.end());
        for (int step = 0; step < 6; ++step) {
            const std::vector<int32_t> ids = random_ids(B, V, rng);
            const std::vector<int32_t> reversed_ids(ids.rbegin(), ids.rend());
            const std::vector<float> a = download(gpu.forward_batch(rows, ids), B * V);
            const std::vector<float> b = download(gpu.forward_batch(reversed, reversed_ids), B * V);
            for (int64_t i = 0; i < B; ++i)
                ASSERT_EQ(std::memcmp(a.data() + i * V, b.data() + (B - 1 - i) * V, size_t(V) * sizeof(float)), 0)
                    << "step " << step << ", row " << i;
        }
    }
}

INSTANTIATE_TEST_SUITE_P(Fixtures, BatchStepQ1,
                         ::testing::Values("qwen3_5_binary", "qwen3_binary", "qwen3_next_binary", "qwen3_5_moe_binary"));

// A batch whose shape repeats (B and each attention layer's plan) is replayed from a CUDA graph, bit for bit
// the eager steps of a model with graphs off: the first step eager, the second captured, every later one a
// replay, whatever states fill the rows. Steps 6–9 swap the first two rows and steps 10–11 a third set of
// sequences takes rows 0–2: the graph then steps other states than those it was captured with, through the
// tables each step uploads (batch_step_cuda.cpp), and must still give each row its own logits.
TEST(BatchStep, ABatchOfARepeatedShapeReplaysAGraphBitForBitTheEagerSteps) {
    DELTABIT_REQUIRE_GPU();
    const Model cpu = test::load_fixture_model("qwen3_5_binary", /*q1_matrices=*/true);
    CudaModel graphs(cpu), eager(cpu);
    eager.set_decode_graphs(false);
    const int64_t V = cpu.config().n_vocab, B = 6;
    std::mt19937 rng(3);
    const std::vector<std::vector<int32_t>> prompts = row_prompts(B, V, rng);
    std::vector<CudaSequenceState> a = prefilled(graphs, prompts), b = prefilled(eager, prompts);
    std::vector<CudaSequenceState> c = prefilled(graphs, prompts), d = prefilled(eager, prompts);
    std::vector<CudaSequenceState*> rows_a = pointers(a), rows_b = pointers(b);
    for (int step = 0; step < 12; ++step) {
        if (step == 6) {
            std::swap(rows_a[0], rows_a[1]);
            std::swap(rows_b[0], rows_b[1]);
        }
        if (step == 10)
            for (size_t i = 0; i < 3; ++i) {
                rows_a[i] = &c[i];
                rows_b[i] = &d[i];
            }
        const std::vector<int32_t> ids = random_ids(B, V, rng);
        const std::vector<float> ga = download(graphs.forward_batch(rows_a, ids), B * V);
        const std::vector<float> gb = download(eager.forward_batch(rows_b, ids), B * V);
        ASSERT_EQ(std::memcmp(ga.data(), gb.data(), ga.size() * sizeof(float)), 0) << "step " << step;
    }
    const CudaDecodeStats s = graphs.decode_stats();
    EXPECT_EQ(s.batch_graph_captures, 1);
    EXPECT_EQ(s.batch_graph_replays, 10);
    EXPECT_EQ(eager.decode_stats().batch_graph_captures + eager.decode_stats().batch_graph_replays, 0);
}

TEST(BatchStep, ABatchWithABadRowIsRefusedWholeAndChangesNothing) {
    DELTABIT_REQUIRE_GPU();
    const Model cpu = Model::load(test::fixtures_dir() / "qwen3_5_float");
    CudaModel gpu(cpu);
    CudaSequenceState a = gpu.new_sequence(16), b = gpu.new_sequence(16), full = gpu.new_sequence(3);
    const std::vector<int32_t> prompt = {5, 9, 2};
    for (CudaSequenceState* s : {&a, &b, &full}) gpu.forward_last(*s, prompt);
    const StateImage a_before = a.save(), b_before = b.save();
    const auto unchanged = [&] {
        EXPECT_EQ(a.position(), 3);
        EXPECT_EQ(b.position(), 3);
        EXPECT_EQ(full.position(), 3);
        const StateImage a_now = a.save(), b_now = b.save();
        for (size_t i = 0; i < a_now.chunks.size(); ++i) EXPECT_TRUE(a_now.chunks[i].bytes == a_before.chunks[i].bytes);
        for (size_t i = 0; i < b_now.chunks.size(); ++i) EXPECT_TRUE(b_now.chunks[i].bytes == b_before.chunks[i].bytes);
    };
    const std::vector<int32_t> three = {1, 2, 3};
    CudaSequenceState* with_full[3] = {&a, &b, &full};
    EXPECT_THROW(gpu.forward_batch(with_full, three), Error);
    unchanged();
    CudaSequenceState* twice[3] = {&a, &b, &a};
    EXPECT_THROW(gpu.forward_batch(twice, three), Error);
    unchanged();
    CudaSequenceState* two[2] = {&a, &b};
    const std::vector<int32_t> outside = {1, int32_t(cpu.config().n_vocab)};
    EXPECT_THROW(gpu.forward_batch(two, outside), Error);
    unchanged();
    EXPECT_THROW(gpu.forward_batch(two, three), Error);  // 3 ids for 2 rows
    unchanged();
    // And the good rows still step.
    gpu.forward_batch(two, std::span(three).first(2));
    EXPECT_EQ(a.position(), 4);
    EXPECT_EQ(b.position(), 4);
}

}  // namespace
}  // namespace deltabit

#endif  // DELTABIT_HAVE_CUDA
