// Warp-level tensor-core primitives (sm_80+): ldmatrix loads of 8×8 b16 tiles from shared memory into the
// fragment layout mma.sync expects, the f16 · f16 → f32 mma, the s8 · s8 → s32 one and the binary AND-popc
// one. Fragment layouts (PTX ISA, "Matrix fragments for mma.m16n8k16"), with g = lane / 4 and t = lane % 4:
//   A (16×16, row major) a[0]: (g, 2t..2t+1)  a[1]: (g+8, 2t..)  a[2]: (g, 2t+8..)  a[3]: (g+8, 2t+8..)
//   B (16×8, column major) b[0]: rows 2t..2t+1 of column g   b[1]: rows 2t+8..2t+9 of column g
//   C (16×8) c[0], c[1]: (g, 2t), (g, 2t+1)   c[2], c[3]: (g+8, 2t), (g+8, 2t+1)
// ldmatrix_x4: lane l gives the address of row l % 8 of matrix l / 8; matrix i lands in register i.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

namespace deltabit::cuda {

__device__ __forceinline__ void ldmatrix_x4(const void* smem, uint32_t (&r)[4]) {
    const unsigned addr = unsigned(__cvta_generic_to_shared(smem));
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(addr));
}

// The same with each 8×8 matrix transposed: the rows given become its columns.
__device__ __forceinline__ void ldmatrix_x4_trans(const void* smem, uint32_t (&r)[4]) {
    const unsigned addr = unsigned(__cvta_generic_to_shared(smem));
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(addr));
}

// c += a · b, f16 inputs, f32 accumulators. The products are exact in f32, but the accumulation is not
// IEEE round-to-nearest: measured (Fasi et al. 2021), the 16 products and c are added as one block
// aligned to the largest and truncated — error bounds must allow ~2u of the largest term per term.
__device__ __forceinline__ void mma_f16_f32(float (&c)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
        "{%0, %1, %2, %3};\n"
        : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

// c += a · b, bf16 inputs, f32 accumulators (the layout above; bf16 keeps f32's exponent range with 8
// significant bits). Accumulation as the f16 form's.
__device__ __forceinline__ void mma_bf16_f32(float (&c)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
        "{%0, %1, %2, %3};\n"
        : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

// d += a · b, s8 inputs, s32 accumulators, exact (m16n8k32: the layout above with four 8-bit k per
// register where f16 has two 16-bit ones).
__device__ __forceinline__ void mma_s8_s32(int (&d)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
    asm volatile(
        "mma.sync.aligned.m16n8k32.row.col.s32.s8.s8.s32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
        "{%0, %1, %2, %3};\n"
        : "+r"(d[0]), "+r"(d[1]), "+r"(d[2]), "+r"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

// The same with unsigned 8-bit a (0..255): 1-bit weights as 0/1 bytes against signed activations.
__device__ __forceinline__ void mma_u8_s8_s32(int (&d)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
    asm volatile(
        "mma.sync.aligned.m16n8k32.row.col.s32.u8.s8.s32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
        "{%0, %1, %2, %3};\n"
        : "+r"(d[0]), "+r"(d[1]), "+r"(d[2]), "+r"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

// c += popc(a AND b), 1-bit inputs, s32 accumulators, exact (m16n8k128: a0 = row g, a1 = row g + 8, each the
// 32 k-bits [32t, 32t + 32); b = the same k-bits of column g; C as above). Bits pair position for position,
// so any bit order works as long as a and b share it (ops/matmul/gemv_b1_cuda.h).
__device__ __forceinline__ void mma_b1_and_popc(int (&c)[4], uint32_t a0, uint32_t a1, uint32_t b) {
    asm volatile(
        "mma.sync.aligned.m16n8k128.row.col.s32.b1.b1.s32.and.popc {%0, %1, %2, %3}, {%4, %5}, {%6}, "
        "{%0, %1, %2, %3};\n"
        : "+r"(c[0]), "+r"(c[1]), "+r"(c[2]), "+r"(c[3])
        : "r"(a0), "r"(a1), "r"(b));
}

}  // namespace deltabit::cuda
