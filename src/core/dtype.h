// Element types of weights and activations. Quantised types store a row of K values as K/block_elems
// blocks of block_bytes each (see core/quant_blocks.h for the layouts). GGUF identifies types by the
// ggml type id; two incompatible Q2_0 variants share id 42 and are told apart by the tensor's size.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string_view>

namespace deltabit {

enum class DType : uint8_t {
    F32,
    F16,
    BF16,
    Q8_0,      // 32 weights: fp16 d, int8 q[32]            x = d·q
    Q4_0,      // 32 weights: fp16 d, 16 bytes of nibbles  x = d·(q − 8)
    Q1_0,      // 128 weights: fp16 d, 16 bytes of signs   x = ±d          (ggml id 41)
    Q2_0,      // PrismML group-128 ternary+: fp16 d, 32 bytes of 2-bit codes (ggml id 42)
    Q2_0_G64,  // upstream llama.cpp group-64 Q2_0 (same ggml id 42, different block)
    I32,       // integer tensors (token ids, positions); never a weight type
};

struct DTypeInfo {
    std::string_view name;   // as llama.cpp prints it ("q1_0", "f16", ...)
    uint32_t ggml_id;        // GGUF tensor type id
    uint32_t block_elems;    // values per block (1 for plain types)
    uint32_t block_bytes;    // bytes per block
    bool quantized;
};

const DTypeInfo& dtype_info(DType t);
inline std::string_view dtype_name(DType t) { return dtype_info(t).name; }
inline bool is_quantized(DType t) { return dtype_info(t).quantized; }

// Bytes taken by n values of type t; n must be a multiple of the block size (checked by callers at
// the file boundary with row_fits_blocks).
inline uint64_t dtype_bytes(DType t, uint64_t n) {
    const DTypeInfo& info = dtype_info(t);
    return n / info.block_elems * info.block_bytes;
}
inline bool row_fits_blocks(DType t, uint64_t n) { return n % dtype_info(t).block_elems == 0; }

// Bits per weight, for reports (Q1_0: 18·8/128 = 1.125).
inline double dtype_bits_per_weight(DType t) {
    const DTypeInfo& info = dtype_info(t);
    return 8.0 * info.block_bytes / info.block_elems;
}

// Every dtype whose ggml id is `id` (two for id 42), in a fixed order; empty when unknown.
struct DTypeCandidates {
    DType types[2];
    int count = 0;
};
DTypeCandidates dtypes_for_ggml_id(uint32_t id);

// Parse a user-facing name ("q1_0", "Q8_0", "bf16", "q2_0_g64"); nullopt when unknown.
std::optional<DType> parse_dtype(std::string_view name);

// The name llama.cpp gives a ggml type id, for messages about types we do not support ("q4_k").
std::string_view ggml_type_name(uint32_t id);

}  // namespace deltabit
