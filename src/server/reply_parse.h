// The model's reply text → OpenAI's pieces: thinking (`reasoning_content`), the answer (`content`) and
// tool calls, in the forms the Qwen chat templates teach their models:
//   thinking   ...</think>   (the template opens <think> in the generation prompt) or <think>...</think>
//   tool call  <tool_call>\n<function=NAME>\n<parameter=P>\nVALUE\n</parameter>\n</function>\n</tool_call>
//              (Qwen3.5, Qwen3-Coder) or <tool_call>\n{"name": NAME, "arguments": {...}}\n</tool_call>
//              (Qwen3, Hermes).
// A call that does not parse is never dropped: the reply keeps it as text and says so (`malformed`).
//
// ReplySplitter does the same while the reply streams: it releases reasoning and content deltas as
// soon as they cannot be the start of a tag, and holds everything from "<tool_call>" on (when tools
// were offered) until the end, where finish() parses the calls.
#pragma once

#include <nlohmann/json.hpp>

#include <string>
#include <string_view>
#include <vector>

namespace deltabit::server {

struct ToolCall {
    std::string name;
    std::string arguments;  // a JSON object, as a string (OpenAI's form)
};

struct ReplyDelta {
    std::string reasoning;
    std::string content;
};

struct ReplyEnd {
    ReplyDelta rest;                  // text released at the end
    std::vector<ToolCall> tool_calls;
    bool malformed = false;           // a <tool_call> block that did not parse: kept in content
};

// Parses the blocks in `text` (everything from the first "<tool_call>"). Empty result and
// malformed = true when any block does not parse.
std::vector<ToolCall> parse_tool_calls(std::string_view text, bool& malformed);

class ReplySplitter {
public:
    // `thinking`: the prompt left the model inside <think> (the reply starts with reasoning).
    // `tools`: tool calls are looked for (tools were offered and tool_choice is not none).
    ReplySplitter(bool thinking, bool tools) : in_think_(thinking), tools_(tools) {}

    ReplyDelta push(std::string_view text);
    ReplyEnd finish();

private:
    void drain(ReplyDelta& out, bool at_end);

    bool in_think_;
    bool tools_;
    bool in_tool_calls_ = false;
    std::string pending_;  // text not yet released: may start a tag
    std::string calls_;    // from "<tool_call>" on
};

// The prompt ends inside an open <think> block (the template opened it for the reply).
bool prompt_opens_thinking(std::string_view rendered_prompt);

}  // namespace deltabit::server
