// Helpers for the GGUF tests: a byte builder that writes GGUF fields by hand (independent of
// gguf::Writer, so the writer can be checked against it) and small assertion helpers.
#pragma once

#include "core/error.h"
#include "formats/gguf.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <string>
#include <string_view>
#include <vector>

namespace deltabit::gguf::testing {

// Appends little-endian GGUF fields. Every corrupt-file test builds its bytes with this, so the
// test reads as the file's layout.
class Bytes {
public:
    Bytes& u8(uint8_t v) { return put(v); }
    Bytes& u32(uint32_t v) { return put(v); }
    Bytes& u64(uint64_t v) { return put(v); }
    Bytes& i64(int64_t v) { return put(v); }
    Bytes& f32(float v) { return put(v); }
    Bytes& raw(std::string_view s) {
        bytes.insert(bytes.end(), s.begin(), s.end());
        return *this;
    }
    Bytes& raw(const std::vector<uint8_t>& v) {
        bytes.insert(bytes.end(), v.begin(), v.end());
        return *this;
    }
    Bytes& str(std::string_view s) { return u64(s.size()).raw(s); }
    Bytes& header(uint64_t n_tensors, uint64_t n_kv, uint32_t version = 3) {
        return raw("GGUF").u32(version).u64(n_tensors).u64(n_kv);
    }
    Bytes& kv_u32(std::string_view key, uint32_t v) { return str(key).u32(4).u32(v); }
    Bytes& kv_string(std::string_view key, std::string_view v) { return str(key).u32(8).str(v); }
    Bytes& tensor(std::string_view name, const std::vector<int64_t>& shape, uint32_t ggml_type, uint64_t offset) {
        str(name).u32(static_cast<uint32_t>(shape.size()));
        for (int64_t d : shape) i64(d);
        return u32(ggml_type).u64(offset);
    }
    Bytes& zeros(size_t n) {
        bytes.resize(bytes.size() + n, 0);
        return *this;
    }
    Bytes& fill(size_t n, uint8_t v) {
        bytes.resize(bytes.size() + n, v);
        return *this;
    }
    Bytes& pad_to(size_t alignment) { return zeros((alignment - bytes.size() % alignment) % alignment); }
    size_t size() const { return bytes.size(); }

    std::vector<uint8_t> bytes;

private:
    template <typename T>
    Bytes& put(T v) {
        const size_t at = bytes.size();
        bytes.resize(at + sizeof(T));
        std::memcpy(bytes.data() + at, &v, sizeof(T));
        return *this;
    }
};

inline File parse(const std::vector<uint8_t>& bytes) { return File::parse(bytes, "test.gguf"); }

// The message of the Error that parsing `bytes` throws ("" if it parses).
inline std::string parse_error(const std::vector<uint8_t>& bytes) {
    try {
        parse(bytes);
    } catch (const Error& e) {
        return e.what();
    }
    return "";
}

#define EXPECT_PARSE_ERROR(bytes, substring)                                                       \
    do {                                                                                           \
        const std::string message_ = ::deltabit::gguf::testing::parse_error(bytes);                \
        EXPECT_NE(message_.find(substring), std::string::npos) << "message: [" << message_ << "]"; \
        EXPECT_EQ(message_.find('\n'), std::string::npos) << "one line: " << message_;             \
    } while (0)

inline std::vector<uint8_t> pattern_bytes(size_t n, uint32_t seed) {
    std::vector<uint8_t> out(n);
    uint32_t x = seed * 2654435761u + 1;
    for (auto& b : out) {
        x = x * 1664525u + 1013904223u;  // LCG: deterministic, distinct per seed
        b = static_cast<uint8_t>(x >> 24);
    }
    return out;
}

}  // namespace deltabit::gguf::testing
