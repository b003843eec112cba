// The request parser and the reply splitter, white-box: the rules a black-box test reaches only one
// at a time (every field's type and range, unknown fields, tool-call forms, tags split across tokens).
#include "server/reply_parse.h"
#include "server/request_parse.h"

#include "sampling/sampling_params.h"

#include <fmt/format.h>
#include <gtest/gtest.h>

#include <cmath>

namespace deltabit::server {
namespace {

// The param a refused body names, or "(accepted)".
std::string refused_param(const std::string& body) {
    try {
        parse_chat_request(body, RequestLimits{});
    } catch (const RequestError& e) {
        EXPECT_EQ(e.error().status, 400);
        return e.error().param.empty() ? "(body)" : e.error().param;
    }
    return "(accepted)";
}

constexpr const char* kMessages = R"("messages": [{"role": "user", "content": "hi"}])";
std::string with(const std::string& field) { return std::string("{") + kMessages + ", " + field + "}"; }

// The message a refused body gives, or "(accepted)".
std::string refusal(const std::string& body) {
    try {
        parse_chat_request(body, RequestLimits{});
    } catch (const RequestError& e) {
        return e.error().message;
    }
    return "(accepted)";
}

// The sampling fields' ranges are the sampler's table under the OpenAI API's bounds
// (sampling/sampling_params.h): the parser refuses exactly what the table refuses, with the table's
// words, and what it accepts the sampler takes (check_sampling_params finds nothing).
TEST(RequestParse, SamplingRangesAreTheSamplersTable) {
    struct Case {
        const char* field;    // as the request spells it
        const char* setting;  // as SamplingParams does
        double value;
    };
    const Case cases[] = {
        {"temperature", "temperature", 0.0},   {"temperature", "temperature", 2.0},
        {"temperature", "temperature", 2.01},  {"temperature", "temperature", -0.1},
        {"top_p", "top_p", 0.0},               {"top_p", "top_p", 1.0},
        {"top_p", "top_p", 1.5},               {"min_p", "min_p", 0.0},
        {"min_p", "min_p", 0.99},              {"min_p", "min_p", 1.0},
        {"top_k", "top_k", 0.0},               {"top_k", "top_k", 4e9},
        {"presence_penalty", "presence_penalty", -2.0},   {"presence_penalty", "presence_penalty", 2.5},
        {"frequency_penalty", "frequency_penalty", 2.0},  {"frequency_penalty", "frequency_penalty", -3.0},
        {"repetition_penalty", "repeat_penalty", 0.0},    {"repetition_penalty", "repeat_penalty", 1.3},
    };
    for (const Case& c : cases) {
        const std::string value = c.value == std::floor(c.value) ? fmt::format("{}", int64_t(c.value)) : fmt::format("{}", c.value);
        const std::string body = with(fmt::format("\"{}\": {}", c.field, value));
        const std::optional<std::string_view> range = sampling_range_error(c.setting, c.value, SamplingBounds::openai_api);
        SCOPED_TRACE(body);
        if (!range) {
            EXPECT_EQ(refused_param(body), "(accepted)");
            EXPECT_FALSE(check_sampling_params(parse_chat_request(body, RequestLimits{}).generation.sampling,
                                               SamplingBounds::openai_api));
        } else {
            EXPECT_EQ(refused_param(body), c.field);
            EXPECT_EQ(refusal(body), fmt::format("'{}' is {}; it must be {}", c.field, value, *range));
        }
    }
    // The engine's ranges are wider where OpenAI states bounds; elsewhere the same.
    EXPECT_FALSE(sampling_range_error("temperature", 3.0));
    EXPECT_FALSE(sampling_range_error("presence_penalty", -5.0));
    EXPECT_TRUE(sampling_range_error("min_p", 1.0));
    // In range as a double, out of range as the float the sampler holds: refused, named.
    EXPECT_EQ(refused_param(with(R"("top_p": 1e-50)")), "top_p");
    EXPECT_EQ(refusal(with(R"("top_p": 1e-50)")), "'top_p' is 0 as a 32-bit float; it must be in (0, 1] (1 = off)");
}

TEST(RequestParse, RefusesEachBadFieldByName) {
    EXPECT_EQ(refused_param(std::string("{") + kMessages + "}"), "(accepted)");
    EXPECT_EQ(refused_param("{"), "(body)");
    EXPECT_EQ(refused_param("[1]"), "(body)");
    // A number no double holds: the JSON parser throws out_of_range (found by fuzz_server_request).
    EXPECT_EQ(refused_param("88E8888888888"), "(body)");
    EXPECT_EQ(refused_param(with(R"("temperature": 1e999)")), "(body)");
    EXPECT_EQ(refused_param("{}"), "messages");
    EXPECT_EQ(refused_param(R"({"messages": []})"), "messages");
    EXPECT_EQ(refused_param(with(R"("foo": 1)")), "foo");
    try {
        parse_chat_request(with(R"("temprature": 1)"), RequestLimits{});
        ADD_FAILURE() << "a misspelt field was accepted";
    } catch (const RequestError& e) {
        EXPECT_EQ(e.error().message, "unknown field 'temprature' (did you mean 'temperature'?)");
    }
    try {
        parse_chat_request(with(R"("foo": 1)"), RequestLimits{});
        ADD_FAILURE() << "an unknown field was accepted";
    } catch (const RequestError& e) {
        EXPECT_EQ(e.error().message, "unknown field 'foo'");
    }
    EXPECT_EQ(refused_param(with(R"("temperature": "hot")")), "temperature");
    EXPECT_EQ(refused_param(with(R"("temperature": 2.5)")), "temperature");
    EXPECT_EQ(refused_param(with(R"("temperature": 2.0)")), "(accepted)");
    EXPECT_EQ(refused_param(with(R"("top_p": 0)")), "top_p");
    EXPECT_EQ(refused_param(with(R"("top_k": -1)")), "top_k");
    EXPECT_EQ(refused_param(with(R"("top_k": 1.5)")), "top_k");
    EXPECT_EQ(refused_param(with(R"("min_p": 1.01)")), "min_p");
    EXPECT_EQ(refused_param(with(R"("presence_penalty": -2.01)")), "presence_penalty");
    EXPECT_EQ(refused_param(with(R"("frequency_penalty": 3)")), "frequency_penalty");
    EXPECT_EQ(refused_param(with(R"("repetition_penalty": 0)")), "repetition_penalty");
    EXPECT_EQ(refused_param(with(R"("max_tokens": 0)")), "(accepted)");
    EXPECT_EQ(refused_param(with(R"("max_tokens": 4097)")), "max_tokens");
    EXPECT_EQ(refused_param(with(R"("max_completion_tokens": -1)")), "max_completion_tokens");
    EXPECT_EQ(refused_param(with(R"("seed": "x")")), "seed");
    EXPECT_EQ(refused_param(with(R"("stop": ["a", 1])")), "stop[1]");
    EXPECT_EQ(refused_param(with(R"("stop": ["a", "b", "c", "d", "e"])")), "stop");
    EXPECT_EQ(refused_param(with(R"("stop": [""])")), "stop");
    EXPECT_EQ(refused_param(with(R"("n": 2)")), "n");
    EXPECT_EQ(refused_param(with(R"("top_logprobs": 3)")), "top_logprobs");
    EXPECT_EQ(refused_param(with(R"("logprobs": true, "top_logprobs": 21)")), "top_logprobs");
    EXPECT_EQ(refused_param(with(R"("stream_options": {"include_usage": true})")), "stream_options");
    EXPECT_EQ(refused_param(with(R"("stream": true, "stream_options": {"x": 1})")), "stream_options.x");
    EXPECT_EQ(refused_param(R"({"messages": [{"role": "robot", "content": "x"}]})"), "messages[0].role");
    EXPECT_EQ(refused_param(R"({"messages": [{"role": "user"}]})"), "messages[0].content");
    EXPECT_EQ(refused_param(R"({"messages": [{"role": "user", "content": 5}]})"), "messages[0].content");
    EXPECT_EQ(refused_param(R"({"messages": [{"role": "user", "content": "x", "extra": 1}]})"), "messages[0].extra");
    EXPECT_EQ(refused_param(with(R"("tool_choice": "required")")), "tool_choice");
    EXPECT_EQ(refused_param(with(R"("tools": [{"type": "function", "function": {"name": "f"}}], "tool_choice": {"type": "function", "function": {"name": "g"}})")),
              "tool_choice.function.name");
    EXPECT_EQ(refused_param(with(R"("chat_template_kwargs": {"enable_thinking": "yes"})")), "chat_template_kwargs.enable_thinking");
}

// A block-diffusion model's server refuses the fields its block loop has no use for, after the usual
// checks, naming each with code unsupported_parameter; a field that asks for nothing passes.
TEST(RequestParse, BlockDiffusionRefusesWhatItsLoopHasNoUseFor) {
    const auto refused = [](std::string_view body, bool chat) -> std::string {
        try {
            if (chat) parse_chat_request(body, RequestLimits{}, true);
            else parse_completion_request(body, RequestLimits{}, true);
        } catch (const RequestError& e) {
            EXPECT_EQ(e.error().status, 400);
            if (e.error().code != "unsupported_parameter") return "(other: " + e.error().message + ")";
            EXPECT_NE(e.error().message.find("does not apply to a block-diffusion model: "), std::string::npos);
            return e.error().param;
        }
        return "(accepted)";
    };
    for (const char* field : {R"("temperature": 0)", R"("top_p": 1)", R"("top_k": 0)", R"("min_p": 0)",
                              R"("presence_penalty": 0)", R"("frequency_penalty": 0)", R"("repetition_penalty": 1)",
                              R"("stop": ["x"])", R"("logprobs": true)",
                              R"("tools": [{"type": "function", "function": {"name": "f"}}])",
                              R"("tools": [{"type": "function", "function": {"name": "f"}}], "tool_choice": "auto")"}) {
        const std::string body = with(field);
        const std::string name = std::string(field).substr(1, std::string(field).find('"', 1) - 1);
        EXPECT_EQ(refused(body, true), name) << body;
        EXPECT_EQ(refusal(body), "(accepted)") << body;  // a left-to-right model takes it
    }
    EXPECT_EQ(refused(with(R"("logprobs": false, "stop": [], "tool_choice": "none", "tools": [], "seed": 4, "max_tokens": 9)"), true),
              "(accepted)");
    EXPECT_EQ(refused(R"({"prompt": "hi", "echo": true})", false), "echo");
    EXPECT_EQ(refused(R"({"prompt": "hi", "logprobs": 0})", false), "logprobs");
    EXPECT_EQ(refused(R"({"prompt": "hi", "echo": false, "logprobs": null, "seed": 1})", false), "(accepted)");
    // The usual checks come first: a wrong type is named as such.
    EXPECT_EQ(refused(with(R"("temperature": "hot")"), true).substr(0, 8), "(other: ");
}

// Every field the API documents is read (none is refused as unknown, whatever else is wrong with null),
// so the parser's lists that name the field a misspelt one meant hold only real fields.
TEST(RequestParse, EveryDocumentedFieldIsKnown) {
    auto unknown = [](auto parse, const std::string& body) {
        try {
            parse(body, RequestLimits{}, false);
        } catch (const RequestError& e) {
            return e.error().message.starts_with("unknown field");
        }
        return false;
    };
    const std::vector<std::string> generation = {
        "temperature", "top_p", "top_k", "min_p", "presence_penalty", "frequency_penalty", "repetition_penalty",
        "seed", "max_tokens", "max_completion_tokens", "stop", "stream", "stream_options", "user", "n"};
    std::vector<std::string> chat = generation, completion = generation;
    for (const char* f : {"model", "messages", "tools", "tool_choice", "chat_template_kwargs", "parallel_tool_calls",
                          "logprobs", "top_logprobs"})
        chat.push_back(f);
    for (const char* f : {"model", "prompt", "echo", "logprobs"}) completion.push_back(f);
    for (const std::string& f : chat)
        EXPECT_FALSE(unknown(parse_chat_request, with("\"" + f + "\": null"))) << f;
    for (const std::string& f : completion)
        EXPECT_FALSE(unknown(parse_completion_request, "{\"prompt\": \"hi\", \"" + f + "\": null}")) << f;
    // And a misspelt completions field names the one meant.
    try {
        parse_completion_request(R"({"prompt": "hi", "ecco": true})", RequestLimits{});
        ADD_FAILURE() << "a misspelt field was accepted";
    } catch (const RequestError& e) {
        EXPECT_EQ(e.error().message, "unknown field 'ecco' (did you mean 'echo'?)");
    }
}

TEST(RequestParse, ReadsWhatItAccepts) {
    const ChatCompletionRequest r = parse_chat_request(
        with(R"("temperature": 0, "top_k": 5, "top_p": 0.5, "min_p": 0.1, "seed": 7, "stop": "x", "max_tokens": 9,
              "stream": true, "stream_options": {"include_usage": true}, "logprobs": true, "top_logprobs": 2,
              "chat_template_kwargs": {"enable_thinking": false, "custom": 1})"),
        RequestLimits{});
    EXPECT_EQ(r.generation.sampling.temperature, 0.0f);
    EXPECT_EQ(r.generation.sampling.top_k, 5);
    EXPECT_EQ(r.generation.sampling.seed, 7u);
    EXPECT_TRUE(r.generation.seed_given);
    EXPECT_EQ(r.generation.stop, std::vector<std::string>{"x"});
    EXPECT_EQ(r.generation.max_tokens, 9);
    EXPECT_TRUE(r.generation.include_usage);
    EXPECT_EQ(r.generation.top_logprobs, 2);
    EXPECT_EQ(r.enable_thinking, false);
    EXPECT_EQ(r.template_kwargs["custom"], 1);
    // Tool call arguments arrive as a JSON string; the template gets them as a mapping.
    const ChatCompletionRequest t = parse_chat_request(
        R"({"messages": [{"role": "assistant", "content": null, "tool_calls": [{"id": "1", "type": "function", "function": {"name": "f", "arguments": "{\"a\": 1}"}}]}]})",
        RequestLimits{});
    EXPECT_EQ(t.messages[0]["tool_calls"][0]["function"]["arguments"]["a"], 1);
    EXPECT_EQ(t.messages[0]["content"], "");
}

