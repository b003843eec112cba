// Internal to src/formats: the byte-level helpers shared by the GGUF reader and writer. Not part of
// the public API (include formats/gguf.h).
#pragma once

#include "formats/gguf.h"

#include <cstdint>
#include <cstring>
#include <string>
#include <string_view>
#include <vector>

namespace deltabit::gguf {

bool is_signed_type(ValueType t);
bool is_scalar_type(ValueType t);
// The 64-bit payload of a scalar of type t read from its little-endian bytes: signed integers
// sign-extended, everything else zero-extended (floats keep their bit pattern).
uint64_t scalar_bits(ValueType t, const uint8_t* p);

template <typename T>
void append_le(T v, std::vector<uint8_t>& out) {
    // resize + memcpy rather than insert: GCC 12 reports a false -Warray-bounds on the latter.
    const size_t at = out.size();
    out.resize(at + sizeof(T));
    std::memcpy(out.data() + at, &v, sizeof(T));  // hosts are little-endian (static_assert in gguf_value.cpp)
}

// Friend of Value: builds Values from raw parts and serialises them as GGUF bytes.
class ValueEncoder {
public:
    static Value scalar(ValueType t, uint64_t bits);
    static Value scalar_from_bytes(ValueType t, const uint8_t* p);
    // Arrays from their parts, without per-element Values: `raw` is count × element size LE bytes.
    static Value scalar_array(ValueType element_type, uint64_t count, std::vector<uint8_t> raw);
    static Value string_array(std::vector<std::string> strings);
    static void append_string(std::string_view s, std::vector<uint8_t>& out);
    // The value's bytes after its u32 type tag (for arrays: element type, count, elements).
    static void append_payload(const Value& v, std::vector<uint8_t>& out);
};

// Parses file.bytes() into `file` (gguf_reader.cpp); File::open and File::parse call it.
void parse_into(File& file);

// Round up to a multiple of `alignment` (a power of two); callers keep v far from 2^64.
inline uint64_t align_up(uint64_t v, uint64_t alignment) { return (v + alignment - 1) & ~(alignment - 1); }

}  // namespace deltabit::gguf
