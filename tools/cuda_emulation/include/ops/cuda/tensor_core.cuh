// Host stand-in for src/ops/cuda/tensor_core.cuh (tools/cuda_emulation): ldmatrix and mma.sync through the
// warp's exchange slots, so each lane's registers follow the fragment layouts written there (PTX ISA,
// "Matrix fragments for mma.m16n8k16 / m16n8k32"; g = lane / 4, t = lane % 4). Every lane of the warp must
// take part, as on the device.
//
// The binary mma (m16n8k128 .b1 AND-popc) is exact, as on the device.
//
// Precision: f16/bf16 products are summed with c in double and rounded once to f32 — not the tensor cores'
// truncating block accumulation — so results check indexing, not the device's last bits. Integer mmas are
// exact, as on the device.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "core/half.h"

namespace deltabit::cuda {

namespace emu_tc {

// ldmatrix .x4: lane l gives the address of row l % 8 of matrix l / 8; register i of lane l holds row l / 4
// of matrix i, b16 elements 2(l % 4) and +1 (.trans: column l / 4, rows 2(l % 4) and +1).
inline void ldmatrix(const void* address, uint32_t (&r)[4], bool transposed, const emu::Site& site) {
    const int lane = emu::lane();
    emu::lane_slot(lane)[0] = reinterpret_cast<uint64_t>(address);
    emu::warp_barrier(site);
    const auto row = [](int matrix, int row_in_matrix) {
        return reinterpret_cast<const uint16_t*>(emu::lane_slot(8 * matrix + row_in_matrix)[0]);
    };
    for (int i = 0; i < 4; ++i) {
        const int g = lane / 4, t = lane % 4;
        const uint16_t lo = transposed ? row(i, 2 * t)[g] : row(i, g)[2 * t];
        const uint16_t hi = transposed ? row(i, 2 * t + 1)[g] : row(i, g)[2 * t + 1];
        r[i] = uint32_t(lo) | uint32_t(hi) << 16;
    }
    emu::warp_barrier(site);
}

// Element e (0 .. 32/bits − 1) of a register, as a number.
using Decode = double (*)(uint32_t reg, int e);
inline double f16(uint32_t r, int e) { return deltabit::half_to_float(uint16_t(r >> (16 * e))); }
inline double bf16(uint32_t r, int e) { return deltabit::bf16_to_float(uint16_t(r >> (16 * e))); }
inline double s8(uint32_t r, int e) { return double(int8_t(r >> (8 * e))); }
inline double u8(uint32_t r, int e) { return double(uint8_t(r >> (8 * e))); }

// m16n8kK with `per` elements a register (K = 8·per): A a[i] row g + 8(i & 1), k (i >> 1)·K/2 + per·t + e;
// B b[i] column g, k i·K/2 + per·t + e; C c[0..1] row g, columns 2t, 2t + 1, c[2..3] row g + 8. So the row
// of an output comes from lanes 4·(row % 8) + t', its column from lanes 4·column + t'.
template <typename Acc>
void mma(Acc (&c)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1, int per, Decode decode_a, Decode decode_b,
         const emu::Site& site) {
    const int lane = emu::lane();
    uint64_t* mine = emu::lane_slot(lane);
    for (int i = 0; i < 4; ++i) mine[i] = a[i];
    mine[4] = b0;
    mine[5] = b1;
    emu::warp_barrier(site);
    Acc out[4];
    for (int j = 0; j < 4; ++j) {
        const int row = lane / 4 + 8 * (j / 2), column = 2 * (lane % 4) + j % 2;
        double sum = double(c[j]);
        for (int t = 0; t < 4; ++t)
            for (int half = 0; half < 2; ++half) {
                const uint32_t ra = uint32_t(emu::lane_slot(4 * (row % 8) + t)[2 * half + row / 8]);
                const uint32_t rb = uint32_t(emu::lane_slot(4 * column + t)[4 + half]);
                for (int e = 0; e < per; ++e) sum += decode_a(ra, e) * decode_b(rb, e);
            }
        out[j] = Acc(sum);  // integers: exact, as the device's s32 sums are (below 2^53 here)
    }
    emu::warp_barrier(site);
    for (int j = 0; j < 4; ++j) c[j] = out[j];
}

// m16n8k128 .b1 AND-popc: a0 row g, a1 row g + 8, each the k-bits [32t, 32t + 32); b column g, the same
// k-bits; c[j] (row g + 8(j / 2), column 2t + j % 2) += Σ_t' popc(A-word of t' AND B-word of t').
inline void mma_b1(int (&c)[4], uint32_t a0, uint32_t a1, uint32_t b, const emu::Site& site) {
    const int lane = emu::lane();
    uint64_t* mine = emu::lane_slot(lane);
    mine[0] = a0;
    mine[1] = a1;
    mine[2] = b;
    emu::warp_barrier(site);
    int out[4];
    for (int j = 0; j < 4; ++j) {
        const int row = lane / 4 + 8 * (j / 2), column = 2 * (lane % 4) + j % 2;
        int sum = c[j];
        for (int t = 0; t < 4; ++t) {
            const uint32_t ra = uint32_t(emu::lane_slot(4 * (row % 8) + t)[row / 8]);
            const uint32_t rb = uint32_t(emu::lane_slot(4 * column + t)[2]);
            sum += __popc(ra & rb);
        }
        out[j] = sum;
    }
    emu::warp_barrier(site);
    for (int j = 0; j < 4; ++j) c[j] = out[j];
}

}  // namespace emu_tc

inline void ldmatrix_x4(const void* smem, uint32_t (&r)[4], emu::Site site = emu::Site::current()) {
    emu_tc::ldmatrix(smem, r, false, site);
}
inline void ldmatrix_x4_trans(const void* smem, uint32_t (&r)[4], emu::Site site = emu::Site::current()) {
    emu_tc::ldmatrix(smem, r, true, site);
}
inline void mma_f16_f32(float (&c)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1,
                        emu::Site site = emu::Site::current()) {
    emu_tc::mma(c, a, b0, b1, 2, emu_tc::f16, emu_tc::f16, site);
}
inline void mma_bf16_f32(float (&c)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1,
                         emu::Site site = emu::Site::current()) {
    emu_tc::mma(c, a, b0, b1, 2, emu_tc::bf16, emu_tc::bf16, site);
}
inline void mma_s8_s32(int (&d)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1,
                       emu::Site site = emu::Site::current()) {
    emu_tc::mma(d, a, b0, b1, 4, emu_tc::s8, emu_tc::s8, site);
}
inline void mma_u8_s8_s32(int (&d)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1,
                          emu::Site site = emu::Site::current()) {
    emu_tc::mma(d, a, b0, b1, 4, emu_tc::u8, emu_tc::s8, site);
}

inline void mma_b1_and_popc(int (&c)[4], uint32_t a0, uint32_t a1, uint32_t b, emu::Site site = emu::Site::current()) {
    emu_tc::mma_b1(c, a0, a1, b, site);
}

}  // namespace deltabit::cuda
