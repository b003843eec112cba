// The bounds of a request. The sampling settings' ranges are not here: they live with the sampler's
// (sampling/sampling_params.h, under SamplingBounds::openai_api), one table for the CLI's flags and the
// server's JSON fields; the parser (request_parse.cpp) names the field and its range when it refuses one.
#pragma once

#include <cstdint>

namespace deltabit::server {

inline constexpr int kMaxTopLogprobs = 20;  // OpenAI's bound on top_logprobs (and completions' logprobs)

// Bounds the server applies to every request; `deltabit serve` flags set them (docs/server.md).
struct RequestLimits {
    int64_t max_body_bytes = 4 << 20;   // larger bodies: 413 before parsing
    int64_t max_prompt_tokens = 0;      // 0: the context size
    int64_t max_tokens = 4096;          // cap on max_tokens (and its default when the request has none)
    int64_t max_stop_strings = 4;       // OpenAI's limit
    int64_t max_messages = 1024;
};

}  // namespace deltabit::server
