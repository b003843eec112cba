// Hopper warpgroup tensor-core primitives (wgmma, sm_90a only: guard callers with DELTABIT_WGMMA_COMPILED).
// A warpgroup (4 consecutive warps, 128 threads) issues one wgmma together; it reads its operands from shared
// memory through 64-bit matrix descriptors and accumulates into registers asynchronously: the registers
// hold the result only after wgmma_wait<N>() has let at most N committed groups remain in flight.
//
// Shared-memory layout the descriptors here describe (no swizzle, "K-major": PTX ISA, "Matrix Descriptor
// Format" and "Shared Memory Matrix Layout"): the matrix is cut into core matrices of 8 rows × 16 bytes,
// each 128 contiguous bytes (row r of the core matrix at byte 16·r). For a tile of rows × 128 bytes of K
// (one activation group of int8), core matrix (row / 8, k_chunk) lies at (row / 8) · 1024 + k_chunk · 128:
// the leading byte offset (next core matrix along K) is 128, the stride byte offset (next 8 rows) 1024.
//
// Accumulator layout of an m64nN wgmma (PTX ISA, "Register Fragments and Shared Memory Matrix Layouts"),
// thread t of the warpgroup, w = t / 32, g = (t % 32) / 4, q = t % 4: d[4j + 0], d[4j + 1] are row 16w + g,
// columns 8j + 2q and 8j + 2q + 1; d[4j + 2], d[4j + 3] the same columns of row 16w + g + 8.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "ops/cuda/bulk_copy.cuh"

#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
#define DELTABIT_WGMMA_COMPILED 1
#endif

