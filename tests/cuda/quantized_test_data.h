// Test data and helpers shared by the GPU tests of quantised products and tables (test_gemv_cuda.cpp,
// test_prefill_gemm.cpp, test_prefill_gemm_half.cpp, test_op_parity_lookup.cpp, test_op_parity_diffusion.cpp):
// random quantised weights and tables, index samples that keep every tile edge near the ends, and a parallel
// loop for the CPU references of large shapes.
#pragma once

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <random>
#include <thread>
#include <vector>

#include "core/dtype.h"
#include "core/half.h"

namespace deltabit::test {

template <typename F>
void parallel_for(int64_t n, F&& body) {
    const int64_t threads = std::max<int64_t>(1, std::min<int64_t>(std::thread::hardware_concurrency(), n));
    std::vector<std::thread> pool;
    for (int64_t w = 0; w < threads; ++w)
        pool.emplace_back([&, w] {
            for (int64_t i = w; i < n; i += threads) body(i);
        });
    for (auto& th : pool) th.join();
}

// Every block: an fp16 scale in ±0.05, then random bytes.
inline std::vector<uint8_t> random_weights(DType t, int64_t rows, int64_t cols, std::mt19937& rng) {
    const DTypeInfo& info = dtype_info(t);
    std::vector<uint8_t> bytes(size_t(rows) * dtype_bytes(t, uint64_t(cols)));
    std::uniform_int_distribution<int> byte(0, 255);
    std::uniform_real_distribution<float> scale(-0.05f, 0.05f);
    for (size_t b = 0; b < bytes.size(); b += info.block_bytes) {
        const uint16_t d = float_to_half(scale(rng));
        std::memcpy(&bytes[b], &d, sizeof d);
        for (size_t i = sizeof d; i < info.block_bytes; ++i) bytes[b + i] = uint8_t(byte(rng));
    }
    return bytes;
}

// An embedding-style table of `rows` × `cols` in `type`'s layout (the lookup and soft-embedding parity tests):
// plain values in ±2, or blocks of a finite fp16 scale in ±0.1 and random bytes (a random fp16 scale can be
// inf or NaN, and NaN ≠ NaN would fail an exact comparison for the wrong reason).
inline std::vector<uint8_t> random_table(DType type, int64_t rows, int64_t cols, std::mt19937& rng) {
    std::vector<uint8_t> bytes(size_t(rows) * dtype_bytes(type, uint64_t(cols)));
    std::uniform_int_distribution<int> byte(0, 255);
    std::uniform_real_distribution<float> value(-2.0f, 2.0f);
    if (!is_quantized(type)) {
        for (size_t i = 0; i < size_t(rows * cols); ++i) {
            const float v = value(rng);
            if (type == DType::F32) std::memcpy(&bytes[i * 4], &v, 4);
            const uint16_t h = type == DType::F16 ? float_to_half(v) : float_to_bf16(v);
            if (type != DType::F32) std::memcpy(&bytes[i * 2], &h, 2);
        }
        return bytes;
    }
    const size_t block_bytes = dtype_info(type).block_bytes;
    for (size_t b = 0; b < bytes.size(); b += block_bytes) {
        const uint16_t d = float_to_half(value(rng) * 0.05f);
        std::memcpy(&bytes[b], &d, sizeof d);
        for (size_t i = sizeof d; i < block_bytes; ++i) bytes[b + i] = uint8_t(byte(rng));
    }
    return bytes;
}

// Sample of indices in [0, n): all of them when n ≤ 2·edge + extra, else the first and last `edge`
// (every tile edge near the ends) and `extra` spread between.
inline std::vector<int64_t> sample(int64_t n, int64_t edge, int64_t extra, std::mt19937& rng) {
    std::vector<int64_t> out;
    if (n <= 2 * edge + extra) {
        for (int64_t i = 0; i < n; ++i) out.push_back(i);
        return out;
    }
    for (int64_t i = 0; i < edge; ++i) out.push_back(i);
    std::uniform_int_distribution<int64_t> mid(edge, n - edge - 1);
    for (int64_t i = 0; i < extra; ++i) out.push_back(mid(rng));
    for (int64_t i = n - edge; i < n; ++i) out.push_back(i);
    std::sort(out.begin(), out.end());
    out.erase(std::unique(out.begin(), out.end()), out.end());
    return out;
}

}  // namespace deltabit::test
