// `deltabit bench` on a block-diffusion model (DiffusionGemma; issue 37's "Speed"): how fast a prompt is
// encoded and blocks are committed, with each denoising step read against its floor (models/diffusion_cost.h).
//
// Tests (one row each in bench/history.tsv):
//   encP   the prompt of P random tokens encoded into a fresh cache (the median of up to 3 runs);
//   dgN    the block loop (runtime/diffusion_generate.h) after that prompt, N new tokens in whole blocks
//          of the canvas length, with the model's generation settings except EOS stopping (off, so every
//          block runs). tok/s = committed tokens / (the loop's time − the prompt's encoding time of encP);
//          the time of each step but a block's first (which also encodes the block before it) is the
//          target's to measure (DiffusionBenchTarget::generate); its median is read against the step's
//          floor, the larger of its bytes at the copy bandwidth and its FLOPs at the bf16 peak (bytes only
//          where no peak is known, as on a CPU), at the middle block's depth, self-conditioned.
// Steps per block depend on the weights: random weights never reach the confidence threshold, so each block
// runs max_denoising_steps — the worst case, which is also the figure "at max steps" the row reports.
#pragma once

#include "cli/bench_report.h"
#include "models/diffusion_cost.h"
#include "runtime/diffusion_generate.h"

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

namespace deltabit {
class Model;
}

namespace deltabit::cli {

// What the diffusion bench drives: one backend's encoder and block loop.
class DiffusionBenchTarget {
public:
    struct Run {
        DiffusionGeneration generation;
        double seconds = 0;                // the loop's, from the call to the last block committed
        std::vector<double> step_seconds;  // every step but each block's first, in order
    };
    virtual ~DiffusionBenchTarget() = default;
    virtual std::string description() const = 0;
    virtual const ModelConfig& config() const = 0;
    // Encodes `prompt` into a fresh cache; returns when the work is done (the caller times it).
    virtual void encode_fresh(std::span<const int32_t> prompt) = 0;
    // The block loop over `prompt` with deltabit's seeded draws, returning when it is done, with the time of
    // each step but a block's first (however the backend can see it).
    virtual Run generate(std::span<const int32_t> prompt, const DiffusionGenerationConfig& settings, uint64_t seed) = 0;
    // The memory the rows report (GiB): the process's peak resident memory since the bench started on the CPU,
    // the device's memory in use on a GPU.
    virtual double memory_gib() const = 0;
};

// The CPU reference (models/diffusion_gemma.h); borrows `model`.
std::unique_ptr<DiffusionBenchTarget> cpu_diffusion_target(const Model& model);
#if DELTABIT_HAVE_CUDA
// DiffusionGemmaCuda and the device block loop (cli/bench_diffusion_cuda.cpp); uploads `model`, which may be
// dropped afterwards.
std::unique_ptr<DiffusionBenchTarget> cuda_diffusion_target(const Model& model);
#endif

struct DiffusionBenchPlan {
    int64_t prompt_tokens = 1024;
    int64_t new_tokens = 512;  // rounded up to whole blocks
    DiffusionGenerationConfig settings;
    uint64_t seed = 1;
};

// The floors the dg row is read against (BenchReport's copy_gb_s and bf16_peak_tflop_s).
struct DiffusionFloors {
    double copy_gb_s = 0;
    double bf16_peak_tflop_s = 0;  // 0: unknown, the floor is the bytes' alone
};

std::vector<BenchMeasurement> run_diffusion_bench(DiffusionBenchTarget& target, const DiffusionCost& cost,
                                                  const DiffusionBenchPlan& plan, const DiffusionFloors& floors);

}  // namespace deltabit::cli