namespace deltabit::cuda {

// Byte offset of (row, 16-byte k chunk) in the core-matrix layout above, for tiles 128 bytes of K wide.
__device__ __forceinline__ uint32_t core_matrix_offset(int row, int k_chunk) {
    return uint32_t((row >> 3) * 1024 + k_chunk * 128 + (row & 7) * 16);
}

// Descriptor of the tile at `smem` (the layout above; 16-byte aligned), no swizzle.
__device__ __forceinline__ uint64_t wgmma_descriptor(const void* smem, uint32_t leading_bytes, uint32_t stride_bytes) {
    const uint32_t addr = uint32_t(__cvta_generic_to_shared(smem));
    return uint64_t((addr & 0x3FFFF) >> 4) | (uint64_t(leading_bytes >> 4) << 16) | (uint64_t(stride_bytes >> 4) << 32);
}

// Descriptor of a K-major tile in the 128-byte swizzle layout (what the copy engine writes with
// TensorMapSwizzle::bytes128, ops/cuda/tensor_map_cuda.h): rows of 128 bytes of K, each row's 16-byte chunks
// permuted by the row's index modulo 8, groups of 8 rows 1024 bytes apart, the tile 1024-byte aligned. A later
// k step within the 128 bytes (k16 of f16: 32 bytes on) is the same descriptor with `smem` that far into the
// first row: the hardware applies the permutation to the address it forms. (The leading byte offset is
// unused in this layout; 1 by convention.)
__device__ __forceinline__ uint64_t wgmma_descriptor_swizzle128(const void* smem) {
    const uint32_t addr = uint32_t(__cvta_generic_to_shared(smem));
    return uint64_t((addr & 0x3FFFF) >> 4) | (uint64_t(1) << 16) | (uint64_t(1024 >> 4) << 32) | (uint64_t(1) << 62);
}

#if defined(DELTABIT_WGMMA_COMPILED)
// Orders this thread's earlier register accesses to the accumulators before the next wgmma reads them.
__device__ __forceinline__ void wgmma_fence() { asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory"); }
__device__ __forceinline__ void wgmma_commit() { asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory"); }
template <int N>
__device__ __forceinline__ void wgmma_wait() {
    asm volatile("wgmma.wait_group.sync.aligned %0;\n" ::"n"(N) : "memory");
}
// fence_proxy_async_shared (ops/cuda/bulk_copy.cuh) makes generic-proxy writes to shared memory (st.shared,
// cp.async) visible to the async proxy wgmma reads with.

// Keeps the compiler from moving accesses of an accumulator register across the asynchronous wgmma.
__device__ __forceinline__ void wgmma_fence_operand(int& r) { asm volatile("" : "+r"(r)::"memory"); }

// d (+)= a · bᵀ: a 64 × 32 s8 (K-major), b 128 × 32 s8 (K-major), d 64 × 128 s32, exact. accumulate = false
// ignores d's old values (a fresh accumulator without zeroing it). run = false issues nothing — a predicate,
// not a branch, so that a pipelined loop's wgmmas and waits stay one straight sequence for ptxas (which
// serialises every wgmma when some path might reuse registers a wgmma still writes). Both warpgroup-uniform.
__device__ __forceinline__ void wgmma_m64n128k32_s8(int (&d)[64], uint64_t a_desc, uint64_t b_desc, bool accumulate,
                                                    bool run = true) {
    asm volatile(
        "{\n"
        ".reg .pred p, g;\n"
        "setp.ne.b32 p, %66, 0;\n"
        "setp.ne.b32 g, %67, 0;\n"
        "@g wgmma.mma_async.sync.aligned.m64n128k32.s32.s8.s8 {"
        "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, "
        "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, "
        "%32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, "
        "%48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63"
        "}, %64, %65, p;\n"
        "}\n"
        : "+r"(d[0]), "+r"(d[1]), "+r"(d[2]), "+r"(d[3]), "+r"(d[4]), "+r"(d[5]), "+r"(d[6]), "+r"(d[7]),
          "+r"(d[8]), "+r"(d[9]), "+r"(d[10]), "+r"(d[11]), "+r"(d[12]), "+r"(d[13]), "+r"(d[14]), "+r"(d[15]),
          "+r"(d[16]), "+r"(d[17]), "+r"(d[18]), "+r"(d[19]), "+r"(d[20]), "+r"(d[21]), "+r"(d[22]), "+r"(d[23]),
          "+r"(d[24]), "+r"(d[25]), "+r"(d[26]), "+r"(d[27]), "+r"(d[28]), "+r"(d[29]), "+r"(d[30]), "+r"(d[31]),
          "+r"(d[32]), "+r"(d[33]), "+r"(d[34]), "+r"(d[35]), "+r"(d[36]), "+r"(d[37]), "+r"(d[38]), "+r"(d[39]),
          "+r"(d[40]), "+r"(d[41]), "+r"(d[42]), "+r"(d[43]), "+r"(d[44]), "+r"(d[45]), "+r"(d[46]), "+r"(d[47]),
          "+r"(d[48]), "+r"(d[49]), "+r"(d[50]), "+r"(d[51]), "+r"(d[52]), "+r"(d[53]), "+r"(d[54]), "+r"(d[55]),
          "+r"(d[56]), "+r"(d[57]), "+r"(d[58]), "+r"(d[59]), "+r"(d[60]), "+r"(d[61]), "+r"(d[62]), "+r"(d[63])
        : "l"(a_desc), "l"(b_desc), "r"(int(accumulate)), "r"(int(run)));
}

// The same product with a from registers, for N = 16, 32, 64 or 128 columns (tokens): d is 64 × N s32 in the
// accumulator layout above (d[4j + e], j < N / 8); a is this thread's four words of the 64 × 32 s8 tile, in
// the register layout of PTX ISA's "Register Fragments" for k32 (CuTe's ALayout_64x32): a[0] row 16w + g,
// k 4q .. 4q + 3 (lowest k in the lowest byte); a[1] row 16w + g + 8, same k; a[2], a[3] the same rows at
// k + 16. The wgmma reads a asynchronously too: a must not change before the wait that covers it.
template <int N>
__device__ __forceinline__ void wgmma_m64nNk32_s8_ra(int (&d)[N / 2], const uint32_t (&a)[4], uint64_t b_desc,
                                                     bool accumulate) {
    static_assert(N == 16 || N == 32 || N == 64 || N == 128, "an s8 wgmma tile of 16, 32, 64 or 128 columns");
    if constexpr (N == 16) {
        asm volatile(
            "{\n"
            ".reg .pred p;\n"
            "setp.ne.b32 p, %13, 0;\n"
            "wgmma.mma_async.sync.aligned.m64n16k32.s32.s8.s8 {"
            "%0, %1, %2, %3, %4, %5, %6, %7"
            "}, {%8, %9, %10, %11}, %12, p;\n"
            "}\n"
            : "+r"(d[0]), "+r"(d[1]), "+r"(d[2]), "+r"(d[3]), "+r"(d[4]), "+r"(d[5]), "+r"(d[6]), "+r"(d[7])
            : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(b_desc), "r"(int(accumulate)));
    } else if constexpr (N == 32) {
        asm volatile(
            "{\n"
            ".reg .pred p;\n"
            "setp.ne.b32 p, %21, 0;\n"
            "wgmma.mma_async.sync.aligned.m64n32k32.s32.s8.s8 {"
            "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15"
            "}, {%16, %17, %18, %19}, %20, p;\n"
            "}\n"
            : "+r"(d[0]), "+r"(d[1]), "+r"(d[2]), "+r"(d[3]), "+r"(d[4]), "+r"(d[5]), "+r"(d[6]), "+r"(d[7]),
              "+r"(d[8]), "+r"(d[9]), "+r"(d[10]), "+r"(d[11]), "+r"(d[12]), "+r"(d[13]), "+r"(d[14]), "+r"(d[15])
            : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(b_desc), "r"(int(accumulate)));
    } else if constexpr (N == 64) {
        asm volatile(
            "{\n"
            ".reg .pred p;\n"
            "setp.ne.b32 p, %37, 0;\n"
            "wgmma.mma_async.sync.aligned.m64n64k32.s32.s8.s8 {"
            "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, "
            "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31"
            "}, {%32, %33, %34, %35}, %36, p;\n"
            "}\n"
            : "+r"(d[0]), "+r"(d[1]), "+r"(d[2]), "+r"(d[3]), "+r"(d[4]), "+r"(d[5]), "+r"(d[6]), "+r"(d[7]),
              "+r"(d[8]), "+r"(d[9]), "+r"(d[10]), "+r"(d[11]), "+r"(d[12]), "+r"(d[13]), "+r"(d[14]), "+r"(d[15]),
              "+r"(d[16]), "+r"(d[17]), "+r"(d[18]), "+r"(d[19]), "+r"(d[20]), "+r"(d[21]), "+r"(d[22]), "+r"(d[23]),
              "+r"(d[24]), "+r"(d[25]), "+r"(d[26]), "+r"(d[27]), "+r"(d[28]), "+r"(d[29]), "+r"(d[30]), "+r"(d[31])
            : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(b_desc), "r"(int(accumulate)));
    } else {
        asm volatile(
            "{\n"
            ".reg .pred p;\n"
            "setp.ne.b32 p, %69, 0;\n"
            "wgmma.mma_async.sync.aligned.m64n128k32.s32.s8.s8 {"
            "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, "
            "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, "
            "%32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, "
            "%48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63"
            "}, {%64, %65, %66, %67}, %68, p;\n"
            "}\n"
            : "+r"(d[0]), "+r"(d[1]), "+r"(d[2]), "+r"(d[3]), "+r"(d[4]), "+r"(d[5]), "+r"(d[6]), "+r"(d[7]),
              "+r"(d[8]), "+r"(d[9]), "+r"(d[10]), "+r"(d[11]), "+r"(d[12]), "+r"(d[13]), "+r"(d[14]), "+r"(d[15]),
              "+r"(d[16]), "+r"(d[17]), "+r"(d[18]), "+r"(d[19]), "+r"(d[20]), "+r"(d[21]), "+r"(d[22]), "+r"(d[23]),
              "+r"(d[24]), "+r"(d[25]), "+r"(d[26]), "+r"(d[27]), "+r"(d[28]), "+r"(d[29]), "+r"(d[30]), "+r"(d[31]),
              "+r"(d[32]), "+r"(d[33]), "+r"(d[34]), "+r"(d[35]), "+r"(d[36]), "+r"(d[37]), "+r"(d[38]), "+r"(d[39]),
              "+r"(d[40]), "+r"(d[41]), "+r"(d[42]), "+r"(d[43]), "+r"(d[44]), "+r"(d[45]), "+r"(d[46]), "+r"(d[47]),
              "+r"(d[48]), "+r"(d[49]), "+r"(d[50]), "+r"(d[51]), "+r"(d[52]), "+r"(d[53]), "+r"(d[54]), "+r"(d[55]),
              "+r"(d[56]), "+r"(d[57]), "+r"(d[58]), "+r"(d[59]), "+r"(d[60]), "+r"(d[61]), "+r"(d[62]), "+r"(d[63])
            : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(b_desc), "r"(int(accumulate)));
    }
}

// d (+)= a · bᵀ on f16 inputs with fp32 accumulation, a from registers: a 64 × 16 f16 tile, b N × 16 f16
// (K-major: a k16 step is two core matrices along K, as an s8 k32 step is), d 64 × N f32 in the accumulator
// layout above, for N = 16, 32, 64 or 128. a is this thread's four f16x2 words in the register
// layout of PTX ISA's "Register Fragments" for k16 (CuTe's ALayout_64x16): a[0] row 16w + g, k 2q, 2q + 1
// (the lower k in the lower half); a[1] row 16w + g + 8, same k; a[2], a[3] the same rows at k + 8. The
// products are exact and summed in fp32 in an order the hardware picks. As wgmma_m64nNk32_s8_ra, a must not
// change before the wait that covers it; accumulate = false ignores d's old values.
template <int N>
__device__ __forceinline__ void wgmma_m64nNk16_f16_ra(float (&d)[N / 2], const uint32_t (&a)[4], uint64_t b_desc,
                                                      bool accumulate) {
    static_assert(N == 16 || N == 32 || N == 64 || N == 128, "an f16 wgmma tile of 16, 32, 64 or 128 columns");
    if constexpr (N == 16) {
        asm volatile(
            "{\n"
            ".reg .pred p;\n"
            "setp.ne.b32 p, %13, 0;\n"
            "wgmma.mma_async.sync.aligned.m64n16k16.f32.f16.f16 {"
            "%0, %1, %2, %3, %4, %5, %6, %7"
            "}, {%8, %9, %10, %11}, %12, p, 1, 1, 0;\n"
            "}\n"
            : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7])
            : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(b_desc), "r"(int(accumulate)));
    } else if constexpr (N == 32) {
        asm volatile(
            "{\n"
            ".reg .pred p;\n"
            "setp.ne.b32 p, %21, 0;\n"
            "wgmma.mma_async.sync.aligned.m64n32k16.f32.f16.f16 {"
            "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15"
            "}, {%16, %17, %18, %19}, %20, p, 1, 1, 0;\n"
            "}\n"
            : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]),
              "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15])
            : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(b_desc), "r"(int(accumulate)));
    } else if constexpr (N == 64) {
        asm volatile(
            "{\n"
            ".reg .pred p;\n"
            "setp.ne.b32 p, %37, 0;\n"
            "wgmma.mma_async.sync.aligned.m64n64k16.f32.f16.f16 {"
            "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, "
            "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31"
            "}, {%32, %33, %34, %35}, %36, p, 1, 1, 0;\n"
            "}\n"
            : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]),
              "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]),
              "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]),
              "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31])
            : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(b_desc), "r"(int(accumulate)));
    } else {
        asm volatile(
            "{\n"
            ".reg .pred p;\n"
            "setp.ne.b32 p, %69, 0;\n"
            "wgmma.mma_async.sync.aligned.m64n128k16.f32.f16.f16 {"
            "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, "
            "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, "
            "%32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, "
            "%48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63"
            "}, {%64, %65, %66, %67}, %68, p, 1, 1, 0;\n"
            "}\n"
            : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]),
              "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]),
              "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]),
              "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]),
              "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]),
              "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]),
              "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]),
              "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63])
            : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(b_desc), "r"(int(accumulate)));
    }
}
#endif

}  // namespace deltabit::cuda
