// The row kernels of the CPU fast matmul (ops/cpu_fast/matmul_cpu_fast.h), one table per instruction set: a
// portable scalar one (quant_dot_scalar.cpp), AVX2 + FMA + F16C (quant_dot_avx2.cpp) and AVX-512 BW/VL/VNNI
// (quant_dot_avx512.cpp). The vector files are compiled for their instruction set with `#pragma GCC
// target` and include nothing but intrinsics and <cstdint>/<cstring>, so no inline function or template
// instantiated there can be picked by the linker for code that runs on an older CPU.
//
// A kernel computes one weight row against n_tokens ≤ kTokenTile tokens: each stored weight block is
// read and expanded once and used for every token of the tile (the matrix–matrix product of a prompt).
// Every token's result is computed by the same operations in the same order whatever the tile holds, so
// tiling and threading never change a bit of the output.
//
// Int8 activations (one token): q[K] int8 rounded per group of the weight's block size (group g covers
// q[g·G, (g+1)·G)), scale[g] = max|x|/127 of the group, sum[g] = Σ q over the group. For Q2_0 and
// Q2_0_G64 each group is stored in the order the 2-bit codes are packed: position s·(G/4) + b holds the
// value of element 4·b + s (s = 0..3, the code's place in its byte), so one shifted copy of the code
// bytes lines up with a contiguous run of activations. Block value: Σ level·q over the block, exact in
// int32; the row's result is Σ_blocks fp32(d·scale) · value, summed in fp32 (how — lanes, order — is the
// kernel's own, fixed).
#pragma once

#include <cstdint>

namespace deltabit::cpu_fast {

inline constexpr int kTokenTile = 4;

struct Int8Token {
    const int8_t* q;       // [K]
    const float* scale;    // [K / G]
    const int32_t* sum;    // [K / G]
};

// out[t] = row · token t, for t < n_tokens (≤ kTokenTile); `row` is n_blocks stored blocks.
using Int8RowKernel = void (*)(const void* row, int64_t n_blocks, const Int8Token* tokens, int n_tokens, float* out);
// out[t] = Σ_k w[k] · x[t][k] in fp32.
using F32RowKernel = void (*)(const float* w, int64_t k, const float* const* x, int n_tokens, float* out);
// out[0..k) = the row's values as fp32 (exact).
using ToF32Kernel = void (*)(const void* row, int64_t k, float* out);

struct KernelTable {
    const char* name;
    Int8RowKernel q8_0, q4_0, q1_0, q2_0, q2_0_g64;
    F32RowKernel f32_dot;
    ToF32Kernel f16_to_f32, bf16_to_f32;
};

// The entry points of a vector kernel file, defined in its anonymous namespace: each of its tile templates
// (q8_0_tile<NT> ... q2_0_g64_tile<NT>, f32_tile<NT>) instantiated for 1..kTokenTile tokens and chosen by
// n_tokens. A macro and not a shared template: a template defined here and instantiated in two files compiled
// for different instruction sets could reach the linker once, with either set's code (see the top).
#define DELTABIT_CPU_FAST_ENTRY_POINTS()                                                                      \
    DELTABIT_CPU_FAST_INT8_ENTRY(q8_0)                                                                     \
    DELTABIT_CPU_FAST_INT8_ENTRY(q4_0)                                                                     \
    DELTABIT_CPU_FAST_INT8_ENTRY(q1_0)                                                                     \
    DELTABIT_CPU_FAST_INT8_ENTRY(q2_0)                                                                     \
    DELTABIT_CPU_FAST_INT8_ENTRY(q2_0_g64)                                                                 \
    void f32_dot(const float* w, int64_t k, const float* const* x, int n_tokens, float* out) {            \
        switch (n_tokens) {                                                                                \
            case 1: f32_tile<1>(w, k, x, out); return;                                                     \
            case 2: f32_tile<2>(w, k, x, out); return;                                                     \
            case 3: f32_tile<3>(w, k, x, out); return;                                                     \
            default: f32_tile<kTokenTile>(w, k, x, out); return;                                           \
        }                                                                                                  \
    }
#define DELTABIT_CPU_FAST_INT8_ENTRY(name)                                                                    \
    void name(const void* row, int64_t n_blocks, const Int8Token* tokens, int n_tokens, float* out) {      \
        const auto* r = static_cast<const uint8_t*>(row);                                                  \
        switch (n_tokens) {                                                                                \
            case 1: name##_tile<1>(r, n_blocks, tokens, out); return;                                      \
            case 2: name##_tile<2>(r, n_blocks, tokens, out); return;                                      \
            case 3: name##_tile<3>(r, n_blocks, tokens, out); return;                                      \
            default: name##_tile<kTokenTile>(r, n_blocks, tokens, out); return;                            \
        }                                                                                                  \
    }
static_assert(kTokenTile == 4, "DELTABIT_CPU_FAST_ENTRY_POINTS lists the tile sizes 1..4");

const KernelTable& scalar_kernels();
// Only call these where the CPU has the instructions (matmul_cpu_fast.cpp checks).
const KernelTable& avx2_kernels();
const KernelTable& avx512_kernels();

}  // namespace deltabit::cpu_fast
