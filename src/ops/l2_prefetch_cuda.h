// Weights brought into L2 ahead of the decode GEMVs that read them, by a prefetcher running beside the
// step (EXPERIMENT, off unless asked for).
//
// Why: a decode GEMV kernel alone cannot stream its weights at the card's bandwidth — the DRAM ramp at
// its start and the drain at its end cost ~3 µs a kernel (docs/bench.md, "Floors beside the figures"),
// and the step has ~250 of them. Read from L2 the same kernels are 15–21% faster (bench_gemv_cuda
// --l2-resident). A prefetcher that walks the step's weights in the order the GEMVs read them, a window
// ahead of the one running, keeps DRAM busy across the kernel boundaries and the non-GEMV kernels.
//
// How: an L2StreamSchedule records, while a step is being captured into a CUDA graph, every GEMV launch's
// matrices (codes and scales, in launch order) and stamps each launch with a mark — its index. The GEMV
// kernel's first thread writes its mark into the schedule's progress word when it starts. The prefetcher
// (a few one-warp blocks, a parallel branch of the same graph) issues bulk L2 prefetches of the recorded
// bytes in order, never more than `window` bytes past the end of the GEMV that last reported (whose own
// bytes, and those of GEMVs before it, it skips: they are being read already). Prefetches
// are hints: nothing reads what the prefetcher did, so the step's results cannot depend on it. It gives up
// (exits) when the progress word has not moved for a millisecond, so a serialised run (compute-sanitizer,
// a GPU that runs the branches one after the other) costs at most that, never a hang.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <vector>

#include "backend/cuda_buffer.h"

namespace deltabit::cuda {

struct L2PrefetchSettings {
    int64_t window_bytes = 24ll << 20;  // how far past the last byte of the GEMV running
    int64_t chunk_bytes = 64 << 10;     // one bulk prefetch
    // Prefetcher blocks (one warp each; chunks dealt round-robin). One thread's bulk prefetches go out at
    // ~145 GB/s on an H200 (measured: 8 blocks cap a chain at ~1.15 TB/s, 16 at ~2.3), hence 32.
    int blocks = 32;
};

// From DELTABIT_L2_PREFETCH (unset or 0: off; n: on with an n MiB window), DELTABIT_L2_PREFETCH_BLOCKS and
// DELTABIT_L2_PREFETCH_CHUNK_KB. `enabled` false when off.
struct L2PrefetchPlan {
    bool enabled = false;
    L2PrefetchSettings settings;
};
L2PrefetchPlan l2_prefetch_plan_from_environment();

class L2StreamSchedule {
public:
    explicit L2StreamSchedule(L2PrefetchSettings settings, int64_t max_chunks = 1 << 17, int max_marks = 4096);
    ~L2StreamSchedule();
    L2StreamSchedule(const L2StreamSchedule&) = delete;
    L2StreamSchedule& operator=(const L2StreamSchedule&) = delete;

    // Records (on this thread) the GEMV launches between begin and end: each gets the next mark.
    // end_recording uploads the chunk list, so the captured prefetcher sees it on every replay: call it after
    // the capture has ended (it copies synchronously). Recording again replaces the list.
    void begin_recording();
    void end_recording();

    // Called by the GEMV launchers: the recording schedule of this thread, or nullptr.
    static L2StreamSchedule* recording();
    // The next launch's matrices: byte ranges in the order the launch reads them. Returns its mark.
    int record_launch(const std::vector<std::pair<const void*, int64_t>>& ranges);
    int* progress() const { return progress_.get<int>(); }

    // The progress reset and the prefetcher, forked from `stream` onto `side`; join() makes `stream` wait
    // for the prefetcher (call it after the step's last kernel, inside the same capture).
    void fork(cudaStream_t stream, cudaStream_t side);
    void join(cudaStream_t stream, cudaStream_t side);

    int64_t recorded_bytes() const { return recorded_bytes_; }
    int marks() const { return int(mark_start_host_.size()); }

private:
    L2PrefetchSettings settings_;
    int64_t max_chunks_;
    int max_marks_;
    DeviceBuffer chunks_;      // L2PrefetchChunk[max_chunks]
    DeviceBuffer mark_start_;  // int64_t[max_marks + 1]: the first chunk of each mark, then the chunk count
    DeviceBuffer counts_;      // int: the marks recorded
    DeviceBuffer progress_;    // int: the mark of the last GEMV to start (-1: none yet)
    struct Chunk {
        const void* ptr;
        uint32_t bytes;
        int32_t mark;
    };
    std::vector<Chunk> chunks_host_;
    std::vector<int64_t> mark_start_host_;
    int64_t recorded_bytes_ = 0;
    cudaEvent_t forked_{}, done_{};
};

}  // namespace deltabit::cuda
