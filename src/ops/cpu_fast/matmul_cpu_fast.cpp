#include "ops/cpu_fast/matmul_cpu_fast.h"

#include "core/error.h"
#include "core/quant.h"
#include "ops/cpu_fast/quant_dot.h"

#include <algorithm>
#include <atomic>
#include <cmath>

namespace deltabit::cpu_fast {
namespace {

std::atomic<int64_t> f32_calls{0}, int8_calls{0};

// Rows a task walks together: 16 rows of the widest geometry's quantised matrices (17408 inputs of Q8_0,
// 18.5 KiB a row) stay in L2 while every token tile passes over them; for Q1_0 they fit L1.
constexpr int64_t kRowGroup = 16;
// Below this many multiply-adds (weights × tokens) a product runs on the caller alone: waking a worker
// costs a few microseconds, as much as ~10^5 multiply-adds on one core (the fixture models' 256×128
// products stay on one thread).
constexpr int64_t kMinParallelWork = int64_t(1) << 17;

bool has_avx2() {
    return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && __builtin_cpu_supports("f16c");
}
bool has_avx512() {
    return has_avx2() && __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
           __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512vnni");
}

const KernelTable& kernels_for(Isa isa) {
    switch (isa) {
        case Isa::avx512:
            if (has_avx512()) return avx512_kernels();
            break;
        case Isa::avx2:
            if (has_avx2()) return avx2_kernels();
            break;
        case Isa::scalar: return scalar_kernels();
    }
    fail("cpu matmul: this CPU lacks the {} instructions", isa_name(isa));
}

Int8RowKernel int8_kernel(const KernelTable& k, DType t) {
    switch (t) {
        case DType::Q8_0: return k.q8_0;
        case DType::Q4_0: return k.q4_0;
        case DType::Q1_0: return k.q1_0;
        case DType::Q2_0: return k.q2_0;
        case DType::Q2_0_G64: return k.q2_0_g64;
        default: return nullptr;
    }
}

// The 2-bit types keep each group's activations in code order (quant_dot.h).
bool code_order(DType t) { return t == DType::Q2_0 || t == DType::Q2_0_G64; }

// One token's row rounded to int8 per group, exactly as cpu::matmul_int8_activations rounds a group.
void quantize_token(const float* x, int64_t k, int64_t group, bool in_code_order, int8_t* q, float* scale,
                    int32_t* sum) {
    const int64_t quarter = group / 4;
    for (int64_t g = 0; g * group < k; ++g) {
        const float* xg = x + g * group;
        float amax = 0.0f;
        for (int64_t i = 0; i < group; ++i) amax = std::max(amax, std::fabs(xg[i]));
        const float inv = amax > 0.0f ? 127.0f / amax : 0.0f;
        scale[g] = amax / 127.0f;
        int32_t total = 0;
        for (int64_t i = 0; i < group; ++i) {
            const int8_t v = int8_t(std::clamp(std::nearbyint(xg[i] * inv), -127.0f, 127.0f));  // ties to even
            const int64_t at = in_code_order ? (i % 4) * quarter + i / 4 : i;
            q[g * group + at] = v;
            total += v;
        }
        sum[g] = total;
    }
}

struct RowSplit {
    int64_t rows_per_task, tasks;
};

RowSplit split_rows(const WeightView& w, int64_t n_tokens, const ThreadPool& pool) {
    const int64_t work = w.rows * w.cols * n_tokens;
    if (pool.threads() == 1 || work < kMinParallelWork) return {w.rows, 1};
    // About 4 tasks a thread, so a thread slowed by another process hands its share to the others.
    const int64_t wanted = int64_t(pool.threads()) * 4;
    int64_t per_task = (w.rows + wanted - 1) / wanted;
    per_task = (per_task + kRowGroup - 1) / kRowGroup * kRowGroup;
    return {per_task, (w.rows + per_task - 1) / per_task};
}

void matmul_int8(const float* x, const WeightView& w, int64_t n_tokens, float* y, ThreadPool& pool,
                 const KernelTable& kernels) {
    const Int8RowKernel kernel = int8_kernel(kernels, w.dtype);
    const int64_t K = w.cols, N = w.rows, group = int8_group(w.dtype), groups = K / group;
    const int64_t n_blocks = K / int64_t(dtype_info(w.dtype).block_elems);
    // The caller's scratch, reused across calls (this thread owns it for the call).
    thread_local std::vector<int8_t> q;
    thread_local std::vector<float> scales;
    thread_local std::vector<int32_t> sums;
    thread_local std::vector<Int8Token> tokens;
    q.resize(size_t(n_tokens * K));
    scales.resize(size_t(n_tokens * groups));
    sums.resize(size_t(n_tokens * groups));
    tokens.resize(static_cast<size_t>(n_tokens));
    const bool ordered = code_order(w.dtype);
    int8_t* qd = q.data();
    float* sd = scales.data();
    int32_t* md = sums.data();
    const auto quantize = [&](int64_t t) {
        quantize_token(x + t * K, K, group, ordered, qd + t * K, sd + t * groups, md + t * groups);
    };
    if (n_tokens >= 8)
        pool.run(n_tokens, quantize);
    else
        for (int64_t t = 0; t < n_tokens; ++t) quantize(t);
    for (int64_t t = 0; t < n_tokens; ++t) tokens[size_t(t)] = {qd + t * K, sd + t * groups, md + t * groups};

    const Int8Token* tk = tokens.data();
    const RowSplit split = split_rows(w, n_tokens, pool);
    pool.run(split.tasks, [&](int64_t task) {
        const int64_t begin = task * split.rows_per_task, end = std::min(N, begin + split.rows_per_task);
        float out[kTokenTile];
        for (int64_t r0 = begin; r0 < end; r0 += kRowGroup) {
            const int64_t r1 = std::min(end, r0 + kRowGroup);
            for (int64_t t0 = 0; t0 < n_tokens; t0 += kTokenTile) {
                const int nt = int(std::min<int64_t>(kTokenTile, n_tokens - t0));
                for (int64_t r = r0; r < r1; ++r) {
                    kernel(w.row(r), n_blocks, tk + t0, nt, out);
                    for (int t = 0; t < nt; ++t) y[(t0 + t) * N + r] = out[t];
                }
            }
        }
    });
}

void matmul_f32(const float* x, const WeightView& w, int64_t n_tokens, float* y, ThreadPool& pool,
                const KernelTable& kernels) {
    const int64_t K = w.cols, N = w.rows;
    const RowSplit split = split_rows(w, n_tokens, pool);
    pool.run(split.tasks, [&](int64_t task) {
        const int64_t begin = task * split.rows_per_task, end = std::min(N, begin + split.rows_per_task);
        // Rows of a stored type other than F32 are decoded once into this thread's buffer.
        thread_local std::vector<float> decoded;
        if (w.dtype != DType::F32) decoded.resize(size_t(kRowGroup * K));
        float out[kTokenTile];
        const float* xs[kTokenTile];
        for (int64_t r0 = begin; r0 < end; r0 += kRowGroup) {
            const int64_t r1 = std::min(end, r0 + kRowGroup);
            for (int64_t r = r0; r < r1 && w.dtype != DType::F32; ++r) {
                float* to = decoded.data() + (r - r0) * K;
                if (w.dtype == DType::F16)
                    kernels.f16_to_f32(w.row(r), K, to);
                else if (w.dtype == DType::BF16)
                    kernels.bf16_to_f32(w.row(r), K, to);
                else
                    dequantize_row(w.dtype, w.row(r), to, K);
            }
            for (int64_t t0 = 0; t0 < n_tokens; t0 += kTokenTile) {
                const int nt = int(std::min<int64_t>(kTokenTile, n_tokens - t0));
                for (int t = 0; t < nt; ++t) xs[t] = x + (t0 + t) * K;
                for (int64_t r = r0; r < r1; ++r) {
                    const float* wr = w.dtype == DType::F32 ? static_cast<const float*>(w.row(r))
                                                            : decoded.data() + (r - r0) * K;
                    kernels.f32_dot(wr, K, xs, nt, out);
                    for (int t = 0; t < nt; ++t) y[(t0 + t) * N + r] = out[t];
                }
            }
        }
    });
}

}  // namespace

std::string_view isa_name(Isa isa) {
    switch (isa) {
        case Isa::scalar: return "scalar";
        case Isa::avx2: return "avx2";
        case Isa::avx512: return "avx512";
    }
    return "?";
}

std::vector<Isa> supported_isas() {
    std::vector<Isa> isas{Isa::scalar};
    if (has_avx2()) isas.push_back(Isa::avx2);
    if (has_avx512()) isas.push_back(Isa::avx512);
    return isas;
}

Isa best_isa() {
    static const Isa best = supported_isas().back();
    return best;
}

int64_t int8_group(DType t) { return is_quantized(t) ? int64_t(dtype_info(t).block_elems) : 1; }

void matmul(const float* x, const WeightView& w, int64_t n_tokens, float* y, Activations activations,
            ThreadPool& pool, Isa isa) {
    if (n_tokens <= 0 || w.rows == 0) return;
    const KernelTable& kernels = kernels_for(isa);
    if (activations == Activations::int8 && is_quantized(w.dtype)) {
        int8_calls.fetch_add(1, std::memory_order_relaxed);
        matmul_int8(x, w, n_tokens, y, pool, kernels);
    } else {
        f32_calls.fetch_add(1, std::memory_order_relaxed);
        matmul_f32(x, w, n_tokens, y, pool, kernels);
    }
}

Counters counters() { return {f32_calls.load(), int8_calls.load()}; }

}  // namespace deltabit::cpu_fast
