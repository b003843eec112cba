// Fixed-width little-endian integers in byte strings: how deltabit's own binary files (snapshots, diffusion
// records) store their counts and sizes, whatever the host's byte order.
#pragma once

#include <cstdint>
#include <string>

namespace deltabit {

// Appends the low `bytes` bytes of v, least significant first.
inline void put_le(std::string& out, uint64_t v, int bytes) {
    for (int i = 0; i < bytes; ++i) out.push_back(char(v >> (8 * i)));
}

// The `bytes`-byte little-endian integer at p.
inline uint64_t get_le(const unsigned char* p, int bytes) {
    uint64_t v = 0;
    for (int i = 0; i < bytes; ++i) v |= uint64_t(p[i]) << (8 * i);
    return v;
}

}  // namespace deltabit
