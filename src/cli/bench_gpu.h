// The GPU half of `deltabit bench`: the card's copy bandwidth, and prefill / time-to-first-token /
// decode timings of a CudaModel read against it and against the tensor-core peak. The plan is plain
// data; the measuring functions exist in CUDA builds only.
//
// Timing. Every figure is host wall-clock time around calls that end synchronised (a prompt is followed
// by a stream synchronisation; a decode step or a first token ends with the GPU argmax's 4-byte copy),
// so it is what a caller of the engine waits, launch gaps included. Prompts and first tokens take the
// median of a few runs on fresh sequences; decode is the mean of 128 greedy steps after two warm-up
// steps (which size the decode scratch and capture the step's CUDA graph for that sequence). A batched
// decode test (tg128b8: 8 sequences) times forward_batch steps with every row's argmax on the GPU and the
// B ids copied back once a step; its traffic is the weights once a step plus each row's KV and state.
//
// Depth. A decode run at depth n first brings a fresh sequence to n tokens: by prefill in chunks of
// 4096 tokens, or — when that is projected to take longer than its budget from the prompt rates just
// measured — by writing random finite keys, values and DeltaNet states straight into the sequence and
// advancing its position. Decode speed depends on how many positions attention reads, not on what they
// hold, so both give the same step time; the note of each row says which was used and how long a prefill
// took or would take.
//
// Memory. A background thread samples cudaMemGetInfo every 2 ms while prompts and depth fills run (not
// during decode steps: their scratch is fixed after the first step, and no other thread should call into
// CUDA while a step's graph is being captured); each measurement reports the device-wide peak since it
// began, its filling included.
#pragma once

#include "cli/bench_report.h"
#include "models/inference_cost.h"
#include "models/kv_format.h"

#include <cstdint>
#include <string>
#include <vector>

#if DELTABIT_HAVE_CUDA
#include "bench/decode_floor_cuda.h"
#include "models/model_cuda.h"
#endif

namespace deltabit::cli {

// Dense bf16 tensor-core rate of an H200 as measured on this workplace's H200s: an 8192³ bf16 matrix
// product through PyTorch ran at 769–798 TFLOP/s on random data (/work/.library/device/KINDS.md, readings
// of 2026-10-28 and 2026-11-04); NVIDIA's datasheet gives ~989 dense. Prefill is read against the rate a
// real kernel was seen to reach.
constexpr double kH200Bf16TensorPeakTflops = 790.0;

enum class DepthFill { automatic, prefill, synthetic };

struct BenchPlan {
    std::vector<int64_t> prompt_lengths = {512, 4096, 131072};  // pp tests
    // The first prompt length again, continuing a sequence this deep (and, when filled by prefill, the fill's
    // average rate as a row of its own).
    std::vector<int64_t> prompt_depths = {32768};
    std::vector<int64_t> first_token_lengths = {2, 16, 64};
    std::vector<int64_t> depths = {0, 4096, 32768};
    int64_t decode_tokens = 128;
    // Batched decode tests (the server's continuous batching): for each B, B sequences at depth 0 stepped
    // together (CudaModel::forward_batch), decode_tokens steps; tok/s counts every row's token.
    std::vector<int64_t> batch_sizes = {8, 32};
    KvFormat kv = KvFormat::f32;
    DepthFill fill = DepthFill::automatic;
    // A prompt test projected (from the previous prompt rate) to take longer than this is skipped, and a
    // depth projected to take longer to prefill is filled synthetically: keeps one geometry's whole bench
    // within a few minutes whatever the prefill speed.
    double prompt_budget_s = 60.0;
    double fill_budget_s = 45.0;
    // Tests that would start after this many seconds of measuring are skipped (with a note), so a slow
    // build of the engine still reports what it measured within a bounded time.
    double max_seconds = 240.0;
    uint64_t seed = 1;
};

#if DELTABIT_HAVE_CUDA

struct GpuProbe {
    std::string name;     // "NVIDIA H200"
    std::string summary;  // "NVIDIA H200, sm_90, 132 SMs, 139.8 GiB"
    double copy_gb_s = 0; // device-to-device copy, bytes read + written per second
    double bf16_peak_tflop_s = 0;  // 0 when this GPU's peak is not known here
    // The decode floors (bench/decode_floor_cuda.h): one kernel alone streaming a Bonsai-27B-FFN-sized matrix,
    // and a dependent launch in a graph.
    cuda::StreamFloor stream_floor;
    double dependent_launch_us = 0;
};

// Error when no CUDA device is usable. Measures the copy bandwidth (1 GiB copied 10 times, median of 5)
// and the decode floors (12 MiB streamed, median of 9; a chain of 256 launches, median of 9 replays).
GpuProbe probe_gpu();

// Runs the plan on `model` (whose weights `cost` was computed from) and returns its measurements; skipped
// tests are explained in `notes`. `decode_path` receives a summary of how decode steps ran (graph replays
// vs eager steps, from CudaModel::decode_stats).
std::vector<BenchMeasurement> run_gpu_bench(CudaModel& model, const InferenceCost& cost, const BenchPlan& plan,
                                            const GpuProbe& gpu, std::vector<std::string>& notes,
                                            std::string& decode_path);

#endif  // DELTABIT_HAVE_CUDA

}  // namespace deltabit::cli
