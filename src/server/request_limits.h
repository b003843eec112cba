// The ranges a request's fields must lie in, stated once: the parser (request_parse.cpp) checks every
// numeric field against this table and names the field and its range when it refuses one. The same
// ranges as the CLI's sampling flags (cli/sampling_options.cpp); the OpenAI ones where OpenAI states
// them (temperature 0..2, penalties −2..2, top_logprobs 0..20).
#pragma once

#include <cstdint>
#include <string_view>

namespace deltabit::server {

struct Range {
    std::string_view field;
    double low, high;
    bool low_open = false;  // (low, high] rather than [low, high]
};

inline constexpr Range kTemperatureRange{"temperature", 0.0, 2.0};
inline constexpr Range kTopPRange{"top_p", 0.0, 1.0, /*low_open=*/true};
inline constexpr Range kTopKRange{"top_k", 0.0, 1e9};  // 0 = off; above the vocabulary = all
inline constexpr Range kMinPRange{"min_p", 0.0, 1.0};
inline constexpr Range kPresenceRange{"presence_penalty", -2.0, 2.0};
inline constexpr Range kFrequencyRange{"frequency_penalty", -2.0, 2.0};
inline constexpr Range kRepetitionRange{"repetition_penalty", 0.0, 10.0, /*low_open=*/true};
inline constexpr Range kTopLogprobsRange{"top_logprobs", 0.0, 20.0};
inline constexpr Range kCompletionLogprobsRange{"logprobs", 0.0, 20.0};
inline constexpr int kMaxTopLogprobs = 20;

// Bounds the server applies to every request; `deltabit serve` flags set them (docs/server.md).
struct RequestLimits {
    int64_t max_body_bytes = 4 << 20;   // larger bodies: 413 before parsing
    int64_t max_prompt_tokens = 0;      // 0: the context size
    int64_t max_tokens = 4096;          // cap on max_tokens (and its default when the request has none)
    int64_t max_stop_strings = 4;       // OpenAI's limit
    int64_t max_messages = 1024;
};

}  // namespace deltabit::server
