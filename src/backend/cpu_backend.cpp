#include "backend/cpu_backend.h"

#include <cstdlib>
#include <cstring>
#include <new>

#include "core/error.h"

namespace deltabit {

namespace {
// 64 bytes: a cache line, and enough for any SIMD load a later fast CPU path may use.
constexpr size_t kAlignment = 64;
}  // namespace

void* CpuBackend::allocate(size_t bytes) {
    if (bytes == 0) return nullptr;
    const size_t rounded = (bytes + kAlignment - 1) / kAlignment * kAlignment;
    if (rounded < bytes) fail("backend cpu: allocation of {} bytes overflows", bytes);
    void* ptr = std::aligned_alloc(kAlignment, rounded);
    if (ptr == nullptr) fail("backend cpu: out of memory allocating {} bytes", bytes);
    return ptr;
}

void CpuBackend::free(void* ptr) { std::free(ptr); }

// memmove: the CPU backend's "device" is the host, so a caller may hand overlapping ranges.
void CpuBackend::copy_to_device(void* dst, const void* host, size_t bytes) {
    if (bytes != 0) std::memmove(dst, host, bytes);
}
void CpuBackend::copy_to_host(void* host, const void* src, size_t bytes) {
    if (bytes != 0) std::memmove(host, src, bytes);
}
void CpuBackend::copy_on_device(void* dst, const void* src, size_t bytes) {
    if (bytes != 0) std::memmove(dst, src, bytes);
}

}  // namespace deltabit
