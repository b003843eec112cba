// Launch geometry shared by the CUDA ops (plain C++, so host tests include it without nvcc).
//
// Every op kernel uses a 1-D grid along x and a grid-stride loop over its work items (rows, tokens,
// (token, head) pairs, ...), with 64-bit item indices. The grid is capped at kMaxGridBlocks, which is
// inside every CUDA device's limit for any grid dimension (x allows 2^31 − 1, y and z 65535), so no
// launch can exceed a device limit however long the context: past the cap, each block simply takes
// several items. Work never depends on the grid covering the items in one pass.
#pragma once

#include <algorithm>
#include <cstdint>

namespace deltabit::cuda {

inline constexpr int64_t kMaxGridBlocks = 65535;

// Blocks to launch for `items` work items of `items_per_block` each; 0 when there is nothing to do
// (callers skip the launch: a 0-block launch is a CUDA error).
inline unsigned grid_blocks(int64_t items, int64_t items_per_block = 1) {
    if (items <= 0) return 0;
    const int64_t blocks = items / items_per_block + (items % items_per_block != 0 ? 1 : 0);
    return unsigned(std::min(blocks, kMaxGridBlocks));
}

}  // namespace deltabit::cuda
