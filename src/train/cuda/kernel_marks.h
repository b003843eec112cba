// Marks after the launches of the trainer's multi-kernel ops (the delta rule, flash attention's
// backward, the norms' and the conv's backward), so that `deltabit train --profile` can split such an
// op's span by kernel: the profile (train/cuda/profile_events.h) installs the hook for a profiled step
// only; otherwise a mark is one branch on a null pointer. A mark records, it synchronises nothing.
#pragma once

namespace deltabit::train::cuda {

struct KernelMarks {
    void (*hook)(void* context, const char* kernel) = nullptr;
    void* context = nullptr;
};
// One per process: the trainer's launches all go on the default stream of one device.
extern KernelMarks g_kernel_marks;

// Call right after launching `kernel` (a string literal: the profile keeps the pointer).
inline void mark_kernel(const char* kernel) {
    if (g_kernel_marks.hook != nullptr) g_kernel_marks.hook(g_kernel_marks.context, kernel);
}

}  // namespace deltabit::train::cuda
