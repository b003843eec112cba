// The token embedding's lookup and its gradient. The gradient sums, per vocabulary row, the rows of dx
// whose token it is. As float atomics (one per value) those sums serialise on the frequent tokens'
// rows (qwen35-100m: 25M atomics onto 259 × 768 addresses, a space token in a fifth of the rows) and
// their bits depend on scheduling. Here the host groups the rows by token once a batch (a counting sort:
// O(N + V) on the tokens it already holds) and cuts each token's rows into runs of at most kRunRows;
// one block per run sums its rows column by column in row order, straight into dembed when it is its
// token's only run, else into a partial row that a second launch adds in run order. Every sum has a
// fixed order: the gradient repeats itself bit for bit.
//
// Traffic, N rows of D: dx read once (N·D), dembed read and written once per distinct token, and a
// partial row written and read per run of a token with more than kRunRows rows (≤ 2N / kRunRows such
// runs: a split token's c > 64 rows make ⌈c / 64⌉ < 2c / 64 runs). qwen35-100m (N = 32,768, V = 259,
// D = 768): ≤ 259 + 512 = 771 runs (blocks), ≤ 1,024 partial rows (3.1 MB against dx's 100.7 MB). A
// 32K vocabulary: ≤ min(V, N) + N / 64 runs and the same partial bound; dembed's touched rows (≤ N
// distinct tokens) are read and written once each.
#include "train/cuda/device_common.cuh"
#include "train/cuda/kernel_marks.h"
#include "train/cuda/kernels.h"

#include <string>
#include <vector>

