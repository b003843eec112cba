#include "train/cuda/profile_events.h"

#include "backend/cuda_buffer.h"
#include "train/cuda/kernel_marks.h"

#include <cuda_runtime.h>

#include <vector>

namespace deltabit::train::cuda {

using deltabit::cuda::cuda_check;

KernelMarks g_kernel_marks;

struct ProfileEvents::Impl {
    struct Span {
        ProfileKind kind;
        ProfilePass pass;
        double flops, bytes;
        std::string detail;
        size_t start, stop = 0;  // indices into events
    };
    // A kernel mark inside a span: the kernel launched since the span's start or the previous mark.
    struct Mark {
        size_t span;
        const char* kernel;
        size_t event;
    };
    StepProfile& sink;
    std::vector<cudaEvent_t> events;  // the pool; the first `used` belong to the open step
    size_t used = 0;
    std::vector<Span> spans;
    std::vector<Mark> marks;
    int64_t open_span = -1;  // marks outside a span (none in the trainer) are not recorded

    static void on_mark(void* context, const char* kernel) {
        Impl& I = *static_cast<Impl*>(context);
        if (I.open_span < 0) return;
        const size_t event = I.record();
        I.marks.push_back({size_t(I.open_span), kernel, event});
    }

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
ProfileEvents::~ProfileEvents() {
    if (g_kernel_marks.context == impl_.get()) g_kernel_marks = {};
}

void ProfileEvents::begin_step() { g_kernel_marks = {&Impl::on_mark, impl_.get()}; }

int64_t ProfileEvents::begin(ProfileKind kind, ProfilePass pass, double flops, double bytes, std::string detail) {
    Impl& I = *impl_;
    const size_t start = I.record();
    I.spans.push_back({kind, pass, flops, bytes, std::move(detail), start});
    I.open_span = int64_t(I.spans.size() - 1);
    return I.open_span;
}

void ProfileEvents::end(int64_t span) {
    impl_->spans[size_t(span)].stop = impl_->record();
    impl_->open_span = -1;
}

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
        // Each mark's kernel: from the span's start or the previous mark to the mark.
        for (size_t m = 0; m < I.marks.size(); ++m) {
            const Impl::Mark& mark = I.marks[m];
            const bool first = m == 0 || I.marks[m - 1].span != mark.span;
            const size_t from = first ? I.spans[mark.span].start : I.marks[m - 1].event;
            I.sink.add_kernel(mark.kernel, I.elapsed_ms(from, mark.event));
        }
    }
    if (g_kernel_marks.context == impl_.get()) g_kernel_marks = {};
    I.sink.end_step(wall_ms, device_span);
    I.spans.clear();
    I.marks.clear();
    I.open_span = -1;
    I.used = 0;
}

}  // namespace deltabit::train::cuda
