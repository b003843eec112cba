// A job on a block-diffusion model (runtime/diffusion_runner.h), run to its end on the scheduler's
// thread: the block loop `deltabit run` uses, over the job's prompt with its seed and max_tokens (rounded
// up to whole blocks, as run does), one token event per committed block — its text, as run prints it
// (special tokens skipped, nothing after the first EOS); the done event is returned for the caller to
// send. `stop`, polled after every denoising step (on CUDA every few steps), ends the run there (the unfinished block is not
// sent) when the client is gone, the deadline has passed or the server is stopping.
//
// usage.completion_tokens counts the tokens up to and including the first EOS, as a left-to-right reply
// counts its EOS; with no EOS, every committed token (whole blocks: it can exceed max_tokens by less than
// a block). finish: "stop" (an EOS was committed), "length", "cancelled" or "deadline".
#pragma once

#include "runtime/diffusion_runner.h"
#include "server/job.h"
#include "text/tokenizer.h"

#include <chrono>
#include <cstdint>
#include <functional>

namespace deltabit::server {

struct DiffusionJobResult {
    JobEvent done;  // not yet sent: the scheduler counts it first, so /metrics has a reply its client has
    double seconds = 0.0;
    int64_t blocks = 0, denoising_steps = 0;
};

// `stopping`: the server is shutting down (the job ends as "cancelled").
DiffusionJobResult run_diffusion_job(DiffusionRunner& runner, const text::Tokenizer& tokenizer, Job& job,
                                     std::chrono::steady_clock::time_point deadline,
                                     const std::function<bool()>& stopping);

}  // namespace deltabit::server
