// Steady-state decode and prefill allocate no device memory (issue #5): after one warm-up of each shape
// class (a prompt cut into chunks, the eager first decode step, the graph capture), 20 repeated long
// prefills and 2000 decode steps leave the free device memory (cudaMemGetInfo) and the arenas'
// allocation count exactly where they were, and every one of the 2000 steps is a graph replay. Free memory
// is device-wide, so ctest runs this test alone (RUN_SERIAL, CMakeLists.txt).
#include "models/fixture.h"

#if DELTABIT_HAVE_CUDA

#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <cstdio>
#include <span>
#include <vector>

#include "cuda/decode_test_models.h"
#include "cuda/op_parity_cuda.h"
#include "models/model_cuda.h"

namespace deltabit {
namespace {

size_t free_device_bytes() {
    size_t free = 0, total = 0;
    cuda::cuda_check(cudaDeviceSynchronize(), "sync");
    cuda::cuda_check(cudaMemGetInfo(&free, &total), "cudaMemGetInfo");
    return free;
}

TEST(MemoryFlatCuda, RepeatedPrefillsAndDecodeStepsAllocateNothing) {
    DELTABIT_REQUIRE_GPU();
    const Model cpu = test::load_fixture_model("qwen3_5_binary", true);
    const int64_t V = cpu.config().n_vocab;
    CudaModel gpu(cpu);
    constexpr int64_t kPrompt = 1100;  // three chunks: 512, 512, 76
    constexpr int64_t kSteps = 2000;
    CudaSequenceState s = gpu.new_sequence(kPrompt + kSteps + 8);
    const StateCheckpoint empty = s.checkpoint();
    std::vector<int32_t> prompt(kPrompt);
    for (int64_t i = 0; i < kPrompt; ++i) prompt[size_t(i)] = int32_t((i * 7919 + 13) % V);

    // Warm-up: each shape class once, and the graph.
    const float* p = gpu.forward_last(s, prompt);
    for (int i = 0; i < 2; ++i) {
        const int32_t id = gpu.argmax(p);
        p = gpu.forward_last(s, std::span(&id, 1));
    }
    s.restore(empty);
    gpu.forward_last(s, prompt);
    const size_t free0 = free_device_bytes();
    const int64_t allocations0 = gpu.decode_stats().arena_allocations;
    const int64_t replays0 = gpu.decode_stats().graph_replays;

    for (int round = 0; round < 20; ++round) {
        s.restore(empty);
        p = gpu.forward_last(s, prompt);
        ASSERT_EQ(free_device_bytes(), free0) << "prefill " << round;
        ASSERT_EQ(gpu.decode_stats().arena_allocations, allocations0) << "prefill " << round;
    }
    for (int64_t step = 0; step < kSteps; ++step) {
        const int32_t id = gpu.argmax(p);
        p = gpu.forward_last(s, std::span(&id, 1));
        if (step % 250 == 249) {
            ASSERT_EQ(free_device_bytes(), free0) << "decode step " << step;
            ASSERT_EQ(gpu.decode_stats().arena_allocations, allocations0) << "decode step " << step;
        }
    }
    const CudaDecodeStats st = gpu.decode_stats();
    EXPECT_EQ(st.graph_replays - replays0, kSteps);
    EXPECT_EQ(st.graph_captures, 2);  // one per copy of the DeltaNet states (CudaLayerState)
    std::printf("[ memory ] free %zu bytes before and after; arena allocations %lld; %lld replays\n", free0,
                (long long)st.arena_allocations, (long long)st.graph_replays);
}

}  // namespace
}  // namespace deltabit

#endif  // DELTABIT_HAVE_CUDA
