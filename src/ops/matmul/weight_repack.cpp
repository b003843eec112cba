#include "ops/matmul/weight_repack.h"

#include <array>
#include <cstring>

#include "core/error.h"
#include "core/quant_blocks.h"

namespace deltabit {

namespace {

// Word-level permutations of the layout described in weight_repack.h, done a byte at a time through
// 256-entry tables so a 27B model repacks in seconds rather than bit by bit.
//
// Q1_0 forward: original bit m = 8·b + t of the word (byte b, bit t) is weight m = 4·j + k with
// j = 2·b + t/4, k = t % 4, and moves to bit 8·k + j = 8·(t%4) + t/4 + 2·b.
// Q1_0 inverse: repacked bit 8·k + j goes back to bit 4·j + k.
// Q2_0: original pair m = 4·b + t (byte b, pair t) is weight 4·p + k with p = b, k = t and moves to
// pair position 4·k + p, i.e. bit 8·t + 2·b; the map is a 4×4 transpose, so it is its own inverse.
struct PermutationTables {
    std::array<uint32_t, 256> q1_forward{};
    std::array<uint32_t, 256> q1_inverse{};
    std::array<uint32_t, 256> q2_transpose{};
    PermutationTables() {
        for (uint32_t v = 0; v < 256; ++v) {
            for (uint32_t t = 0; t < 8; ++t) {
                if ((v >> t) & 1u) {
                    q1_forward[v] |= 1u << (8 * (t % 4) + t / 4);
                    q1_inverse[v] |= 1u << (4 * t);  // byte k, bit j = t → bit 4·j (+ k added by the caller's shift)
                }
            }
            for (uint32_t t = 0; t < 4; ++t) q2_transpose[v] |= ((v >> (2 * t)) & 3u) << (8 * t);
        }
    }
};

const PermutationTables& tables() {
    static const PermutationTables instance;
    return instance;
}

uint32_t load_word(const uint8_t* p) {
    return uint32_t(p[0]) | uint32_t(p[1]) << 8 | uint32_t(p[2]) << 16 | uint32_t(p[3]) << 24;
}
void store_word(uint8_t* p, uint32_t w) {
    for (int i = 0; i < 4; ++i) p[i] = uint8_t(w >> (8 * i));
}

uint32_t q1_forward(uint32_t w) {
    const auto& t = tables().q1_forward;
    return t[w & 0xff] | t[(w >> 8) & 0xff] << 2 | t[(w >> 16) & 0xff] << 4 | t[w >> 24] << 6;
}
uint32_t q1_inverse(uint32_t w) {
    const auto& t = tables().q1_inverse;
    return t[w & 0xff] | t[(w >> 8) & 0xff] << 1 | t[(w >> 16) & 0xff] << 2 | t[w >> 24] << 3;
}
uint32_t q2_transpose(uint32_t w) {
    const auto& t = tables().q2_transpose;
    return t[w & 0xff] | t[(w >> 8) & 0xff] << 2 | t[(w >> 16) & 0xff] << 4 | t[w >> 24] << 6;
}

// The code bytes of one block: size and offset after the fp16 d (every supported block starts with d).
size_t block_code_bytes(DType t) { return dtype_info(t).block_bytes - sizeof(uint16_t); }

enum class WordMap { identity, q1, q2 };
WordMap word_map(DType t) {
    switch (t) {
        case DType::Q1_0: return WordMap::q1;
        case DType::Q2_0:
        case DType::Q2_0_G64: return WordMap::q2;
        default: return WordMap::identity;
    }
}

uint32_t map_word(WordMap m, uint32_t w, bool forward) {
    switch (m) {
        case WordMap::q1: return forward ? q1_forward(w) : q1_inverse(w);
        case WordMap::q2: return q2_transpose(w);
        case WordMap::identity: return w;
    }
    return w;
}

void check_shape(const WeightView& w, const char* name) {
    if (!gemv_layout_supports(w.dtype)) {
        fail("gemv repack: tensor {}: dtype {} has no GEMV layout (supported: q1_0, q2_0, q2_0_g64, q4_0, q8_0)",
             name, dtype_name(w.dtype));
    }
    if (w.rows < 0 || w.cols <= 0 || !row_fits_blocks(w.dtype, uint64_t(w.cols))) {
        fail("gemv repack: tensor {}: {} × {} is not a whole number of {}-weight {} blocks per row", name, w.rows,
             w.cols, dtype_info(w.dtype).block_elems, dtype_name(w.dtype));
    }
}

}  // namespace

bool gemv_layout_supports(DType t) {
    return t == DType::Q1_0 || t == DType::Q2_0 || t == DType::Q2_0_G64 || t == DType::Q4_0 || t == DType::Q8_0;
}

size_t gemv_code_row_bytes(DType t, int64_t k) {
    return size_t(k / dtype_info(t).block_elems) * block_code_bytes(t);
}

GemvRepacked repack_for_gemv(const WeightView& w, const char* name) {
    check_shape(w, name);
    const DTypeInfo& info = dtype_info(w.dtype);
    const size_t blocks_per_row = size_t(w.cols / info.block_elems);
    const size_t code_bytes = block_code_bytes(w.dtype);
    const size_t row_code_bytes = gemv_code_row_bytes(w.dtype, w.cols);
    const WordMap map = word_map(w.dtype);

    GemvRepacked out;
    out.dtype = w.dtype;
    out.rows = w.rows;
    out.cols = w.cols;
    out.codes.resize(size_t(w.rows) * row_code_bytes);
    out.scales.resize(size_t(w.rows) * blocks_per_row);
    for (int64_t r = 0; r < w.rows; ++r) {
        const auto* src = static_cast<const uint8_t*>(w.row(r));
        uint8_t* dst = out.codes.data() + size_t(r) * row_code_bytes;
        for (size_t b = 0; b < blocks_per_row; ++b) {
            const uint8_t* block = src + b * info.block_bytes;
            std::memcpy(&out.scales[size_t(r) * blocks_per_row + b], block, sizeof(uint16_t));
            const uint8_t* codes = block + sizeof(uint16_t);
            for (size_t i = 0; i < code_bytes; i += 4) {
                store_word(dst + b * code_bytes + i, map_word(map, load_word(codes + i), /*forward=*/true));
            }
        }
    }
    return out;
}

void verify_gemv_repack(const WeightView& original, const GemvRepacked& packed, const char* name) {
    check_shape(original, name);
    if (packed.dtype != original.dtype || packed.rows != original.rows || packed.cols != original.cols) {
        fail("gemv repack: tensor {}: repacked {} {}×{} does not describe the original {} {}×{}", name,
             dtype_name(packed.dtype), packed.rows, packed.cols, dtype_name(original.dtype), original.rows,
             original.cols);
    }
    const DTypeInfo& info = dtype_info(original.dtype);
    const size_t blocks_per_row = size_t(original.cols / info.block_elems);
    const size_t code_bytes = block_code_bytes(original.dtype);
    const size_t row_code_bytes = gemv_code_row_bytes(original.dtype, original.cols);
    if (packed.codes.size() != size_t(original.rows) * row_code_bytes ||
        packed.scales.size() != size_t(original.rows) * blocks_per_row) {
        fail("gemv repack: tensor {}: repacked planes have {} code bytes and {} scales, expected {} and {}", name,
             packed.codes.size(), packed.scales.size(), size_t(original.rows) * row_code_bytes,
             size_t(original.rows) * blocks_per_row);
    }
    const WordMap map = word_map(original.dtype);
    std::vector<uint8_t> rebuilt(info.block_bytes);
    for (int64_t r = 0; r < original.rows; ++r) {
        const auto* src = static_cast<const uint8_t*>(original.row(r));
        const uint8_t* codes = packed.codes.data() + size_t(r) * row_code_bytes;
        for (size_t b = 0; b < blocks_per_row; ++b) {
            std::memcpy(rebuilt.data(), &packed.scales[size_t(r) * blocks_per_row + b], sizeof(uint16_t));
            for (size_t i = 0; i < code_bytes; i += 4) {
                store_word(rebuilt.data() + sizeof(uint16_t) + i,
                           map_word(map, load_word(codes + b * code_bytes + i), /*forward=*/false));
            }
            if (std::memcmp(rebuilt.data(), src + b * info.block_bytes, info.block_bytes) != 0) {
                fail("gemv repack: tensor {}: row {} block {} (byte offset {}) does not decode to the original", name,
                     r, b, size_t(r) * original.row_bytes() + b * info.block_bytes);
            }
        }
    }
}

int gemv_layout_level(const GemvRepacked& packed, int64_t r, int64_t j) {
    const uint8_t* row = packed.codes.data() + size_t(r) * gemv_code_row_bytes(packed.dtype, packed.cols);
    switch (packed.dtype) {
        case DType::Q1_0: {  // word of 32 weights; weight 4·jj + k sits in byte k, bit jj
            const int64_t word = j / 32, m = j % 32;
            return (row[word * 4 + m % 4] >> (m / 4)) & 1 ? +1 : -1;
        }
        case DType::Q2_0:
        case DType::Q2_0_G64: {  // word of 16 weights; weight 4·p + k sits in byte k, bits 2·p
            const int64_t word = j / 16, m = j % 16;
            return int((row[word * 4 + m % 4] >> (2 * (m / 4))) & 3) - 1;
        }
        case DType::Q4_0: {  // original nibble order
            const int64_t block = j / 32, m = j % 32;
            const uint8_t byte = row[block * 16 + m % 16];
            return int(m < 16 ? byte & 0x0f : byte >> 4) - 8;
        }
        case DType::Q8_0: return int(int8_t(row[j]));
        default: fail("gemv repack: gemv_layout_level: dtype {} has no GEMV layout", dtype_name(packed.dtype));
    }
}

}  // namespace deltabit
