#include "ops/l2_prefetch_cuda.h"

#include <algorithm>
#include <cstdlib>
#include <string>

#include "core/error.h"

namespace deltabit::cuda {

namespace {

struct DeviceChunk {  // the layout of L2StreamSchedule::Chunk, as the kernel reads it
    const void* ptr;
    uint32_t bytes;
    int32_t mark;
};

thread_local L2StreamSchedule* t_recording = nullptr;

__device__ __forceinline__ uint64_t global_ns() {
    uint64_t t;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
    return t;
}

__device__ __forceinline__ int load_relaxed(const int* p) {
    int v;
    asm volatile("ld.relaxed.gpu.global.s32 %0, [%1];" : "=r"(v) : "l"(p) : "memory");
    return v;
}

// One thread per block issues the block's chunks (chunk j goes to block j mod gridDim.x). A chunk of a GEMV
// that has already started (its mark <= progress) is skipped: that GEMV is reading it itself. Any other is
// issued once it lies within window_chunks past the end of the GEMV that last reported.
// mark_start[m] is mark m's first chunk, mark_start[marks] the chunk count.
__global__ void l2_prefetch_kernel(const DeviceChunk* chunks, const int64_t* mark_start, const int* marks_ptr,
                                   const int* progress, int64_t window_chunks, int64_t patience_ns) {
    if (threadIdx.x != 0) return;
    const int marks = *marks_ptr;
    const int64_t n = mark_start[marks];
    int seen = -2;
    int64_t allowed = 0;
    uint64_t last_move = global_ns();
    for (int64_t j = blockIdx.x, i = 0; j < n; j += gridDim.x, ++i) {
        const DeviceChunk c = chunks[j];
        // A look at the progress word now and then even while allowed: a prefetcher that has fallen behind
        // skips what is being read already instead of issuing it late.
        if (i % 16 == 15) {
            const int p = min(load_relaxed(progress), marks - 1);
            if (p != seen) {
                seen = p;
                last_move = global_ns();
                allowed = mark_start[p + 1] + window_chunks;
            }
        }
        while (c.mark > seen && j >= allowed) {
            const int p = min(load_relaxed(progress), marks - 1);
            const uint64_t now = global_ns();
            if (p != seen) {
                seen = p;
                last_move = now;
                allowed = mark_start[p + 1] + window_chunks;  // p = -1: window_chunks from the first chunk
                continue;
            }
            if (now - last_move > uint64_t(patience_ns)) return;  // the step is not running beside us
            __nanosleep(200);
        }
        if (c.mark <= seen) continue;
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
        asm volatile("cp.async.bulk.prefetch.L2.global [%0], %1;" ::"l"(c.ptr), "r"(c.bytes) : "memory");
#endif
    }
}

int64_t env_int(const char* name, int64_t fallback) {
    const char* v = std::getenv(name);
    return v == nullptr || *v == '\0' ? fallback : std::strtoll(v, nullptr, 10);
}

}  // namespace

L2PrefetchPlan l2_prefetch_plan_from_environment() {
    L2PrefetchPlan plan;
    const int64_t window_mib = env_int("DELTABIT_L2_PREFETCH", 0);
    plan.enabled = window_mib > 0;
    if (plan.enabled) plan.settings.window_bytes = window_mib << 20;
    plan.settings.blocks = int(std::clamp<int64_t>(env_int("DELTABIT_L2_PREFETCH_BLOCKS", plan.settings.blocks), 1, 1024));
    plan.settings.chunk_bytes =
        std::clamp<int64_t>(env_int("DELTABIT_L2_PREFETCH_CHUNK_KB", plan.settings.chunk_bytes >> 10), 1, 1024) << 10;
    return plan;
}

L2StreamSchedule::L2StreamSchedule(L2PrefetchSettings settings, int64_t max_chunks, int max_marks)
    : settings_(settings),
      max_chunks_(max_chunks),
      max_marks_(max_marks),
      chunks_(size_t(max_chunks) * sizeof(DeviceChunk)),
      mark_start_(size_t(max_marks + 1) * sizeof(int64_t)),
      counts_(sizeof(int)),
      progress_(sizeof(int)) {
    static_assert(sizeof(Chunk) == sizeof(DeviceChunk), "one chunk layout on host and device");
    cuda_check(cudaMemset(counts_.get(), 0, counts_.bytes()), "prefetch schedule");
    cuda_check(cudaMemset(mark_start_.get(), 0, mark_start_.bytes()), "prefetch schedule");
    cuda_check(cudaEventCreateWithFlags(&forked_, cudaEventDisableTiming), "event");
    cuda_check(cudaEventCreateWithFlags(&done_, cudaEventDisableTiming), "event");
}

L2StreamSchedule::~L2StreamSchedule() {
    if (t_recording == this) t_recording = nullptr;
    cudaEventDestroy(forked_);
    cudaEventDestroy(done_);
}

void L2StreamSchedule::begin_recording() {
    if (t_recording != nullptr) fail_message("L2 prefetch: a schedule is already recording on this thread");
    chunks_host_.clear();
    mark_start_host_.clear();
    recorded_bytes_ = 0;
    t_recording = this;
}

void L2StreamSchedule::end_recording() {
    if (t_recording == this) t_recording = nullptr;
    if (!chunks_host_.empty()) chunks_.upload(chunks_host_.data(), chunks_host_.size() * sizeof(Chunk));
    std::vector<int64_t> starts = mark_start_host_;
    starts.push_back(int64_t(chunks_host_.size()));
    mark_start_.upload(starts.data(), starts.size() * sizeof(int64_t));
    const int marks = int(mark_start_host_.size());
    counts_.upload(&marks, sizeof marks);
}

L2StreamSchedule* L2StreamSchedule::recording() { return t_recording; }

int L2StreamSchedule::record_launch(const std::vector<std::pair<const void*, int64_t>>& ranges) {
    if (int(mark_start_host_.size()) >= max_marks_) return -1;  // past capacity: this launch reports nothing
    const int mark = int(mark_start_host_.size());
    mark_start_host_.push_back(int64_t(chunks_host_.size()));
    for (const auto& [ptr, bytes] : ranges) {
        // Whole 16-byte words (the bulk prefetch's rule): the word holding the first byte to the one holding
        // the last — never past the allocation, whose own alignment is coarser.
        const uintptr_t begin = reinterpret_cast<uintptr_t>(ptr) & ~uintptr_t(15);
        const uintptr_t end = (reinterpret_cast<uintptr_t>(ptr) + uintptr_t(bytes) + 15) & ~uintptr_t(15);
        for (uintptr_t a = begin; a < end && int64_t(chunks_host_.size()) < max_chunks_;
             a += uintptr_t(settings_.chunk_bytes)) {
            const uintptr_t b = std::min(end, a + uintptr_t(settings_.chunk_bytes));
            chunks_host_.push_back({reinterpret_cast<const void*>(a), uint32_t(b - a), mark});
        }
        recorded_bytes_ += bytes;
    }
    return mark;
}

void L2StreamSchedule::fork(cudaStream_t stream, cudaStream_t side) {
    cuda_check(cudaMemsetAsync(progress_.get(), 0xff, sizeof(int), stream), "prefetch progress reset");
    cuda_check(cudaEventRecord(forked_, stream), "prefetch fork");
    cuda_check(cudaStreamWaitEvent(side, forked_, 0), "prefetch fork");
    const int64_t window_chunks = std::max<int64_t>(1, settings_.window_bytes / settings_.chunk_bytes);
    l2_prefetch_kernel<<<unsigned(settings_.blocks), 32, 0, side>>>(
        chunks_.get<DeviceChunk>(), mark_start_.get<int64_t>(), counts_.get<int>(), progress_.get<int>(),
        window_chunks, int64_t(1'000'000));
    cuda_check_launch("l2_prefetch_kernel");
}

void L2StreamSchedule::join(cudaStream_t stream, cudaStream_t side) {
    cuda_check(cudaEventRecord(done_, side), "prefetch join");
    cuda_check(cudaStreamWaitEvent(stream, done_, 0), "prefetch join");
}

}  // namespace deltabit::cuda
