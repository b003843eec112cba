// The scratch memory of the CUDA model's forward calls (models/model_cuda.h). CUDA builds only.
#pragma once

#if DELTABIT_HAVE_CUDA

#include <cstddef>
#include <cstdint>
#include <vector>

#include "backend/cuda_buffer.h"

namespace deltabit {

// Device memory for the intermediates of forward calls of one shape class, reused by every call and
// every layer: a bump allocator over one buffer. A call that needs more than the buffer holds gets the
// excess from overflow slabs and records how much it used; the next call (after the stream has drained)
// replaces the buffer by one of that size. So a shape class allocates once (or a few times while the
// longest chunk is first seen) and never again — steady state is zero cudaMalloc/cudaFree.
// A slab holds the arena's offsets from where it begins, so rewinding reuses it as it reuses the buffer,
// and each new one is at least as large as the offsets below it: a call that outgrows the buffer many
// times over makes a few cudaMallocs, not one per intermediate (H200, Bonsai-27B: the first 512-token
// prompt after 64-token ones made ~1300, and freeing them cost the next call ~70 ms).
class DeviceArena {
public:
    void* alloc(size_t bytes);
    size_t mark() const { return used_; }
    void rewind(size_t mark) { used_ = mark; }
    // Start of a call: nothing of the previous call may still run. Grows the buffer if the last call
    // overflowed; returns whether it did.
    bool begin_call();
    bool overflowed() const { return !overflow_.empty(); }
    int64_t allocations() const { return allocations_; }
    size_t capacity() const { return buffer_.bytes(); }

private:
    struct Slab {
        cuda::DeviceBuffer memory;
        size_t begin = 0;  // the arena offset of its first byte
    };
    cuda::DeviceBuffer buffer_;
    std::vector<Slab> overflow_;
    size_t used_ = 0, high_water_ = 0;
    int64_t allocations_ = 0;
};

}  // namespace deltabit

#endif  // DELTABIT_HAVE_CUDA
