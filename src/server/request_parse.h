// JSON bodies → native requests (api_types.h), strictly: a body that is not a JSON object, a field of
// the wrong type, a value outside its range (request_limits.h) or a field this server does not know
// is refused with RequestError (400) naming the field — an unknown field is refused rather than
// ignored, so a client never believes a setting took effect when it did not. Fields OpenAI defines
// that change nothing here (user, n = 1, parallel_tool_calls, ...) are accepted.
//
// Pure functions of the text: no model, no I/O, so the fuzzer (fuzz/fuzz_server_request.cpp) drives
// them directly.
#pragma once

#include "server/api_types.h"
#include "server/request_limits.h"

#include <string_view>

namespace deltabit::server {

// With `block_diffusion` (the server runs a block-diffusion model), a field the block loop has no use
// for — the sampler settings, penalties, stop, logprobs, tools, echo — is refused (400, code
// "unsupported_parameter") naming it and saying why (runtime/diffusion_runner.h), after the usual checks.
ChatCompletionRequest parse_chat_request(std::string_view body, const RequestLimits& limits, bool block_diffusion = false);
CompletionRequest parse_completion_request(std::string_view body, const RequestLimits& limits,
                                           bool block_diffusion = false);

}  // namespace deltabit::server
