// CUDA events around the trainer's launch groups, for `deltabit train --profile` (train/step_profile.h):
// a pair of events per span on the default stream, every launch of the step on that stream too, so a
// span's elapsed time is its kernels' time plus any idle gap inside it. The events are created once and
// reused step after step; they are only read after the step's last synchronisation, so recording them
// adds no wait. They touch no memory the step computes with: a profiled step does the same arithmetic.
//
// Plain C++ (pimpl): no CUDA types in the interface.
#pragma once

#include "train/step_profile.h"

#include <cstdint>
#include <memory>
#include <string>

namespace deltabit::train::cuda {

class ProfileEvents {
public:
    explicit ProfileEvents(StepProfile& sink);
    ~ProfileEvents();
    ProfileEvents(const ProfileEvents&) = delete;
    ProfileEvents& operator=(const ProfileEvents&) = delete;

    // Opens a step: from here to end_step the multi-kernel ops' kernel marks (kernel_marks.h) record
    // too, splitting their spans by kernel.
    void begin_step();
    // Records a span's start; returns the handle end() closes.
    int64_t begin(ProfileKind kind, ProfilePass pass, double flops, double bytes, std::string detail = {});
    void end(int64_t span);
    // Host wall time (a host kind), straight into the sink.
    void host(ProfileKind kind, double ms);
    // After the step's last synchronisation: every span's time into the sink, and the step closed with
    // its wall time and the device's span (first start to last end).
    void end_step(double wall_ms);

private:
    struct Impl;
    std::unique_ptr<Impl> impl_;
};

}  // namespace deltabit::train::cuda
