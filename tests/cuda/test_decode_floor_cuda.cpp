// The decode floors (bench/decode_floor_cuda.h): each measurement proves its kernels did their work (the
// checksum of every byte streamed, the count of every launch in the chain) and refuses a request it
// cannot measure. Skips without CUDA or a GPU.
#include <gtest/gtest.h>

#ifdef DELTABIT_HAVE_CUDA
#include "backend/cuda_buffer.h"
#include "backend/cuda_probe.h"
#include "core/error.h"
#include "bench/decode_floor_cuda.h"
#endif

namespace deltabit {
namespace {

#ifdef DELTABIT_HAVE_CUDA
#define SKIP_WITHOUT_GPU() \
    if (cuda::device_count() == 0) GTEST_SKIP() << "no CUDA device on this machine"
#else
#define SKIP_WITHOUT_GPU() GTEST_SKIP() << "built without CUDA"
#endif

#ifdef DELTABIT_HAVE_CUDA
// A stream of the test's own (the legacy default stream cannot be captured into a graph).
struct TestStream {
    cudaStream_t s = nullptr;
    TestStream() { cuda::cuda_check(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), "stream"); }
    ~TestStream() { cudaStreamDestroy(s); }
};
#endif

TEST(DecodeFloorCuda, StreamFloorReadsEveryByteAtAPlausibleRate) {
    SKIP_WITHOUT_GPU();
#ifdef DELTABIT_HAVE_CUDA
    // 4 MiB + 48 bytes: the tail past the unrolled loop is read too (the checksum would differ otherwise).
    const size_t bytes = (size_t(4) << 20) + 48;
    const TestStream stream;
    const cuda::StreamFloor floor = cuda::measure_stream_floor(bytes, 3, stream.s);
    EXPECT_EQ(floor.bytes, bytes);
    EXPECT_GT(floor.microseconds, 0.0);
    // No HBM of today serves 20 TB/s: a faster figure would mean the span missed the kernel's work.
    EXPECT_LT(floor.gb_per_s(), 20000.0) << floor.microseconds << " µs";
#endif
}

TEST(DecodeFloorCuda, DependentLaunchChainCountsEveryLaunch) {
    SKIP_WITHOUT_GPU();
#ifdef DELTABIT_HAVE_CUDA
    const TestStream stream;
    const double us = cuda::measure_dependent_launch_us(64, 2, stream.s);  // throws if a launch overtook
    EXPECT_GT(us, 0.0);
    EXPECT_LT(us, 1000.0);
#endif
}

TEST(DecodeFloorCuda, RefusesWhatItCannotMeasure) {
    SKIP_WITHOUT_GPU();
#ifdef DELTABIT_HAVE_CUDA
    const TestStream stream;
    EXPECT_THROW(cuda::measure_stream_floor(100, 3, stream.s), Error);  // not a multiple of 16
    EXPECT_THROW(cuda::measure_stream_floor(0, 3, stream.s), Error);
    EXPECT_THROW(cuda::measure_dependent_launch_us(63, 2, stream.s), Error);  // odd: would not end in `ping`
    EXPECT_THROW(cuda::measure_dependent_launch_us(64, 0, stream.s), Error);
#endif
}

}  // namespace
}  // namespace deltabit
