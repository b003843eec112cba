// The portable row kernels of the CPU fast matmul (ops/cpu_fast/quant_dot.h): plain loops that any CPU runs, used
// where AVX2 is absent. Each block's value Σ level·q is an exact int32; the row sums fp32(d·scale)·value in
// block order.
#include "ops/cpu_fast/quant_dot.h"

#include "core/half.h"
#include "core/quant_blocks.h"

namespace deltabit::cpu_fast {
namespace {

template <typename Block, int G, typename LevelOf>
void int8_row(const void* row, int64_t n_blocks, const Int8Token* tokens, int n_tokens, float* out, LevelOf level_of) {
    const auto* blocks = static_cast<const Block*>(row);
    for (int t = 0; t < n_tokens; ++t) {
        const Int8Token& x = tokens[t];
        float acc = 0.0f;
        for (int64_t b = 0; b < n_blocks; ++b) {
            const int8_t* q = x.q + b * G;
            int32_t value = 0;
            for (int j = 0; j < G; ++j) value += level_of(blocks[b], j) * q[j];
            const float scale = half_to_float(blocks[b].d) * x.scale[b];
            acc += scale * float(value);
        }
        out[t] = acc;
    }
}

// Q2_0 activations sit in code order (quant_dot.h): position j of the group holds element 4·(j % (G/4)) + j / (G/4).
template <int G>
int q2_level_at(const uint8_t* qs, int position) {
    return q2_0_level(qs, 4 * (position % (G / 4)) + position / (G / 4));
}

void q8_0(const void* row, int64_t n_blocks, const Int8Token* tokens, int n_tokens, float* out) {
    int8_row<BlockQ8_0, kQ8_0BlockElems>(row, n_blocks, tokens, n_tokens, out,
                                         [](const BlockQ8_0& b, int j) { return int(b.qs[j]); });
}
void q4_0(const void* row, int64_t n_blocks, const Int8Token* tokens, int n_tokens, float* out) {
    int8_row<BlockQ4_0, kQ4_0BlockElems>(row, n_blocks, tokens, n_tokens, out,
                                         [](const BlockQ4_0& b, int j) { return q4_0_code(b, j) - 8; });
}
void q1_0(const void* row, int64_t n_blocks, const Int8Token* tokens, int n_tokens, float* out) {
    int8_row<BlockQ1_0, kQ1_0BlockElems>(row, n_blocks, tokens, n_tokens, out,
                                         [](const BlockQ1_0& b, int j) { return q1_0_sign(b, j); });
}
void q2_0(const void* row, int64_t n_blocks, const Int8Token* tokens, int n_tokens, float* out) {
    int8_row<BlockQ2_0, kQ2_0BlockElems>(row, n_blocks, tokens, n_tokens, out, [](const BlockQ2_0& b, int j) {
        return q2_level_at<kQ2_0BlockElems>(b.qs, j);
    });
}
void q2_0_g64(const void* row, int64_t n_blocks, const Int8Token* tokens, int n_tokens, float* out) {
    int8_row<BlockQ2_0G64, kQ2_0G64BlockElems>(row, n_blocks, tokens, n_tokens, out, [](const BlockQ2_0G64& b, int j) {
        return q2_level_at<kQ2_0G64BlockElems>(b.qs, j);
    });
}

void f32_dot(const float* w, int64_t k, const float* const* x, int n_tokens, float* out) {
    for (int t = 0; t < n_tokens; ++t) {
        float acc = 0.0f;
        for (int64_t i = 0; i < k; ++i) acc += w[i] * x[t][i];
        out[t] = acc;
    }
}

void f16_to_f32(const void* row, int64_t k, float* out) {
    const auto* h = static_cast<const uint16_t*>(row);
    for (int64_t i = 0; i < k; ++i) out[i] = half_to_float(h[i]);
}

void bf16_to_f32(const void* row, int64_t k, float* out) {
    const auto* h = static_cast<const uint16_t*>(row);
    for (int64_t i = 0; i < k; ++i) out[i] = bits_to_float(uint32_t(h[i]) << 16);
}

}  // namespace

const KernelTable& scalar_kernels() {
    static const KernelTable table{"scalar", q8_0, q4_0, q1_0, q2_0, q2_0_g64, f32_dot, f16_to_f32, bf16_to_f32};
    return table;
}

}  // namespace deltabit::cpu_fast