TEST(RequestParse, CompletionPromptsAndEcho) {
    EXPECT_EQ(parse_completion_request(R"({"prompt": "abc"})", RequestLimits{}).generation.max_tokens, 16);
    EXPECT_EQ(parse_completion_request(R"({"prompt": [[1, 2, 3]]})", RequestLimits{}).prompt_ids, (std::vector<int32_t>{1, 2, 3}));
    EXPECT_THROW(parse_completion_request(R"({"prompt": "abc", "max_tokens": 0})", RequestLimits{}), RequestError);
    EXPECT_NO_THROW(parse_completion_request(R"({"prompt": "abc", "max_tokens": 0, "echo": true, "logprobs": 1})", RequestLimits{}));
    EXPECT_THROW(parse_completion_request(R"({"prompt": [1, -2]})", RequestLimits{}), RequestError);
    EXPECT_THROW(parse_completion_request(R"({"prompt": "a", "logprobs": 21})", RequestLimits{}), RequestError);
    EXPECT_THROW(parse_completion_request(R"({"max_tokens": 3})", RequestLimits{}), RequestError);
}

TEST(ReplyParse, ToolCallsInBothForms) {
    bool malformed = true;
    std::vector<ToolCall> calls = parse_tool_calls(
        "<tool_call>\n<function=get_weather>\n<parameter=city>\nOslo\n</parameter>\n<parameter=days>\n3\n</parameter>\n"
        "</function>\n</tool_call>\n<tool_call>\n{\"name\": \"f\", \"arguments\": {\"x\": [1]}}\n</tool_call>",
        malformed);
    EXPECT_FALSE(malformed);
    ASSERT_EQ(calls.size(), 2u);
    EXPECT_EQ(calls[0].name, "get_weather");
    EXPECT_EQ(calls[0].arguments, R"({"city":"Oslo","days":3})");
    EXPECT_EQ(calls[1].name, "f");
    EXPECT_EQ(calls[1].arguments, R"({"x":[1]})");
    // Model text need not be UTF-8 (a byte-level model can write anything): a value with a stray byte
    // is kept, as U+FFFD, rather than failing the whole reply (found by fuzz/fuzz_server_request.cpp).
    calls = parse_tool_calls("<tool_call>\n<function=f>\n<parameter=a>\nx\xff\n</parameter>\n</function>\n</tool_call>", malformed);
    ASSERT_EQ(calls.size(), 1u);
    EXPECT_EQ(calls[0].arguments, "{\"a\":\"x\xef\xbf\xbd\"}");
    for (const char* bad : {"<tool_call>\n{\"name\": \"f\", \"arguments\": ", "<tool_call><function=f></tool_call>",
                            "<tool_call>{\"arguments\": {}}</tool_call>", "<tool_call>{\"name\": \"f\"}</tool_call> trailing"}) {
        EXPECT_TRUE(parse_tool_calls(bad, malformed).empty()) << bad;
        EXPECT_TRUE(malformed) << bad;
    }
}

