// Host stand-in for src/ops/cuda/async_copy.cuh (tools/cuda_emulation). A copy is queued in the thread's open
// group and lands only when a cp_async_wait_group covers its group — the latest moment the device allows —
// so a tile read before its wait (or before the __syncthreads after other threads' waits) reads poison.
// The source is read when the copy lands, not when it is issued. mbarrier arrivals are not emulated.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

namespace deltabit::cuda {

inline void cp_async16(void* shared, const void* global, bool fill_zero = false) {
    emu::open_copy_group.push_back({shared, global, 16, fill_zero});
}
inline void cp_async8(void* shared, const void* global, bool fill_zero = false) {
    emu::open_copy_group.push_back({shared, global, 8, fill_zero});
}
inline void cp_async4(void* shared, const void* global, bool fill_zero = false) {
    emu::open_copy_group.push_back({shared, global, 4, fill_zero});
}

inline void cp_async_commit_group() {
    emu::copy_groups.push_back(std::move(emu::open_copy_group));
    emu::open_copy_group.clear();
}

// Lands the oldest committed groups until at most N remain in flight.
template <int N>
void cp_async_wait_group() {
    while (emu::copy_groups.size() > size_t(N)) {
        emu::land(emu::copy_groups.front());
        emu::copy_groups.erase(emu::copy_groups.begin());
    }
}

}  // namespace deltabit::cuda
