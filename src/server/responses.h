// OpenAI response bodies from job events: the JSON the HTTP side sends, built in one place so the
// streamed and whole forms of a reply carry the same fields.
#pragma once

#include "server/api_types.h"
#include "server/job.h"
#include "server/reply_parse.h"
#include "text/tokenizer.h"

#include <nlohmann/json.hpp>

#include <string>

namespace deltabit::server {

using nlohmann::ordered_json;

// Invalid UTF-8 (a token that ends inside a character) is written as U+FFFD rather than refused.
std::string dump_json(const ordered_json& value);
std::string error_body(const ApiError& error);

ordered_json usage_json(const JobEvent& done);
// One entry of chat logprobs.content: {"token", "logprob", "bytes", "top_logprobs"}.
ordered_json chat_logprob_json(const TokenLogprob& lp, const text::Tokenizer& tokenizer);
ordered_json tool_calls_json(const std::vector<ToolCall>& calls, const std::string& id_prefix, bool with_index);

// The completions API's logprobs object: {"tokens", "token_logprobs", "top_logprobs", "text_offset"},
// with a null first entry when the prompt is echoed (its first token has no context).
struct CompletionLogprobs {
    ordered_json tokens = ordered_json::array(), token_logprobs = ordered_json::array(),
                 top_logprobs = ordered_json::array(), text_offset = ordered_json::array();
    size_t offset = 0;
    void add(int32_t token, const TokenLogprob* lp, const text::Tokenizer& tokenizer, bool with_top);
    ordered_json json() const;
};

}  // namespace deltabit::server
