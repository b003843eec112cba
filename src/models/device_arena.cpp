#include "models/device_arena.h"

#if DELTABIT_HAVE_CUDA

#include <algorithm>

namespace deltabit {

namespace {
constexpr size_t kArenaAlign = 256;
size_t align_up(size_t n) { return (n + kArenaAlign - 1) / kArenaAlign * kArenaAlign; }
}  // namespace

void* DeviceArena::alloc(size_t bytes) {
    const size_t size = align_up(std::max<size_t>(bytes, 1));
    const size_t offset = used_;
    used_ += size;
    high_water_ = std::max(high_water_, used_);
    if (used_ <= buffer_.bytes()) return buffer_.get<char>() + offset;
    for (Slab& slab : overflow_)
        if (slab.begin <= offset && used_ <= slab.begin + slab.memory.bytes())
            return slab.memory.get<char>() + (offset - slab.begin);
    constexpr size_t kMinSlab = size_t(64) << 20;
    ++allocations_;
    Slab& slab = overflow_.emplace_back(Slab{cuda::DeviceBuffer(std::max({size, kMinSlab, offset})), offset});
    return slab.memory.get<char>();
}

bool DeviceArena::begin_call() {
    used_ = 0;
    if (overflow_.empty()) return false;
    overflow_.clear();
    buffer_ = cuda::DeviceBuffer();  // free first: the old and the new need not fit together
    buffer_ = cuda::DeviceBuffer(high_water_);
    ++allocations_;
    return true;
}

}  // namespace deltabit

#endif  // DELTABIT_HAVE_CUDA
