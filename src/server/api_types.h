// The server's native request structs: what an HTTP thread makes of a JSON body (request_parse.h)
// and hands to the scheduler. Nothing here knows HTTP or the model; the scheduler never sees JSON.
#pragma once

#include "sampling/sampling_params.h"

#include <nlohmann/json.hpp>

#include <cstdint>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

namespace deltabit::server {

// An OpenAI-style error: {"error": {"message", "type", "param", "code"}} with an HTTP status.
struct ApiError {
    int status = 400;
    std::string message;
    std::string type = "invalid_request_error";
    std::string param;  // the offending field ("messages[2].role"), empty when none
    std::string code;
};

class RequestError : public std::runtime_error {
public:
    explicit RequestError(ApiError error) : std::runtime_error(error.message), error_(std::move(error)) {}
    const ApiError& error() const { return error_; }

private:
    ApiError error_;
};

enum class ToolChoiceMode { none, auto_, required, named };

struct ToolChoice {
    ToolChoiceMode mode = ToolChoiceMode::auto_;
    std::string name;  // mode == named
};

// What both endpoints share: sampling, limits, stops, streaming, logprobs.
struct GenerationRequest {
    SamplingParams sampling;
    std::optional<int64_t> max_tokens;  // unset: up to the server's limit and the context
    std::vector<std::string> stop;
    bool stream = false;
    bool include_usage = false;  // stream_options.include_usage
    bool logprobs = false;
    int top_logprobs = 0;        // alternatives per token, 0..kMaxTopLogprobs
    bool seed_given = false;     // else the scheduler draws a seed for the request
};

struct ChatCompletionRequest {
    std::string model;
    nlohmann::ordered_json messages = nlohmann::ordered_json::array();  // as the template sees them
    nlohmann::ordered_json tools;                                      // null or an array
    ToolChoice tool_choice;
    std::optional<bool> enable_thinking;                      // chat_template_kwargs.enable_thinking
    nlohmann::ordered_json template_kwargs = nlohmann::ordered_json::object();  // the other kwargs
    GenerationRequest generation;
};

struct CompletionRequest {
    std::string model;
    std::optional<std::string> prompt_text;  // exactly one of prompt_text and prompt_ids
    std::vector<int32_t> prompt_ids;
    bool echo = false;
    GenerationRequest generation;  // max_tokens defaults to 16 as OpenAI's; 0 only with echo
};

}  // namespace deltabit::server
