// Two floors of the decode step's structure, measured on the device, so that a decode speed can be read
// against what this way of computing it can reach, not only against the copy bandwidth:
//
//   stream floor     one kernel, alone on the GPU with L2 flushed, reading `bytes` from HBM as fast as a
//                    plain streaming kernel can (16-byte non-caching loads, 8 in flight per thread, 32 warps
//                    per SM): its span from the first block's start to the last block's end. A decode GEMV
//                    over a matrix of that size cannot finish sooner unless its loads began in the kernel
//                    before (H200: 12 MiB, a Bonsai-27B FFN matrix at 1 bit, in ~6 µs — about half the copy
//                    bandwidth: the DRAM ramp and drain of a kernel cost as much as its bytes).
//   dependent launch each of a CUDA graph's kernels waiting for its predecessor (programmatic launch, as the
//                    decode step's kernels are) and reading what it wrote, one block per SM doing nothing
//                    else: µs per launch, the least a step pays per kernel in its chain.
//
// Both return a checked result: the stream floor's kernel folds every word it read into a checksum that
// must equal the host's, and the chain's last output must count every launch — a measurement of a kernel
// that skipped its work would be a wrong floor.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>

namespace deltabit::cuda {

struct StreamFloor {
    size_t bytes = 0;
    double microseconds = 0;  // median span over the runs
    double gb_per_s() const { return microseconds > 0 ? double(bytes) / (microseconds * 1e3) : 0.0; }
};

// `bytes` (a multiple of 16) of a fixed pattern, read `runs` times by one kernel each, L2 flushed before each.
// Throws deltabit::Error on a CUDA error or a wrong checksum.
StreamFloor measure_stream_floor(size_t bytes, int runs, cudaStream_t stream);

// µs per kernel of a replayed graph of `launches` (even) dependent kernels (median of `replays` replays).
// Throws deltabit::Error on a CUDA error or when the chain's result does not count every launch.
double measure_dependent_launch_us(int launches, int replays, cudaStream_t stream);

}  // namespace deltabit::cuda
