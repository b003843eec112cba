#include "train/cuda/profile_events.h"

#include "backend/cuda_buffer.h"

#include <cuda_runtime.h>

#include <vector>

namespace deltabit::train::cuda {

using deltabit::cuda::cuda_check;

struct ProfileEvents::Impl {
    struct Span {
        ProfileKind kind;
        ProfilePass pass;
        double flops, bytes;
        std::string detail;
        size_t start, stop = 0;  // indices into events
    };
    StepProfile& sink;
    std::vector<cudaEvent_t> events;  // the pool; the first `used` belong to the open step
    size_t used = 0;
    std::vector<Span> spans;

    explicit Impl(StepProfile& s) : sink(s) {}
    ~Impl() {
        for (cudaEvent_t e : events) cudaEventDestroy(e);  // no check: a destructor must not throw
    }

    size_t record() {
        if (used == events.size()) {
            cudaEvent_t e = nullptr;
            cuda_check(cudaEventCreate(&e), "cudaEventCreate (profile)");
            events.push_back(e);
        }
        cuda_check(cudaEventRecord(events[used], nullptr), "cudaEventRecord (profile)");
        return used++;
    }

    float elapsed_ms(size_t from, size_t to) const {
        float ms = 0.0f;
        cuda_check(cudaEventElapsedTime(&ms, events[from], events[to]), "cudaEventElapsedTime (profile)");
        return ms;
    }
};

ProfileEvents::ProfileEvents(StepProfile& sink) : impl_(std::make_unique<Impl>(sink)) {}
ProfileEvents::~ProfileEvents() = default;

int64_t ProfileEvents::begin(ProfileKind kind, ProfilePass pass, double flops, double bytes, std::string detail) {
    Impl& I = *impl_;
    const size_t start = I.record();
    I.spans.push_back({kind, pass, flops, bytes, std::move(detail), start});
    return int64_t(I.spans.size() - 1);
}

void ProfileEvents::end(int64_t span) { impl_->spans[size_t(span)].stop = impl_->record(); }

void ProfileEvents::host(ProfileKind kind, double ms) { impl_->sink.add(kind, ProfilePass::update, ms, 0.0, 0.0); }

void ProfileEvents::end_step(double wall_ms) {
    Impl& I = *impl_;
    double device_span = 0.0;
    if (!I.spans.empty()) {
        cuda_check(cudaEventSynchronize(I.events[I.used - 1]), "cudaEventSynchronize (profile)");
        for (const Impl::Span& s : I.spans)
            if (s.stop > s.start)  // an open span (a step cut short by an error) has no time
                I.sink.add(s.kind, s.pass, I.elapsed_ms(s.start, s.stop), s.flops, s.bytes, s.detail);
        device_span = I.elapsed_ms(I.spans.front().start, I.used - 1);
    }
    I.sink.end_step(wall_ms, device_span);
    I.spans.clear();
    I.used = 0;
}

}  // namespace deltabit::train::cuda
