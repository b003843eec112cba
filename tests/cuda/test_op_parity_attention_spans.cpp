// Attention over explicit key spans on the GPU (ops/attention/attention_cuda.h: attention_spans) against the
// naive CPU reference (cpu::attention_spans): the three span rules DiffusionGemma uses — the decoder's
// cache ++ canvas with no mask, the encoder's causal rule with and without a sliding window over a cache
// holding the last W − 1 tokens — and random spans; hostile head dims (1, off the 4-float and warp edges,
// across the 256 boundary where a block's rows drop from 64 to 32, up to 512), GQA groups that fill a
// block, a score scale other than 1, large scores that make the online softmax rescale, the model's two
// geometries at full size, and blocks forced to walk many items. Skips cleanly without a GPU.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <thread>
#include <vector>

#include "ops/attention_spans.h"
#include "ops/op_parity.h"

#ifdef DELTABIT_HAVE_CUDA
#include "cuda/op_parity_cuda.h"
#include "ops/attention/attention_cuda.h"
#endif

namespace deltabit::test {
namespace {

#ifdef DELTABIT_HAVE_CUDA

enum class Spans { all, causal, random };

struct Case {
    int64_t n_queries, n_cached, n_head, n_kv_head, head_dim;
    Spans spans;
    int64_t window;  // causal: a query sees itself and the window − 1 keys before it (0: no window)
    float q_scale;   // > 1 makes scores large, so the running max moves and the softmax rescales
    double scale = 1.0;
};

// Error bound per output element, from the kernel's arithmetic (attention_spans_cuda.cu), as the prompt
// kernel's (tests/cuda/test_prefill_attention.cpp):
//   score s_p: q·scale rounded (u), then one fmaf chain of d4 terms: |δs_p| ≤ (d + 5)·u·A_p with
//     A_p = scale·Σ_j |q_j k_pj|; a score error moves the softmax output by at most 2·max|δs|·vmax;
//   softmax over the n keys of the span, walked in n_t ≤ ceil(n_keys/32) + 1 tiles: each key's weight
//     e^{s−m} (4u + u·R for the subtraction of an argument up to the score span R), each tile's rescale
//     (the same) applied to l and acc (2u), and the sums over keys of l (n fp32 additions) and of acc (n
//     fmaf): ≤ (2n + n_t·(12 + 2R) + 4 + R)·u relative to vmax; the final divide u.
// Inputs are bounded, so vmax = max |v| over the span bounds every |o|.
std::vector<double> span_tolerance(const Case& c, int64_t n_keys, const std::vector<float>& q,
                                   const std::vector<float>& k, const std::vector<float>& v,
                                   const std::vector<int64_t>& begin, const std::vector<int64_t>& end,
                                   const std::vector<double>& want) {
    const int64_t d = c.head_dim, group = c.n_head / c.n_kv_head;
    std::vector<double> tol(want.size());
    const int64_t threads = std::max<unsigned>(1, std::thread::hardware_concurrency());
    std::vector<std::thread> pool;
    for (int64_t w = 0; w < threads; ++w) {
        pool.emplace_back([&, w] {
            for (int64_t t = w; t < c.n_queries; t += threads) {
                for (int64_t h = 0; h < c.n_head; ++h) {
                    const int64_t kvh = h / group;
                    double a_max = 0, s_max = 0, v_max = 0;
                    for (int64_t p = begin[size_t(t)]; p < end[size_t(t)]; ++p) {
                        double a = 0, s = 0;
                        for (int64_t j = 0; j < d; ++j) {
                            const double qj = q[size_t((t * c.n_head + h) * d + j)];
                            const double kj = k[size_t((p * c.n_kv_head + kvh) * d + j)];
                            a += std::fabs(qj * kj);
                            s += qj * kj;
                            v_max = std::max(v_max, double(std::fabs(v[size_t((p * c.n_kv_head + kvh) * d + j)])));
                        }
                        a_max = std::max(a_max, a * c.scale);
                        s_max = std::max(s_max, std::fabs(s * c.scale));
                    }
                    const double score_err = double(d + 5) * kU * a_max;
                    const double n = double(end[size_t(t)] - begin[size_t(t)]);
                    const double n_t = std::ceil(double(n_keys) / 32.0) + 1, span = 2.0 * s_max;
                    const double bound =
                        (2.0 * score_err + (2.0 * n + n_t * (12.0 + 2.0 * span) + 5.0 + span) * kU) * v_max;
                    for (int64_t j = 0; j < d; ++j) {
                        const size_t i = size_t((t * c.n_head + h) * d + j);
                        tol[i] = bound + 2.0 * kU * std::fabs(want[i]);
                    }
                }
            }
        });
    }
    for (auto& th : pool) th.join();
    return tol;
}

std::string describe(const Case& c) {
    const char* rule = c.spans == Spans::all ? "cache++canvas" : c.spans == Spans::causal ? "causal" : "random";
    return std::string("attention spans ") + rule + " T=" + std::to_string(c.n_queries) +
           " cached=" + std::to_string(c.n_cached) + " H=" + std::to_string(c.n_head) + "/" +
           std::to_string(c.n_kv_head) + " d=" + std::to_string(c.head_dim) +
           (c.window > 0 ? " W=" + std::to_string(c.window) : "") + (c.q_scale > 1 ? " large-scores" : "") +
           (c.scale != 1.0 ? " scale=" + std::to_string(c.scale) : "");
}

void check_spans(const Case& c, uint32_t seed, int64_t max_blocks = 0) {
    std::mt19937 rng(seed);
    const int64_t n_keys = c.n_cached + c.n_queries;
    std::vector<float> q = uniform(size_t(c.n_queries * c.n_head * c.head_dim), rng, -1.0f, 1.0f);
    for (float& x : q) x *= c.q_scale;
    const std::vector<float> k = uniform(size_t(n_keys * c.n_kv_head * c.head_dim), rng, -1.0f, 1.0f);
    const std::vector<float> v = uniform(k.size(), rng, -1.0f, 1.0f);
    // The spans by the model's rule (models/diffusion_gemma.cpp): keys are the cache, then the queries' own.
    std::vector<int64_t> begin(static_cast<size_t>(c.n_queries)), end(static_cast<size_t>(c.n_queries));
    cpu::diffusion_key_spans(c.n_queries, c.n_cached, c.spans == Spans::causal, c.window, begin.data(), end.data());
    if (c.spans == Spans::random) {
        for (int64_t t = 0; t < c.n_queries; ++t) {
            const int64_t a = int64_t(rng() % uint64_t(n_keys)), b = int64_t(rng() % uint64_t(n_keys));
            begin[size_t(t)] = std::min(a, b);
            end[size_t(t)] = std::max(a, b) + 1;
        }
    }
    const cpu::AttentionSpanDims dims{c.n_queries, n_keys, c.n_head, c.n_kv_head, c.head_dim};

    // The reference, one thread per slice of queries.
    std::vector<float> want(q.size());
    {
        const int64_t threads = std::max<unsigned>(1, std::thread::hardware_concurrency());
        const int64_t per = (c.n_queries + threads - 1) / threads;
        std::vector<std::thread> pool;
        for (int64_t t0 = 0; t0 < c.n_queries; t0 += per) {
            pool.emplace_back([&, t0] {
                cpu::AttentionSpanDims part = dims;
                part.n_queries = std::min(per, c.n_queries - t0);
                const size_t off = size_t(t0 * c.n_head * c.head_dim);
                cpu::attention_spans(q.data() + off, k.data(), v.data(), part, c.scale, begin.data() + t0,
                                     end.data() + t0, want.data() + off);
            });
        }
        for (auto& th : pool) th.join();
    }

    GuardedDeviceArray<float> dq(q), dk(k), dv(v), dout(q.size());
    GuardedDeviceArray<int64_t> dbegin(begin), dend(end);
    cuda::attention_spans(dq.get(), dk.get(), dv.get(), dims, c.scale, dbegin.get(), dend.get(), dout.get(), nullptr,
                          max_blocks);
    const std::string what = describe(c) + (max_blocks > 0 ? " on " + std::to_string(max_blocks) + " blocks" : "");
    const std::vector<double> want_d = to_double(want);
    const std::vector<double> tol = span_tolerance(c, n_keys, q, k, v, begin, end, want_d);
    expect_within(dout.download(what), want_d, [&](size_t i) { return tol[i]; }, what);
}

TEST(OpParityAttentionSpans, HostileShapes) {
    DELTABIT_REQUIRE_GPU();
    uint32_t seed = 1;
    const std::vector<Case> cases = {
        {1, 0, 1, 1, 1, Spans::all, 0, 1},          {1, 0, 1, 1, 1, Spans::causal, 0, 1},
        {5, 7, 2, 1, 12, Spans::all, 0, 1},         {5, 9, 2, 1, 16, Spans::causal, 6, 1},
        {63, 0, 4, 2, 65, Spans::causal, 0, 1},     {65, 64, 4, 4, 63, Spans::random, 0, 2},
        {7, 121, 3, 1, 129, Spans::all, 0, 1},      {64, 64, 8, 2, 128, Spans::causal, 33, 8},
        {129, 0, 2, 1, 256, Spans::random, 0, 4},   {33, 31, 6, 3, 257, Spans::causal, 20, 2},
        {45, 10, 4, 4, 300, Spans::random, 0, 5},   {3, 100, 64, 1, 64, Spans::all, 0, 1},
        {9, 5, 32, 1, 300, Spans::causal, 4, 2},    {17, 40, 4, 2, 511, Spans::all, 0, 1},
        {16, 23, 16, 2, 512, Spans::all, 0, 1},     {37, 20, 16, 2, 512, Spans::causal, 0, 3},
        {1000, 0, 2, 1, 64, Spans::causal, 128, 1}, {40, 50, 4, 2, 96, Spans::all, 0, 1, 0.125},
    };
    for (const Case& c : cases) check_spans(c, seed++);
}

// google/diffusiongemma-26B-A4B-it (reference §1.3): 16 query heads; sliding layers 8 kv heads of 256 with
// window 1024, so the decoder reads the last 1023 prompt tokens; full layers 2 kv heads of 512 over the
// whole history; canvas 256.
TEST(OpParityAttentionSpans, DiffusionGemmaGeometry) {
    DELTABIT_REQUIRE_GPU();
    if (quick_mode()) GTEST_SKIP() << "long shapes skipped in quick mode";
    check_spans({256, 1023, 16, 8, 256, Spans::all, 0, 1}, 100);       // decoder, sliding layer
    check_spans({256, 1500, 16, 2, 512, Spans::all, 0, 1}, 101);       // decoder, full layer
    check_spans({600, 0, 16, 8, 256, Spans::causal, 1024, 1}, 102);    // encoder, a first prompt
    check_spans({256, 1023, 16, 8, 256, Spans::causal, 1024, 1}, 103); // encoder, a committed block
    check_spans({256, 1500, 16, 2, 512, Spans::causal, 0, 1}, 104);    // encoder, full layer
}

// tests/fixtures/diffusion_gemma (the CPU forward's transformers fixture): 4 query heads; sliding layers 2 kv
// heads of 16 with window 6, full layers 1 kv head of 32; canvas 8.
TEST(OpParityAttentionSpans, FixtureGeometry) {
    DELTABIT_REQUIRE_GPU();
    check_spans({8, 5, 4, 2, 16, Spans::all, 0, 1}, 300);      // decoder, sliding layer: the last W − 1 = 5
    check_spans({8, 20, 4, 1, 32, Spans::all, 0, 1}, 301);     // decoder, full layer
    check_spans({12, 0, 4, 2, 16, Spans::causal, 6, 1}, 302);  // encoder, a prompt longer than the window
    check_spans({8, 5, 4, 2, 16, Spans::causal, 6, 1}, 303);   // encoder, a committed block
    check_spans({8, 20, 4, 1, 32, Spans::causal, 0, 1}, 304);  // encoder, full layer
}

TEST(OpParityAttentionSpans, FewBlocksWalkManyItems) {
    DELTABIT_REQUIRE_GPU();
    check_spans({300, 5, 8, 2, 64, Spans::random, 0, 1}, 200, 3);
    check_spans({70, 31, 16, 2, 512, Spans::causal, 32, 2}, 201, 2);
}

TEST(OpParityAttentionSpans, RefusesUnsupportedShapes) {
    DELTABIT_REQUIRE_GPU();
    const cpu::AttentionSpanDims wide{4, 4, 2, 1, 513};
    EXPECT_THROW(cuda::attention_spans(nullptr, nullptr, nullptr, wide, 1.0, nullptr, nullptr, nullptr, nullptr), Error);
    const cpu::AttentionSpanDims huge_group{4, 4, 65, 1, 64};
    EXPECT_THROW(cuda::attention_spans(nullptr, nullptr, nullptr, huge_group, 1.0, nullptr, nullptr, nullptr, nullptr),
                 Error);
    const cpu::AttentionSpanDims wide_group{4, 4, 33, 1, 300};  // 32 rows per block above head_dim 256
    EXPECT_THROW(cuda::attention_spans(nullptr, nullptr, nullptr, wide_group, 1.0, nullptr, nullptr, nullptr, nullptr),
                 Error);
}

// The spans themselves written on the device (cuda::diffusion_key_spans) equal the reference's exactly,
// every rule, around the window's edges (a cache shorter than, equal to and past W − 1) and for a length
// past one block of threads; the guard behind each array stays intact.
TEST(OpParityAttentionSpans, DeviceSpansAreTheReferenceRule) {
    DELTABIT_REQUIRE_GPU();
    for (const int64_t n : {1, 63, 65, 257, 1500})
        for (const int64_t cached : {0, 2, 3, 4, 1023})
            for (const bool causal : {false, true})
                for (const int64_t window : {0, 4, 1024}) {
                    const size_t count = static_cast<size_t>(n);
                    std::vector<int64_t> want_begin(count), want_end(count);
                    cpu::diffusion_key_spans(n, cached, causal, window, want_begin.data(), want_end.data());
                    GuardedDeviceArray<int64_t> begin(count), end(count);
                    cuda::diffusion_key_spans(n, cached, causal, window, begin.get(), end.get(), nullptr);
                    const std::string what = "n " + std::to_string(n) + " cached " + std::to_string(cached) +
                                             (causal ? " causal" : " all") + " window " + std::to_string(window);
                    EXPECT_EQ(begin.download(what), want_begin) << what;
                    EXPECT_EQ(end.download(what), want_end) << what;
                }
}

#else
TEST(OpParityAttentionSpans, SkippedWithoutCuda) { GTEST_SKIP() << "built without CUDA"; }
#endif

}  // namespace
}  // namespace deltabit::test