namespace deltabit::train::cuda {
namespace {

using deltabit::cuda::cuda_check_launch;
using deltabit::cuda::DeviceBuffer;

// Rows a run: 64 gives ≥ N / 64 = 512 blocks at qwen35-100m (a block sums 64 rows of 768 with 256
// threads), while a frequent token's rows spread over many blocks instead of one.
constexpr int kRunRows = 64;

DeviceBuffer g_plan;        // the packed plan below, int32
Scratch g_partials;         // partial rows, [partial][D]

#define GRID_STRIDE(i, n) for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < (n); i += int64_t(gridDim.x) * blockDim.x)

__global__ void embedding_forward_kernel(const float* embed, const int32_t* tokens, int64_t N, int64_t D, float* x) {
    GRID_STRIDE(i, N * D) x[i] = embed[int64_t(tokens[i / D]) * D + i % D];
}

// The plan: rows grouped by token (row order within a token), runs of ≤ kRunRows of them.
struct Plan {
    std::vector<int32_t> packed;  // rows[N] | run_begin[runs + 1] | run_token[runs] | run_partial[runs]
                                  // | split_token[splits] | split_begin[splits + 1]
    int64_t runs = 0, splits = 0, partials = 0;
};

Plan plan_runs(std::span<const int32_t> tokens, int64_t V) {
    const int64_t N = int64_t(tokens.size());
    std::vector<int32_t> first(size_t(V) + 1, 0);
    for (int32_t t : tokens) {
        if (t < 0 || t >= V)
            fail_message("train cuda: embedding_backward: token " + std::to_string(t) + " is outside 0.." +
                         std::to_string(V - 1));
        ++first[size_t(t) + 1];
    }
    for (int64_t v = 0; v < V; ++v) first[size_t(v) + 1] += first[size_t(v)];
    std::vector<int32_t> rows(static_cast<size_t>(N)), next(first.begin(), first.end() - 1);
    for (int64_t n = 0; n < N; ++n) rows[size_t(next[size_t(tokens[size_t(n)])]++)] = int32_t(n);

    std::vector<int32_t> run_begin, run_token, run_partial, split_token, split_begin;
    int32_t partials = 0;
    for (int64_t v = 0; v < V; ++v) {
        const int32_t begin = first[size_t(v)], end = first[size_t(v) + 1];
        if (begin == end) continue;
        const bool split = end - begin > kRunRows;
        if (split) {
            split_token.push_back(int32_t(v));
            split_begin.push_back(partials);
        }
        for (int32_t r = begin; r < end; r += kRunRows) {
            run_begin.push_back(r);
            run_token.push_back(int32_t(v));
            run_partial.push_back(split ? partials++ : -1);
        }
    }
    run_begin.push_back(int32_t(N));
    split_begin.push_back(partials);
    Plan plan;
    plan.runs = int64_t(run_token.size());
    plan.splits = int64_t(split_token.size());
    plan.partials = partials;
    plan.packed = std::move(rows);
    for (const auto* part : {&run_begin, &run_token, &run_partial, &split_token, &split_begin})
        plan.packed.insert(plan.packed.end(), part->begin(), part->end());
    return plan;
}

// One block per run: column c of its rows summed in row order, into dembed (the token's only run) or
// its partial row.
__global__ void embedding_runs_kernel(const float* dx, const int32_t* rows, const int32_t* run_begin,
                                      const int32_t* run_token, const int32_t* run_partial, int64_t D, float* dembed,
                                      float* partials) {
    __shared__ int32_t run_rows[kRunRows];
    const int64_t run = blockIdx.x;
    const int32_t begin = run_begin[run], count = run_begin[run + 1] - begin;
    for (int i = threadIdx.x; i < count; i += blockDim.x) run_rows[i] = rows[begin + i];
    __syncthreads();
    const int32_t partial = run_partial[run];
    float* out = partial < 0 ? dembed + int64_t(run_token[run]) * D : partials + int64_t(partial) * D;
    for (int64_t c = threadIdx.x; c < D; c += blockDim.x) {
        float sum = 0.0f;
#pragma unroll 4
        for (int i = 0; i < count; ++i) sum += dx[int64_t(run_rows[i]) * D + c];
        if (partial < 0)
            out[c] += sum;
        else
            out[c] = sum;
    }
}

// One block per token with several runs: its partial rows added in run order.
__global__ void embedding_splits_kernel(const float* partials, const int32_t* split_token, const int32_t* split_begin,
                                        int64_t D, float* dembed) {
    const int64_t s = blockIdx.x;
    const int32_t begin = split_begin[s], end = split_begin[s + 1];
    float* out = dembed + int64_t(split_token[s]) * D;
    for (int64_t c = threadIdx.x; c < D; c += blockDim.x) {
        float sum = 0.0f;
        for (int32_t p = begin; p < end; ++p) sum += partials[int64_t(p) * D + c];
        out[c] += sum;
    }
}

}  // namespace

void embedding_forward(const float* embed, const int32_t* tokens, int64_t N, int64_t D, float* x) {
    embedding_forward_kernel<<<blocks_for(N * D), kBlock>>>(embed, tokens, N, D, x);
    cuda_check_launch("embedding_forward_kernel");
}

void embedding_backward(const float* dx, std::span<const int32_t> tokens, int64_t V, int64_t D, float* dembed) {
    const int64_t N = int64_t(tokens.size());
    if (N == 0 || D == 0) return;
    if (N > 2147483647) fail_message("train cuda: embedding_backward: " + std::to_string(N) + " rows exceed int32");
    const Plan plan = plan_runs(tokens, V);
    const size_t bytes = plan.packed.size() * sizeof(int32_t);
    if (g_plan.bytes() < bytes) g_plan = DeviceBuffer(bytes);
    // A synchronous copy: it waits for the kernels before it (the end of the backward, which the step's
    // synchronisation follows anyway); the plan itself was built while they ran.
    g_plan.upload(plan.packed.data(), bytes);
    const int32_t* rows = g_plan.get<int32_t>();
    const int32_t* run_begin = rows + N;
    const int32_t* run_token = run_begin + plan.runs + 1;
    const int32_t* run_partial = run_token + plan.runs;
    const int32_t* split_token = run_partial + plan.runs;
    const int32_t* split_begin = split_token + plan.splits;
    float* partials = g_partials.floats(plan.partials * D);
    embedding_runs_kernel<<<unsigned(plan.runs), kBlock>>>(dx, rows, run_begin, run_token, run_partial, D, dembed,
                                                           partials);
    cuda_check_launch("embedding_runs_kernel");
    mark_kernel("embedding: embedding_runs_kernel");
    if (plan.splits == 0) return;
    embedding_splits_kernel<<<unsigned(plan.splits), kBlock>>>(partials, split_token, split_begin, D, dembed);
    cuda_check_launch("embedding_splits_kernel");
    mark_kernel("embedding: embedding_splits_kernel");
}

}  // namespace deltabit::train::cuda
