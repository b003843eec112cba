// The logprob of a token from a row of logits, as the API reports it (a generated token's, or a prompt
// token's with echo): the scheduler's one formula, which the tests also use to check it against a direct
// forward pass.
#pragma once

#include "server/job.h"

#include <cstdint>
#include <span>

namespace deltabit::server {

// log-softmax of `logits` [n_vocab] at `token`, and the `top` most likely tokens (ties to the lower id).
TokenLogprob logprob_of(std::span<const float> logits, int32_t token, int top);

}  // namespace deltabit::server
