// The CPU half of `deltabit bench --backend cpu`: the machine's copy bandwidth with the threads the engine
// gets, and prompt (pp) and decode (tg) speed of the CPU engine (runtime/engine.h, the fast path of
// ops/cpu_fast/matmul_cpu_fast.h unless DELTABIT_CPU_REFERENCE=1) read against it.
//
// Timing. Host wall-clock time around engine calls. A prompt test feeds n random tokens to a fresh sequence
// (only the last token's logits are computed, as chat and run do); the median of up to 3 runs (fewer when a
// run takes over 10 s). A decode test first feeds `depth` random tokens (or 1 at depth 0), takes 2 untimed
// greedy steps, then times plan.decode_tokens greedy steps (forward + argmax); tok/s is steps / time. Decode
// moves InferenceCost::decode_traffic bytes a token; GB/s and % of the measured copy bandwidth follow.
//
// Copy bandwidth. 256 MiB copied by `threads` threads, each its own slice, 5 times; the median, counting
// bytes read + written (as the GPU probe counts them).
#pragma once

#include "cli/bench_gpu.h"
#include "cli/bench_report.h"
#include "models/inference_cost.h"
#include "runtime/engine.h"

#include <string>
#include <vector>

namespace deltabit::cli {

struct CpuProbe {
    std::string name;     // "AMD EPYC" (/proc/cpuinfo's model name), or "cpu"
    std::string summary;  // "AMD EPYC, 2 threads of 2 cores, avx512"
    int threads = 1;
    double copy_gb_s = 0;
};

CpuProbe probe_cpu(int threads);

std::vector<BenchMeasurement> run_cpu_bench(Engine& engine, const InferenceCost& cost, const BenchPlan& plan,
                                            const CpuProbe& cpu, std::vector<std::string>& notes);

}  // namespace deltabit::cli
