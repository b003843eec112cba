// The CPU fast path of matmul (contract: ops/matmul.h, y = x · Wᵀ), a third implementation beside the naive
// reference (matmul_cpu.cpp, the oracle) and CUDA, tested against the reference in
// tests/ops/test_matmul_fast.cpp. The CPU model routes its products here (models/blocks.h); the environment
// switch DELTABIT_CPU_REFERENCE=1 sends them back to the reference.
//
//   x  [T][K]     row-major fp32, K = w.cols
//   w  W[N][K]    WeightView, read in place in its stored dtype
//   y  [T][N]     row-major; must not overlap x
//
// Work is split over the pool's threads by output rows; each task walks its rows in groups that stay in
// L1 and, for a prompt (T > 1), every row against tiles of 4 tokens, so a weight block is read and expanded
// once for 4 tokens (ops/cpu_fast/quant_dot.h). A product too small to pay for waking threads runs on the caller.
//
// Numerics (Activations):
//   f32   every weight dtype: weights decoded exactly to fp32 (as dequantize_row does) and products summed
//         in fp32 — differs from the reference's double sum only by fp32 rounding.
//   int8  quantised weights (Q8_0, Q4_0, Q1_0, Q2_0, Q2_0_G64): each token's x is rounded to int8 once per
//         matmul, per group of the weight's block size (32, 32, 128, 128, 64) — scale = max|x|/127 of the
//         group, q = round-half-even(x · 127/max|x|) in fp32, as cpu::matmul_int8_activations rounds — and
//         every block's Σ level·q is an exact int32, scaled by fp32(d·scale) and summed in fp32. Plain-float
//         weights run as f32. The rounding moves a result by at most Σ_i |w_i|·scale_i·(1/2 + 400·2⁻²⁴) from
//         the exact product (the derivation is in the test).
// The result is the same bits for every thread count and every T (each y[t][n] is computed by the same
// operations in the same order); it depends on the instruction set (Isa), each of which is tested.
#pragma once

#include <cstdint>
#include <string_view>
#include <vector>

#include "core/tensor.h"
#include "core/thread_pool.h"

namespace deltabit::cpu_fast {

enum class Activations { f32, int8 };

enum class Isa { scalar, avx2, avx512 };
std::string_view isa_name(Isa isa);
// What this CPU can run, scalar first; best_isa() is the last (AVX-512 needs F, BW, VL and VNNI; AVX2
// needs AVX2, FMA and F16C).
std::vector<Isa> supported_isas();
Isa best_isa();

// The activation group of the int8 mode for `t`: its block size (1 for plain-float types, which do not
// use it).
int64_t int8_group(DType t);

void matmul(const float* x, const WeightView& w, int64_t n_tokens, float* y, Activations activations,
            ThreadPool& pool, Isa isa = best_isa());

// Calls of matmul since the process started, by mode actually taken (an int8 request on a plain-float
// weight counts as f32): for tests and reports that must show the fast path ran (STYLE habit 16).
struct Counters {
    int64_t f32 = 0;
    int64_t int8 = 0;
};
Counters counters();

}  // namespace deltabit::cpu_fast