TEST(ReplyParse, SplitterSeparatesThinkingContentAndCallsAcrossPieces) {
    ReplySplitter s(/*thinking=*/true, /*tools=*/true);
    std::string reasoning, content;
    for (const char* piece : {"let me ", "think</th", "ink>\n\nThe answer <", "tool_call>{\"name\": \"f\", ", "\"arguments\": {}}</tool_call>"}) {
        const ReplyDelta d = s.push(piece);
        reasoning += d.reasoning;
        content += d.content;
    }
    const ReplyEnd end = s.finish();
    reasoning += end.rest.reasoning;
    content += end.rest.content;
    EXPECT_EQ(reasoning, "let me think");
    EXPECT_EQ(content, "\n\nThe answer ");
    ASSERT_EQ(end.tool_calls.size(), 1u);
    EXPECT_FALSE(end.malformed);
    // Without tools a "<tool_call>" is plain text; a tag prefix held at the end is released.
    ReplySplitter plain(false, false);
    EXPECT_EQ(plain.push("a <tool_call> b <thi").content, "a <tool_call> b ");
    EXPECT_EQ(plain.finish().rest.content, "<thi");
    EXPECT_TRUE(prompt_opens_thinking("assistant\n<think>\n"));
    EXPECT_FALSE(prompt_opens_thinking("<think>\n\n</think>\n\n"));
}

}  // namespace
}  // namespace deltabit::server
